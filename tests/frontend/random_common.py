"""Everyday ops for the random programs (tests/frontend/random_programs.py) that the other families do not
draw:

activation    nn.functional's activations (gelu both ways, silu, softplus with a beta and threshold, elu,
              celu, selu, leaky_relu, hardtanh, relu6, mish, logsigmoid, hardswish, hardsigmoid, softsign,
              tanhshrink, softshrink, hardshrink, threshold) and the math users write by hand (pow with
              a scalar or tensor exponent, sqrt, rsqrt, log, log1p, expm1, reciprocal and division, each
              on a map of the value into its domain, square, clamp with scalar bounds, sinh, cosh, logit,
              xlogy, hypot, logaddexp, sinc, copysign)
structure     cat and stack (a value with itself, a new input or another value), F.pad (constant with a
              value, reflect, replicate, circular; negative pads crop), repeat, tile, roll, tril and triu,
              diagonal, repeat_interleave, einsum, movedim, unflatten, expand_as with an add, diff
keepdim       reductions with keepdim broadcast back against their operand (x - x.mean(d, keepdim=True),
              x / x.sum(d, keepdim=True), x - x.amax(d, keepdim=True), (x - mean) / std), over size-1 dims
              too, F.normalize and cosine_similarity
lowp          explicit casts to float16 or bfloat16 (not autocast): ops in the low-precision dtype, mixed
              with the operand's dtype, a 0-d float tensor (which does not raise a dimensioned tensor's
              dtype), a Python scalar, an integer tensor or the other half-precision dtype (bf16 with f16
              promotes to float32); reductions and softmax in the low-precision dtype; the result cast
              back. torch's float64 run rounds there too, so the float64 way is held to the
              low-precision dtype's eps as well (Program.casts).
promote       cat, stack and index_copy (unique indices) of a matmul's result and another value; cat and stack
              inside an autocast region half the time: there the matmul's result is low precision and the
              other operand float32, and the result float32. index_copy is drawn outside regions only:
              torch's CPU autocast lists (its runs here) promote it, its CUDA lists (flame's regions) not."""

from __future__ import annotations

import importlib

import numpy as np


def _F(lib):
    return importlib.import_module(f"{lib.__name__}.nn.functional")


# ---- activations and hand-written math -------------------------------------------------------------

ACTIVATIONS = {
    "gelu": lambda F, x: F.gelu(x),
    "gelu_tanh": lambda F, x: F.gelu(x, approximate="tanh"),
    "silu": lambda F, x: F.silu(x),
    "softplus": lambda F, x: F.softplus(x),
    "softplus_beta": lambda F, x: F.softplus(x, beta=2.0, threshold=1.5),
    "elu": lambda F, x: F.elu(x, alpha=0.7),
    "celu": lambda F, x: F.celu(x, alpha=2.0),  # (torch differentiates with float32(alpha): a power of two)
    "selu": lambda F, x: F.selu(x),
    "leaky_relu": lambda F, x: F.leaky_relu(x, 0.2),
    "hardtanh": lambda F, x: F.hardtanh(x, -0.7, 1.2),
    "relu6": lambda F, x: F.relu6(x * 4),
    "mish": lambda F, x: F.mish(x),
    "logsigmoid": lambda F, x: F.logsigmoid(x),
    "hardswish": lambda F, x: F.hardswish(x * 3),
    "hardsigmoid": lambda F, x: F.hardsigmoid(x * 3),
    "softsign": lambda F, x: F.softsign(x),
    "tanhshrink": lambda F, x: F.tanhshrink(x),
    "softshrink": lambda F, x: F.softshrink(x, 0.4),
    "hardshrink": lambda F, x: F.hardshrink(x, 0.4),
    "threshold": lambda F, x: F.threshold(x, 0.1, -2.0),
}
MATH = {
    "pow2": lambda lib, x: x**2,
    "pow3": lambda lib, x: x.pow(3),
    "pow_half": lambda lib, x: (x.abs() + 0.5) ** 0.5,
    "pow_neg": lambda lib, x: (x.abs() + 0.5).pow(-1.5),
    "rpow": lambda lib, x: 2.0**x,
    "sqrt": lambda lib, x: (x.abs() + 0.5).sqrt(),
    "rsqrt": lambda lib, x: (x * x + 0.5).rsqrt(),
    "log": lambda lib, x: (x.abs() + 0.5).log(),
    "log1p": lambda lib, x: x.abs().log1p(),
    "expm1": lambda lib, x: x.expm1(),
    "reciprocal": lambda lib, x: (x.abs() + 0.5).reciprocal(),
    "rdiv": lambda lib, x: 1.5 / (x.abs() + 0.5),
    "square": lambda lib, x: x.square(),
    "clamp": lambda lib, x: x.clamp(-0.6, 0.9),
    "clamp_min": lambda lib, x: x.clamp(min=0.2),
    "sinh": lambda lib, x: x.sinh(),
    "cosh": lambda lib, x: x.cosh(),
    "tan": lambda lib, x: (x.tanh() * 1.2).tan(),  # inside (-1.2, 1.2), away from the poles at +-pi/2
    "logit": lambda lib, x: (x.sigmoid() * 0.9 + 0.05).logit(),
    "sinc": lambda lib, x: x.sinc(),
}
BINARY_MATH = {
    "div": lambda lib, x, y: x / (y.abs() + 0.5),
    "pow": lambda lib, x, y: (x.abs() + 0.5) ** y,
    "xlogy": lambda lib, x, y: lib.xlogy(x, y.abs() + 0.5),
    "hypot": lambda lib, x, y: lib.hypot(x, y.abs() + 0.5),
    "logaddexp": lambda lib, x, y: lib.logaddexp(x, y),
    "copysign": lambda lib, x, y: x.copysign(y),
}


