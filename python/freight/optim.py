"""freight.optim: SGD, Adam and AdamW with torch.optim's constructors and update rules, and the
learning-rate schedules StepLR, CosineAnnealingLR and OneCycleLR."""
from ._freight.optim import *  # noqa: F401,F403
