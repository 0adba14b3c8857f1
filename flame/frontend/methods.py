"""Tensor's methods, bound onto the class in one place. tensor.py holds a tensor's state and what reads
it; every method that makes a tensor goes through dispatch.apply, which makes Tensors, so those methods
are written above it: tensor_core.TensorCore (conversions, operators, elementwise math, reductions,
movement), tensor_ops.TensorOps, tensor_index_methods.TensorIndexOps (gather, scatter, index_*),
tensor_pieces.TensorPieces (split, tensor_split, chunk, fliplr, flipud), tensor_math.TensorMath,
torch_extras.TensorExtras, random_fills.TensorRandomFills,
torch_shapes.TensorShapes, real_tensors.TensorRealQueries, and below the methods whose code is a
function of an op module (indexing, softmax, backward). The package's __init__ imports this module,
so a Tensor has all its methods once any part of flame.frontend is imported."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

from flame.frontend import autograd, autograd_grad, functional, incomplete_gamma, indexing
from flame.frontend.hooks import TensorHooks
from flame.frontend.random_fills import TensorRandomFills
from flame.frontend.real_tensors import TensorRealQueries
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import TensorCore
from flame.frontend.tensor_index_methods import TensorIndexOps
from flame.frontend.tensor_inplace import in_place_methods
from flame.frontend.tensor_math import TensorMath
from flame.frontend.tensor_ops import TensorOps
from flame.frontend.tensor_pieces import TensorPieces
from flame.frontend.torch_extras import TensorExtras
from flame.frontend.torch_shapes import TensorShapes

# torch's other names of Tensor methods (x.divide, x.greater ...): alias -> the method it is
TENSOR_ALIASES = {"divide": "div", "multiply": "mul", "subtract": "sub", "greater": "gt", "greater_equal": "ge",
                  "less": "lt", "less_equal": "le", "not_equal": "ne"}
_OF_THE_CLASS = {"__module__", "__qualname__", "__doc__", "__slots__", "__dict__", "__weakref__"}


class TensorLinks:
    """Tensor's methods whose code is a function of an op module (no state of their own)."""

    __slots__ = ()

    def backward(
        self, gradient: Tensor | None = None, retain_graph: bool | None = None, create_graph: bool = False, inputs=None
    ) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's .grad (torch's Tensor.backward), or into `inputs`
        alone. The graph behind self is freed unless retain_graph=True: a second backward through it
        raises. create_graph=True gives .grad a history of its own, which can be differentiated again."""
        if create_graph or inputs is not None:
            autograd_grad.backward(self, gradient, retain_graph, create_graph, inputs=inputs)
            return
        autograd.backward(self, gradient, retain_graph)

    def __setitem__(self, key, value):
        """x[key] = value: a functional update that rebinds x (frontend/indexing.py)."""
        indexing.setitem(self, key, value)

    def __getitem__(self, key):
        return indexing.getitem(self, key)

    def __iter__(self):
        if not self.shape:  # raised by iter() itself, as torch's
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    def igamma(self, other):
        """P(self, other), the regularized lower incomplete gamma function, as torch's Tensor.igamma."""
        return incomplete_gamma.gammainc(self, other)

    def igammac(self, other):
        """Q(self, other) = 1 - P(self, other), the regularized upper one, as torch's Tensor.igammac."""
        return incomplete_gamma.gammaincc(self, other)

    # ---- nn shortcuts -----------------------------------------------------------------------------
    def softmax(self, dim: int = -1, dtype=None):
        return functional.softmax(self, dim, dtype=dtype)

    def log_softmax(self, dim: int = -1, dtype=None):
        return functional.log_softmax(self, dim, dtype=dtype)


NUMPY_NAMES = {"axis": "dim", "keepdims": "keepdim"}  # PyTorch's argument parser takes NumPy's names too


def numpy_names(fn: Callable) -> Callable:
    """fn, also taking NumPy's keyword names where its parameters are torch's `dim` / `keepdim`, as every
    torch function and Tensor method does (`x.sum(axis=0)`, `torch.cumprod(a, axis=0)`,
    `x.mean(axis=1, keepdims=True)`); fn itself where it has neither parameter or already takes them.
    Giving both spellings of one argument is torch's TypeError."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn
    names = {a: d for a, d in NUMPY_NAMES.items() if d in params and a not in params}
    if not names:
        return fn

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if kwargs and not names.keys().isdisjoint(kwargs):
            for alias, name in names.items():
                if alias in kwargs:
                    if name in kwargs:
                        raise TypeError(f"{fn.__name__}() got multiple values for argument '{name}' "
                                        f"(as '{name}' and as '{alias}')")
                    kwargs[name] = kwargs.pop(alias)
        return fn(*args, **kwargs)

    return call


def bind(cls: type, *mixins: type) -> None:
    """Copy each mixin's methods and attributes onto cls; a name that two of them (or cls and one of
    them) define is an error, so no definition silently hides another. A method with torch's `dim` /
    `keepdim` also takes NumPy's `axis` / `keepdims` (numpy_names)."""
    for mixin in mixins:
        for name, member in vars(mixin).items():
            if name in _OF_THE_CLASS:
                continue
            if name in vars(cls):
                raise TypeError(f"{cls.__name__}.{name} is defined twice (again in {mixin.__name__})")
            setattr(cls, name, numpy_names(member) if inspect.isfunction(member) else member)


bind(Tensor, TensorCore, TensorOps, TensorIndexOps, TensorPieces, TensorMath, TensorLinks, TensorHooks, TensorExtras,
     TensorRandomFills, TensorShapes, TensorRealQueries)
bind(Tensor, type("TensorAliases", (), {a: vars(Tensor)[m] for a, m in TENSOR_ALIASES.items()}))  # x.divide ...
bind(Tensor, in_place_methods(Tensor))  # x.sigmoid_() and its kin, from the methods bound above