def _act(lib, x, *ys, fn):
    if fn in ACTIVATIONS:
        return ACTIVATIONS[fn](_F(lib), x)
    if fn in MATH:
        return MATH[fn](lib, x)
    return BINARY_MATH[fn](lib, x, *ys)


def activation_family(g) -> int | None:
    """An activation, or math written by hand, of a free value (a binary one with a value it broadcasts with)."""
    rng = g.rng
    i = g.pick()
    fn = rng.choice(list(ACTIVATIONS) + list(MATH) + list(BINARY_MATH))
    if fn not in BINARY_MATH:
        return g.add("act", (i,), fn=fn)
    s = g.shapes[i]
    return g.add("act", (i, g.operand(s[rng.randrange(len(s) + 1) :])), fn=fn)


# ---- structure: cat, stack, pad, repeat, roll, triangles, einsum --------------------------------------


EINSUM = {  # equation: how the second operand's shape follows from the first's
    "ij,jk->ik": lambda s, n: (s[1], n),
    "ij,kj->ik": lambda s, n: (n, s[1]),
    "bij,bjk->bik": lambda s, n: (s[0], s[2], n),
    "ij,ij->i": lambda s, n: s,
    "ij,ij->": lambda s, n: s,
    "i,j->ij": lambda s, n: (n,),
    "bij->bji": None,
    "ij->j": None,
    "ii->i": None,
    "bhqd,bhkd->bhqk": lambda s, n: (s[0], s[1], n, s[3]),
}


def _structure(lib, x, *ys, fn, **kw):
    if fn in ("cat", "stack"):
        return getattr(lib, fn)([x, *ys] if ys else [x, x * 2], dim=kw["dim"])
    if fn == "pad":
        value = {"value": kw["value"]} if kw["mode"] == "constant" else {}
        return _F(lib).pad(x, kw["pad"], mode=kw["mode"], **value)
    if fn in ("repeat", "tile"):
        return getattr(x, fn)(kw["reps"])
    if fn == "roll":
        return x.roll(kw["shifts"], kw["dims"])
    if fn in ("tril", "triu"):
        return getattr(x, fn)(kw["k"])
    if fn == "diagonal":
        return x.diagonal(kw["offset"], kw["d1"], kw["d2"]) * 1.5
    if fn == "repeat_interleave":
        return x.repeat_interleave(kw["n"], dim=kw["dim"])
    if fn == "einsum":
        return lib.einsum(kw["eq"], x, *ys)
    if fn == "movedim":
        return x.movedim(kw["src"], kw["dst"]) * 1.5
    if fn == "unflatten":
        return x.unflatten(kw["dim"], kw["sizes"]) * 1.5
    if fn == "expand_add":
        return x.expand_as(ys[0]) + ys[0]
    return x.diff(dim=kw["dim"])  # diff


