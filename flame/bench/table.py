"""The suite's table of cases, in report order: the stateless kernels, then the training steps, then
the transformer training steps."""

from flame.bench.cases import STATELESS
from flame.bench.cases_gpt import GPT
from flame.bench.cases_train import TRAINING

CASES = [*STATELESS, *TRAINING, *GPT]
