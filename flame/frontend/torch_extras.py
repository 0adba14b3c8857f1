"""Small torch functions composed of flame's ops, with torch's names, parameters, values, dtypes,
gradients and errors: isin isneginf isposinf gcd lcm frexp ldexp diagflat combinations vander
unravel_index hsplit vsplit dsplit is_nonzero is_same_size is_signed chain_matmul matrix_power scalar_tensor
range gradient,
the window functions (hann, hamming, blackman, bartlett, kaiser) and the thread-count settings. The
functions that torch also has as Tensor methods are TensorExtras's methods (bound by methods.py)."""

from __future__ import annotations

import builtins
import itertools
import math
import os
import warnings

import numpy as np

from flame.errors import ArgumentError, ArgumentRangeError, DTypeError, ShapeError
from flame.frontend import pointwise_formulas
from flame.frontend.context import current_trace, no_grad, user_location
from flame.frontend.creation import tensor
from flame.frontend.default_dtype import get_default_dtype
from flame.frontend.linalg_functions import matrix_power, multi_dot  # matrix_power: torch's alias too
from flame.frontend.promotion import result_type
from flame.frontend.tensor import Tensor, dim_index
from flame.frontend.tensor_core import cat, full, placed, where
from flame.frontend.torch_saves import saves
from flame.ir.dtypes import boolean, dtype_of, f64, i32, i64, u8

__all__ = ["bartlett_window", "blackman_window", "chain_matmul", "combinations", "dsplit", "diagflat", "frexp", "gcd",
           "get_num_interop_threads", "get_num_threads", "gradient", "hamming_window", "hann_window", "hsplit",
           "is_nonzero", "is_same_size", "is_signed", "isin", "isneginf", "isposinf", "kaiser_window", "lcm", "ldexp",
           "matrix_power", "range", "scalar_tensor", "set_num_interop_threads", "set_num_threads", "unravel_index",
           "vander", "vsplit"]


def _integers(op: str, *xs: Tensor) -> None:
    for x in xs:
        if x.dtype.is_float:
            raise DTypeError(f'{op}: "{op}_cpu" not implemented for {x.dtype} (torch.{op} takes integer tensors)'
                             f"\n  at {user_location()}")


def _steps(dtype) -> int:
    """Euclid's algorithm ends within about log_phi(max) steps (consecutive Fibonacci numbers are its worst case)."""
    return int(math.log(2.0 ** (8 * dtype.itemsize)) / math.log((1 + 5 ** 0.5) / 2)) + 2


