"""Creating tensors: flame.tensor, zeros/ones/full/arange, rand/randn with a counter-based Generator."""

from __future__ import annotations

import math
import operator
import os
from contextvars import ContextVar
from typing import Any

import numpy as np

from flame.errors import (
    ArgumentError,
    ArgumentRangeError,
    ArgumentTypeError,
    DTypeError,
    OverflowValueError,
    ShapeError,
)
from flame.frontend import memory_format as _memory_format
from flame.frontend.context import made_like, no_grad, user_location
from flame.frontend.default_dtype import float_dtype, get_default_dtype
from flame.frontend.dispatch import apply
from flame.frontend.promotion import fits
from flame.frontend.random_ints import check_bounds, integers
from flame.frontend.tensor import Tensor, _shape_arg, to_array
from flame.frontend.tensor_core import full as _full
from flame.frontend.tensor_core import placed, where
from flame.ir.dtypes import DType, bf16, dtype_of, f32, f64, finfo, i64, u8
from flame.ir.ops.creation import arange_len
from flame.runtime import device as _device
from flame.runtime.device import executor

__all__ = ["Generator", "arange", "as_tensor", "default_generator", "empty", "empty_like", "eye", "from_numpy",
           "full", "full_like", "get_rng_state", "initial_seed", "linspace", "logspace", "manual_seed",
           "multinomial", "ones", "ones_like", "rand", "rand_like", "randint", "randn", "randperm", "randn_like",
           "seed", "set_rng_state", "tensor", "zeros", "zeros_like"]


def tensor(data: Any, dtype: Any = None, requires_grad: bool = False, *, device: Any = None) -> Tensor:
    """A new concrete tensor from data (Python floats give the default floating dtype, flame.get_default_dtype,
    ints i64, a NumPy array or tensor its own dtype, as in PyTorch)."""
    return placed(Tensor(data, dtype, requires_grad), device, "tensor")


