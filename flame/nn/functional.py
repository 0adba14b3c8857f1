"""flame.nn.functional: the composite functions (PyTorch names), defined in flame.frontend.functional."""

from flame.frontend.functional import *  # noqa: F401,F403
from flame.frontend.functional import __all__  # noqa: F401
