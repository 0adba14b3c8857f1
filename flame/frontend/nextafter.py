"""torch.nextafter: the next floating value after input towards other, as C's nextafter, in input's
(promoted) dtype. Written with exact arithmetic on the value (its binade's unit in the last place,
computed in f64, where every f64/f32/f16/bf16 value and step is exact) rather than on its bits, so it
needs no op of its own and runs the same eagerly, compiled and on both executors."""

from __future__ import annotations

from flame.errors import ArgumentTypeError, DTypeError
from flame.frontend.context import no_grad, user_location
from flame.frontend.dispatch import apply
from flame.frontend.norms import _TORCH_NAMES
from flame.frontend.promotion import result_type
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import where
from flame.ir.dtypes import bf16, f16, f32, f64, value_range

__all__ = ["nextafter"]

# dtype -> (significand bits, smallest normal exponent)
_FORMATS = {f64: (53, -1022), f32: (24, -126), f16: (11, -14), bf16: (8, -126)}


def _step(x: Tensor, y: Tensor, dtype) -> Tensor:
    """The next value of dtype after x towards y (f64 tensors holding values of dtype), without history."""
    bits, emin = _FORMATS[dtype]
    a = x.abs()
    finite = where(a.isfinite() & (a != 0), a, 1.0)
    e = finite.log2().floor()
    e = where(e.exp2() > finite, e - 1, e)  # log2 rounded up to the next binade
    e = where((e + 1).exp2() <= finite, e + 1, e)
    e = e.clamp_min(emin)  # subnormals share the smallest normal binade's step
    ulp = (e - (bits - 1)).exp2()
    away = finite + ulp
    toward = where((finite == e.exp2()) & (e > emin), finite - ulp / 2, finite - ulp)  # below a power of two
    mag = where((y > x) == (x > 0), away, toward).copysign(x)
    mag = where(a.isinf(), x.sign() * value_range(dtype)[1], mag)  # from infinity: the largest finite value
    tiny = 2.0 ** (emin - bits + 1)  # the smallest subnormal, signed as y
    mag = where(x == 0, where(y > 0, x + tiny, x - tiny), mag)
    return where(x == y, y, where(x.isnan() | y.isnan(), x + y, mag))


def nextafter(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """The next floating value after each element of input towards other's (other's where they are
    equal, NaN where either is), in the dtype input and other promote to, as torch.nextafter; the
    gradient flows to input where input and other differ (NaN included) and is zero where they are
    equal, and other's is zero, as torch's."""
    for name, t in (("input", input), ("other", other)):
        if not isinstance(t, Tensor):
            raise ArgumentTypeError(f"nextafter(): argument '{name}' (position {1 + (name == 'other')}) must be "
                                    f"Tensor, not {type(t).__name__}\n  at {user_location()}")
    dtype = result_type(input, other)
    if dtype not in _FORMATS:
        raise DTypeError(f"\"nextafter_cpu\" not implemented for '{_TORCH_NAMES.get(dtype, dtype)}'\n"
                         f"  at {user_location()}")
    x, y = input.to(dtype), other.to(dtype)
    with no_grad():
        value = _step(x.detach().to(f64), y.detach().to(f64), dtype).to(dtype)
    if not (x.requires_grad or y.requires_grad):
        return value
    xs, ys = x.broadcast_to(value.shape), y.broadcast_to(value.shape)
    with no_grad():
        differ = xs != ys
    carrier = where(differ, xs, xs.detach())  # torch's input gradient: grad where input != other, else 0
    if y.requires_grad:  # torch's other gradient: zeros (other requires grad, so the result does too)
        carrier = where(differ & ~differ, ys, carrier)
    return apply("straight_through", carrier, value)
