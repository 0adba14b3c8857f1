"""flame.optim: optimizers (SGD, ASGD, Rprop, Adam, AdamW, Adamax, NAdam, RAdam, RMSprop, Adagrad,
Adadelta, Adafactor, Muon, and LBFGS, eager only), learning-rate schedules and weight averaging (swa_utils),
torch.optim-shaped, that work eagerly and inside a @flame.compile'd training step."""

from flame.optim import lr_scheduler, swa_utils  # noqa: F401
from flame.optim.adafactor import Adafactor
from flame.optim.adam import Adam, AdamW
from flame.optim.adam_variants import Adamax, NAdam, RAdam
from flame.optim.lbfgs import LBFGS
from flame.optim.muon import Muon
from flame.optim.optimizer import Optimizer
from flame.optim.rmsprop import Adadelta, Adagrad, RMSprop
from flame.optim.sgd import ASGD, SGD, Rprop

__all__ = [
    "ASGD",
    "SGD",
    "Adadelta",
    "Adafactor",
    "Adagrad",
    "Adam",
    "AdamW",
    "Adamax",
    "LBFGS",
    "Muon",
    "NAdam",
    "Optimizer",
    "RAdam",
    "RMSprop",
    "Rprop",
    "lr_scheduler",
    "swa_utils",
]


_NOT_PROVIDED = {
    "SparseAdam": "Adam for sparse gradients, which flame does not produce",
}


def __getattr__(name: str):
    """torch.optim's optimizers that flame does not provide are refused by name."""
    if name in _NOT_PROVIDED:
        raise AttributeError(f"flame.optim has no {name} ({_NOT_PROVIDED[name]}): it is not supported")
    raise AttributeError(f"module 'flame.optim' has no attribute {name!r}")
