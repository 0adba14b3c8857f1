"""flame.nn: PyTorch-shaped modules."""

from flame.nn import functional  # noqa: F401
