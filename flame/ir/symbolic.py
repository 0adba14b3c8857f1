"""Symbolic sizes: an integer that is its value everywhere and an expression of the size symbol where
codegen renders it, so one kernel source serves every size of a dynamic dimension.

A graph instantiated from a dynamic-size template (flame.frontend.dynamic) carries `SymInt`s in its
shapes and attributes: each is the int it equals at this size (comparisons, hashing, NumPy, range
all see the value), and remembers its form `a*s0 + b`. Sums, differences, products with constants,
exact divisions and remainders by constants stay symbolic; anything else (a product of two sizes,
`max`, a comparison) gives the plain value, so a decision codegen takes on a size is taken at this
size, as a static compile would.

While `rendering(s)` is active, `str()`/`format()` of a SymInt writes a marker (`SIZE_MARK`) that
`finish_source` turns into a C expression of the kernel parameter `flame_s0` (typed like the literal
it replaces: `n = {{ n }}u` becomes `n = ((unsigned)(784*flame_s0))`) and adds that parameter to the
kernel's signature (last, after the scratch pointer). A kernel whose text used no size, or used it
only through values (loop bounds baked at this size), is an ordinary kernel; either way its source
is the same at every size exactly when nothing in it depends on the size but through `flame_s0`, and
the executors' compile caches, keyed by source, then compile it once."""

from __future__ import annotations

import contextvars
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from fractions import Fraction

SYMBOL = "flame_s0"  # the kernel parameter holding the size (a long long, after the other arguments)
SIZE_MARK = "FLAMESIZE"
_MARK_RE = re.compile(SIZE_MARK + r"(64)?\[([^\]]*)\](ull|ULL|ll|LL|u|U)?([A-Za-z0-9_.]?)")
_INT32 = 1 << 31


class NotSymbolic(Exception):
    """A kernel's text uses a size where it cannot be a runtime value (the message says where)."""


def _lift(x) -> tuple[int | Fraction, int | Fraction] | None:
    if isinstance(x, SymInt):
        return x.a, x.b
    if isinstance(x, int) and not isinstance(x, bool):
        return 0, int(x)
    return None


def _norm(x) -> int | Fraction:
    """x as an int where it is integral (int arithmetic is much cheaper than Fraction's), else a Fraction."""
    if type(x) is int:
        return x
    x = Fraction(x)
    return x.numerator if x.denominator == 1 else x


def _exact(x: int | Fraction, d: int) -> int | Fraction | None:
    """x / d where that is an integer, else None."""
    if type(x) is int:
        return x // d if x % d == 0 else None
    q = x / d
    return q.numerator if q.denominator == 1 else None


def _make(value: int, a: Fraction, b: Fraction):
    return SymInt(value, a, b) if a else int(value)


