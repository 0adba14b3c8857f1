"""torch's _foreach_* functions (torch._foreach_add(params, grads, alpha=-lr), the EMA update
torch._foreach_lerp_(ema, params, 1 - decay), torch._foreach_norm(grads)): one op applied to each tensor of
a list, or to the pairs of two or three lists. Each is the tensor method of the same name applied in turn,
so dtypes, broadcasting, errors, gradients and tracing are that method's; what this module adds is torch's
list handling: the lists' lengths checked, a scalar, a list of scalars or a list of tensors as the other
argument, the out-of-place forms returning a tuple and the in-place ones (`_foreach_add_`) returning the
list they were given."""

from __future__ import annotations

from collections.abc import Callable

from flame.errors import ArgumentTypeError, FlameError, ShapeError
from flame.frontend import methods  # noqa: F401  (Tensor's methods are bound: the rules below call them)
from flame.frontend.norms import vector_norm
from flame.frontend.tensor import Tensor

_NUMBER = (bool, int, float)


class ForeachError(FlameError, RuntimeError):
    """The lists given to a _foreach_* function do not fit together (torch raises RuntimeError)."""


def _type_name(x) -> str:
    return "Tensor" if isinstance(x, Tensor) else type(x).__name__


def _no_form(name: str, forms: tuple[str, ...], args: tuple, kwargs: dict) -> ArgumentTypeError:
    got = ", ".join([*map(_type_name, args), *(f"{k}={_type_name(v)}" for k, v in kwargs.items())])
    lines = "".join(f"\n * ({f})" for f in forms)
    return ArgumentTypeError(f"{name}() received an invalid combination of arguments - got ({got}), but expected "
                             f"one of:{lines}")


def _tensor_list(name: str, xs, position: int, forms: tuple[str, ...], args: tuple, kwargs: dict) -> list:
    if not isinstance(xs, (list, tuple)):
        raise _no_form(name, forms, args, kwargs)
    for i, x in enumerate(xs):
        if not isinstance(x, Tensor):
            raise ArgumentTypeError(f"expected Tensor as element {i} in argument {position}, but got "
                                    f"{type(x).__name__}")
    return list(xs)


def _self_list(name: str, xs, forms: tuple[str, ...], args: tuple, kwargs: dict) -> list:
    tensors = _tensor_list(name, xs, 0, forms, args, kwargs)
    if not tensors:
        raise ForeachError("Tensor list must have at least one tensor.")
    return tensors


def _same_length(a: list, b: list) -> None:
    if len(a) != len(b):
        raise ForeachError(f"Tensor lists must have the same number of tensors, got {len(a)} and {len(b)}")


def _scalar_count(tensors: list, scalars: list) -> None:
    if len(tensors) != len(scalars):
        raise ForeachError("Tensor list must have same number of elements as scalar list.")


def _is_number(x) -> bool:
    """A Python number, or a 0-d tensor (torch's parser takes one where it asks for a Number)."""
    return isinstance(x, _NUMBER) or (isinstance(x, Tensor) and x.ndim == 0)


def _is_scalar_list(x) -> bool:
    return isinstance(x, (list, tuple)) and len(x) > 0 and all(isinstance(v, _NUMBER) for v in x)


def _apply(tensors: list, each: Callable, in_place: bool, given):
    """The out-of-place form returns a tuple of the results; the in-place one, the list it was given."""
    if in_place:
        for i, t in enumerate(tensors):
            each(i, t)
        return given
    return tuple(each(i, t) for i, t in enumerate(tensors))


def _write(t: Tensor, method: str, name: str, *args, **kwargs) -> Tensor:
    """t.method_(*args) where Tensor has it; else t = t.method(*args) by torch's in-place rules."""
    if hasattr(Tensor, f"{method}_"):
        return getattr(t, f"{method}_")(*args, **kwargs)
    others = [a for a in args if isinstance(a, Tensor)]
    return t._inplace(lambda x: getattr(x, method)(*args, **kwargs), *others, what=name)


