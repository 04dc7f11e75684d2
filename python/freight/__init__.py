"""Freight from Python: the C++ training engine with PyTorch's ergonomics.

    import freight
    result = freight.train(model="mlp", epochs=2)          # the command's options as keywords
    print(result.epochs[-1]["test_accuracy"])
    rows = freight.explain(model="mlp")["rows"]             # where a step's time goes

Tensors share memory with NumPy (np.asarray(t), freight.from_numpy(a)) and with PyTorch through
DLPack (torch.from_dlpack(t), freight.from_dlpack(x)). docs/python.md covers the API.
"""
import functools as _functools
import os as _os

# OpenMP's idle threads spin 10,000 iterations before they sleep, as the freight command sets
# (tools/freight/openmp_wait.h: libgomp's default of 300,000 made whole processes run three
# times slower at random on a 2-vCPU virtual machine). libgomp reads it when it loads, so it
# must be set before the extension loads; a user's own setting, or a libgomp already loaded
# (by PyTorch), is left as it is.
if "OMP_WAIT_POLICY" not in _os.environ:
    _os.environ.setdefault("GOMP_SPINCOUNT", "10000")

from ._freight import *  # noqa: F401,F403  (Tensor, Error, the ops, explain, plan, load, ...)
from ._freight import grad_enabled, set_grad_enabled
from . import data, nn, optim  # noqa: F401
from .training import TrainResult, bench, evaluate, save, train  # noqa: F401

__version__ = "0.1.0"


class no_grad:
    """Ops inside record no autograd graph (evaluation, manual updates); also a decorator."""

    def __enter__(self):
        self._previous = grad_enabled()
        set_grad_enabled(False)

    def __exit__(self, *exc):
        set_grad_enabled(self._previous)
        return False

    def __call__(self, fn):
        @_functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with type(self)():
                return fn(*args, **kwargs)

        return wrapper


class enable_grad(no_grad):
    """Ops inside record the autograd graph again (inside a no_grad block)."""

    def __enter__(self):
        self._previous = grad_enabled()
        set_grad_enabled(True)