class SymInt(int):
    """The integer `a*s0 + b` at one size s0 (see the module docstring)."""

    def __new__(cls, value: int, a: int | Fraction, b: int | Fraction):
        obj = super().__new__(cls, value)
        obj.a, obj.b = _norm(a), _norm(b)  # ints where integral: the common case, and fast
        return obj

    def __reduce__(self):
        return SymInt, (int(self), self.a, self.b)

    def _binary(self, other, sign: int, swap: bool = False):
        o = _lift(other)
        if o is None:
            return NotImplemented
        v = int(other) - int(self) if swap else int(self) + sign * int(other)
        if swap:
            return _make(v, o[0] - self.a, o[1] - self.b)
        return _make(v, self.a + sign * o[0], self.b + sign * o[1])

    def __add__(self, other):
        return self._binary(other, 1)

    __radd__ = __add__

    def __sub__(self, other):
        return self._binary(other, -1)

    def __rsub__(self, other):
        return self._binary(other, -1, swap=True)

    def __mul__(self, other):
        if isinstance(other, SymInt):
            return int(self) * int(other)  # s0 squared: the value at this size
        o = _lift(other)
        if o is None:
            return NotImplemented
        c = int(other)
        return _make(int(self) * c, self.a * c, self.b * c)

    __rmul__ = __mul__

    def __neg__(self):
        return _make(-int(self), -self.a, -self.b)

    def __pos__(self):
        return self

    def __floordiv__(self, other):
        if type(other) is int and other > 0:
            a, b = _exact(self.a, other), _exact(self.b, other)
            if a is not None and b is not None:
                return _make(int(self) // other, a, b)  # exact at every size
        return int(self) // other

    def __mod__(self, other):
        if type(other) is int and other > 0 and type(self.a) is int and self.a % other == 0 \
                and type(self.b) is int:
            return self.b % other  # the same at every size
        return int(self) % other

    def __str__(self) -> str:
        ctx = _RENDERING.get()
        if ctx is None:
            return int.__repr__(self)
        return f"{SIZE_MARK}{'' if int(self) < _INT32 else '64'}[{self.expr()}]"

    __repr__ = __str__  # (a list of sizes in a kernel's comment)

    def __format__(self, spec: str) -> str:
        return str(self) if not spec else format(int(self), spec)

    def expr(self) -> str:
        """The C expression of a*flame_s0 + b (exact: the value is an integer at every valid size)."""
        den = self.a.denominator * self.b.denominator // _gcd(self.a.denominator, self.b.denominator)
        a, b = int(self.a * den), int(self.b * den)
        text = SYMBOL if a == 1 else f"{a}*{SYMBOL}"
        text += "" if b == 0 else f"{'+' if b > 0 else '-'}{abs(b)}"
        return text if den == 1 else f"({text})/{den}"

    def form(self) -> str:
        """a*s0+b as the IR shows it."""
        return self.expr().replace(SYMBOL, "s0")


class SizeExpr(int):
    """A launch-shape number derived from a size (a segment's first block: sums of ceil-divisions and
    minimums): its value here, and its C text, rendered like a SymInt's."""

    def __new__(cls, value: int, text: str):
        obj = super().__new__(cls, value)
        obj.text = text
        return obj

    @staticmethod
    def of(x: int) -> str:
        return x.expr() if isinstance(x, SymInt) else x.text if isinstance(x, SizeExpr) else str(int(x))

    @classmethod
    def blocks(cls, n: int, unit: int, cap: int) -> int:
        """min(ceil(n / unit), cap), at least 1; a SizeExpr when n is a size being rendered."""
        v = max(1, min(-(-int(n) // unit), cap))
        if not isinstance(n, (SymInt, SizeExpr)) or _RENDERING.get() is None:
            return v
        c = f"(({cls.of(n)}+{unit - 1})/{unit})"
        return cls(v, f"({c}<1?1:{c}>{cap}?{cap}:{c})")

    def __add__(self, other):
        return SizeExpr(int(self) + int(other), f"({self.text}+{SizeExpr.of(other)})")

    def __radd__(self, other):
        return SizeExpr(int(other) + int(self), f"({SizeExpr.of(other)}+{self.text})")

    def __sub__(self, other):
        return SizeExpr(int(self) - int(other), f"({self.text}-{SizeExpr.of(other)})")

    def __rsub__(self, other):
        return SizeExpr(int(other) - int(self), f"({SizeExpr.of(other)}-{self.text})")

    def __str__(self) -> str:
        if _RENDERING.get() is None:
            return int.__repr__(self)
        return f"{SIZE_MARK}[{self.text}]"

    __repr__ = __str__


class SymFloat(float):
    """The float k / n at one size, n a SymInt (the mean's gradient scale 1/s0): its value
    everywhere; `cuda_c.literal` writes it as k / (double)n while rendering, so the kernel's text
    does not change with the size."""

    def __new__(cls, value: float, k: float, n: int, f32: bool = False):
        obj = super().__new__(cls, value)
        obj.k, obj.n, obj.f32 = float(k), n, f32  # f32: the value is k / n rounded to f32
        return obj

    def __reduce__(self):
        return SymFloat, (float(self), self.k, self.n, self.f32)

    def __repr__(self) -> str:
        if _RENDERING.get() is not None and isinstance(self.n, SymInt):
            return f"{self.k!r}/({self.n.form()})"  # (a kernel's comment: the literal is literal()'s)
        return float.__repr__(self)

    __str__ = __repr__

    def expr(self) -> str | None:
        """`k/(double)(n)` while rendering (the double division rounds as Python's k / n does), else None."""
        if _RENDERING.get() is None or not isinstance(self.n, SymInt):
            return None
        return f"({self.k!r}/(double)({self.n}))"


def _gcd(x: int, y: int) -> int:
    while y:
        x, y = y, x % y
    return x


@dataclass
class Rendering:
    """The size being rendered, and what rendered per size instead of with the parameter."""

    size: int
    per_size: list[str] = field(default_factory=list)  # "kernel name: why"


_RENDERING: contextvars.ContextVar[Rendering | None] = contextvars.ContextVar("flame_rendering", default=None)


@contextmanager
def rendering(size: int | None):
    """Within: SymInts render as the size parameter (size None: as their values)."""
    token = _RENDERING.set(None if size is None else Rendering(size))
    try:
        yield _RENDERING.get()
    finally:
        _RENDERING.reset(token)


def current() -> Rendering | None:
    return _RENDERING.get()


_CASTS = {(False, False): "int", (False, True): "unsigned", (True, False): "long long",
          (True, True): "unsigned long long"}


def _cast(m: re.Match) -> str:
    if m.group(4):
        raise NotSymbolic(f"a size is followed by {m.group(4)!r} in the kernel text")
    wide, suffix = bool(m.group(1)) or "ll" in (m.group(3) or "").lower(), "u" in (m.group(3) or "").lower()
    return f"(({_CASTS[wide, suffix]})({m.group(2)}))"


def finish_source(source: str, name_token: str) -> tuple[str, bool]:
    """(source with each size marker as a C expression of flame_s0, whether it takes the parameter).
    NotSymbolic where a size is written where a runtime value cannot go (a suffix other than an
    integer literal's, a kernel signature not found)."""
    if SIZE_MARK not in source:
        return source, False
    source = _MARK_RE.sub(_cast, source)
    start = source.find(name_token + "(")
    if start < 0:
        raise NotSymbolic("the kernel's signature was not found")
    close = source.index(")", start)
    sep = "" if source[start + len(name_token) + 1: close].strip() == "" else ", "
    return source[:close] + f"{sep}const long long {SYMBOL}" + source[close:], True


def plain(text: str) -> str:
    """text with each size marker as `s0` (kernel names)."""
    return re.sub(SIZE_MARK + r"(64)?\[[^\]]*\]", "s0", text) if SIZE_MARK in text else text
