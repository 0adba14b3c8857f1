"""torch.nn.parameter's names: Parameter, Buffer and the lazy modules' placeholders. They live in
flame/frontend/parameter.py, below flame.checkpoint, which gives saved Parameters back as Parameters."""

from flame.frontend.parameter import (  # noqa: F401  (torch.nn.parameter's names)
    Buffer,
    Parameter,
    UninitializedBuffer,
    UninitializedParameter,
    buffer_persistent,
    is_lazy,
)