def _call(t: Tensor, method: str, name: str, in_place: bool, *args, **kwargs) -> Tensor:
    return _write(t, method, name, *args, **kwargs) if in_place else getattr(t, method)(*args, **kwargs)


# ---- unary: _foreach_sqrt(self), _foreach_sqrt_(self) ----------------------------------------------------
UNARY = (
    "abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1", "floor", "frac",
    "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal", "round", "rsqrt", "sigmoid", "sign", "sin",
    "sinh", "sqrt", "tan", "tanh", "trunc",
)


def _unary(method: str, in_place: bool) -> Callable:
    name = f"_foreach_{method}{'_' if in_place else ''}"

    def fn(self: list) -> list | tuple:
        tensors = _self_list(name, self, ("tuple of Tensors self",), (self,), {})
        return _apply(tensors, lambda i, t: _call(t, method, name, in_place), in_place, self)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"x.{method}{'_' if in_place else ''}() of each tensor x of self (torch.{name})."
    return fn


# ---- binary: a Number, a list of scalars, a list of tensors (and for some a 0-d Tensor) --------------------
BINARY = {  # name: (the tensor method, alpha= with tensors, a Tensor `other` taken)
    "add": ("add", True, True), "sub": ("sub", True, False), "mul": ("mul", False, True),
    "div": ("div", False, True), "maximum": ("maximum", False, False), "minimum": ("minimum", False, False),
    "clamp_min": ("clamp_min", False, False), "clamp_max": ("clamp_max", False, False),
    "pow": ("pow", False, False),
}


def _binary_forms(op: str) -> tuple[str, ...]:
    _, alpha, takes_tensor = BINARY[op]
    arg = "exponent" if op == "pow" else "scalar"
    a = ", *, Number alpha = 1" if alpha else ""
    forms = [f"tuple of Tensors self, Number {arg}", f"tuple of Tensors self, tuple of Scalars {arg}s"
             if op != "pow" else "tuple of Tensors self, tuple of Scalars exponent"]
    if takes_tensor:
        forms.append(f"tuple of Tensors self, Tensor other{a}")
    forms.append(f"tuple of Tensors self, tuple of Tensors {'exponent' if op == 'pow' else 'other'}{a}")
    if op == "pow":
        forms.insert(0, "Number self, tuple of Tensors exponent")
    return tuple(forms)


def _binary(op: str, in_place: bool) -> Callable:
    method, takes_alpha, takes_tensor = BINARY[op]
    name = f"_foreach_{op}{'_' if in_place else ''}"
    forms = _binary_forms(op)

    def fn(self, other, *, alpha: float | None = None) -> list | tuple:
        args, kwargs = (self, other), ({} if alpha is None else {"alpha": alpha})
        if op == "pow" and not in_place and _is_number(self):  # _foreach_pow(2.0, exponents)
            exponents = _self_list(name, other, forms, args, kwargs)
            return tuple(t.__rpow__(self) for t in exponents)
        tensors = _self_list(name, self, forms, args, kwargs)
        if alpha is not None and not (takes_alpha and (isinstance(other, (list, tuple, Tensor)))):
            raise _no_form(name, forms, args, kwargs)
        extra = {"alpha": alpha} if alpha is not None else {}
        if alpha is None and _is_number(other) and not (takes_tensor and isinstance(other, Tensor)):
            return _apply(tensors, lambda i, t: _call(t, method, name, in_place, other), in_place, self)
        if isinstance(other, Tensor):
            if not takes_tensor:
                raise _no_form(name, forms, args, kwargs)
            if other.ndim != 0:
                raise ShapeError(f"scalar tensor expected to be 0 dim but it has {other.ndim} dimensions and "
                                 f"{other.numel()} elements.")
            return _apply(tensors, lambda i, t: _call(t, method, name, in_place, other, **extra), in_place, self)
        if alpha is None and _is_scalar_list(other):
            _scalar_count(tensors, other)
            return _apply(tensors, lambda i, t: _call(t, method, name, in_place, other[i]), in_place, self)
        if isinstance(other, (list, tuple)) and not other and alpha is None:
            _scalar_count(tensors, other)
        others = _tensor_list(name, other, 1, forms, args, kwargs)
        _same_length(tensors, others)
        return _apply(tensors, lambda i, t: _call(t, method, name, in_place, others[i], **extra), in_place, self)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"x.{method}{'_' if in_place else ''}(y) for each tensor x of self, y the scalar, the scalar "
                  f"or the tensor at the same place of the list given (torch.{name}).")
    return fn