def structure_family(g) -> int | None:
    """cat, stack, pad, repeat, tile, roll, tril/triu, diagonal, repeat_interleave, einsum, movedim, unflatten,
    expand_as or diff of a free value (torch says which arguments fit its shape: _Gen.add)."""
    rng = g.rng
    i = g.pick()
    s = g.shapes[i]
    r = len(s)
    fn = rng.choice(["cat", "stack", "pad", "pad", "repeat", "tile", "roll", "tril", "diagonal", "repeat_interleave",
                     "einsum", "einsum", "movedim", "unflatten", "expand_add", "diff"])
    dim = rng.randrange(-r, r) if r else 0
    if fn in ("cat", "stack"):
        ys = ()
        if rng.random() < 0.7:
            shape = list(s)
            if fn == "cat" and r:
                shape[dim] = g.size(0, 3)
            ys = tuple(g.operand(tuple(shape)) for _ in range(rng.randint(1, 2)))
        return g.add("structure", (i, *ys), fn=fn, dim=rng.randrange(-r - 1, r + 1) if fn == "stack" else dim)
    if fn == "pad":
        mode = rng.choice(["constant", "constant", "reflect", "replicate", "circular"])
        k = rng.randint(1, max(1, min(r, 3)))
        pad = tuple(rng.randint(-1 if mode == "constant" else 0, 2) for _ in range(2 * k))
        return g.add("structure", (i,), fn=fn, pad=pad, mode=mode, value=rng.choice([0.0, -1.5]))
    if fn in ("repeat", "tile"):
        reps = tuple(rng.randint(1, 3) for _ in range(rng.randint(r if fn == "repeat" else 1, r + 1) if r else 1))
        return g.add("structure", (i,), fn=fn, reps=reps)
    if fn == "roll" and r:
        dims = tuple(rng.sample(range(r), rng.randint(1, r)))
        return g.add("structure", (i,), fn=fn, shifts=tuple(rng.randint(-3, 3) for _ in dims), dims=dims)
    if fn in ("tril", "diagonal") and r >= 2:
        if fn == "diagonal":
            d1, d2 = rng.sample(range(-r, 0), 2)
            return g.add("structure", (i,), fn=fn, offset=rng.randint(-2, 2), d1=d1, d2=d2)
        return g.add("structure", (i,), fn=rng.choice(["tril", "triu"]), k=rng.randint(-1, 1))
    if fn == "repeat_interleave":
        return g.add("structure", (i,), fn=fn, n=rng.randint(1, 3), dim=dim if r else None)
    if fn == "einsum":
        eq = rng.choice([e for e in EINSUM if len(e.split(",")[0].split("-")[0]) == r] or ["ij,jk->ik"])
        if len(eq.split(",")[0].split("-")[0]) != r:
            return None
        other = EINSUM[eq]
        ys = () if other is None else (g.operand(other(s, g.size())),)
        return g.add("structure", (i, *ys), fn=fn, eq=eq)
    if fn == "movedim" and r >= 2:
        return g.add("structure", (i,), fn=fn, src=rng.randrange(r), dst=rng.randrange(-r, r))
    if fn == "unflatten" and r and s[dim]:
        n = s[dim]
        a = rng.choice([d for d in range(1, n + 1) if n % d == 0])
        sizes = rng.choice([(a, n // a), (-1, a), (a, -1, 1)]) if n % a == 0 else (n,)
        return g.add("structure", (i,), fn=fn, dim=dim, sizes=sizes)
    if fn == "expand_add":
        target = tuple(g.size(1, 3) for _ in range(rng.randint(0, 1))) + tuple(
            n if n != 1 or rng.random() < 0.5 else g.size(1, 3) for n in s
        )
        return g.add("structure", (i, g.operand(target)), fn=fn)
    if fn == "diff" and r:
        return g.add("structure", (i,), fn=fn, dim=dim)
    return None


# ---- reductions with keepdim, broadcast back ------------------------------------------------------


def _keepdim(lib, x, fn, dim):
    if fn == "center":
        return x - x.mean(dim, keepdim=True)
    if fn == "share":
        return x / (x.abs() + 0.5).sum(dim, keepdim=True)
    if fn == "shift_max":
        return x - x.amax(dim, keepdim=True)
    if fn == "standardize":
        return (x - x.mean(dim, keepdim=True)) / (x.var(dim, keepdim=True, unbiased=False) + 0.1).sqrt()
    if fn == "logsumexp_sub":
        return x - x.logsumexp(dim, keepdim=True)
    if fn == "normalize":
        return _F(lib).normalize(x, dim=dim[0] if isinstance(dim, tuple) else dim)
    return _F(lib).cosine_similarity(x, x.flip(dim[0] if isinstance(dim, tuple) else dim).sin(), dim=-1)


def keepdim_family(g) -> int | None:
    """A reduction with keepdim broadcast back against its operand (a free value of rank 1 or more), over
    one dim, a tuple of dims or a size-1 dim."""
    rng = g.rng
    i = g.pick(lambda s: len(s) >= 1)
    if i is None:
        return None
    s = g.shapes[i]
    r = len(s)
    ones = [d for d in range(r) if s[d] == 1]
    dims = rng.sample(range(r), rng.randint(1, r))
    dim = rng.choice(ones) if ones and rng.random() < 0.4 else (tuple(dims) if len(dims) > 1 else dims[0] - r)
    fn = rng.choice(["center", "share", "shift_max", "standardize", "logsumexp_sub", "normalize", "cosine"])
    return g.add("keepdim", (i,), fn=fn, dim=dim)


# ---- explicit low-precision casts ----------------------------------------------------------------


def _gelu(lib, a):
    """gelu; torch's CPU kernel gives NaN at +inf in float16, bfloat16 and float32 (its float64 kernel, its
    CUDA kernels and flame give inf): inf there, as its float64 run of the program does."""
    out = _F(lib).gelu(a)
    return out.where(a != float("inf"), a) if lib.__name__ == "torch" else out


def _lowp(lib, x, *ys, dtype, fn, **kw):
    lo = getattr(lib, dtype)
    a = x.to(lo)
    if fn == "unary":
        out = getattr(a, kw["name"])() if kw["name"] != "gelu" else _gelu(lib, a)
    elif fn == "same":
        out = a * ys[0].to(lo) + a
    elif fn == "mixed":
        out = a * ys[0] - a  # low precision with the operand's dtype: the operand's
    elif fn == "halves":
        out = a * ys[0].to(lib.float16 if dtype == "bfloat16" else lib.bfloat16)  # float32
    elif fn == "zero_dim":
        out = a * ys[0].sum() + a  # a 0-d float tensor does not raise a's dtype
    elif fn == "scalar":
        out = (a * kw["c"] + 1).exp()
    elif fn == "int":
        out = a + lib.tensor(kw["other"])
    elif fn == "softmax":
        out = a.softmax(kw["dim"])
    else:
        out = getattr(a, fn)(kw["dim"], keepdim=kw["keep"])
    return out.to(x.dtype)


def lowp_family(g) -> int | None:
    """A free value cast to float16 or bfloat16 and an op on it there (module docstring), cast back."""
    rng = g.rng
    i = g.pick()
    s = g.shapes[i]
    r = len(s)
    dtype = rng.choice(["float16", "bfloat16"])
    fn = rng.choice(["unary", "same", "mixed", "halves", "zero_dim", "scalar", "int", "softmax", "sum", "mean", "amax"])
    sub = s[rng.randrange(r + 1) :]
    if fn == "unary":
        return g.add("lowp", (i,), dtype=dtype, fn=fn, name=rng.choice(["exp", "tanh", "sigmoid", "sin", "gelu"]))
    if fn in ("same", "mixed", "halves"):
        return g.add("lowp", (i, g.operand(tuple(1 if rng.random() < 0.3 else n for n in sub))), dtype=dtype, fn=fn)
    if fn == "zero_dim":
        return g.add("lowp", (i, g.operand(g.shape())), dtype=dtype, fn=fn)
    if fn == "scalar":
        return g.add("lowp", (i,), dtype=dtype, fn=fn, c=rng.choice([0.3, -1.5]))
    if fn == "int":
        other = g.np.integers(-3, 4, sub).astype(rng.choice(["int32", "int64", "int16"]))
        return g.add("lowp", (i,), dtype=dtype, fn=fn, other=other)
    if fn == "softmax":
        return g.add("lowp", (i,), dtype=dtype, fn=fn, dim=rng.randrange(-r, r) if r else 0)
    if not r:
        return None
    return g.add("lowp", (i,), dtype=dtype, fn=fn, dim=rng.randrange(-r, r), keep=rng.random() < 0.5)


# ---- cat, stack and index_copy of a matmul's result (autocast's promote rule) ----------------------


def _promote(lib, x, w, y, fn, dim, index=None):
    a = x @ w
    if fn == "index_copy":
        return a.index_copy(dim, lib.tensor(index), y)
    return getattr(lib, fn)([a, y], dim=dim)


def promote_family(g) -> int | None:
    """cat, stack or index_copy of x @ w and a value of the fitting shape; inside an autocast region half
    the time (module docstring)."""
    rng = g.rng
    m, k, n = g.size(), g.size(), g.size()
    x, w = g.operand((m, k)), g.operand((k, n))
    fn = rng.choice(["cat", "stack", "index_copy"])
    dim = rng.randrange(2)
    shape = [m, n]
    kw = {}
    if fn == "cat":
        shape[dim] = g.size(0, 3)
    elif fn == "index_copy":
        kw["index"] = g.np.permutation(shape[dim])[: g.size(0, shape[dim])] if shape[dim] else np.zeros(0, np.int64)
        shape[dim] = len(kw["index"])
    ins = (x, w, g.operand(tuple(shape)))
    if fn == "index_copy" or rng.random() < 0.5:  # (index_copy is on torch's CPU promote list, not its CUDA lists)
        return g.add("promote", ins, fn=fn, dim=dim, **kw)
    return g.add("autocast", ins, dtype=rng.choice(["float16", "bfloat16"]), inner="promote", fn=fn, dim=dim, **kw)


APPLY = {"act": _act, "structure": _structure, "keepdim": _keepdim, "lowp": _lowp, "promote": _promote}