def gcd(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """The greatest common divisor of each pair (non-negative; gcd(0, 0) = 0), as torch.gcd: Euclid's
    algorithm as a fixed number of remainder steps (eagerly it stops once every divisor is zero)."""
    _integers("gcd", input, other)
    if isinstance(other, Tensor) and (input.dtype == boolean) != (other.dtype == boolean):  # (bool with ints)
        input, other = (t.to(result_type(input, other)) for t in (input, other))
    a, b = input.abs(), other.abs() if isinstance(other, Tensor) else tensor(builtins.abs(other))
    a, b = a + b * 0, b + a * 0  # broadcast, promoted as torch's
    eager = current_trace.get() is None
    for _ in builtins.range(_steps(a.dtype)):
        if eager and not bool(b.any().item()):
            break
        nonzero = b != 0
        a, b = where(nonzero, b, a), where(nonzero, a % where(nonzero, b, 1), 0)
    return a


def lcm(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """The least common multiple of each pair (non-negative; 0 where either is 0), as torch.lcm."""
    g = gcd(input, other)
    return where(g == 0, 0, (input // where(g == 0, 1, g) * other).abs()).to(g.dtype)


def _power_of_two(e: Tensor, dtype) -> tuple[Tensor, Tensor]:
    """2**e as two exact factors of dtype (2**e alone overflows for a subnormal's exponent)."""
    half = (e / 2).trunc()
    return half.to(dtype).exp2(), (e - half).to(dtype).exp2()


def frexp(input: Tensor) -> tuple[Tensor, Tensor]:  # noqa: A002
    """(mantissa, exponent) with input = mantissa * 2**exponent, |mantissa| in [0.5, 1) (0, inf and NaN
    as themselves with exponent 0), exponent int32, as torch.frexp; the gradient flows to the mantissa."""
    if not input.dtype.is_float:
        raise DTypeError(f"torch.frexp() only supports floating-point dtypes, got {input.dtype}\n"
                         f"  at {user_location()}")
    with no_grad():
        a = input.detach().to(f64).abs()
        regular = a.isfinite() & (a != 0)
        safe = where(regular, a, 1.0)
        e = safe.log2().floor() + 1
        lo, hi = _power_of_two(-e, f64)
        m = safe * lo * hi
        e = where(m >= 1, e + 1, where(m < 0.5, e - 1, e))
        e = where(regular, e, 0.0)
        lo, hi = _power_of_two(-e, input.dtype)
    return input * lo * hi, e.to(i32)


@saves(pointwise_formulas.ldexp_saved, vjp=pointwise_formulas.ldexp)
def ldexp(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """input * 2**other, as torch.ldexp: in the operands' result type (a bf16 input with integer exponents
    stays bf16), the default floating dtype where that is not floating; a bool exponent raises as torch's."""
    if isinstance(other, Tensor) and other.dtype == boolean:
        raise DTypeError(f"ldexp: \"ldexp_exp\" not implemented for 'Bool' exponents (PyTorch raises too; "
                         f"other.int())\n  at {user_location()}")
    dtype = result_type(input, other)
    dtype = dtype if dtype.is_float else get_default_dtype()
    return input.to(dtype) * (2.0 ** other).to(dtype)


def isneginf(input: Tensor) -> Tensor:  # noqa: A002
    """Where input is -inf, as torch.isneginf."""
    return input.isinf() & (input < 0)


def isposinf(input: Tensor) -> Tensor:  # noqa: A002
    """Where input is +inf, as torch.isposinf."""
    return input.isinf() & (input > 0)


def isin(elements, test_elements, *, assume_unique: bool = False, invert: bool = False) -> Tensor:
    """Whether each of elements is among test_elements (either may be a number), as torch.isin."""
    e = elements if isinstance(elements, Tensor) else tensor(elements)
    t = test_elements if isinstance(test_elements, Tensor) else tensor(test_elements)
    found = (e.reshape(*e.shape, 1) == t.reshape(-1)).any(-1) if t.numel() else full(e.shape, False, dtype=boolean)
    return ~found if invert else found


def diagflat(input: Tensor, offset: int = 0) -> Tensor:  # noqa: A002
    """input's elements on the offset diagonal of a square matrix, as torch.diagflat."""
    return input.flatten().diag(offset)


def combinations(input: Tensor, r: int = 2, with_replacement: bool = False) -> Tensor:  # noqa: A002
    """The length-r combinations of a 1-D tensor's elements as rows (itertools.combinations's order), as
    torch.combinations; r = 0 gives an empty 1-D tensor."""
    if input.ndim != 1:
        raise ShapeError(f"Expect a 1D vector, but got shape {list(input.shape)}\n  at {user_location()}")
    if r < 0:
        raise ArgumentRangeError(f"Expect a non-negative number, but got {r}\n  at {user_location()}")
    if r == 0:
        return input[:0]
    pick = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    rows = list(pick(builtins.range(input.shape[0]), r))
    return input[tensor(np.array(rows, dtype=np.int64).reshape(len(rows), r))]


def vander(x: Tensor, N: int | None = None, increasing: bool = False) -> Tensor:  # noqa: N803
    """The Vandermonde matrix of a 1-D x: columns x**(N-1) ... x**0 (x**0 ... with increasing), as
    torch.vander (integers and bools as int64)."""
    if x.ndim != 1:
        raise ShapeError(f"x must be a one-dimensional tensor.\n  at {user_location()}")
    n = x.shape[0] if N is None else N
    if n < 0:
        raise ArgumentRangeError(f"N must be non-negative.\n  at {user_location()}")
    if not x.dtype.is_float:
        x = x.to(i64)
    ones = full((x.shape[0], builtins.min(n, 1)), 1, dtype=x.dtype)
    cols = [ones] if n <= 1 else [ones, x.unsqueeze(1).expand(x.shape[0], n - 1).cumprod(1)]
    out = cat(cols, 1)
    return out if increasing else out.flip(1)


def unravel_index(indices, shape) -> tuple[Tensor, ...]:
    """The coordinates in a tensor of the given shape of each flat index (negative ones wrap, as
    Python's), as torch.unravel_index: one int64 tensor per dimension."""
    idx = indices if isinstance(indices, Tensor) else tensor(indices)
    if idx.dtype.is_float or idx.dtype == boolean:
        raise DTypeError(f"expected 'indices' to be integer dtype, but got {idx.dtype}\n  at {user_location()}")
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    if builtins.any(d < 0 for d in dims):
        raise ArgumentError(f"'shape' cannot have negative values, but got {dims}\n  at {user_location()}")
    idx, coords = idx.to(i64), []
    for d in reversed(dims):
        coords.append(idx % d)
        idx = idx // d
    return tuple(reversed(coords))


def _split(op: str, input: Tensor, indices_or_sections, dim: int, rank: int) -> tuple[Tensor, ...]:  # noqa: A002
    if input.ndim < rank:
        raise ShapeError(f"torch.{op} requires a tensor with at least {rank} dimension, but got a tensor with "
                         f"{input.ndim} dimensions!\n  at {user_location()}")
    if isinstance(indices_or_sections, int):
        size = input.shape[dim]
        if indices_or_sections == 0 or size % indices_or_sections:
            raise ShapeError(f"torch.{op} attempted to split along dimension {dim}, but the size of the dimension "
                             f"{size} is not divisible by the split_size {indices_or_sections}!\n"
                             f"  at {user_location()}")
    return tuple(input.tensor_split(indices_or_sections, dim))


def hsplit(input: Tensor, sections=None, *, indices=None) -> tuple[Tensor, ...]:  # noqa: A002
    """Split along dim 1 (dim 0 of a 1-D tensor) as numpy.hsplit, torch.hsplit: into `sections` equal
    parts, or at `indices` (a list given by position is taken as the indices)."""
    return _split("hsplit", input, sections if indices is None else indices, 1 if input.ndim > 1 else 0, 1)


def vsplit(input: Tensor, sections=None, *, indices=None) -> tuple[Tensor, ...]:  # noqa: A002
    """Split along dim 0 of a tensor of 2 or more dims, as torch.vsplit."""
    return _split("vsplit", input, sections if indices is None else indices, 0, 2)


def dsplit(input: Tensor, sections=None, *, indices=None) -> tuple[Tensor, ...]:  # noqa: A002
    """Split along dim 2 of a tensor of 3 or more dims, as torch.dsplit."""
    return _split("dsplit", input, sections if indices is None else indices, 2, 3)


def is_nonzero(input: Tensor) -> bool:  # noqa: A002
    """Whether a one-element tensor is not zero, as torch.is_nonzero (more or fewer elements raise)."""
    if input.numel() != 1:
        what = "no values" if input.numel() == 0 else "more than one value"
        raise ShapeError(f"Boolean value of Tensor with {what} is ambiguous\n  at {user_location()}")
    return bool(input.item() != 0)


def is_same_size(input: Tensor, other: Tensor) -> bool:  # noqa: A002
    return tuple(input.shape) == tuple(other.shape)


def is_signed(input: Tensor) -> bool:  # noqa: A002
    """Whether input's dtype holds negative values (not uint8 or bool), as torch.is_signed."""
    return input.dtype not in (u8, boolean)


def chain_matmul(*matrices: Tensor) -> Tensor:
    """The product of 2-D matrices, as torch.chain_matmul (deprecated there, with its warning), multiplied
    in linalg.multi_dot's order of fewest multiply-adds, as torch's."""
    warnings.warn("torch.chain_matmul is deprecated and will be removed in a future PyTorch release. Use "
                  "torch.linalg.multi_dot instead, which accepts a list of two or more tensors rather than "
                  "multiple parameters.", UserWarning, stacklevel=2)
    if not matrices:
        raise ArgumentError(f"chain_matmul(): Expected one or more matrices\n  at {user_location()}")
    for m in matrices:
        if m.ndim != 2:
            raise ShapeError(f"Tensor dimension is {m.ndim}, expected 2 instead.\n  at {user_location()}")
    return matrices[0].clone() if len(matrices) == 1 else multi_dot(matrices)  # torch's: multi_dot's order


def scalar_tensor(s, *, dtype=None, layout=None, device=None, pin_memory: bool = False,
                  requires_grad: bool = False) -> Tensor:
    """A 0-d tensor holding s, of the default floating dtype unless dtype is given (torch.scalar_tensor)."""
    out = placed(full((), s, dtype=dtype_of(dtype) if dtype is not None else get_default_dtype()), device,
                 "scalar_tensor")
    return out.requires_grad_(requires_grad) if requires_grad else out


def range(start=0, end=None, step=1, *, dtype=None, layout=None, device=None, pin_memory: bool = False,  # noqa: A001
          requires_grad: bool = False) -> Tensor:
    """start, start + step, ... up to end INCLUSIVE, of the default floating dtype unless dtype is given,
    as torch.range (deprecated there for torch.arange, which excludes end; with torch's warning)."""
    warnings.warn("torch.range is deprecated and will be removed in a future release because its behavior is "
                  "inconsistent with Python's range builtin. Instead, use torch.arange, which produces values in "
                  "[start, end).", UserWarning, stacklevel=2)
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ArgumentRangeError(f"step must be nonzero\n  at {user_location()}")
    if (end - start) * step < 0:
        raise ArgumentRangeError(f"upper bound and larger bound inconsistent with step sign\n  at {user_location()}")
    n = int(math.floor((end - start) / step)) + 1
    dt = dtype_of(dtype) if dtype is not None else get_default_dtype()
    out = placed(tensor(start + np.arange(n, dtype=np.float64) * step).to(dt), device, "range")
    return out.requires_grad_(requires_grad) if requires_grad else out


def _window(name: str, window_length: int, periodic: bool, dtype, device, requires_grad: bool, values) -> Tensor:
    dt = dtype_of(dtype) if dtype is not None else get_default_dtype()
    if not dt.is_float:
        raise DTypeError(f"{name} expects floating point dtypes, got {dt}\n  at {user_location()}")
    if window_length < 0:
        raise ArgumentRangeError(f"{name} requires non-negative window_length, got window_length={window_length}"
                                 f"\n  at {user_location()}")
    if window_length <= 1:
        v = np.ones(window_length)
    else:
        n = window_length + 1 if periodic else window_length
        v = values(np.arange(n, dtype=np.float64), n)[:window_length]
    out = placed(tensor(v).to(dt), device, name)
    return out.requires_grad_(requires_grad) if requires_grad else out


def _cosines(*coefficients: float):
    def values(k, n):
        return sum((-1) ** j * c * np.cos(2 * np.pi * j * k / (n - 1)) for j, c in enumerate(coefficients))

    return values


def hann_window(window_length: int, periodic: bool = True, *, dtype=None, layout=None, device=None,
                pin_memory: bool = False, requires_grad: bool = False) -> Tensor:
    """0.5 - 0.5 cos(2 pi n / (N - 1)), as torch.hann_window (periodic: one longer, the last dropped)."""
    return _window("hann_window", window_length, periodic, dtype, device, requires_grad, _cosines(0.5, 0.5))


def hamming_window(window_length: int, periodic: bool = True, alpha: float = 0.54, beta: float = 0.46, *,
                   dtype=None, layout=None, device=None, pin_memory: bool = False,
                   requires_grad: bool = False) -> Tensor:
    """alpha - beta cos(2 pi n / (N - 1)), as torch.hamming_window."""
    return _window("hamming_window", window_length, periodic, dtype, device, requires_grad, _cosines(alpha, beta))


def blackman_window(window_length: int, periodic: bool = True, *, dtype=None, layout=None, device=None,
                    pin_memory: bool = False, requires_grad: bool = False) -> Tensor:
    """0.42 - 0.5 cos(2 pi n / (N - 1)) + 0.08 cos(4 pi n / (N - 1)), as torch.blackman_window."""
    return _window("blackman_window", window_length, periodic, dtype, device, requires_grad,
                   _cosines(0.42, 0.5, 0.08))


def bartlett_window(window_length: int, periodic: bool = True, *, dtype=None, layout=None, device=None,
                    pin_memory: bool = False, requires_grad: bool = False) -> Tensor:
    """1 - |2n / (N - 1) - 1|, as torch.bartlett_window."""
    return _window("bartlett_window", window_length, periodic, dtype, device, requires_grad,
                   lambda k, n: 1 - np.abs(2 * k / (n - 1) - 1))


def kaiser_window(window_length: int, periodic: bool = True, beta: float = 12.0, *, dtype=None, layout=None,
                  device=None, pin_memory: bool = False, requires_grad: bool = False) -> Tensor:
    """I0(beta sqrt(1 - (2n / (N - 1) - 1)^2)) / I0(beta), as torch.kaiser_window."""
    return _window("kaiser_window", window_length, periodic, dtype, device, requires_grad,
                   lambda k, n: np.i0(beta * np.sqrt(np.clip(1 - (2 * k / (n - 1) - 1) ** 2, 0, None)))
                   / np.i0(beta))


def _along(x: Tensor, d: int, start: int, length: int) -> Tensor:
    return x.narrow(d, start, length)


def gradient(input: Tensor, *, spacing=1, dim=None, edge_order: int = 1) -> tuple[Tensor, ...]:  # noqa: A002
    """The derivative of input along each dim (or the given dims) by central differences inside and
    one-sided ones of order edge_order (1 or 2) at the ends, as torch.gradient / numpy.gradient;
    spacing is a number, one number per dim, or one tensor of coordinates per dim."""
    dims = tuple(builtins.range(input.ndim)) if dim is None else ((dim,) if isinstance(dim, int) else tuple(dim))
    dims = tuple(dim_index("gradient", d, input.ndim) for d in dims)
    spacings = list(spacing) if isinstance(spacing, (tuple, list)) else [spacing] * len(dims)
    if len(spacings) != len(dims):
        raise ShapeError(f"torch.gradient expected spacing to be unspecified, a scalar or it's spacing and dim "
                         f"arguments to have the same length, but got a spacing argument of length "
                         f"{len(spacings)} and a dim argument of length {len(dims)}.\n  at {user_location()}")
    if edge_order not in (1, 2):
        raise ArgumentRangeError(f"torch.gradient only supports edge_order=1 and edge_order=2.\n"
                                 f"  at {user_location()}")
    if builtins.any(input.shape[d] < edge_order + 1 for d in dims):
        raise ShapeError(f"torch.gradient expected each dimension size to be at least edge_order+1\n"
                         f"  at {user_location()}")
    f = input if input.dtype.is_float else input.to(get_default_dtype())
    return tuple(_gradient_along(f, d, h, edge_order) for d, h in zip(dims, spacings))


def _coefficient(v: Tensor, d: int, ndim: int) -> Tensor:
    return v.reshape(*(1,) * d, -1, *(1,) * (ndim - d - 1))


def _gradient_along(f: Tensor, d: int, h, edge_order: int) -> Tensor:
    n, r = f.shape[d], f.ndim
    if isinstance(h, Tensor):
        dx = h[1:] - h[:-1]  # in the coordinates' dtype, as torch's
        d1, d2 = dx[:-1], dx[1:]
        a, b, c = (_coefficient(v, d, r) for v in (-d2 / (d1 * (d1 + d2)), (d2 - d1) / (d1 * d2),
                                                    d1 / (d2 * (d1 + d2))))
        inner = a * _along(f, d, 0, n - 2) + b * _along(f, d, 1, n - 2) + c * _along(f, d, 2, n - 2)
        if edge_order == 1:
            first = (_along(f, d, 1, 1) - _along(f, d, 0, 1)) / dx[0]
            last = (_along(f, d, n - 1, 1) - _along(f, d, n - 2, 1)) / dx[-1]
        else:
            e1, e2 = dx[0], dx[1]
            first = (-(2 * e1 + e2) / (e1 * (e1 + e2)) * _along(f, d, 0, 1) + (e1 + e2) / (e1 * e2) * _along(f, d, 1, 1)
                     - e1 / (e2 * (e1 + e2)) * _along(f, d, 2, 1))
            e1, e2 = dx[-2], dx[-1]
            last = (e2 / (e1 * (e1 + e2)) * _along(f, d, n - 3, 1) - (e2 + e1) / (e1 * e2) * _along(f, d, n - 2, 1)
                    + (2 * e2 + e1) / (e2 * (e1 + e2)) * _along(f, d, n - 1, 1))
    else:
        inner = (_along(f, d, 2, n - 2) - _along(f, d, 0, n - 2)) / (2.0 * h)
        if edge_order == 1:
            first = (_along(f, d, 1, 1) - _along(f, d, 0, 1)) / h
            last = (_along(f, d, n - 1, 1) - _along(f, d, n - 2, 1)) / h
        else:
            first = (-1.5 * _along(f, d, 0, 1) + 2 * _along(f, d, 1, 1) - 0.5 * _along(f, d, 2, 1)) / h
            last = (0.5 * _along(f, d, n - 3, 1) - 2 * _along(f, d, n - 2, 1) + 1.5 * _along(f, d, n - 1, 1)) / h
    return cat([first, inner, last], d)


_threads = {"intra": os.cpu_count() or 1, "inter": os.cpu_count() or 1}


def _set_threads(kind: str, name: str, n: int) -> None:
    if not isinstance(n, int) or n <= 0:
        raise ArgumentRangeError(f"{name} expects a positive integer\n  at {user_location()}")
    _threads[kind] = n


def get_num_threads() -> int:
    """The number set_num_threads last set (the CPU count at first). flame's work runs on the GPU or in
    NumPy, whose BLAS threads OMP_NUM_THREADS sets, so the number is kept and changes nothing."""
    return _threads["intra"]


def set_num_threads(num: int) -> None:
    """Accepted, as torch.set_num_threads, and kept for get_num_threads (see there)."""
    _set_threads("intra", "set_num_threads", num)


def get_num_interop_threads() -> int:
    return _threads["inter"]


def set_num_interop_threads(num: int) -> None:
    _set_threads("inter", "set_num_interop_threads", num)


class TensorExtras:
    """Tensor's methods of the functions above (torch.Tensor has them as methods too)."""

    __slots__ = ()

    def gcd(self, other):
        return gcd(self, other)

    def lcm(self, other):
        return lcm(self, other)

    def ldexp(self, other):
        return ldexp(self, other)

    def frexp(self):
        return frexp(self)

    def isneginf(self):
        return isneginf(self)

    def isposinf(self):
        return isposinf(self)

    def diagflat(self, offset: int = 0):
        return diagflat(self, offset)

    def matrix_power(self, n: int):
        return matrix_power(self, n)

    def hsplit(self, sections=None, *, indices=None):
        return hsplit(self, sections, indices=indices)

    def vsplit(self, sections=None, *, indices=None):
        return vsplit(self, sections, indices=indices)

    def dsplit(self, sections=None, *, indices=None):
        return dsplit(self, sections, indices=indices)

    def is_nonzero(self) -> bool:
        return is_nonzero(self)

    def is_same_size(self, other) -> bool:
        return is_same_size(self, other)

    def is_signed(self) -> bool:
        return is_signed(self)

    # activations.py imports ops.py, which needs Tensor's methods bound: these two import it when called
    def hardshrink(self, lambd: float = 0.5):
        from flame.frontend.activations import hardshrink

        return hardshrink(self, lambd)

    def prelu(self, weight):
        from flame.frontend.activations import prelu

        return prelu(self, weight)