def as_tensor(data: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """A tensor sharing `data`'s memory where its dtype and device allow, else a copy (torch.as_tensor)."""
    if isinstance(data, Tensor) and (dtype is None or dtype_of(dtype) == data.dtype):
        return placed(data, device, "as_tensor")
    arr, dt = to_array(data, dtype, copy=False)
    return placed(Tensor._concrete(arr, dt), device, "as_tensor")


def from_numpy(ndarray: np.ndarray) -> Tensor:
    """A tensor sharing the NumPy array's memory on the reference executor (torch.from_numpy); on a GPU
    the data is copied to the device."""
    a = ndarray
    if not isinstance(a, np.ndarray):
        raise TypeError(f"from_numpy: expected a numpy.ndarray, got {type(a).__name__}")
    return as_tensor(a, dtype_of(a.dtype))


def frombuffer(buffer: Any, *, dtype: Any, count: int = -1, offset: int = 0, requires_grad: bool = False) -> Tensor:
    """A 1-d tensor of `dtype` read from an object with the buffer protocol (bytes, bytearray, memoryview,
    array.array, mmap), skipping `offset` bytes and reading `count` elements (-1: all that are left), with
    torch.frombuffer's checks. A writable buffer is shared on the reference executor, as torch shares it; a
    read-only one (bytes) is copied, where torch warns and shares memory it may not write."""
    try:
        view = memoryview(buffer)
    except TypeError:
        raise ArgumentError("object does not implement Python buffer protocol.") from None
    dt, length = dtype_of(dtype), view.nbytes
    if length == 0 or count == 0:
        raise ArgumentError(f"both buffer length ({length}) and count ({count}) must not be 0")
    if offset < 0 or offset >= length:
        raise ArgumentError(f"offset ({offset} bytes) must be non-negative and no greater than buffer length "
                            f"({length} bytes) minus 1")
    size = dt.itemsize
    if count < 0:
        if (length - offset) % size:
            raise ArgumentError(f"buffer length ({length - offset} bytes) after offset ({offset} bytes) must be a "
                                f"multiple of element size ({size})")
        count = (length - offset) // size
    elif offset + count * size > length:
        raise ArgumentError(f"requested buffer length ({count} * {size} bytes) after offset ({offset} bytes) must "
                            f"not be greater than actual buffer length ({length} bytes)")
    arr = np.frombuffer(view.cast("B") if view.ndim != 1 or view.format != "B" else view, dtype=dt.np_dtype,
                        count=count, offset=offset)
    out = as_tensor(arr if arr.flags.writeable else arr.copy(), dt)
    return out.requires_grad_() if requires_grad else out


def from_dlpack(ext_tensor) -> Tensor:
    """Zero-copy view of a DLPack-capable array (torch, CuPy, JAX) on the current device, bfloat16
    included (NumPy and CuPy import no bfloat16 through DLPack: its bits come as int16 and are viewed
    as bfloat16, still sharing memory)."""
    obj = ext_tensor
    bits = _bfloat16_bits(obj)
    if bits is not None:
        return Tensor._concrete(executor().from_dlpack(bits).view(bf16.np_dtype), bf16)
    arr = executor().from_dlpack(obj)
    return Tensor._concrete(arr, dtype_of(arr.dtype))


def _bfloat16_bits(obj) -> Any:
    """A bfloat16 array as an int16 view of the same memory, or None for any other array."""
    dtype = str(getattr(obj, "dtype", ""))
    if dtype == "torch.bfloat16":
        import torch  # already imported: obj is a torch tensor

        return obj.view(torch.int16)
    if dtype == "bfloat16" and callable(getattr(obj, "view", None)):  # JAX, NumPy with ml_dtypes
        return obj.view(np.int16)
    return None


def full(size, fill_value, dtype=None, *, device=None, requires_grad: bool = False) -> Tensor:
    """A tensor of `size` filled with fill_value, as torch.full (tensor_core.full: the dtype rule)."""
    return _full(size, fill_value, dtype, device=device).requires_grad_(requires_grad)


def zeros(*shape, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A tensor of zeros (torch.zeros), in dtype or the default floating dtype."""
    return placed(_full(_shape_arg(shape), 0, float_dtype(dtype)), device, "zeros").requires_grad_(requires_grad)


def ones(*shape, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A tensor of ones (torch.ones), in dtype or the default floating dtype."""
    return placed(_full(_shape_arg(shape), 1, float_dtype(dtype)), device, "ones").requires_grad_(requires_grad)


def empty(*shape, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """torch.empty: flame has no uninitialised memory to hand out, so the tensor holds zeros."""
    return placed(zeros(*shape, dtype=dtype), device, "empty").requires_grad_(requires_grad)


def empty_like(input: Tensor, dtype=None, *, device=None, requires_grad: bool = False,  # noqa: A002
               memory_format=None) -> Tensor:
    """A tensor of input's shape (zeros), in dtype or input's (memory_format: flame/frontend/memory_format.py)."""
    _memory_format.check("empty_like", memory_format)
    return made_like(input, placed(zeros_like(input, dtype), device, "empty_like").requires_grad_(requires_grad))


def full_like(input: Tensor, fill_value, dtype=None, *, device=None, requires_grad: bool = False,  # noqa: A002
              memory_format=None) -> Tensor:
    """A tensor of input's shape filled with fill_value, in dtype or input's."""
    _memory_format.check("full_like", memory_format)
    filled = full(input.shape, fill_value, dtype or input.dtype)
    return made_like(input, placed(filled, device, "full_like").requires_grad_(requires_grad))


def zeros_like(input: Tensor, dtype=None, *, device=None, requires_grad: bool = False,  # noqa: A002
               memory_format=None) -> Tensor:
    """Zeros of input's shape, in dtype or input's."""
    _memory_format.check("zeros_like", memory_format)
    made = placed(_full(input.shape, 0, dtype or input.dtype), device, "zeros_like")
    return made_like(input, made.requires_grad_(requires_grad))


def ones_like(input: Tensor, dtype=None, *, device=None, requires_grad: bool = False,  # noqa: A002
              memory_format=None) -> Tensor:
    """Ones of input's shape, in dtype or input's."""
    _memory_format.check("ones_like", memory_format)
    made = placed(_full(input.shape, 1, dtype or input.dtype), device, "ones_like")
    return made_like(input, made.requires_grad_(requires_grad))


def arange(start=0, end=None, step=1, dtype=None, *, device=None, requires_grad: bool = False) -> Tensor:
    """start, start + step, ... below end (arange(end) counts from 0), as torch.arange: i64 for integer
    bounds, the default floating dtype where one is a float; a tensor bound counts as its value (a float
    tensor's as a float), as torch reads it."""
    start, end, step = (v.item() if isinstance(v, Tensor) else v for v in (start, end, step))
    stop = end
    if stop is None:
        start, stop = 0, start
    if dtype is None:
        floats = any(isinstance(v, (float, np.floating)) for v in (start, stop, step))
        dtype = get_default_dtype() if floats else i64
    if step == 0:
        raise ShapeError(f"arange: step must be nonzero (as in PyTorch)\n  at {user_location()}")
    if (stop - start) * step < 0:
        raise ShapeError(f"arange({start}, {stop}, {step}): upper bound and larger bound inconsistent with step "
                         f"sign, as in PyTorch (an empty range needs start == stop)\n  at {user_location()}")
    dt = dtype_of(dtype)
    if dt.is_int and any(isinstance(v, (float, np.floating)) for v in (start, stop, step)):
        made = _int_arange(float(start), float(stop), float(step), dt)
    else:
        made = apply("arange", start=start, stop=stop, step=step, dtype=dt)
    return placed(made, device, "arange").requires_grad_(requires_grad)


def _int_arange(start: float, stop: float, step: float, dt: DType) -> Tensor:
    """torch.arange into an integer dtype from float bounds: the values are int(start) + i * int(step)
    (C++ casts, toward zero); the length is ceil((stop - start) / step) in doubles, except for int64,
    whose length is counted from the truncated bounds, as PyTorch's CPU kernel does."""
    s0, s1, st = int(start), int(stop), int(step)
    n = arange_len(s0, s1, st) if dt == i64 else int(np.ceil((stop - start) / step))
    if st == 0:
        return full((n,), s0, dt)
    return apply("arange", start=s0, stop=s0 + n * st, step=st, dtype=dt)


_SEED_MASK = 2**64 - 1


def _seed_bits(seed, op: str) -> int:
    """A seed in [-2**63, 2**64) as the int64 holding its 64 bits (torch keeps seeds as uint64: -1 and
    2**64 - 1 are one seed); outside that range torch's ValueError."""
    seed = operator.index(seed)
    if not -(2**63) <= seed < 2**64:
        raise OverflowValueError(f"{op}: Overflow when unpacking long long: seed={seed} is outside "
                                 f"[-2**63, 2**64)\n  at {user_location()}")
    seed &= _SEED_MASK
    return seed - 2**64 if seed >= 2**63 else seed


class Generator:
    """A counter-based random stream: a seed and an offset, both i64 scalar tensors. Each draw of n
    numbers uses counters offset..offset+n-1 and advances the offset in place, so inside
    @flame.compile the seed and offset are state inputs of the graph and a step is replayable."""

    def __init__(self, seed: int = 0):
        self.seed_tensor = Tensor(np.int64(_seed_bits(seed, "Generator")), i64)
        self.offset_tensor = Tensor(np.int64(0), i64)
        self.seed_tensor._role = self.offset_tensor._role = "state"

    def manual_seed(self, seed: int) -> Generator:
        """Restart the stream from seed, an int in [-2**63, 2**64) (a negative one counts as its unsigned
        64-bit value, as torch's); self."""
        if isinstance(seed, bool) or not hasattr(seed, "__index__"):
            raise DTypeError(f"manual_seed expected a long, but got {type(seed).__name__}\n  at {user_location()}")
        self.seed_tensor.copy_(_seed_bits(seed, "manual_seed"))
        self.offset_tensor.copy_(0)
        return self

    def initial_seed(self) -> int:
        """The seed the stream started from (manual_seed's, or seed()'s), as torch's unsigned 64-bit value."""
        return int(self.seed_tensor.item()) & _SEED_MASK

    def seed(self) -> int:
        """Reseed from the operating system's entropy (as torch's Generator.seed) and return the seed."""
        seed = int.from_bytes(os.urandom(8), "little") >> 1  # a non-negative int64
        self.manual_seed(seed)
        return seed

    def get_state(self) -> Tensor:
        """The stream's state as torch's: a u8 tensor (16 bytes: the seed and the offset, little-endian
        int64), which set_state restores."""
        state = np.array([self.seed_tensor.item(), self.offset_tensor.item()], "<i8").view(np.uint8)
        return Tensor(state.copy(), u8)

    def set_state(self, new_state: Tensor) -> Generator:
        """Restore a state get_state returned, in place (a compiled function that captured this generator
        draws from the restored stream)."""
        if not isinstance(new_state, Tensor) or new_state.dtype != u8 or tuple(new_state.shape) != (16,):
            got = (f"{new_state.dtype} {list(new_state.shape)}" if isinstance(new_state, Tensor)
                   else type(new_state).__name__)
            raise ArgumentTypeError(f"Generator.set_state: expected the u8 tensor of 16 bytes get_state() "
                                    f"returns, got {got}")
        seed, offset = np.ascontiguousarray(new_state.numpy()).view("<i8")
        self.seed_tensor.copy_(int(seed))
        self.offset_tensor.copy_(int(offset))
        return self

    def draw(self, op: str, shape: tuple[int, ...], dtype: DType) -> Tensor:
        hook = draw_hook.get()
        if hook is not None:
            hook(self)
        out = apply(op, self.seed_tensor, self.offset_tensor, shape=shape, dtype=dtype)
        n = int(np.prod(shape, dtype=np.int64))
        self.offset_tensor.copy_(self.offset_tensor + n)
        return out


draw_hook: ContextVar = ContextVar("draw_hook", default=None)
"""Called with the generator before each draw (flame.func.vmap's randomness modes set it)."""


class _DefaultGenerator:
    """The process's default generators, one per device as in PyTorch (a generator's state tensors
    live on the device that made them; a process that switches executors, as the GPU tests do, gets
    the other device's generator), each made on first use from the last flame.manual_seed (0)."""

    def __init__(self):
        self.gens: dict[str, Generator] = {}
        self.seed = 0

    def get(self) -> Generator:
        device = _device.get_device()
        if device not in self.gens:
            self.gens[device] = Generator(self.seed)
        return self.gens[device]

    def manual_seed(self, seed: int) -> Generator:
        """Reseed every device's generator (torch.manual_seed does): the current device's in place (a
        compiled function that captured it sees the new seed), the others are made afresh from it."""
        bits = _seed_bits(int(seed), "manual_seed")  # torch.manual_seed takes int(seed)
        self.seed = bits
        current = self.get()
        self.gens = {_device.get_device(): current}
        return current.manual_seed(bits)


_default = _DefaultGenerator()


def default_generator() -> Generator:
    return _default.get()


def manual_seed(seed: int) -> Generator:
    """Reseed the default generator (model initialisation and dropout use it unless given one)."""
    return _default.manual_seed(seed)


def seed() -> int:
    """Reseed the default generator from the operating system's entropy; the seed (torch.seed)."""
    return manual_seed(int.from_bytes(os.urandom(8), "little") >> 1).initial_seed()


def initial_seed() -> int:
    """The default generator's seed (torch.initial_seed)."""
    return default_generator().initial_seed()


def get_rng_state() -> Tensor:
    """The default generator's state (Generator.get_state), as torch.get_rng_state."""
    return default_generator().get_state()


def set_rng_state(new_state: Tensor) -> None:
    """Restore the default generator's state from get_rng_state(), as torch.set_rng_state."""
    default_generator().set_state(new_state)


def rand(*shape, dtype=None, device=None, generator: Generator | None = None, requires_grad: bool = False) -> Tensor:
    """Uniform numbers in [0, 1), in dtype or the default floating dtype. A dtype narrower than f32 takes
    as many of the stream's bits as its significand holds, so no draw rounds up to 1 (torch's values are
    the multiples of 2**-digits below 1 too)."""
    dt = float_dtype(dtype)
    if dt.is_float and dt.itemsize < 4:
        digits = finfo(dt).nmant + 1
        u = (generator or default_generator()).draw("random_uniform", _shape_arg(shape), f32)
        t = ((u * float(2**digits)).floor() * float(2.0**-digits)).to(dt)
    else:
        t = (generator or default_generator()).draw("random_uniform", _shape_arg(shape), dt)
    t = placed(t, device, "rand")
    return t.requires_grad_(requires_grad) if requires_grad else t


def randn(*shape, dtype=None, device=None, generator: Generator | None = None, requires_grad: bool = False) -> Tensor:
    """Standard normal numbers, in dtype or the default floating dtype."""
    t = (generator or default_generator()).draw("random_normal", _shape_arg(shape), float_dtype(dtype))
    t = placed(t, device, "randn")
    return t.requires_grad_(requires_grad) if requires_grad else t


def rand_like(input: Tensor, dtype=None, *, device=None, generator: Generator | None = None,  # noqa: A002
              requires_grad: bool = False, memory_format=None) -> Tensor:
    """U(0, 1) samples of input's shape, in dtype or input's."""
    _memory_format.check("rand_like", memory_format)
    drawn = rand(*input.shape, dtype=dtype or input.dtype, generator=generator)
    return made_like(input, placed(drawn, device, "rand_like").requires_grad_(requires_grad))


def randn_like(input: Tensor, dtype=None, *, device=None, generator: Generator | None = None,  # noqa: A002
               requires_grad: bool = False, memory_format=None) -> Tensor:
    """N(0, 1) samples of input's shape, in dtype or input's."""
    _memory_format.check("randn_like", memory_format)
    drawn = randn(*input.shape, dtype=dtype or input.dtype, generator=generator)
    return made_like(input, placed(drawn, device, "randn_like").requires_grad_(requires_grad))


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator: Generator | None = None) -> Tensor:
    """Fill tensor in place with U(a, b), values in [a, b) (Tensor.uniform_, torch.nn.init.uniform_); a > b
    raises torch's RuntimeError."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a > b:
        raise ArgumentRangeError(f"uniform_ expects to return a [from, to) range, but found from={a:g} > to={b:g}\n"
                                 f"  at {user_location()}")
    values = rand(*tensor.shape, dtype=tensor.dtype, generator=generator) * (b - a) + a
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and tensor.dtype.is_float and a < b:
        top = np.asarray(b, tensor.dtype.np_dtype)  # values that round up to b stay below it, as torch's
        values = values.clamp_max(float(max(np.nextafter(top, -np.inf), np.asarray(a, tensor.dtype.np_dtype))))
    with no_grad():
        return tensor.copy_(values)


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator: Generator | None = None) -> Tensor:
    """Fill tensor in place with N(mean, std^2) (Tensor.normal_, torch.nn.init.normal_); a negative or NaN
    std raises torch's RuntimeError."""
    if isinstance(std, (int, float)) and not std >= 0:
        raise ArgumentRangeError(f"normal expects std >= 0.0, but found std {std:g}\n  at {user_location()}")
    with no_grad():
        return tensor.copy_(randn(*tensor.shape, dtype=tensor.dtype, generator=generator) * std + mean)


def randint(*args, low=None, high=None, size=None, dtype=i64, device=None, generator: Generator | None = None,
            requires_grad: bool = False) -> Tensor:
    """Integers drawn uniformly from [low, high) (random_ints.integers): randint(high, size) or
    randint(low, high, size), positionally or by keyword as torch's, int64 unless dtype; low and high - 1
    must be values of dtype (torch's RuntimeError otherwise)."""
    args = list(args)
    if size is None and args and not isinstance(args[-1], (int, np.integer)):
        size = args.pop()
    bounds = [*args, *(v for v in (high,) if v is not None)]
    if low is not None:
        bounds.insert(0, low)
    if size is None or len(bounds) not in (1, 2):
        raise ArgumentTypeError(f"randint() received an invalid combination of arguments: expected (high, size) or "
                                f"(low, high, size), got {len(bounds)} bound(s) and size={size!r}\n"
                                f"  at {user_location()}")
    for name, v in zip(("low", "high") if len(bounds) == 2 else ("high",), bounds):
        if isinstance(v, (float, np.floating)) or not hasattr(v, "__index__"):
            raise ArgumentTypeError(f"randint(): argument '{name}' must be int, not {type(v).__name__}\n"
                                    f"  at {user_location()}")
    lo, hi = (0, operator.index(bounds[0])) if len(bounds) == 1 else tuple(operator.index(b) for b in bounds)
    dt = dtype_of(dtype)
    check_bounds(lo, hi, dt)
    shape = _shape_arg((size,) if isinstance(size, (int, np.integer)) else tuple(size))
    out = placed(integers(generator or default_generator(), shape, lo, hi, dt), device, "randint")
    return out.requires_grad_(True) if requires_grad else out


def randperm(n: int, *, generator: Generator | None = None, dtype=i64, layout=None, device=None,
             pin_memory: bool = False, requires_grad: bool = False) -> Tensor:
    """A random permutation of 0 .. n - 1, as torch.randperm (int64 by default; any numeric dtype whose range
    holds n - 1): the order of n uniform f64 draws from flame's random stream (a permutation with torch's
    distribution, not torch's numbers)."""
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool):
        raise ArgumentTypeError(f"randperm(): argument 'n' (position 1) must be int, not {type(n).__name__}\n"
                                f"  at {user_location()}")
    dt = dtype_of(dtype)
    if not dt.is_float and not dt.is_int:
        raise DTypeError(f'randperm: "randperm" not implemented for {dt} (as in PyTorch)\n  at {user_location()}')
    if n > 0:
        fits("randperm", "n - 1", n - 1, dt)  # the largest value must convert, as torch's check
    order = rand(int(n), dtype=f64, generator=generator).argsort()
    out = placed(order if dt == i64 else order.to(dt), device, "randperm")
    return out.requires_grad_(True) if requires_grad else out


def multinomial(input: Tensor, num_samples: int, replacement: bool = False,  # noqa: A002
                generator: Generator | None = None) -> Tensor:
    """Category indices drawn from the non-negative weights of each row of input ([C] or [N, C]), as
    torch.multinomial: with replacement by inverting the running sum of the weights; without, the
    num_samples largest keys log(u) / w (Efraimidis-Spirakis: the same distribution as drawing one by
    one). Eager calls check the weights (non-negative, enough nonzero categories)."""
    if input.ndim not in (1, 2):
        raise ShapeError(f"multinomial: input must be 1-D or 2-D, got shape {list(input.shape)}")
    c = input.shape[-1]
    if input._value is None:
        w = input.numpy().astype(np.float64)
        if (w < 0).any() or not np.isfinite(w).all() or (w.sum(-1) <= 0).any():
            raise ValueError("multinomial: weights must be finite, non-negative and have a positive sum per row")
        if not replacement and (num_samples > (w > 0).sum(-1)).any():
            raise ValueError(f"multinomial: cannot draw {num_samples} samples without replacement from "
                             f"{int((w > 0).sum(-1).min())} categories of nonzero weight")
    p = input.to(f64)
    u = (generator or default_generator()).draw("random_uniform", (*input.shape[:-1], num_samples if replacement
                                                                   else c), f64)
    if not replacement:
        keys = where(p > 0, u.log() / where(p > 0, p, 1.0), float("-inf"))
        return keys.topk(num_samples, dim=-1).indices
    cdf = p.cumsum(-1)
    target = u * cdf[..., -1:]
    idx = (cdf.unsqueeze(-2) <= target.unsqueeze(-1)).sum(-1)
    last = ((p > 0).to(i64) * arange(c)).amax(-1, keepdim=True)  # rounding must not pick a trailing zero
    return idx.clamp(max=last)


def _split(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Veltkamp's split: a = hi + lo exactly, each half of a's significand (so hi * hi is exact)."""
    c = a * a.dtype.type(2.0 ** ((np.finfo(a.dtype).nmant + 2) // 2) + 1)
    hi = c - (c - a)
    return hi, a - hi


def _fma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """a * b + c rounded once (as a fused multiply-add), from error-free transforms in a's dtype:
    p + e is a * b exactly (Dekker), s + t is p + c exactly (Knuth), and the sum of the small parts
    goes in last. Where a value is not finite, the plain a * b + c."""
    with np.errstate(all="ignore"):
        p = a * b
        (ah, al), (bh, bl) = _split(a), _split(b)
        e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
        s = p + c
        v = s - p
        t = (p - (s - v)) + (c - v)
        out = s + (e + t)
    return np.where(np.isfinite(out), out, s)


def _linspace_values(start, end, steps: int, dt: DType) -> np.ndarray:
    """torch.linspace's values, as its CPU kernel computes them: start + step * i for the first half and
    end - step * (steps - 1 - i) for the second, step = (end - start) / (steps - 1). In f32 and f64 each
    value is one fused multiply-add; in f16 and bf16 every operation rounds to the dtype; for an integer
    dtype start and end are truncated first, the arithmetic is in f64 and the values are truncated."""
    if not dt.is_float:
        s, e, work = float(int(start)), float(int(end)), np.dtype(np.float64)
    else:
        work = dt.np_dtype if dt.itemsize >= 4 else np.dtype(np.float32)
        s, e = (work.type(np.asarray(v, dt.np_dtype)) for v in (start, end))
    if steps <= 1:
        return np.full(steps, s, work).astype(dt.np_dtype)
    i = np.arange(steps, dtype=work)
    first = i < steps // 2
    back = work.type(steps - 1) - i
    if dt.is_float and dt.itemsize < 4:
        def r(x):  # noqa: E306 (rounded to the dtype, as each c10::Half / BFloat16 operation)
            return np.asarray(x).astype(dt.np_dtype).astype(work)
        step = r(r(e - s) / r(work.type(steps - 1)))
        return np.where(first, r(s + r(step * r(i))), r(e - r(step * r(back)))).astype(dt.np_dtype)
    step = (work.type(e) - work.type(s)) / work.type(steps - 1)
    ones = np.ones(steps, work)
    out = np.where(first, _fma(step * ones, i, s * ones), _fma(-step * ones, back, e * ones))
    return (out if dt.is_float else np.trunc(out)).astype(dt.np_dtype)


def linspace(start, end, steps: int, dtype=None, *, device=None, requires_grad: bool = False) -> Tensor:
    """steps evenly spaced values from start to end, bitwise as torch.linspace on the CPU (from start for
    the first half, from end for the second, so both ends are exact; _linspace_values), in dtype or the
    default floating dtype. The values are computed on the host from the Python numbers: inside
    @flame.compile they are a constant of the graph."""
    dt = float_dtype(dtype)
    if steps < 0:
        raise ShapeError(f"linspace: number of steps must be non-negative, got {steps}")
    if steps > 1:  # (as torch: one step is start, unchecked)
        fits("linspace", "start", start, dt)
        fits("linspace", "end", end, dt)
    made = Tensor._concrete(executor().asarray(_linspace_values(start, end, steps, dt)), dt)
    return placed(made, device, "linspace").requires_grad_(requires_grad)


def _logspace_values(start, end, steps: int, base: float, dt: DType) -> np.ndarray:
    """torch.logspace's values, as its CPU kernel computes them: the exponents by linspace's formula with
    each operation rounded to the dtype (no fused multiply-add), then the C library's pow(base, exponent)
    in f64 (math.pow: NumPy's power may round differently), rounded to the dtype; one step is
    pow(base, start) with start unrounded; for an integer dtype start and end are truncated first,
    base is rounded to f32 and the values are truncated. Bitwise torch's in f64 and the integer dtypes;
    in f32 and (for long ranges) f16 and bf16 torch's CPU build rounds its power differently, and values
    may differ in the last place."""
    typed = (dt if dt.is_float else f64).np_dtype
    if steps <= 1:
        return np.full(steps, _pow(base, float(start))).astype(dt.np_dtype)
    if not dt.is_float:  # (torch's integer kernel: truncated bounds, a base rounded to f32)
        start, end, base = int(start), int(end), float(np.float32(base))
    s, e = np.asarray(start, typed), np.asarray(end, typed)
    step = np.asarray((e - s) / np.asarray(steps - 1, typed), typed)
    i = np.arange(steps).astype(typed)
    back = np.arange(steps - 1, -1, -1).astype(typed)
    exps = np.where(np.arange(steps) < steps // 2, s + step * i, e - step * back).astype(typed)
    return np.array([_pow(base, x) for x in exps.astype(np.float64).tolist()]).astype(dt.np_dtype)


def _pow(base: float, x: float) -> float:
    """C's pow, where Python's math.pow raises instead: inf for an overflow, nan for a negative base's
    fractional power."""
    try:
        return math.pow(base, x)
    except OverflowError:
        return math.inf if base > 0 or x == int(x) and int(x) % 2 == 0 else -math.inf
    except ValueError:
        return math.nan


def logspace(start, end, steps: int, base: float = 10.0, dtype=None, *, device=None,
             requires_grad: bool = False) -> Tensor:
    """base ** linspace(start, end, steps), as torch.logspace on the CPU (_logspace_values), in
    dtype or the default floating dtype; computed on the host from the Python numbers (inside
    @flame.compile a constant of the graph)."""
    dt = float_dtype(dtype)
    if steps < 0:
        raise ShapeError(f"logspace: number of steps must be non-negative, got {steps}")
    if steps > 1:  # (as torch: one step is start, unchecked)
        fits("logspace", "start", start, dt)
        fits("logspace", "end", end, dt)
    values = _logspace_values(start, end, steps, float(base), dt)
    return placed(Tensor._concrete(executor().asarray(values), dt), device, "logspace").requires_grad_(requires_grad)


def eye(n: int, m: int | None = None, dtype=None, *, device=None, requires_grad: bool = False) -> Tensor:
    """The n x m identity (ones on the diagonal), in dtype or the default floating dtype."""
    m = n if m is None else m
    made = (arange(n).unsqueeze(1) == arange(m).unsqueeze(0)).to(float_dtype(dtype))
    return placed(made, device, "eye").requires_grad_(requires_grad)
