"""torch's random draws beyond rand / randn / randint: torch.bernoulli, torch.normal (its four overloads),
torch.poisson, torch.randint_like, and Tensor's in-place fills bernoulli_ exponential_ geometric_ cauchy_ log_normal_
random_. Each transforms uniform or normal numbers from flame's random stream (a Generator's when
given), so they draw inside @flame.compile as eagerly; the values follow torch's distributions, not its
draws. As torch's, the draws are not differentiated (torch's gradient of normal and bernoulli is zero)."""

from __future__ import annotations

import math

from flame.errors import ArgumentRangeError, ArgumentTypeError, DTypeError
from flame.frontend.context import current_trace, made_like, no_grad, user_location
from flame.frontend.creation import Generator, default_generator, multinomial, randint, randn
from flame.frontend.default_dtype import get_default_dtype
from flame.frontend.random_ints import check_bounds, dtype_bounds, integers
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import placed, where
from flame.ir.dtypes import boolean, dtype_of, f64

__all__ = ["bernoulli", "normal", "poisson", "randint_like"]


def _uniform(shape, generator: Generator | None) -> Tensor:
    """U[0, 1) in f64, from the generator's stream."""
    return (generator or default_generator()).draw("random_uniform", tuple(shape), f64)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ArgumentRangeError(f"{message}\n  at {user_location()}")


def _eager_values(x) -> bool:
    return isinstance(x, Tensor) and current_trace.get() is None


def bernoulli(input: Tensor, p=None, *, generator: Generator | None = None) -> Tensor:  # noqa: A002
    """1 with probability input (or p, a number or tensor), else 0, of input's dtype, as torch.bernoulli."""
    probs = input if p is None else p
    if isinstance(probs, Tensor):
        _kernel_dtype(probs.dtype, "bernoulli_tensor_cpu_p_", "a tensor of probabilities", floats=True)
        if _eager_values(probs):
            _check(bool(((probs >= 0) & (probs <= 1)).all().item()), "Expected p_in >= 0 && p_in <= 1 to be true, "
                                                                     "but got false.")
        probs = probs.detach()
    else:
        _check(0 <= probs <= 1, f"bernoulli_ expects p to be in [0, 1], but got p={probs}")
    return (_uniform(input.shape, generator) < probs).to(input.dtype)


def _kernel_dtype(dt, kernel: str, what: str, floats: bool = False, continuous: str = "") -> None:
    """torch's dtype checks of a random fill: a continuous distribution (continuous names it) takes
    floating tensors only, and a kernel with floats=True no integer or bool one, one without no bool
    one; DTypeError (a RuntimeError, as torch's) naming the kernel and the dtype."""
    if continuous and not dt.is_float:
        raise DTypeError(f"{continuous} distribution is a continuous probability distribution. dtype must be a "
                         f"floating point but you specified {dt}\n  at {user_location()}")
    if dt == boolean or (floats and not dt.is_float):
        raise DTypeError(f'"{kernel}" not implemented for {dt} ({what} must be of a floating dtype'
                         f'{"" if floats else " or an integer one"})\n  at {user_location()}')


def _std_ok(std) -> None:
    if isinstance(std, Tensor):
        if _eager_values(std):
            _check(bool((std >= 0).all().item()), "normal expects all elements of std >= 0.0")
    else:
        _check(std >= 0, f"normal expects std >= 0.0, but found std {std}")


