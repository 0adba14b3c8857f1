"""flame.optim: optimizers (SGD, Adam, AdamW) and learning-rate schedules, torch.optim-shaped, that work
eagerly and inside a @flame.compile'd training step."""

from flame.optim import lr_scheduler  # noqa: F401
from flame.optim.adam import Adam, AdamW
from flame.optim.optimizer import Optimizer
from flame.optim.sgd import SGD

__all__ = ["SGD", "Adam", "AdamW", "Optimizer", "lr_scheduler"]
