"""freight.nn: modules and layers with torch.nn's constructors and state_dict names, and models
built from a zoo name, a model file or a dict in the model-file format (freight.nn.build)."""
from ._freight.nn import *  # noqa: F401,F403
from ._freight.nn import Module, build, load_spec, zoo  # noqa: F401
