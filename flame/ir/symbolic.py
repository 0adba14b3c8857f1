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
the executors' compile caches, keyed by source, then compile it once.

While `recording()` is active, every decision taken on a size is a guard (`Guards`): a comparison
(`n < vec`, `numel >= 2**31`, two buffers of equal bytes), a remainder or quotient that is not exact
at every size, a product of two sizes; each such result is a `SizeExpr` (its value here, its C text
and its value at any size), so launch geometry and buffer sizes stay functions of s0. A plan made
while recording (flame.plan.instance) is the plan at every size where its guards hold."""

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
    if isinstance(x, SizeExpr):
        return None  # SizeExpr's reflected operator takes it
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


class _Compared:
    """Comparisons of a symbolic size: each is a decision on the size, recorded by `_compare`."""

    def __eq__(self, other):
        return _compare(self, other, "eq")

    def __ne__(self, other):
        return _compare(self, other, "ne")

    def __lt__(self, other):
        return _compare(self, other, "lt")

    def __le__(self, other):
        return _compare(self, other, "le")

    def __gt__(self, other):
        return _compare(self, other, "gt")

    def __ge__(self, other):
        return _compare(self, other, "ge")


class SymInt(_Compared, int):
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

    __hash__ = int.__hash__

    def at(self, s: int) -> int:
        """The value at size s (an integer at every size the template takes)."""
        return int(self.a * s + self.b)


    def __mul__(self, other):
        if isinstance(other, SizeExpr):
            return NotImplemented
        if isinstance(other, SymInt):  # s0 squared: the value at this size (an expression while recording)
            return SizeExpr.combine(self, other, "*") if _GUARDS.get() is not None else int(self) * int(other)
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
            if _GUARDS.get() is not None:
                return SizeExpr.combine(self, other, "//")
        if isinstance(other, SizeExpr):
            return NotImplemented
        return int(self) // other

    def __mod__(self, other):
        if type(other) is int and other > 0 and type(self.a) is int and self.a % other == 0 \
                and type(self.b) is int:
            return self.b % other  # the same at every size
        if type(other) is int and other > 0 and _GUARDS.get() is not None:
            return SizeExpr.combine(self, other, "%")
        if isinstance(other, SizeExpr):
            return NotImplemented
        return int(self) % other

    def __truediv__(self, other):
        if _GUARDS.get() is not None:
            _note("eq", self, int(self), True)  # a float of the size: a decision at this size
        return int(self) / other

    def __rtruediv__(self, other):
        if _GUARDS.get() is not None:
            _note("eq", self, int(self), True)
        return other / int(self)

    def __str__(self) -> str:
        ctx = _RENDERING.get()
        if ctx is None:
            return int.__repr__(self)
        wide = int(self) >= _INT32
        if _GUARDS.get() is not None:
            _note("ge", self, _INT32, wide)  # the C type of the size: 32-bit until 2^31
        return f"{SIZE_MARK}{'64' if wide else ''}[{self.expr()}]"

    __repr__ = __str__  # (a list of sizes in a kernel's comment)

    def __format__(self, spec: str) -> str:
        if spec and _GUARDS.get() is not None:
            _note("eq", self, int(self), True)  # formatted as a number: this size's
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


class SizeExpr(_Compared, int):
    """A number derived from a size by what is not affine (a ceil-division, a remainder, a minimum, a
    product of two sizes): its value here, its C text (rendered like a SymInt's) and `at(s)`, its
    value at size s. Launch geometry (a grid, a segment's first block), aligned byte counts and
    scratch sizes of a symbolic plan are SizeExprs."""

    def __new__(cls, value: int, text: str, at=None):
        obj = super().__new__(cls, value)
        obj.text, obj._at = text, at
        return obj

    def __reduce__(self):
        return int, (int(self),)

    __hash__ = int.__hash__

    def at(self, s: int) -> int:
        if self._at is None:
            raise NotSymbolic(f"{self.text} has no value at other sizes")
        return self._at(s)

    @staticmethod
    def of(x: int) -> str:
        return x.expr() if isinstance(x, SymInt) else x.text if isinstance(x, SizeExpr) else str(int(x))

    @classmethod
    def combine(cls, x, y, op: str) -> SizeExpr:
        """x op y (op one of + - * // % min max), x or y a size."""
        fx, fy = _value_at(x), _value_at(y)
        v, tx, ty = _OPS[op](int(x), int(y)), cls.of(x), cls.of(y)
        if op == "//":  # Python's floor division in C (C truncates toward zero)
            text = f"(({tx})>=0?({tx})/({ty}):-((-({tx})+({ty})-1)/({ty})))"
        elif op in ("min", "max"):
            text = f"(({tx}){'<' if op == 'min' else '>'}({ty})?({tx}):({ty}))"
        else:
            text = f"(({tx}){op}({ty}))"
        f = _OPS[op]
        return cls(v, text, lambda s: f(fx(s), fy(s)))

    @classmethod
    def blocks(cls, n: int, unit: int, cap: int) -> int:
        """min(ceil(n / unit), cap), at least 1; a SizeExpr when n is a size being rendered."""
        v = max(1, min(-(-int(n) // unit), cap))
        if not isinstance(n, (SymInt, SizeExpr)) or _RENDERING.get() is None:
            return v
        c = f"(({cls.of(n)}+{unit - 1})/{unit})"
        fn = _value_at(n)
        return cls(v, f"({c}<1?1:{c}>{cap}?{cap}:{c})", lambda s: max(1, min(-(-fn(s) // unit), cap)))

    def _binary(self, other, op: str, swap: bool = False):
        if not isinstance(other, int) or isinstance(other, bool):
            return NotImplemented
        return SizeExpr.combine(other, self, op) if swap else SizeExpr.combine(self, other, op)

    def __add__(self, other):
        return self._binary(other, "+")

    def __radd__(self, other):
        return self._binary(other, "+", True)

    def __sub__(self, other):
        return self._binary(other, "-")

    def __rsub__(self, other):
        return self._binary(other, "-", True)

    def __mul__(self, other):
        return self._binary(other, "*")

    def __rmul__(self, other):
        return self._binary(other, "*", True)

    def __floordiv__(self, other):
        return self._binary(other, "//")

    def __rfloordiv__(self, other):
        return self._binary(other, "//", True)

    def __mod__(self, other):
        return self._binary(other, "%")

    def __neg__(self):
        return SizeExpr.combine(0, self, "-")


    def __str__(self) -> str:
        if _RENDERING.get() is None:
            return int.__repr__(self)
        return f"{SIZE_MARK}[{self.text}]"

    __repr__ = __str__

    def __format__(self, spec: str) -> str:
        if spec and _GUARDS.get() is not None:
            _note("eq", self, int(self), True)
        return str(self) if not spec else format(int(self), spec)


_OPS = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y, "//": lambda x, y: x // y,
        "%": lambda x, y: x % y, "min": min, "max": max}


def _compare(x, other, name: str):
    """x (a SymInt or a SizeExpr) compared with other, recorded as a guard while recording."""
    if not isinstance(other, (int, float)):
        return NotImplemented
    r = _TEST[name](int(x), int(other) if isinstance(other, int) else other)  # (plain: no reflected guard)
    if _GUARDS.get() is not None:
        _note(name, x, other, r)
    return r

_TEST = {"eq": lambda x, y: x == y, "ne": lambda x, y: x != y, "lt": lambda x, y: x < y,
         "le": lambda x, y: x <= y, "gt": lambda x, y: x > y, "ge": lambda x, y: x >= y}


def _value_at(x):
    """s -> the value of x at size s (x a SymInt, a SizeExpr or a constant)."""
    if isinstance(x, (SymInt, SizeExpr)):
        return x.at
    c = int(x) if isinstance(x, int) else x
    return lambda s: c


def value_at(x, s: int):
    """x (a SymInt, a SizeExpr, a SymFloat or a constant) at size s."""
    if isinstance(x, (SymInt, SizeExpr)):
        return x.at(s)
    if isinstance(x, SymFloat):
        return x.at(s)
    return x


def maximum(x, y):
    """max(x, y); while recording, where x or y is a function of the size, that function (a SizeExpr)
    rather than a decision on the size: a clamp (a workspace's least bytes) is no guard."""
    if _GUARDS.get() is not None and (isinstance(x, (SymInt, SizeExpr)) or isinstance(y, (SymInt, SizeExpr))):
        return SizeExpr.combine(x, y, "max")
    return max(x, y)


def minimum(x, y):
    """min(x, y), as `maximum` (a cap is no guard)."""
    if _GUARDS.get() is not None and (isinstance(x, (SymInt, SizeExpr)) or isinstance(y, (SymInt, SizeExpr))):
        return SizeExpr.combine(x, y, "min")
    return min(x, y)


def nonzero(x) -> bool:
    """Whether an extent or offset x may be other than 0: true for a function of the size (a SymInt
    that is 0 at some sizes only), so a decision on it holds at every size and records no guard."""
    return isinstance(x, SymInt) and x.a != 0 or bool(x)


def as_int(x) -> int:
    """x as an int, kept as it is where it is a function of the size (a SymInt or a SizeExpr)."""
    return x if isinstance(x, (SymInt, SizeExpr)) else int(x)


def _key(x) -> tuple:
    if isinstance(x, SymInt):
        return ("s", x.a, x.b)
    if isinstance(x, SizeExpr):
        return ("e", x.text)
    return ("c", x)


class Guards:
    """The decisions taken on sizes while recording: (test, x, y) -> the outcome at the size
    recorded. `hold(s)` says whether each outcome is the same at size s, i.e. whether what was made
    while recording is what the same code makes at s."""

    def __init__(self):
        self.tests: dict[tuple, tuple] = {}

    def __len__(self) -> int:
        return len(self.tests)

    def add(self, name: str, x, y, outcome: bool) -> None:
        key = (name, _key(x), _key(y))
        if key not in self.tests:
            self.tests[key] = (_TEST[name], _value_at(x), _value_at(y), outcome)

    def update(self, other: Guards) -> None:
        for k, v in other.tests.items():
            self.tests.setdefault(k, v)

    def holds(self, s: int) -> bool:
        """Whether every outcome holds at size s: failed(s) == "" without building the message."""
        try:
            return all(test(fx(s), fy(s)) == outcome for test, fx, fy, outcome in self.tests.values())
        except (ZeroDivisionError, NotSymbolic, ValueError, TypeError):
            return False

    def failed(self, s: int) -> str:
        """'' if every outcome holds at size s, else the first that does not, in words."""
        for (name, kx, ky), (test, fx, fy, outcome) in self.tests.items():
            try:
                ok = test(fx(s), fy(s)) == outcome
            except (ZeroDivisionError, NotSymbolic, ValueError, TypeError):
                ok = False
            if not ok:
                return f"{_show(kx)} {name} {_show(ky)} was {outcome} (s0={s})"
        return ""


    def coincidences(self) -> list[str]:
        """The outcomes that hold at the recorded size alone: two different affine functions of the
        size found equal (a temporary of 512*s0 bytes the size of a 32768-byte weight at s0=64). A
        plan recorded there serves no other size; `flame.plan.instance` records at another."""
        return [f"{_show(kx)} {name} {_show(ky)} was {outcome}"
                for (name, kx, ky), (*_, outcome) in self.tests.items()
                if name in ("eq", "ne") and outcome == (name == "eq") and kx[0] in "sc" and ky[0] in "sc"
                and _slope(kx) != _slope(ky)]


def _slope(k: tuple):
    return k[1] if k[0] == "s" else 0


def _show(k: tuple) -> str:
    if k[0] == "s":
        return SymInt(0, k[1], k[2]).form()
    return str(k[1]).replace(SYMBOL, "s0")


_GUARDS: contextvars.ContextVar[Guards | None] = contextvars.ContextVar("flame_guards", default=None)


def _note(name: str, x, y, outcome: bool) -> None:
    _GUARDS.get().add(name, x, y, outcome)


@contextmanager
def recording(guards: Guards | None = None):
    """Within: decisions on sizes are recorded into `guards` (a fresh Guards by default; None
    stops recording), which the block receives."""
    token = _GUARDS.set(Guards() if guards is None else guards)
    try:
        yield _GUARDS.get()
    finally:
        _GUARDS.reset(token)


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

    def at(self, s: int) -> float:
        """k / n at size s (rounded to f32 where it was), as the template's reciprocal form gives it."""
        import numpy as np

        n = value_at(self.n, s)
        if isinstance(self.n, SymInt) and n != max(n, 1):
            n = 1
        v = self.k / max(n, 1)
        return SymFloat(float(np.float32(v)) if self.f32 else v, self.k,
                        SymInt(n, self.n.a, self.n.b) if isinstance(self.n, SymInt) else n, self.f32)

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
