"""flame.nn.Parameter: a Tensor that a Module registers as trainable (requires_grad=True)."""

from __future__ import annotations

from flame.errors import TraceError
from flame.frontend.tensor import Tensor


class Parameter(Tensor):
    """A trainable tensor. `Parameter(t)` shares t's buffer (no copy), as torch.nn.Parameter does.
    Inside @flame.compile a Parameter is lifted to a graph input with role `param`."""

    __slots__ = ()  # Tensor has __slots__; a subclass may add none (no per-instance __dict__)

    def __init__(self, data: Tensor | object = None, requires_grad: bool = True):
        if data is None:
            data = Tensor([])
        if isinstance(data, Tensor):
            if data.is_traced:
                raise TraceError("nn.Parameter needs a concrete tensor; it cannot wrap a tensor traced "
                                 "inside @flame.compile (create parameters before compiling)")
            self._init(data._data, data.dtype, None, None)
        else:
            Tensor.__init__(self, data)
        self.requires_grad = bool(requires_grad)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()