# ---- lerp, addcmul, addcdiv --------------------------------------------------------------------------------
_LERP_FORMS = ("tuple of Tensors self, tuple of Tensors tensors1, Number weight",
               "tuple of Tensors self, tuple of Tensors tensors1, tuple of Scalars weight",
               "tuple of Tensors self, tuple of Tensors tensors1, tuple of Tensors weights")


def _lerp(in_place: bool) -> Callable:
    name = f"_foreach_lerp{'_' if in_place else ''}"

    def fn(self, tensors1, weight) -> list | tuple:
        args = (self, tensors1, weight)
        tensors = _self_list(name, self, _LERP_FORMS, args, {})
        ends = _tensor_list(name, tensors1, 1, _LERP_FORMS, args, {})
        _same_length(tensors, ends)
        if _is_number(weight):
            return _apply(tensors, lambda i, t: _call(t, "lerp", name, in_place, ends[i], weight), in_place, self)
        if _is_scalar_list(weight):
            _scalar_count(tensors, weight)
            each = lambda i, t: _call(t, "lerp", name, in_place, ends[i], weight[i])  # noqa: E731
            return _apply(tensors, each, in_place, self)
        weights = _tensor_list(name, weight, 2, _LERP_FORMS, args, {})
        _same_length(tensors, weights)
        return _apply(tensors, lambda i, t: _call(t, "lerp", name, in_place, ends[i], weights[i]), in_place, self)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"x.lerp{'_' if in_place else ''}(end, weight) for each x of self (torch.{name})."
    return fn


def _pointwise(method: str, in_place: bool) -> Callable:
    name = f"_foreach_{method}{'_' if in_place else ''}"
    forms = ("tuple of Tensors self, tuple of Tensors tensor1, tuple of Tensors tensor2, tuple of Scalars scalars",
             "tuple of Tensors self, tuple of Tensors tensor1, tuple of Tensors tensor2, Tensor scalars",
             "tuple of Tensors self, tuple of Tensors tensor1, tuple of Tensors tensor2, Number value = 1")

    def fn(self, tensor1, tensor2, scalars=None, *, value=None) -> list | tuple:
        args, kwargs = (self, tensor1, tensor2, *(() if scalars is None else (scalars,))), {}
        if value is not None:
            kwargs["value"] = value
        if scalars is not None and value is not None:
            raise _no_form(name, forms, args, kwargs)
        given = 1 if scalars is None and value is None else (value if value is not None else scalars)
        tensors = _self_list(name, self, forms, args, kwargs)
        firsts = _tensor_list(name, tensor1, 1, forms, args, kwargs)
        seconds = _tensor_list(name, tensor2, 2, forms, args, kwargs)
        _same_length(tensors, firsts)
        _same_length(tensors, seconds)
        if isinstance(given, Tensor) and given.ndim != 0:
            if given.ndim != 1:
                raise ShapeError(f"Expected packed scalar Tensor to be of dimension 1. Got {given.ndim} instead.")
            if given.shape[0] != len(tensors):
                raise ShapeError(f"Expected length of scalars to match input of length {len(tensors)} but got "
                                 f"{given.shape[0]} instead.")
            values = [given[i] for i in range(len(tensors))]
        elif _is_number(given):
            values = [given] * len(tensors)
        elif isinstance(given, (list, tuple)) and all(isinstance(v, _NUMBER) for v in given):
            _scalar_count(tensors, given)
            values = list(given)
        else:
            raise _no_form(name, forms, args, kwargs)
        each = lambda i, t: _call(t, method, name, in_place, firsts[i], seconds[i], value=values[i])  # noqa: E731
        return _apply(tensors, each, in_place, self)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"x.{method}{'_' if in_place else ''}(t1, t2, value) for each x of self (torch.{name})."
    return fn