def normal(mean=0.0, std=1.0, size=None, *, generator: Generator | None = None, dtype=None, layout=None,
           device=None, pin_memory: bool = False, requires_grad: bool = False) -> Tensor:
    """torch.normal's overloads: normal(mean, std) with either or both tensors (their broadcast shape and
    floating dtype), or normal(mean, std, size) with numbers (the default floating dtype unless dtype)."""
    _std_ok(std)
    tensors = [t.detach() for t in (mean, std) if isinstance(t, Tensor)]
    if not tensors:
        if size is None:
            raise ArgumentTypeError(f"normal() received an invalid combination of arguments: with a number mean and "
                                    f"std, size is required\n  at {user_location()}")
        dt = dtype_of(dtype) if dtype is not None else get_default_dtype()
        shape = (size,) if isinstance(size, int) else tuple(size)
        out = placed(randn(*shape, dtype=dt, generator=generator) * std + mean, device, "normal")
        return out.requires_grad_(requires_grad) if requires_grad else out
    if size is not None:
        raise ArgumentTypeError(f"normal(): size is given only with a number mean and std\n  at {user_location()}")
    dt = tensors[0].dtype  # mean's when it is a tensor, as torch's
    if not dt.is_float:
        raise DTypeError(f'"normal_kernel_cpu" not implemented for {dt} (normal takes floating tensors)\n'
                         f"  at {user_location()}")
    shape = (tensors[0] + tensors[-1] * 0).shape if len(tensors) == 2 else tensors[0].shape
    m = mean.detach() if isinstance(mean, Tensor) else mean
    s = std.detach() if isinstance(std, Tensor) else std
    return (randn(*shape, dtype=dt, generator=generator) * s + m).to(dt)


def randint_like(input: Tensor, low: int = 0, high: int | None = None, *, dtype=None, layout=None,  # noqa: A002
                 device=None, pin_memory: bool = False, requires_grad: bool = False, memory_format=None,
                 generator: Generator | None = None) -> Tensor:
    """Integers uniform in [low, high) of input's shape and dtype (or dtype), as torch.randint_like
    (randint_like(input, high) or randint_like(input, low, high))."""
    if high is None:
        low, high = 0, low
    dt = dtype_of(dtype) if dtype is not None else input.dtype
    return made_like(input, randint(int(low), int(high), tuple(input.shape), dtype=dt, device=device or input.device,
                                    generator=generator))


_SMALL_RATE, _SEARCH_STEPS, _ROUNDS = 10.0, 48, 10


def _poisson_small(lam: Tensor, u: Tensor) -> Tensor:
    """Inversion: the k with F(k - 1) < u <= F(k), by a fixed number of CDF steps (beyond them the
    probability left is below 1e-16 for rates under _SMALL_RATE)."""
    p = (-lam).exp()
    cdf, k = p, lam * 0
    for i in range(1, _SEARCH_STEPS + 1):
        k = k + (u > cdf)
        p = p * lam / i
        cdf = cdf + p
    return k


def _poisson_large(lam: Tensor, u: Tensor, v: Tensor) -> Tensor:
    """Hormann's transformed rejection (PTRS, as NumPy's), _ROUNDS candidates per element, the first one
    accepted kept (at rates of 10 and more a candidate is accepted with probability above 0.9, so
    none is with probability below 1e-10; the normal approximation's rounding is kept then)."""
    slam, loglam = lam.sqrt(), lam.log()
    b = 0.931 + 2.53 * slam
    a = -0.059 + 0.02483 * b
    log_invalpha = (1.1239 + 1.1328 / (b - 3.4)).log()
    vr = 0.9277 - 3.6224 / (b - 2)
    out = (lam + slam * (u[0] - 0.5) * 3.4641016151377544).round().clamp_min(0)  # kept when none is accepted
    for r in reversed(range(_ROUNDS)):
        uu, vv = u[r] - 0.5, v[r]
        us = 0.5 - uu.abs()
        k = ((2 * a / us + b) * uu + lam + 0.43).floor()
        quick = (us >= 0.07) & (vv <= vr)
        rejected = (k < 0) | ((us < 0.013) & (vv > us))
        kk = k.clamp_min(0)
        slow = (vv.log() + log_invalpha - (a / (us * us) + b).log()) <= (-lam + kk * loglam - (kk + 1).lgamma())
        out = where(quick | (~rejected & slow), kk, out)
    return out


def poisson(input: Tensor, generator: Generator | None = None) -> Tensor:  # noqa: A002
    """Poisson(rate) draws for each rate in input, of input's dtype, as torch.poisson (not
    differentiated: torch's gradient is zero)."""
    if not input.dtype.is_float:
        raise DTypeError(f'"poisson" not implemented for {input.dtype} (torch.poisson takes floating rates)\n'
                         f"  at {user_location()}")
    lam = input.detach().to(f64)
    if _eager_values(lam):
        _check(bool((lam >= 0).all().item()), "invalid Poisson rate, expected rate to be non-negative")
    shape = tuple(input.shape)
    u = _uniform((2 * _ROUNDS + 1, *shape), generator)
    small = lam < _SMALL_RATE
    drawn = where(small, _poisson_small(where(small, lam, 0.0), u[0]),
                  _poisson_large(where(small, _SMALL_RATE, lam), u[1:_ROUNDS + 1], u[_ROUNDS + 1:]))
    return drawn.to(input.dtype)


