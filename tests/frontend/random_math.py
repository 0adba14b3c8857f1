"""Reductions, orderings and dtypes for the random programs (tests/frontend/random_programs.py):

reduce_dims   a reduction over a tuple of dims (negative ones, all of them, none: () reduces every dim
              in torch, as dim=None) with keepdim: sum, mean, amax, amin, nansum, logsumexp, var and
              std (a correction of 0, 1 or 2), norm (p 1, 2, 3, inf, -inf), var_mean, std_mean and
              aminmax (both results stacked into one value); prod, and max, min, median and mode with
              their indices (of the untied operand, as below; mode's rounded to halves, for ties) along
              one dim; sum, mean, prod, amax and norm over every dim. var and std take None for ():
              torch's gradient over () is that of one element, against its own value; and over None
              no correction reaching the count (n <= correction): torch's gradient there is +inf
              whatever the deviation's sign, unlike its gradient over the same dims named (which flame
              gives).
ordering      sort (descending or not), topk (largest or smallest, k from 0 to the dim's size),
              kthvalue and msort along a dim, their values times 1 + 0.1 * their indices (an index
              off shows). The operand gets a ramp of 1e-3 per element along its flattened order first,
              so that no two elements are equal (ties, from relu, maximum or masked_fill, where the
              gradient may go to either element). flame has no cummax or cummin
              (docs/coming_from_pytorch.md).
dtypes        an operand combined with an integer, bool or float64 constant under PyTorch's type
              promotion: a binary op with an int32, int64, int16, uint8 or bool tensor (of the operand's
              rank or fewer dims, or 0-d), or with a 0-d float64 tensor (a 0-d tensor does not raise a
              dimensioned float tensor's dtype); floor_divide and remainder of integer values of the
              operand (x.long(), floor and ceil: their gradient is zero; not of a value computed in a
              low-precision region, _Gen.rounded); comparisons counted as int64;
              clamp with tensor bounds, lerp, addcmul and nextafter (towards a constant, or towards
              the operand's own value, where the step and the gradient are zero). The result is a
              float tensor (a loss term needs one).
int_op        integer arithmetic, bitwise ops and comparisons between integer values made from an
              operand (int32, int64, int16, int8 or uint8) and an integer or bool constant, times the
              operand: promotion between integer dtypes, uint8 wrapping, floor division and the two remainders'
              signs, true division of integers (not of a value computed in a low-precision region:
              _Gen.rounded in random_programs.py).
linalg        torch.linalg's matrix_norm and norm (the matrix orders), vecdot, multi_dot (torch's order),
              matrix_power and vander (linalg_family).
masked        where with a number for a branch, masked_fill with a 0-d tensor, masked_scatter from an
              input, clamp with bounds that require grad, masks combined with &, |, ^ and ~,
              nan_to_num of NaNs and infinities, a masked mean."""

from __future__ import annotations

import math

import numpy as np

RAMP = 1e-3


# ---- reductions over dim tuples --------------------------------------------------------------------

TUPLE_REDUCTIONS = ("sum", "mean", "amax", "amin", "nansum", "logsumexp", "var", "std", "norm")
PAIRS = ("var_mean", "std_mean", "aminmax")
ONE_DIM = ("prod", "max", "min", "median", "mode")


def _reduce_dims(lib, x, fn, dim, keep, correction=None, p=None):
    """x reduced over `dim` (a tuple, or an int for the one-dim reductions) with keepdim `keep`."""
    if fn in ("var", "std"):
        return getattr(x, fn)(dim, keepdim=keep, correction=correction)
    if fn == "norm":
        return x.norm(p, dim, keepdim=keep)
    if fn in ("var_mean", "std_mean"):
        a, b = getattr(lib, fn)(x, dim, keepdim=keep, correction=correction)
        return lib.stack([a, b])
    if fn == "aminmax":
        a, b = lib.aminmax(x, dim=dim, keepdim=keep)
        return lib.stack([a, b])
    if fn == "mode":  # ties on purpose: values rounded to halves, the gradient passed through to the untied operand
        t = _untied(lib, x)
        if t.ndim and t.shape[dim] <= 16:  # torch's CPU index is the last occurrence up to 16 elements (mode's doc)
            t = t - t.detach() + (t.detach() * 2).round() / 2
        values, indices = t.mode(dim, keepdim=keep)
        return values * (1 + indices)
    if fn in ("max", "min", "median"):  # one of equal values takes the gradient: untied (module doc)
        values, indices = getattr(_untied(lib, x), fn)(dim, keepdim=keep)
        return values * (1 + indices)  # an index off is a value off
    return getattr(x, fn)(dim, keepdim=keep)


