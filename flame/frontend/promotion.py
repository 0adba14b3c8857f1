"""PyTorch's type promotion over tensors and Python numbers: result_type (the dtype a binary op of
mixed operands computes in), torch.result_type / promote_types / can_cast, and how a Python number
becomes an operand of an integer op (wrapped into its range). tensor_core.binary and every op module
that mixes dtypes build on these."""

from __future__ import annotations

import functools
import math

import numpy as np

from flame.errors import ArgumentTypeError, DTypeError, OverflowValueError
from flame.frontend.context import user_location
from flame.frontend.default_dtype import get_default_dtype
from flame.frontend.tensor import Tensor
from flame.ir.dtypes import DType, boolean, dtype_of, i64, promote, u8, value_range


def is_scalar(x) -> bool:
    """Whether x is a Python or NumPy number (bool included)."""
    return isinstance(x, (int, float, bool, np.number, np.bool_))


def check_operand(name: str, x) -> None:
    """x can be an operand of binary op `name` (a flame Tensor, a number or a NumPy array), else a
    TypeError naming its type (another framework's tensor: with how to convert it)."""
    if isinstance(x, (Tensor, np.ndarray)) or is_scalar(x):
        return
    kind = f"{type(x).__module__}.{type(x).__qualname__}".removeprefix("builtins.")
    hint = (" (another framework's tensor: convert it with flame.tensor(x), or flame.from_dlpack(x) to share "
            "its memory)" if hasattr(x, "__dlpack__") or hasattr(x, "__array__") else "")
    raise ArgumentTypeError(f"{name}: unsupported operand of type {kind}{hint}\n  at {user_location()}")


def tensor_sequence(name: str, tensors) -> list[Tensor]:
    """The tensors of a torch.cat-like argument `tensors` (cat, stack, hstack, ...) as a list: a list or
    tuple of Tensors. Else torch's TypeError: for a Tensor itself (iterating it would take its rows as
    the tensors), an iterator or other object, and for an element that is not a Tensor."""
    if not isinstance(tensors, (list, tuple)):
        raise ArgumentTypeError(f"{name}(): argument 'tensors' (position 1) must be tuple of Tensors, not "
                                f"{type(tensors).__name__}\n  at {user_location()}")
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise ArgumentTypeError(f"{name}(): expected Tensor as element {i} in argument 0, but got "
                                    f"{type(t).__name__}\n  at {user_location()}")
    return list(tensors)


def in_common_dtype(tensors: list[Tensor]) -> list[Tensor]:
    """The tensors in their common dtype (torch.cat and torch.stack promote as result_type does)."""
    dt = functools.reduce(promote, (t.dtype for t in tensors))
    return [t if t.dtype == dt else t.to(dt) for t in tensors]