# ---- the rest: zero_, copy_, clone, norm, max, powsum ------------------------------------------------------
def _foreach_zero_(self: list) -> list:
    """x.zero_() for each tensor x of self; returns self (torch._foreach_zero_)."""
    tensors = _self_list("_foreach_zero_", self, ("tuple of Tensors self",), (self,), {})
    return _apply(tensors, lambda i, t: t.zero_(), True, self)


def _foreach_copy_(self: list, src: list, non_blocking: bool = False) -> list:
    """x.copy_(s) for each tensor x of self and s of src at the same place; returns self (torch._foreach_copy_)."""
    forms = ("tuple of Tensors self, tuple of Tensors src, bool non_blocking = False",)
    tensors = _self_list("_foreach_copy_", self, forms, (self, src), {})
    sources = _tensor_list("_foreach_copy_", src, 1, forms, (self, src), {})
    _same_length(tensors, sources)
    return _apply(tensors, lambda i, t: t.copy_(sources[i], non_blocking), True, self)


def _foreach_clone(self: list) -> tuple:
    """x.clone() for each tensor x of self (torch._foreach_clone)."""
    tensors = _self_list("_foreach_clone", self, ("tuple of Tensors self",), (self,), {})
    return tuple(t.clone() for t in tensors)


def _foreach_max(self: list) -> tuple:
    """x.max() (a 0-d tensor) for each tensor x of self (torch._foreach_max)."""
    tensors = _self_list("_foreach_max", self, ("tuple of Tensors self",), (self,), {})
    if any(t.numel() == 0 for t in tensors):
        raise ForeachError("_foreach_max cannot compute the maximum of an empty tensor; max over zero elements is "
                           "undefined.")
    return tuple(t.max() for t in tensors)


def _norm_args(name: str, self, ord, dtype) -> list:
    forms = (f"tuple of Tensors self, Number ord = 2, ScalarType{'?' if name == '_foreach_norm' else ''} dtype "
             "= None",)
    if not isinstance(ord, _NUMBER):
        raise ArgumentTypeError(f"{name}(): argument 'ord' (position 2) must be Number, not {type(ord).__name__}")
    tensors = _self_list(name, self, forms, (self, ord), {})
    if abs(ord) == float("inf") and any(t.numel() == 0 for t in tensors):
        raise ForeachError(f"{name} cannot compute the infinity norm on an empty tensor because the operation "
                           "does not have an identity")
    return tensors


def _foreach_norm(self: list, ord: float = 2, dtype=None) -> tuple:  # noqa: A002  (torch's name)
    """linalg.vector_norm(x, ord, dtype=dtype) (a 0-d tensor) for each tensor x of self (torch._foreach_norm)."""
    tensors = _norm_args("_foreach_norm", self, ord, dtype)
    return tuple(vector_norm(t, ord, dtype=dtype) for t in tensors)


def _foreach_powsum(self: list, ord: float = 2, dtype=None) -> tuple:  # noqa: A002  (torch's name)
    """sum(|x| ** ord) (a 0-d tensor) for each tensor x of self: the norm before its root (torch._foreach_powsum)."""
    tensors = _norm_args("_foreach_powsum", self, ord, dtype)
    return tuple((t if dtype is None else t.to(dtype)).abs().pow(ord).sum() for t in tensors)


_MADE = {
    **{f.__name__: f for m in UNARY for f in (_unary(m, False), _unary(m, True))},
    **{f.__name__: f for op in BINARY for f in (_binary(op, False), _binary(op, True))},
    **{f.__name__: f for f in (_lerp(False), _lerp(True))},
    **{f.__name__: f for m in ("addcmul", "addcdiv") for f in (_pointwise(m, False), _pointwise(m, True))},
}
globals().update(_MADE)
__all__ = sorted([*_MADE, "_foreach_zero_", "_foreach_copy_", "_foreach_clone", "_foreach_max",  # noqa: PLE0605
                  "_foreach_norm", "_foreach_powsum"])
