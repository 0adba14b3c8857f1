"""flame.optim: optimizers (SGD, Adam, AdamW, RMSprop, Adagrad) and learning-rate schedules,
torch.optim-shaped, that work eagerly and inside a @flame.compile'd training step."""

from flame.optim import lr_scheduler  # noqa: F401
from flame.optim.adam import Adam, AdamW
from flame.optim.optimizer import Optimizer
from flame.optim.rmsprop import Adagrad, RMSprop
from flame.optim.sgd import SGD

__all__ = ["SGD", "Adagrad", "Adam", "AdamW", "Optimizer", "RMSprop", "lr_scheduler"]