_UNSET = object()  # random_'s `to` when not given (to=None given means up to the dtype's largest value)


def _random_bounds(dtype, args, to) -> tuple[int, int]:
    """random_'s [from, to), as torch's overloads: random_() the dtype's whole range (floats: the integers
    their significand holds, 0 .. 2**digits), random_(to), random_(from, to), and random_(from, None) from
    `from` to the dtype's largest value; from and to - 1 checked against the dtype (random_ints)."""
    if len(args) > 2 or (len(args) == 2 and to is not _UNSET):
        raise ArgumentTypeError(f"random_() takes at most from and to\n  at {user_location()}")
    if len(args) == 2:
        start, stop = args
    elif len(args) == 1:
        start, stop = (0, args[0]) if to is _UNSET else (args[0], to)
    else:
        start, stop = 0, (None if to is _UNSET else to)
    if stop is None:
        stop = dtype_bounds(dtype)[1] + 1
    start, stop = int(start), int(stop)
    check_bounds(start, stop, dtype)
    return start, stop


class TensorRandomFills:
    """Tensor's random draws: bernoulli, multinomial and the in-place fills, as torch.Tensor's."""

    __slots__ = ()

    def bernoulli(self, p=None, *, generator=None):
        return bernoulli(self, p, generator=generator)

    def multinomial(self, num_samples: int, replacement: bool = False, *, generator=None):
        return multinomial(self, num_samples, replacement, generator)

    def _fill(self, values: Tensor):
        with no_grad():
            return self.copy_(values)

    def bernoulli_(self, p=0.5, *, generator=None):
        """self filled with 1 with probability p (a number or a tensor broadcast to self), else 0."""
        return self._fill(bernoulli(self, p, generator=generator))

    def exponential_(self, lambd: float = 1.0, *, generator=None):
        """self filled with Exponential(lambd) draws, as torch's."""
        _kernel_dtype(self.dtype, "exponential", "", continuous="Exponential")
        _check(lambd > 0, f"exponential_ expects lambda > 0.0, but found lambda={lambd}")
        return self._fill(-(1 - _uniform(self.shape, generator)).log() / lambd)

    def geometric_(self, p: float, *, generator=None):
        """self filled with Geometric(p) draws (the number of trials to the first success, from 1)."""
        _kernel_dtype(self.dtype, "geometric_cpu", "geometric_'s tensor")
        _check(0 < p < 1, f"geometric_ expects p to be in (0, 1), but got p={p}")
        u = 1 - _uniform(self.shape, generator)
        return self._fill((u.log() / math.log1p(-p)).ceil().clamp_min(1))

    def cauchy_(self, median: float = 0.0, sigma: float = 1.0, *, generator=None):
        """self filled with Cauchy(median, sigma) draws."""
        _kernel_dtype(self.dtype, "cauchy", "", continuous="Cauchy")
        _check(sigma > 0, f"cauchy_ expects sigma > 0.0, but found sigma={sigma}")
        return self._fill(median + sigma * (math.pi * (_uniform(self.shape, generator) - 0.5)).tan())

    def log_normal_(self, mean: float = 1.0, std: float = 2.0, *, generator=None):
        """self filled with exp(N(mean, std^2)) draws."""
        _kernel_dtype(self.dtype, "log_normal_cpu", "log_normal_'s tensor", floats=True)
        _check(std > 0, f"log_normal_ expects std > 0.0, but found std={std}")
        return self._fill((randn(*self.shape, dtype=f64, generator=generator) * std + mean).exp())

    def random_(self, *args, to=_UNSET, generator=None):
        """self filled with integers uniform in [from, to): random_(), random_(to), random_(from, to) or
        random_(from, None) (_random_bounds)."""
        start, stop = _random_bounds(self.dtype, args, to)
        return self._fill(integers(generator or default_generator(), tuple(self.shape), start, stop, self.dtype))