def _reduce_all(lib, x, fn, p=None):
    """x reduced over every dim (no dim argument)."""
    return x.norm(p) if fn == "norm" else getattr(x, fn)()


def reduce_dims_family(g) -> int | None:
    """A reduction of a free value: over a random subset of its dims (each as itself or negative, in any
    order), along one dim, or over all."""
    rng = g.rng
    i = g.pick()
    r = len(g.shapes[i])
    kind = rng.choice(["tuple", "tuple", "tuple", "pair", "one", "all"])
    if kind == "all":
        op = rng.choice(["sum", "mean", "prod", "amax", "norm"])
        return g.add("reduce_all", (i,), fn=op, **({"p": rng.choice([1, 2, "fro"])} if op == "norm" else {}))
    if kind == "one" or (r == 0 and kind != "tuple"):
        op = rng.choice(ONE_DIM if r else ("prod",))
        dim = rng.randrange(-r, r) if r else 0
        return g.add("reduce_dims", (i,), fn=op, dim=dim, keep=rng.random() < 0.5)
    dims = [d for d in range(r) if rng.random() < 0.5]
    rng.shuffle(dims)
    dims = tuple(d - r if rng.random() < 0.5 else d for d in dims)
    keep = rng.random() < 0.5
    op = rng.choice(PAIRS if kind == "pair" else TUPLE_REDUCTIONS)
    if not dims and (rng.random() < 0.3 or op in ("var", "std", "var_mean", "std_mean")):
        dims = None  # (torch's var over dim=() has the gradient of n = 1, wrong against its own value)
    if op == "aminmax":  # a single dim or none (aminmax takes no tuple)
        return g.add("reduce_dims", (i,), fn=op, dim=dims[0] if dims else None, keep=keep)
    kw = {"correction": rng.choice([0, 1, 2])} if op in ("var", "std", "var_mean", "std_mean") else {}
    if dims is None and kw and math.prod(g.shapes[i]) <= kw["correction"]:
        kw["correction"] = 0  # (torch's gradient over every dim there is not its gradient over the dims named)
    kw |= {"p": rng.choice([1, 2, 3, float("inf"), float("-inf")])} if op == "norm" else {}
    if op == "logsumexp" and not dims:  # () is every dim for the others; torch's logsumexp takes none
        dims = tuple(range(r))
    return g.add("reduce_dims", (i,), fn=op, dim=dims, keep=keep, **kw)


# ---- sort, topk and kthvalue -----------------------------------------------------------------------


def _untied(lib, x):
    """x plus RAMP times each element's flat position: no two elements are equal (module doc)."""
    return x + lib.arange(x.numel(), dtype=x.dtype).reshape(x.shape) * RAMP


def _ordering(lib, x, fn, dim=-1, descending=False, k=1, largest=True, keep=False):
    """The values of sort, topk, kthvalue or msort of the untied x, times 1 + their
    indices (scaled down), so that an index off shows too."""
    y = _untied(lib, x)
    if fn == "msort":
        return lib.msort(y)
    if fn == "sort":
        values, indices = y.sort(dim=dim, descending=descending, stable=True)
    elif fn == "topk":
        values, indices = y.topk(k, dim, largest=largest)
    else:
        values, indices = y.kthvalue(k, dim, keepdim=keep)
    return values * (1 + 0.1 * indices)


def ordering_family(g) -> int | None:
    """sort, topk, kthvalue or msort of a free value (0-d included: a dim of 0 or -1)."""
    rng = g.rng
    i = g.pick()
    s = g.shapes[i]
    r = len(s)
    dim = rng.randrange(-r, r) if r else rng.choice([0, -1])
    n = s[dim] if r else 1
    op = rng.choice(["sort", "sort", "topk", "topk", "kthvalue", "msort"])
    if op == "sort":
        return g.add("ordering", (i,), fn=op, dim=dim, descending=rng.random() < 0.5)
    if op == "topk":
        return g.add("ordering", (i,), fn=op, dim=dim, k=rng.randint(0, n), largest=rng.random() < 0.5)
    if op == "kthvalue":
        return None if n == 0 else g.add("ordering", (i,), fn=op, dim=dim, k=rng.randint(1, n), keep=rng.random() < 0.5)
    if op == "msort":
        return g.add("ordering", (i,), fn=op)
    return g.add("ordering", (i,), fn=op, dim=dim)


