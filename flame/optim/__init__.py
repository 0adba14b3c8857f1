"""flame.optim: optimizers (SGD, ASGD, Rprop, Adam, AdamW, Adamax, NAdam, RAdam, RMSprop, Adagrad,
Adadelta) and learning-rate schedules, torch.optim-shaped, that work eagerly and inside a
@flame.compile'd training step."""

from flame.optim import lr_scheduler  # noqa: F401
from flame.optim.adam import Adam, AdamW
from flame.optim.adam_variants import Adamax, NAdam, RAdam
from flame.optim.optimizer import Optimizer
from flame.optim.rmsprop import Adadelta, Adagrad, RMSprop
from flame.optim.sgd import ASGD, SGD, Rprop

__all__ = ["ASGD", "SGD", "Adadelta", "Adagrad", "Adam", "AdamW", "Adamax", "NAdam", "Optimizer", "RAdam", "RMSprop",
           "Rprop", "lr_scheduler"]