def bool_as_number(input: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:  # noqa: A002
    """(input, target) of a pointwise loss whose kernel computes in their promoted dtype (mse_loss,
    smooth_l1_loss, huber_loss): a bool one beside a number-typed one converted to that dtype, as
    the kernel reads it (so a bool target is 0 / 1, where a subtraction of bools would raise)."""
    if is_bool(input) == is_bool(target):
        return input, target
    dt = result_type(input, target)
    return input.to(dt), target.to(dt)


def broadcast_promoted(input: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:  # noqa: A002
    """(input, target) of l1_loss / mse_loss / smooth_l1_loss in the dtype PyTorch computes them in: its
    functional broadcasts the pair first (torch.broadcast_tensors), so a 0-d tensor counts as a dimensioned
    one in the promotion (f32[n] with f64[] gives f64, where f32[n] - f64[] is f32)."""
    if not (isinstance(input, Tensor) and isinstance(target, Tensor)) or input.dtype == target.dtype:
        return input, target
    dt = promote(input.dtype, target.dtype)
    return input.to(dt), target.to(dt)


def same_dtype(op: str, **tensors) -> DType | None:
    """The one dtype of the tensors given (None and numbers are skipped), or PyTorch's refusal of several
    where an op computes in one and promotes none (the GEMMs with an added input, bilinear, a convolution's
    bias): DTypeError naming each one's dtype."""
    given = {name: t for name, t in tensors.items() if isinstance(t, Tensor)}
    kinds = {t.dtype for t in given.values()}
    if len(kinds) > 1:
        got = ", ".join(f"{name}: {t.dtype}" for name, t in given.items())
        raise DTypeError(f"{op}: all tensors must have the same dtype, got {got}, as in PyTorch (convert them with "
                         f".to)\n  at {user_location()}")
    return kinds.pop() if kinds else None


def is_bool(x) -> bool:
    """Whether x is a bool tensor or a Python / NumPy bool."""
    return x.dtype == boolean if isinstance(x, Tensor) else isinstance(x, (bool, np.bool_))


def result_type(*operands) -> DType:
    """torch.result_type over tensors and Python numbers: the dtype of the dimensioned tensors (by
    promote()); a 0-d tensor, then a Python number, counts only when of a higher category (bool <
    integer < float), a Python (or NumPy) float then giving the default floating dtype
    (flame.get_default_dtype). So f16[n] * 2.0 is f16, f32[n] + f64[] is f32, i32[n] + 1 is i32 and
    i32[n] * 1.5 is f32 (f64 after flame.set_default_dtype(flame.float64))."""
    dims = zero_d = numbers = None  # the dtypes of the dimensioned tensors, the 0-d ones, the Python numbers
    float_number = False
    for x in operands:
        if isinstance(x, Tensor):
            dt = x._dtype
            if x.shape:
                dims = dt if dims is None else promote(dims, dt)
            else:
                zero_d = dt if zero_d is None else promote(zero_d, dt)
        elif isinstance(x, (bool, np.bool_, int, np.integer)):
            dt = boolean if isinstance(x, (bool, np.bool_)) else i64
            numbers = dt if numbers is None else promote(numbers, dt)
        else:
            float_number = True
    tensors = _combine(dims, zero_d)
    if float_number and not (tensors is not None and tensors.is_float):  # the number's dtype decides
        numbers = get_default_dtype()
    return _combine(dims, _combine(zero_d, numbers))


def _combine(higher: DType | None, lower: DType | None) -> DType | None:
    """PyTorch's combine_categories: `lower` (a 0-d tensor's or a number's dtype) matters only when
    its category is higher than `higher`'s."""
    if higher is None or lower is None:
        return higher or lower
    if higher.is_float:
        return higher
    if higher == boolean or lower.is_float:
        return promote(higher, lower)
    return higher


def wrapped(x, dt: DType):
    """A Python number as an operand of an integer op of dtype dt: wrapped into its range, as PyTorch's
    arithmetic does (u8 - 1 is 255 where the tensor holds 0, u8 * -2 multiplies by 254)."""
    if dt == boolean or isinstance(x, (bool, np.bool_)):
        return x
    bits = dt.itemsize * 8
    v = int(x) & ((1 << bits) - 1)
    return v - (1 << bits) if dt != u8 and v >= 1 << (bits - 1) else v


def can_cast(from_: DType, to: DType) -> bool:
    """torch.can_cast: whether a type promotion may cast from_ to `to` (not to a lower category: bool <
    integer < float)."""
    order = {"bool": 0, "int": 1, "float": 2}
    return order[dtype_of(from_).kind] <= order[dtype_of(to).kind]


def torch_result_type(tensor, other) -> DType:
    """torch.result_type(tensor, other): the dtype an op of the two gives (result_type's rules)."""
    return result_type(tensor, other)


def promote_types(type1, type2) -> DType:
    """torch.promote_types: the dtype two tensors of dtypes type1 and type2 promote to."""
    return promote(dtype_of(type1), dtype_of(type2))


def fits(op: str, name: str, value, dt) -> None:
    """A Python number argument (None and tensors pass) converts to dt, else OverflowValueError, as
    PyTorch's checked conversion of a Scalar refuses it (c10's overflows): a floating dt takes its finite
    range, infinities and NaN; an integer dt a float within its range (NaN and infinities refused); a
    signed integer dt an int within its range, an unsigned one an int down to minus its largest value
    (which wraps, as two's complement); bool anything."""
    if value is None or isinstance(value, Tensor) or isinstance(value, (bool, np.bool_)) or dt == boolean:
        return
    v = float(value) if dt.is_float else value
    if dt.is_float and not math.isfinite(v):
        return
    lo, hi = value_range(dt)
    if not dt.is_float and lo == 0 and isinstance(value, (int, np.integer)):
        lo = -hi
    if not lo <= v <= hi:  # NaN too
        raise OverflowValueError(f"{op}: {name}={value!r} cannot be converted to {dt.name} without overflow (its "
                                 f"values run from {lo:g} to {hi:g})\n  at {user_location()}")


def alpha_check(op: str, name: str, value, dt: DType) -> None:
    """PyTorch's alpha_check (add, sub, addr): a bool coefficient `name` only for a bool result, a float one
    only for a floating result; else DTypeError in torch's words."""
    if isinstance(value, (bool, np.bool_)) and dt != boolean:
        raise DTypeError(f"{op}: Boolean {name} only supported for Boolean results (as in PyTorch)\n"
                         f"  at {user_location()}")
    if isinstance(value, (float, np.floating)) and not dt.is_float:
        raise DTypeError(f"{op}: for integral input tensors, argument {name} must not be a floating point number "
                         f"(as in PyTorch)\n  at {user_location()}")
    if dt.is_float:  # torch converts it to the result's dtype with a checked conversion: 1e6 is no f16 alpha
        fits(op, name, value, dt)


def coefficient(op: str, name: str, value, dt: DType, checked: bool = False):
    """A scalar coefficient (alpha, beta, value) of an op whose result has dtype dt, as PyTorch's kernels
    take it: converted to dt rather than taking part in the promotion, so an integer result stays
    integer, a float coefficient truncated toward zero (addmm(beta=2.7) of int64 tensors scales by 2); one
    dt cannot hold raises (`fits`). A 0-d tensor counts as its value (detached; cast to an integer dt, its
    value checked where known: eagerly). checked: a Python number must fit a floating dt too (index_add's and
    addmv's alpha and beta, which torch converts with a checked conversion; addcmul's and addmm's it does not)."""
    if isinstance(value, Tensor):
        value = value.detach()
        if dt.is_float or dt == boolean:
            return value
        if not value.is_traced and value.dtype.is_float:
            fits(op, name, value.item(), dt)
        return value.to(dt)
    if dt.is_float or dt == boolean or isinstance(value, (bool, np.bool_)):
        if checked and dt.is_float:
            fits(op, name, value, dt)
        return value
    fits(op, name, value, dt)
    return int(value)