# ---- integer, bool and float constants under type promotion ----------------------------------------

INT_DTYPES = ("int32", "int64", "int16", "uint8", "bool")


def _promote(lib, x, fn, c=None, other=None, bounds=None, weight=None):
    """x combined with a constant of another dtype (`other`: an array of an integer or bool dtype, or a
    0-d float64 array) or with integer values made from x; the result is a float tensor."""
    t = None if other is None else lib.tensor(other)
    if fn in ("add", "sub", "mul", "div", "rsub"):
        if fn == "rsub":
            return t - x
        return getattr(x, "__truediv__" if fn == "div" else f"__{fn}__")(t)
    if fn == "where_int":
        return lib.where(t.bool() if t.dtype != lib.bool else t, x, t)
    if fn == "floor_divide":
        return x * (x.long() // c)
    if fn == "remainder":
        return x * x.floor().remainder(c) + x.ceil().fmod(c)
    if fn == "count":  # int64 counts (a sum of bools) times and plus a float
        return x * (x > c).sum(-1, keepdim=True) + (x < t).sum()
    if fn == "clamp":
        lo, hi = (lib.tensor(b, dtype=x.dtype) for b in bounds)
        return x.clamp(lo, hi)
    if fn == "lerp":
        return x.lerp(lib.tensor(other, dtype=x.dtype), weight)
    if fn == "nextafter":  # towards a constant, or towards x's own value (no step, and no gradient there)
        t = lib.tensor(other, dtype=x.dtype)
        return x.nextafter(lib.where(t < 0, x.detach(), t))
    return x.addcmul(x.sin(), lib.tensor(other, dtype=x.dtype), value=weight)  # addcmul


def dtypes_family(g) -> int | None:
    """x (a free value) with a constant of another dtype, or with integer values of itself."""
    rng = g.rng
    i = g.pick()
    s = g.shapes[i]
    op = rng.choice(
        [
            "add",
            "sub",
            "mul",
            "div",
            "rsub",
            "where_int",
            "floor_divide",
            "remainder",
            "count",
            "clamp",
            "lerp",
            "addcmul",
            "nextafter",
        ]
    )
    if op in ("floor_divide", "remainder"):
        if g.rounded(i):
            return None  # integer values of a rounded value (_Gen.rounded)
        return g.add("promote", (i,), fn=op, c=rng.choice([2, 3, -2]) if op == "remainder" else rng.choice([2, -3]))
    shape = () if rng.random() < 0.3 else tuple(1 if rng.random() < 0.3 else n for n in s[rng.randrange(len(s) + 1) :])
    if op == "count":
        return g.add("promote", (i,), fn=op, c=rng.choice([0.0, 0.5]), other=g.np.standard_normal(s[-1:]))
    if op == "clamp":
        lo = g.np.uniform(-1.5, 0.0, shape)
        return g.add("promote", (i,), fn=op, bounds=(lo, lo + g.np.uniform(0.0, 2.0, shape)))
    if op == "nextafter":
        return g.add("promote", (i,), fn=op, other=g.np.standard_normal(shape))
    if op in ("lerp", "addcmul"):
        return g.add("promote", (i,), fn=op, other=g.np.standard_normal(shape), weight=rng.choice([0.25, -1.5]))
    dtype = rng.choice(INT_DTYPES + ("float64",)) if op != "where_int" else rng.choice(INT_DTYPES)
    if dtype == "float64":
        other = np.array(g.np.standard_normal(), np.float64)  # 0-d: x keeps its dtype
    elif dtype == "bool":
        other = g.np.random(shape) < 0.5
    else:
        lo = 0 if dtype == "uint8" else -3
        other = g.np.integers(lo, 4, shape).astype(dtype)
    if op in ("div", "rsub") and dtype == "bool":
        return None  # torch refuses `bool - x`; x / bool divides by zero
    if op == "div":
        other = np.where(other == 0, 1, other).astype(other.dtype)
    return g.add("promote", (i,), fn=op, other=other)


INT_OPS = (
    "add",
    "sub",
    "mul",
    "floor_divide",
    "remainder",
    "fmod",
    "div",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "maximum",
    "minimum",
    "lt",
    "eq",
)
DIVIDING = ("floor_divide", "remainder", "fmod")


def _int_op(lib, x, fn, dtype, other):
    """x times (integer values of 4 x, as `dtype`) `fn` (an integer or bool constant): integer
    arithmetic under promotion (uint8 wraps modulo 256, floor_divide floors, remainder takes the
    divisor's sign and fmod the dividend's, / is true division, comparisons are bools)."""
    a = (x * 4).floor().detach().to(lib.int64).to(getattr(lib, dtype))  # (an int64 first: float to uint8 of a
    b = lib.tensor(other)  # negative number is undefined; int64 to uint8 wraps)
    op = {"div": lambda u, v: u / v, "lt": lambda u, v: u < v, "eq": lambda u, v: u == v}.get(fn)
    r = op(a, b) if op is not None else getattr(lib, fn)(a, b)
    return x * r


def int_op_family(g) -> int | None:
    """An integer operation between integer values made from a free value and an integer or bool
    constant (int32, int64, int16, int8, uint8, bool; of the value's rank or fewer dims, or 0-d), times the
    value."""
    rng = g.rng
    i = g.pick()
    if g.rounded(i):
        return None  # integer values of a rounded value (_Gen.rounded)
    s = g.shapes[i]
    fn = rng.choice(INT_OPS)
    dtype = rng.choice(["int32", "int64", "int16", "int8", "uint8"])
    odt = rng.choice(["int32", "int64", "int16", "int8", "uint8"] + ([] if fn in DIVIDING + ("div",) else ["bool"]))
    shape = () if rng.random() < 0.3 else tuple(1 if rng.random() < 0.3 else n for n in s[rng.randrange(len(s) + 1) :])
    if odt == "bool":
        other = g.np.random(shape) < 0.5
    else:
        other = g.np.integers(0 if odt == "uint8" else -5, 6, shape).astype(odt)
        if fn in DIVIDING + ("div",):
            other = np.where(other == 0, 3, other).astype(odt)
    if fn.startswith("bitwise") and "bool" in (dtype, odt) and dtype != odt:
        return None
    return g.add("int_op", (i,), fn=fn, dtype=dtype, other=other)


# ---- where and the masked ops ---------------------------------------------------------------------

MASKED = (
    "where_scalar",
    "where_scalar_first",
    "masked_fill_tensor",
    "masked_scatter",
    "clamp_tensor",
    "clamp_min_tensor",
    "mask_logic",
    "nan_to_num",
    "masked_mean",
)


def _masked(lib, x, *bound, fn, mask, c=0.0):
    """x through a where or masked op with the constant bool `mask` (broadcast to x), a number `c` and
    (masked_scatter, clamp) a second operand that requires grad."""
    m = lib.tensor(mask)
    if fn == "where_scalar":
        return lib.where(x > c, x, -1.5)
    if fn == "where_scalar_first":
        return lib.where(m, c, x)
    if fn == "masked_fill_tensor":
        return x.masked_fill(m, lib.tensor(c, dtype=x.dtype))
    if fn == "masked_scatter":  # (x is float64 where a 0-d float64 constant promoted a 0-d x: torch wants one dtype)
        return x.masked_scatter(m, bound[0].to(x.dtype))
    if fn == "clamp_tensor":
        return x.clamp(bound[0] - 0.5, bound[0] + 0.5)
    if fn == "clamp_min_tensor":
        return x.clamp(min=bound[0])
    if fn == "mask_logic":
        return lib.where(((x > c) & m) | ~(x < -c) ^ m, x, x * 0.5)
    if fn == "nan_to_num":  # log of a negative is NaN: its gradient there is 0
        return (x - c).log().nan_to_num(nan=0.25, posinf=2.0, neginf=-2.0)
    return (x * m).sum() / m.sum().clamp(min=1)  # masked_mean


def masked_family(g) -> int | None:
    """where with a number for a branch, masked_fill with a 0-d tensor, masked_scatter from a new input,
    clamp with tensor bounds that require grad, masks combined with &, |, ^ and ~, nan_to_num of NaNs
    and infinities, a masked mean; the masks broadcast to the operand (a free value)."""
    rng = g.rng
    i = g.pick()
    s = g.shapes[i]
    fn = rng.choice(MASKED)
    mask = g.np.random(tuple(1 if rng.random() < 0.3 else n for n in s[rng.randrange(len(s) + 1) :])) < 0.5
    if fn == "masked_scatter":
        n = math.prod(np.broadcast_shapes(mask.shape, s)) + rng.randint(0, 2)
        return g.add("masked", (i, g.input((n,))), fn=fn, mask=mask)
    if fn in ("clamp_tensor", "clamp_min_tensor"):
        return g.add("masked", (i, g.input(tuple(1 if rng.random() < 0.3 else n for n in s))), fn=fn, mask=mask)
    return g.add("masked", (i,), fn=fn, mask=mask, c=rng.choice([0.0, 0.5, -0.3]))


# ---- torch.linalg's norms and products --------------------------------------------------------------

LINALG = ("matrix_norm", "norm", "vecdot", "multi_dot", "matrix_power", "vander")


def _linalg(lib, x, *ys, fn, **kw):
    """x (and new inputs ys) through a torch.linalg function (linalg_family). The norms take x untied
    (their largest or smallest column sum takes the gradient: a tie would share it, a near tie that
    float32 breaks otherwise would move it); matrix_power and vander take tanh(x), bounded."""
    linalg = lib.linalg
    if fn in ("matrix_norm", "norm"):
        return getattr(linalg, fn)(_untied(lib, x), kw["ord"], kw["dim"], kw["keep"])
    if fn == "vecdot":
        return linalg.vecdot(x, ys[0], dim=kw["dim"])
    if fn == "multi_dot":
        return linalg.multi_dot([x, *ys])
    if fn == "matrix_power":
        return linalg.matrix_power(x.tanh(), kw["n"])
    return linalg.vander(x.tanh(), N=kw["N"])


def linalg_family(g) -> int | None:
    """A torch.linalg function of a free value: matrix_norm or norm (the matrix orders 'fro', +-1, +-inf,
    norm's None too) over two of its dims, vecdot with a new input broadcast against it, multi_dot of it
    (1-D or 2-D) and 1 to 3 new matrices (the last a vector now and then), matrix_power (n 0 to 6) of a
    square one, vander (N default or 2 to 4). torch refusing a draw (a 1-D input, a zero-size amin)
    drops it (_Gen.add)."""
    rng = g.rng
    fn = rng.choice(LINALG)
    if fn in ("matrix_norm", "norm"):
        i = g.pick(lambda s: len(s) >= 2)
        i = g.input((g.size(), g.size())) if i is None else i
        r = len(g.shapes[i])
        dims = tuple(d - r if rng.random() < 0.5 else d for d in rng.sample(range(r), 2))
        ords = ["fro", 1, -1, float("inf"), float("-inf")] + ([None] if fn == "norm" else [])
        return g.add("linalg", (i,), fn=fn, ord=rng.choice(ords), dim=dims, keep=rng.random() < 0.5)
    if fn == "multi_dot":
        i = g.pick(lambda s: len(s) in (1, 2))
        i = g.input((g.size(), g.size())) if i is None else i
        k, ins = g.shapes[i][-1], [i]
        for j in range(rng.randint(1, 3)):
            m = g.size()
            ins.append(g.input((k,) if j and rng.random() < 0.3 else (k, m)))
            if len(g.shapes[ins[-1]]) == 1:
                break
            k = m
        return g.add("linalg", tuple(ins), fn=fn)
    i = g.pick(lambda s: len(s) >= 1)
    i = g.input((g.size(),)) if i is None else i
    s = g.shapes[i]
    if fn == "vecdot":
        other = tuple(1 if rng.random() < 0.3 else n for n in s[rng.randrange(len(s)) :])
        return g.add("linalg", (i, g.input(other)), fn=fn, dim=rng.randrange(-len(other), 0))
    if fn == "matrix_power":
        if len(s) < 2 or s[-1] != s[-2]:
            m = g.size(1, 3)
            i = g.input((g.size(1, 2), m, m) if rng.random() < 0.3 else (m, m))
        return g.add("linalg", (i,), fn=fn, n=rng.randint(0, 6))
    return g.add("linalg", (i,), fn=fn, N=rng.choice([None, None, 2, 3, 4]))


APPLY = {
    "linalg": _linalg,
    "masked": _masked,
    "int_op": _int_op,
    "reduce_dims": _reduce_dims,
    "reduce_all": _reduce_all,
    "ordering": _ordering,
    "promote": _promote,
}
