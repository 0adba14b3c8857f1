"""ONE parametrized table over flame.ir.REGISTRY (STYLE.md "Tests mirror the layers").

Every registered op must have a recipe in RECIPES below (an op without one FAILS the suite): a maker of
sample inputs + attributes (broadcasting, odd sizes, zero-size dims where the op allows them), the
dtypes the op accepts, and an oracle written here in plain NumPy / math / Python loops. Per op and
dtype the table checks
  (a) the shape/dtype rule (`infer`) against what the reference executor returns and the oracle's shape,
      and that dtypes the op does not accept raise DTypeError;
  (b) the reference against the oracle (f16/bf16 inputs are widened exactly, so the oracle runs in f64);
  (c) for every differentiable op, the VJP built by the autodiff pass against central finite
      differences in float64 on the reference executor.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import pytest

from flame.errors import DTypeError, ShapeError
from flame.ir import REGISTRY, Builder, Graph, TensorType, dtype_of, verify
from flame.ir.dtypes import DType
from flame.ir.registry import CATEGORIES
from flame.passes.autodiff import autodiff
from flame.runtime.reference import run_graph

FLOATS = ("f32", "f16", "bf16", "f64")
INTS = ("i32", "i64")
NUM = FLOATS + INTS
ALL = NUM + ("bool",)
Case = tuple[list[np.ndarray], dict]


@dataclass(frozen=True)
class Recipe:
    """dtypes: accepted values of the case's main dtype (the input's, or the `dtype` attribute of ops
    without tensor inputs). out: result dtype: "same", "bool", "i64" or "attr" (the dtype attribute)."""

    make: Callable[[np.random.Generator, DType], list[Case]]
    oracle: Callable[..., np.ndarray]
    dtypes: tuple[str, ...] = FLOATS
    out: str = "same"
    grad_make: Callable[[np.random.Generator, DType], list[Case]] | None = None


# ---- sample-input makers --------------------------------------------------------------------------

def _arr(rng, shape, dt, lo=-2.0, hi=2.0):
    if dt.kind == "float":
        return np.asarray(rng.uniform(lo, hi, shape)).astype(dt.np_dtype)
    if dt.kind == "int":
        return np.asarray(rng.integers(-5, 6, shape)).astype(dt.np_dtype)
    return np.asarray(rng.random(shape) < 0.5)


def _pos(rng, shape, dt):
    return _arr(rng, shape, dt, 0.2, 2.0) if dt.kind == "float" else _arr(rng, shape, dt)


def _unit(rng, shape, dt):
    return _arr(rng, shape, dt, -0.9, 0.9)


def _above_one(rng, shape, dt):
    return _arr(rng, shape, dt, 1.2, 3.0)


def _libm(f):
    """The elementwise oracle of Python's math.`f` in float64 (C's libm, independent of NumPy's)."""
    return np.vectorize(getattr(math, f), otypes=[np.float64])


def _mp(name):
    """The elementwise oracle of mpmath's function `name` (polygamma: of n, then x), float64; independent
    of SciPy, which the references use."""
    import mpmath

    fn = getattr(mpmath, name)
    return np.vectorize(lambda x, n=None: float(fn(float(x)) if n is None else fn(n, float(x))), otypes=[np.float64])


def _away(rng, shape, dt):
    """Values at least 0.2 away from zero (no kink of relu/abs within a finite-difference step)."""
    if dt.kind != "float":
        return _arr(rng, shape, dt)
    return np.asarray(rng.uniform(0.2, 2.0, shape) * rng.choice([-1.0, 1.0], shape)).astype(dt.np_dtype)


def _quarters(rng, shape, dt):
    """Multiples of 1/4, so floor/ceil/round see exact integers and exact halves (ties)."""
    if dt.kind != "float":
        return _arr(rng, shape, dt)
    return np.asarray(rng.integers(-12, 13, shape) / 4.0).astype(dt.np_dtype)


def _between_quarters(rng, shape, dt):
    """Multiples of 1/4 plus 1/8: never an integer, a half or 0, where floor/ceil/round/sign jump (their
    gradient is torch's zeros; central differences agree only away from the jumps)."""
    return np.asarray(rng.integers(-12, 13, shape) / 4.0 + 0.125).astype(dt.np_dtype)


UNARY_SHAPES = [(3, 5), (7,), (), (2, 0, 3)]
BINARY_SHAPES = [((3, 4), (3, 4)), ((3, 1), (4,)), ((2, 1, 5), (3, 1)), ((), (2, 3)), ((0, 3), (1, 3)),
                 ((4, 0), (1,))]


def _unary(gen, attrs=({},)):
    return lambda rng, dt: [([gen(rng, s, dt)], dict(a)) for s in UNARY_SHAPES for a in attrs]


def _binary(gen_a, gen_b=None):
    gen_b = gen_b or gen_a
    return lambda rng, dt: [([gen_a(rng, sa, dt), gen_b(rng, sb, dt)], {}) for sa, sb in BINARY_SHAPES]


def _distinct_pair(rng, dt):
    """maximum/minimum inputs that never tie (ties split the gradient: no finite difference there)."""
    out = []
    for sa, sb in BINARY_SHAPES:
        a = _arr(rng, sa, dt)
        b = _arr(rng, sb, dt)
        if dt.kind == "float":
            b = np.where(np.abs(a - b) < 0.1, b + 0.5, b).astype(dt.np_dtype) if a.shape == b.shape else b
        out.append(([a, b], {}))
    return out


def _where(rng, dt):
    shapes = [((3, 4), (3, 4), (3, 4)), ((3, 1), (4,), (3, 4)), ((), (2, 3), (1, 3)), ((0, 2), (1, 2), (2,))]
    return [([rng.random(c) < 0.5, _arr(rng, a, dt), _arr(rng, b, dt)], {}) for c, a, b in shapes]


def _cast(rng, dt):
    return [([_arr(rng, s, dt)], {"dtype": dtype_of(to)}) for to in ALL for s in ((3, 4), (0,), ())]


def _reduce(rng, dt):
    x = _arr(rng, (3, 4, 5), dt)
    cases = [([x], {"axes": ax, "keepdim": kd}) for ax in ([1], [0, 2], [-1], [0, 1, 2], []) for kd in (False, True)]
    cases += [([_arr(rng, (), dt)], {"axes": ax, "keepdim": False}) for ax in ([], [0])]
    cases += [([_arr(rng, (3, 0), dt)], {"axes": [0], "keepdim": kd}) for kd in (False, True)]
    return cases


def _reduce_nonempty(rng, dt):
    return _reduce(rng, dt)[:-2] + [([_arr(rng, (0, 3), dt)], {"axes": [1], "keepdim": False})]


def _argmax(rng, dt):
    x = _arr(rng, (3, 4, 5), dt)
    cases = [([x], {"axis": a, "keepdim": kd}) for a in (0, 2, -2) for kd in (False, True)]
    return cases + [([_arr(rng, (), dt)], {"axis": 0, "keepdim": False}), ([_arr(rng, (0, 3), dt)], {"axis": 1})]


def _movement(specs):
    return lambda rng, dt: [([_arr(rng, s, dt)], dict(a)) for s, a in specs]


def _concat(rng, dt):
    groups = [([(2, 3), (4, 3), (0, 3)], 0), ([(2, 1), (2, 4)], -1), ([(3,)], 0), ([(2, 0), (2, 0)], 1)]
    return [([_arr(rng, s, dt) for s in shapes], {"axis": ax}) for shapes, ax in groups]


def _pad(rng, dt):
    value = {"float": 1.5, "int": 7, "bool": True}[dt.kind]
    specs = [((3, 4), [(1, 2), (0, 3)], 0), ((3, 4), [(0, 0), (2, 1)], value), ((0, 2), [(1, 1), (0, 0)], value),
             ((), [], 0)]
    return [([_arr(rng, s, dt)], {"pads": p, "value": v}) for s, p, v in specs]


def _matmul(rng, dt):
    specs = [((3, 4), (4, 5)), ((2, 3, 4), (4, 2)), ((2, 1, 3, 4), (5, 4, 2)), ((3, 0), (0, 2)), ((0, 4), (4, 3))]
    return [([_arr(rng, a, dt), _arr(rng, b, dt)], {}) for a, b in specs]


def _matmul_bias(rng, dt):
    return [(ins + [_arr(rng, (ins[1].shape[-1],), dt)], kw) for ins, kw in _matmul(rng, dt)]


def _fp8(rng, shape, fmt):
    """FP8 sample values (ml_dtypes), every one exact in any wider dtype."""
    return np.asarray(rng.uniform(-8.0, 8.0, shape)).astype(fmt)


def _scaled_cast(rng, dt):
    # a power-of-two scale (exact products), a value past each format's range (saturated), a NaN
    x = _arr(rng, (4, 6), dt)
    x.flat[0], x.flat[1] = np.asarray(1e4, dt.np_dtype), np.asarray(np.nan if dt.kind == "float" else 0, dt.np_dtype)
    return [([x, np.array(s, np.float32)], {"dtype": fmt}) for s in (4.0, 0.25) for fmt in ("f8e4m3", "f8e5m2")]


def _scaled_cast_oracle(x, scale, dtype):
    limit = float(ml_dtypes.finfo(dtype.np_dtype).max)
    return np.clip(x * scale, -limit, limit).astype(dtype.np_dtype)


def _fp8_matmul(rng, dt):
    e4, e5 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
    out = []
    for fa, fb, (m, n, k) in ((e4, e4, (3, 5, 16)), (e5, e4, (4, 2, 8)), (e4, e5, (2, 3, 32)), (e4, e4, (0, 3, 4))):
        ins = [_fp8(rng, (m, k), fa), _fp8(rng, (n, k), fb), np.array(0.5, np.float32), np.array(0.125, np.float32)]
        out.append((ins, {"out_dtype": dt}))
    return out


def _fp8_matmul_oracle(a, b, a_inv, b_inv, out_dtype):
    return (a.astype(np.float64) @ b.astype(np.float64).T) * (float(a_inv) * float(b_inv))


def _full(rng, dt):
    value = {"float": -1.25, "int": 3, "bool": True}[dt.kind]
    return [([], {"shape": s, "value": value, "dtype": dt}) for s in ((2, 3), (0, 4), ())]


def _arange(rng, dt):
    ranges = [(0, 5, 1), (5, -3, -2), (0, 0, 1), (3, 2, 1)]
    if dt.kind == "float":
        ranges += [(0.5, 3.0, 0.25), (0, 1, 0.1), (-1, 1, 0.3)]
    return [([], {"start": a, "stop": z, "step": s, "dtype": dt}) for a, z, s in ranges]


def _tri(rng, dt):
    return [([_arr(rng, s, dt)], {"k": k}) for s, k in (((4, 5), 0), ((4, 5), 1), ((5, 4), -2), ((2, 3, 3), 0),
                                                         ((0, 3), 0))]


def _idx(rng, high, shape, i):
    return rng.integers(0, high, shape).astype(np.int32 if i % 2 else np.int64)


def _gather(rng, dt):
    specs = [((3, 4), (3, 6), 1), ((4, 2), (5, 2), 0), ((3, 4), (3, 0), -1), ((2, 3, 2), (2, 3, 4), 2)]
    return [([_arr(rng, xs, dt), _idx(rng, xs[ax], ids, i)], {"axis": ax}) for i, (xs, ids, ax) in enumerate(specs)]


def _index_select(rng, dt):
    specs = [((4, 3), 3, 0), ((4, 3), 5, -1), ((2, 3, 4), 0, 1), ((5,), 7, 0)]
    return [([_arr(rng, xs, dt), _idx(rng, xs[ax], (n,), i)], {"axis": ax}) for i, (xs, n, ax) in enumerate(specs)]


def _scatter_add(rng, dt):
    specs = [((3, 4), (3, 6), 1), ((4, 2), (6, 2), 0), ((3, 4), (3, 0), -1)]
    return [([_arr(rng, xs, dt), _idx(rng, xs[ax], ids, i), _arr(rng, ids, dt)], {"axis": ax})
            for i, (xs, ids, ax) in enumerate(specs)]


def _segment_sum(rng, dt):
    """Repeated indices, a slot no index names, an inner axis, an empty index."""
    specs = [((6, 4), 0, 5), ((3, 6), 1, 4), ((2, 5, 3), 1, 7), ((0, 3), 0, 4), ((5,), 0, 3)]
    return [([_idx(rng, size, (shape[ax],), i), _arr(rng, shape, dt)], {"axis": ax, "size": size})
            for i, (shape, ax, size) in enumerate(specs)]


def _scatter(rng, dt):
    """Duplicate positions included (the last write in row-major order wins)."""
    specs = [((3, 4), (3, 6), 1), ((4, 2), (6, 2), 0), ((3, 4), (3, 0), -1), ((2, 3, 2), (2, 3, 4), 2)]
    return [([_arr(rng, xs, dt), _idx(rng, xs[ax], ids, i), _arr(rng, ids, dt)], {"axis": ax})
            for i, (xs, ids, ax) in enumerate(specs)]


def _scatter_unique(rng, dt):
    """Each position written at most once: where duplicates write, the losers' gradient is PyTorch's
    (the position's), not a derivative."""
    x, src = _arr(rng, (4, 5), dt), _arr(rng, (3, 5), dt)
    idx = np.stack([rng.permutation(4)[:3] for _ in range(5)], axis=1)
    return [([x, idx, src], {"axis": 0}), ([x.T.copy(), idx.T.copy(), src.T.copy()], {"axis": 1})]


def _random(rng, dt):
    draws = [(0, 0, (5,)), (12345678901, 7, (2, 3)), (3, 5, (0,)), (2**40 + 3, 2**33 - 2, (4,)), (1, 0, ())]
    return [([np.array(s, np.int64), np.array(o, np.int64)], {"shape": sh, "dtype": dt}) for s, o, sh in draws]


def _attention_cases(rng, dt, additive=True):
    """q, k, v [, mask] and attributes: no mask, bool, additive (broadcast), causal with L != S, GQA."""
    def qkv(b, h, hkv, length, keys, e=3, ev=2):
        return [_arr(rng, (b, h, length, e), dt), _arr(rng, (b, hkv, keys, e), dt), _arr(rng, (b, hkv, keys, ev), dt)]
    keep = rng.random((1, 3, 4)) < 0.6
    keep[..., 0] = True
    cases = [(qkv(1, 2, 2, 3, 4), {"scale": 0.5}), (qkv(2, 1, 1, 3, 4) + [keep], {"scale": 0.7}),
             (qkv(1, 2, 2, 4, 3), {"scale": 0.6, "is_causal": True}),
             (qkv(1, 2, 2, 2, 5), {"scale": 0.6, "is_causal": True}),
             (qkv(1, 4, 2, 3, 3), {"scale": 0.4, "enable_gqa": True})]
    if additive:
        cases.append((qkv(1, 2, 2, 3, 4) + [_arr(rng, (3, 4), dt)], {"scale": 0.5}))
    return cases


def _attention_backward_cases(rng, dt):
    """q, k, v, out, grad_out, stats [, mask]: the statistics are those of q, k (and the mask), as the
    forward computes them (the backward's probabilities come from them)."""
    out = []
    for ins, attrs in _attention_cases(rng, dt):
        q, v = ins[0], ins[2]
        o, go = (_arr(rng, q.shape[:-1] + v.shape[-1:], dt) for _ in range(2))
        wide = [a.astype(np.float64) if a.dtype != bool else a for a in ins]
        stats = _attention_stats_oracle(*wide, **attrs).astype(np.float64 if dt.name == "f64" else np.float32)
        out.append((ins[:3] + [o, go, stats] + ins[3:], attrs))
    return out


def _attention_bias_cases(rng, dt):
    """The backward's inputs with an additive mask of several broadcast shapes (its gradient)."""
    def case(b, h, hkv, length, keys, mask_shape, **attrs):
        attrs = {"scale": 0.5, **attrs}
        q, k, v = (_arr(rng, s, dt) for s in ((b, h, length, 3), (b, hkv, keys, 3), (b, hkv, keys, 2)))
        mask = _arr(rng, mask_shape, dt)
        o, go = (_arr(rng, (b, h, length, 2), dt) for _ in range(2))
        wide = [a.astype(np.float64) for a in (q, k, v, mask)]
        stats = _attention_stats_oracle(*wide, **attrs).astype(np.float64 if dt.name == "f64" else np.float32)
        return [q, k, v, o, go, stats, mask], attrs
    return [case(1, 2, 2, 3, 4, (3, 4)), case(2, 2, 2, 3, 4, (2, 1, 3, 4)), case(2, 2, 2, 3, 4, (1, 2, 3, 4)),
            case(1, 4, 2, 3, 3, (1, 4, 3, 3), enable_gqa=True), case(2, 2, 2, 3, 4, (2, 2, 3, 4))]


def _nonzero(rng, shape, dt):
    """Divisors: floats at least 0.2 away from zero, nonzero integers; quotients not near integers."""
    if dt.kind != "float":
        return np.asarray(rng.choice([-4, -3, -2, -1, 1, 2, 3, 4], shape)).astype(dt.np_dtype)
    return _away(rng, shape, dt)


def _divmod_cases(rng, dt):
    out = []
    for sa, sb in BINARY_SHAPES:
        b = _nonzero(rng, sb, dt)
        a = _arr(rng, sa, dt)
        if dt.kind == "float":  # a / b at least 0.1 away from an integer: no jump of // within reach
            shape = np.broadcast_shapes(sa, sb)
            q = rng.integers(-4, 5, shape) + rng.uniform(0.1, 0.9, shape)
            a = np.asarray(q * b.astype(np.float64)).astype(dt.np_dtype)  # b still broadcasts into a
        out.append(([a, b], {}))
    return out


def _scan_cases(rng, dt):
    x = _arr(rng, (3, 4, 5), dt, -1.5, 1.5)
    cases = [([x], {"axis": a}) for a in (0, 1, -1)]
    return cases + [([_arr(rng, (7,), dt)], {"axis": 0}), ([_arr(rng, (), dt)], {"axis": 0}),
                    ([_arr(rng, (2, 0, 3), dt)], {"axis": 1})]


def _cumprod_grad_cases(rng, dt):
    """Zeros included: the first zero of a line and the zeros after it take different gradients."""
    x = np.array([[1.5, 0.0, 2.0, 0.0, -1.0], [0.5, 1.2, 0.0, 3.0, 2.0], [0.7, -1.3, 1.1, 0.9, 1.4]], dt.np_dtype)
    return _scan_cases(rng, dt) + [([x], {"axis": 1}), ([x.T.copy()], {"axis": 0})]


def _logcumsumexp_cases(rng, dt):
    """The scans' cases, and lines with -inf (a running value that starts at -inf) and a wide range."""
    if dt.kind != "float":  # refused: the cases only need the right dtype
        return _scan_cases(rng, dt)
    x = np.array([[-np.inf, -np.inf, 1.0, 0.5, -2.0], [30.0, -30.0, 3.0, 29.0, 31.0]], dt.np_dtype)
    return _scan_cases(rng, dt) + [([x], {"axis": 1}), ([x.T.copy()], {"axis": 0})]


def _logcumsumexp_grad_cases(rng, dt):
    """The scans' cases and a wide-ranged line (no -inf: central differences need finite neighbours)."""
    x = np.array([[30.0, -30.0, 3.0, 29.0, 31.0], [0.5, 1.2, -0.3, 3.0, 2.0]], dt.np_dtype)
    return _scan_cases(rng, dt) + [([x], {"axis": 1}), ([x.T.copy()], {"axis": 0})]


def _cumarg_cases(rng, dt):
    """Ties (quarters) and, for floats, NaNs: the latest of equal extremes wins, a NaN takes over."""
    x = _quarters(rng, (3, 4, 5), dt) if dt.kind == "float" else _arr(rng, (3, 4, 5), dt)
    if dt.kind == "float":
        x.reshape(-1)[::7] = np.nan
    cases = [([x], {"axis": a, "largest": m}) for a in (0, 1, -1) for m in (True, False)]
    return cases + [([_arr(rng, (), dt)], {"axis": 0, "largest": True}),
                    ([_arr(rng, (2, 0, 3), dt)], {"axis": 1, "largest": False})]


def _cumarg_oracle(x, axis, largest):
    """Element by element in plain Python: torch's cummax / cummin index rule."""
    if x.ndim == 0:
        return np.zeros((), np.int64)
    moved = np.moveaxis(x.astype(np.float64), axis % x.ndim, -1)
    out = np.zeros(moved.shape, np.int64)
    for pos in np.ndindex(*moved.shape[:-1]):
        best, arg = None, 0
        for k in range(moved.shape[-1]):
            v = moved[pos + (k,)]
            if best is None or np.isnan(v) or (not np.isnan(best) and (v >= best if largest else v <= best)):
                best, arg = v, k
            out[pos + (k,)] = arg
    return np.moveaxis(out, -1, axis % x.ndim)


def _argsort_cases(rng, dt):
    x = _quarters(rng, (3, 4, 5), dt) if dt.kind == "float" else _arr(rng, (3, 4, 5), dt)  # ties
    if dt.kind == "float":
        x.reshape(-1)[::6] = np.nan
    cases = [([x], {"axis": a, "descending": d}) for a in (0, 1, -1) for d in (False, True)]
    return cases + [([_arr(rng, (), dt)], {"axis": 0}), ([_arr(rng, (0, 3), dt)], {"axis": 1})]


def _conv_specs():
    """(x shape, w shape, attrs): 1/2/3-d, stride, asymmetric padding, dilation, groups (depthwise),
    batch 1, odd sizes."""
    return [((2, 3, 7), (4, 3, 3), {"stride": [2], "padding": [[1, 2]], "dilation": [1]}),
            ((1, 4, 5, 6), (6, 2, 3, 2), {"stride": [1, 2], "padding": [[1, 1], [0, 1]], "dilation": [1, 2],
                                          "groups": 2}),
            ((2, 3, 5, 5), (3, 1, 3, 3), {"stride": [2, 1], "padding": [[1, 1], [1, 1]], "dilation": [1, 1],
                                          "groups": 3}),
            ((1, 2, 4, 3, 5), (2, 2, 2, 1, 3), {"stride": [1, 2, 2], "padding": [[0, 1], [0, 0], [1, 1]],
                                                "dilation": [2, 1, 1]})]


def _conv_out(x, w, a):
    return (x[0], w[0]) + tuple((s + lo + hi - d * (k - 1) - 1) // st + 1 for s, k, st, (lo, hi), d in
                                zip(x[2:], w[2:], a["stride"], a["padding"], a["dilation"]))


def _cl(shape, a):
    """An NC* activation shape as the op sees it: [N, *S, C] when the case is channels_last."""
    return (shape[0], *shape[2:], shape[1]) if a.get("channels_last") else shape


def _conv_layouts():
    """Every spec NC* and channels-last (passes/layout.py's form of the op)."""
    return [(x, w, {**a, "channels_last": cl}) for x, w, a in _conv_specs() for cl in (False, True)]


def _conv_cases(rng, dt):
    return [([_arr(rng, _cl(x, a), dt), _arr(rng, w, dt)], a) for x, w, a in _conv_layouts()]


def _conv_grad_input_cases(rng, dt):
    out = []
    for x, w, a in _conv_layouts():  # the first input is one longer: a transposed conv's output_padding
        x = (x[:2] + (x[2] + 1,) + x[3:]) if a["stride"][0] > 1 else x
        out.append(([_arr(rng, _cl(_conv_out(x, w, a), a), dt), _arr(rng, w, dt)], {**a, "input_shape": _cl(x, a)}))
    return out


def _conv_grad_weight_cases(rng, dt):
    return [([_arr(rng, _cl(x, a), dt), _arr(rng, _cl(_conv_out(x, w, a), a), dt)], {**a, "weight_shape": w})
            for x, w, a in _conv_layouts()]


# ---- oracles ----------------------------------------------------------------------------------------

def _scan_oracle(step):
    def oracle(x, axis):
        if x.ndim == 0:
            return x
        moved = np.moveaxis(x, axis % x.ndim, -1)
        out = np.zeros(moved.shape, np.float64 if x.dtype.kind == "f" else x.dtype)
        for pos in np.ndindex(*moved.shape[:-1]):
            acc = None
            for k in range(moved.shape[-1]):
                acc = moved[pos + (k,)] if acc is None else step(acc, moved[pos + (k,)])
                out[pos + (k,)] = acc
        return np.moveaxis(out, -1, axis % x.ndim)
    return oracle


def _argsort_oracle(x, axis, descending):
    if x.ndim == 0:
        return np.array(0)
    moved = np.moveaxis(x, axis % x.ndim, -1)
    out = np.zeros(moved.shape, np.int64)
    for pos in np.ndindex(*moved.shape[:-1]):
        row = [float(v) for v in moved[pos]]
        if descending:  # NaN first, then largest first; Python's sort is stable
            key = lambda i, row=row: (not math.isnan(row[i]), -row[i] if not math.isnan(row[i]) else 0)  # noqa: E731
        else:
            key = lambda i, row=row: (math.isnan(row[i]), row[i] if not math.isnan(row[i]) else 0)  # noqa: E731
        out[pos] = sorted(range(len(row)), key=key)
    return np.moveaxis(out, -1, axis % x.ndim)


def _py_binary(fn):
    def oracle(a, b):
        a, b = np.broadcast_arrays(a, b)
        out = [fn(x.item(), y.item()) for x, y in zip(a.ravel(), b.ravel())]
        return np.array(out, np.float64 if a.dtype.kind == "f" else a.dtype).reshape(a.shape)
    return oracle


def _int_pow(x: int, e: int) -> int:
    """Integer pow as PyTorch's: a negative exponent gives 0 but for bases 1 and -1."""
    if e < 0:
        return 1 if x == 1 else (-1 if e % 2 else 1) if x == -1 else 0
    return x**e


def _wrap(v: int, dt: np.dtype) -> int:
    bits = dt.itemsize * 8
    v &= (1 << bits) - 1
    return v - (1 << bits) if dt.kind == "i" and v >= 1 << (bits - 1) else v


def _pow_oracle(a, b):
    if a.dtype.kind == "f":
        return np.exp(b * np.log(a))
    a, b = np.broadcast_arrays(a, b)
    out = [_wrap(_int_pow(x.item(), y.item()), a.dtype) for x, y in zip(a.ravel(), b.ravel())]
    return np.array(out, a.dtype).reshape(a.shape)


def _pow_cases(rng, dt):
    if dt.kind == "float":
        return _binary(_pos, _arr)(rng, dt)
    big = np.asarray(rng.integers(-40, 41, (3, 4))).astype(dt.np_dtype)  # overflowing powers wrap
    return _binary(_arr)(rng, dt) + [([big, np.asarray(rng.integers(-3, 30, (3, 4))).astype(dt.np_dtype)], {})]


def _bitwise_cases(rng, dt):
    fns = ("and", "or", "xor") if dt.kind == "bool" else ("and", "or", "xor", "lshift", "rshift")
    counts = np.array([-1, 0, 3, 31, 32, 63, 64, 70]).astype(dt.np_dtype) if dt.kind == "int" else None
    out = [([_arr(rng, sa, dt), _arr(rng, sb, dt)], {"fn": fn}) for fn in fns for sa, sb in BINARY_SHAPES]
    if counts is not None:  # shift counts past the width and negative ones
        out += [([np.array([-5, 5, 1, -1, 7, -7, 2, 0]).astype(dt.np_dtype), counts], {"fn": fn})
                for fn in ("lshift", "rshift")]
    return out


def _bitwise_oracle(a, b, fn):
    a, b = np.broadcast_arrays(a, b)
    bits = a.dtype.itemsize * 8

    def one(x, y):
        if fn in ("and", "or", "xor"):
            return {"and": x & y, "or": x | y, "xor": x ^ y}[fn]
        if fn == "lshift":
            return 0 if y < 0 or y >= bits else _wrap(x << y, a.dtype)
        return (-1 if x < 0 else 0) if y < 0 or y >= bits else x >> y

    out = [one(x.item(), y.item()) for x, y in zip(a.ravel(), b.ravel())]
    return np.array(out, a.dtype).reshape(a.shape)


def _reduce_oracle(fn):
    def oracle(x, axes, keepdim):
        ax = tuple(a % x.ndim for a in axes) if x.ndim else ()  # a 0-d tensor reduces to itself
        return fn(x, axis=ax, keepdims=keepdim)
    return oracle


def _argmax_oracle(x, axis, keepdim):
    if x.ndim == 0:
        return np.array(0)
    ax = axis % x.ndim
    moved = np.moveaxis(x, ax, -1)
    flat = moved.reshape(-1, moved.shape[-1])
    best = np.array([max(range(len(r)), key=lambda i, r=r: (r[i], -i)) for r in flat]).reshape(moved.shape[:-1])
    return np.expand_dims(best, ax) if keepdim else best


def _round_half_even(x):
    return np.vectorize(lambda v: float(round(v)), otypes=[np.float64])(x) if x.dtype.kind == "f" else x


def _gelu(x, approximate):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + np.vectorize(math.erf, otypes=[np.float64])(x / math.sqrt(2)))


def _slice_oracle(x, starts, stops, steps):
    return x[tuple(slice(a, z, s) for a, z, s in zip(starts, stops, steps))]


def _diagonal_oracle(x, offset, axis1, axis2):
    """Element i of each (axis1, axis2) plane at (i + max(-offset, 0), i + max(offset, 0)), read one by one."""
    rest = [d for d in range(x.ndim) if d not in (axis1, axis2)]
    r0, c0 = max(-offset, 0), max(offset, 0)
    n = max(0, min(x.shape[axis1] - r0, x.shape[axis2] - c0))
    out = np.empty([x.shape[d] for d in rest] + [n], x.dtype)
    for idx in np.ndindex(*out.shape):
        at = [0] * x.ndim
        for d, c in zip(rest, idx):
            at[d] = c
        at[axis1], at[axis2] = idx[-1] + r0, idx[-1] + c0
        out[idx] = x[tuple(at)]
    return out


def _tri_oracle(upper):
    def oracle(x, k):
        i = np.arange(x.shape[-2])[:, None]
        j = np.arange(x.shape[-1])[None, :]
        keep = (j - i >= k) if upper else (j - i <= k)
        return np.where(keep, x, np.zeros((), x.dtype))
    return oracle


def _gather_oracle(x, idx, axis):
    out = np.zeros(idx.shape, x.dtype)
    for pos in np.ndindex(*idx.shape):
        src = list(pos)
        src[axis % x.ndim] = idx[pos]
        out[pos] = x[tuple(src)]
    return out


def _index_select_oracle(x, idx, axis):
    ax = axis % x.ndim
    parts = [np.take(x, [int(i)], axis=ax) for i in idx]
    return np.concatenate(parts, axis=ax) if parts else np.zeros(x.shape[:ax] + (0,) + x.shape[ax + 1:], x.dtype)


def _scatter_oracle(x, idx, src, axis):
    out = x.copy()
    for pos in np.ndindex(*idx.shape):  # row-major: a later write replaces an earlier one
        dst = list(pos)
        dst[axis % x.ndim] = idx[pos]
        out[tuple(dst)] = src[pos]
    return out


def _scatter_add_oracle(x, idx, src, axis):
    out = x.copy()
    for pos in np.ndindex(*idx.shape):
        dst = list(pos)
        dst[axis % x.ndim] = idx[pos]
        out[tuple(dst)] += src[pos]
    return out


def _segment_sum_oracle(idx, src, axis, size):
    ax = axis % src.ndim
    out = np.zeros(src.shape[:ax] + (size,) + src.shape[ax + 1:], src.dtype)
    for i, k in enumerate(idx):  # slice by slice, in order
        np.moveaxis(out, ax, 0)[k] += np.moveaxis(src, ax, 0)[i]
    return out


def _matmul_oracle(a, b):
    return (a[..., :, :, None] * b[..., None, :, :]).sum(-2)


def _matmul_bias_oracle(a, b, bias):
    return _matmul_oracle(a, b) + bias


def _arange_oracle(start, stop, step, dtype):
    vals, k = [], 0
    while (start + k * step < stop) if step > 0 else (start + k * step > stop):
        vals.append(start + k * step)
        k += 1
    return np.array(vals, np.float64)


def _attention_probs(q, k, mask, scale, is_causal, enable_gqa):
    """softmax rows of q k^T * scale + mask written out with an explicit loop over (batch, head)."""
    h = q.shape[-3]
    k = np.repeat(k, h // k.shape[-3], axis=-3) if enable_gqa else k
    s = np.einsum("...le,...se->...ls", q, k) * scale
    if is_causal:
        s = np.where(np.arange(s.shape[-1])[None, :] <= np.arange(s.shape[-2])[:, None], s, -np.inf)
    elif mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    p = np.zeros_like(s)
    for idx in np.ndindex(*s.shape[:-1]):
        row = np.exp(s[idx] - s[idx].max())
        p[idx] = row / row.sum()
    return p, k


def _attention_oracle(q, k, v, *mask, scale, is_causal, enable_gqa, score_mod=None, score_mod_grad=None,
                      where_mask=False):
    p, _ = _attention_probs(q, k, mask[0] if mask else None, scale, is_causal, enable_gqa)
    v = np.repeat(v, q.shape[-3] // v.shape[-3], axis=-3) if enable_gqa else v
    return np.einsum("...ls,...se->...le", p, v)


def _attention_stats_oracle(q, k, v, *mask, scale, is_causal=False, enable_gqa=False, score_mod=None,
                            score_mod_grad=None, where_mask=False):
    """log(sum(exp(row))) of the masked, scaled scores, row by row with math.fsum; -inf for an empty row."""
    h = q.shape[-3]
    k = np.repeat(k, h // k.shape[-3], axis=-3) if enable_gqa else k
    s = np.einsum("...le,...se->...ls", q, k) * scale
    if is_causal:
        s = np.where(np.arange(s.shape[-1])[None, :] <= np.arange(s.shape[-2])[:, None], s, -np.inf)
    elif mask:
        s = np.where(mask[0], s, -np.inf) if mask[0].dtype == bool else s + mask[0]
    out = np.empty(s.shape[:-1])
    for idx in np.ndindex(*s.shape[:-1]):
        row = s[idx][np.isfinite(s[idx])]
        out[idx] = math.log(math.fsum(math.exp(x) for x in row)) if row.size else -math.inf
    return out


def _attention_backward_oracle(q, k, v, out, gout, stats, *mask, scale, is_causal, enable_gqa, score_mod=None,
                               score_mod_grad=None, where_mask=False):
    """where_mask changes nothing here: the gradients are finite (the dropped scores' are 0 either way)."""
    p, kr = _attention_probs(q, k, mask[0] if mask else None, scale, is_causal, enable_gqa)
    group = q.shape[-3] // v.shape[-3] if enable_gqa else 1
    vr = np.repeat(v, group, axis=-3)
    dp = np.einsum("...le,...se->...ls", gout, vr)
    ds = p * (dp - (gout * out).sum(-1, keepdims=True))
    dq = np.einsum("...ls,...se->...le", ds, kr) * scale
    dk = np.einsum("...ls,...le->...se", ds, q) * scale
    dv = np.einsum("...ls,...le->...se", p, gout)
    heads = lambda x: x.reshape(x.shape[:-3] + (-1, group) + x.shape[-2:]).sum(-3)  # noqa: E731
    return np.concatenate([dq.ravel(), heads(dk).ravel(), heads(dv).ravel()])


def _attention_bias_oracle(q, k, v, out, gout, stats, mask, *, scale, is_causal, enable_gqa, score_mod=None,
                           score_mod_grad=None, where_mask=False):
    """dS = p * (dP - rowsum(dO * O)) summed over the dimensions the mask broadcasts along."""
    p, _ = _attention_probs(q, k, mask, scale, is_causal, enable_gqa)
    vr = np.repeat(v, q.shape[-3] // v.shape[-3], axis=-3) if enable_gqa else v
    ds = p * (np.einsum("...le,...se->...ls", gout, vr) - (gout * out).sum(-1, keepdims=True))
    ds = ds.sum(axis=tuple(range(ds.ndim - mask.ndim)))
    return ds.sum(axis=tuple(i for i, n in enumerate(mask.shape) if n == 1), keepdims=True)


def _conv_taps(x_shape, w_shape, stride, padding, dilation, groups):
    """Every (n, o, out position, c, input position, kernel offset) of a convolution, as loops."""
    cg, og = w_shape[1], w_shape[0] // groups
    out = _conv_out(x_shape, w_shape, {"stride": stride, "padding": padding, "dilation": dilation})
    for n, o, *p in np.ndindex(*out):
        for c in range(cg):
            for k in np.ndindex(*w_shape[2:]):
                src = tuple(pi * s + ki * d - lo for pi, s, ki, d, (lo, _) in zip(p, stride, k, dilation, padding))
                if all(0 <= i < size for i, size in zip(src, x_shape[2:])):
                    yield (n, o, *p), (n, (o // og) * cg + c, *src), (o, c, *k)


def _channels_first(oracle, acts, out_act):
    """The oracle of a channels_last case from the NC* one: the activations (`acts`) moved to NC*."""
    def run(a, b, channels_last=False, **attrs):
        if not channels_last:
            return oracle(a, b, **attrs)
        if "input_shape" in attrs:
            s = attrs["input_shape"]
            attrs["input_shape"] = (s[0], s[-1], *s[1:-1])
        a, b = (np.moveaxis(v, -1, 1) if act else v for v, act in zip((a, b), acts))
        out = oracle(a, b, **attrs)
        return np.moveaxis(out, 1, -1) if out_act else out
    return run


def _conv_oracle(x, w, **a):
    y = np.zeros(_conv_out(x.shape, w.shape, a))
    for yi, xi, wi in _conv_taps(x.shape, w.shape, **a):
        y[yi] += x[xi] * w[wi]
    return y


def _conv_grad_input_oracle(dy, w, input_shape, **a):
    dx = np.zeros(input_shape)
    for yi, xi, wi in _conv_taps(input_shape, w.shape, **a):
        dx[xi] += dy[yi] * w[wi]
    return dx


def _conv_grad_weight_oracle(x, dy, weight_shape, **a):
    dw = np.zeros(weight_shape)
    for yi, xi, wi in _conv_taps(x.shape, weight_shape, **a):
        dw[wi] += dy[yi] * x[xi]
    return dw


M32 = 0xFFFFFFFF


def _philox(counter: int, key: int) -> tuple[int, int, int, int]:
    """Philox4x32-10 (Salmon et al., SC'11) on a 128-bit counter (c0 = low word) and 64-bit key."""
    c = [counter & M32, (counter >> 32) & M32, (counter >> 64) & M32, (counter >> 96) & M32]
    k0, k1 = key & M32, (key >> 32) & M32
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & M32, (p0 >> 32) ^ c[3] ^ k1, p0 & M32]
        k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
    return tuple(c)


def _random_oracle(normal):
    """torch's resolution: a float64 uniform carries 53 random bits (the top 24 of one Philox word, then the
    top 29 of another), a narrower dtype's 24."""
    def oracle(seed, offset, shape, dtype):
        wide = dtype.np_dtype == np.float64
        bits = 53 if wide else 24

        def unit(hi, lo):
            return (((hi >> 8) << 29) | (lo >> 3)) / 2**53 if wide else (hi >> 8) / 2**24

        out = []
        for i in range(math.prod(shape)):
            w = _philox(int(offset) + i, int(seed))
            u1 = unit(w[0], w[2] if normal else w[1])
            if not normal:
                out.append(u1)
                continue
            u2 = unit(w[1], w[3])
            out.append(math.sqrt(-2 * math.log(u1 + 2**-bits)) * math.cos(2 * math.pi * u2))
        return np.array(out, np.float64).reshape(shape)
    return oracle


def _cmp(fn):
    return Recipe(_binary(_arr), fn, ALL, out="bool")


def _collective(reduce: bool):
    def make(rng, dt):
        ops = ([{"op": "sum"}] + ([{"op": "avg"}] if dt.kind == "float" else [])) if reduce else [{}]
        shapes = ([(3, 4)], [(5,)], [(3, 4), (2,), (1, 3)])
        return [([_arr(rng, s, dt) for s in group], dict(a)) for group in shapes for a in ops]
    return make


def _packed_oracle(*xs, **attrs):
    return xs[0] if len(xs) == 1 else np.concatenate([x.reshape(-1) for x in xs])


RECIPES: dict[str, Recipe] = {
    "neg": Recipe(_unary(_arr), lambda x: -x, NUM),
    "abs": Recipe(_unary(_away), lambda x: np.where(x < 0, -x, x), NUM),
    "exp": Recipe(_unary(_arr), np.exp),
    "log": Recipe(_unary(_pos), np.log),
    "sqrt": Recipe(_unary(_pos), np.sqrt),
    "rsqrt": Recipe(_unary(_pos), lambda x: x**-0.5),
    "reciprocal": Recipe(_unary(_away), lambda x: 1 / x),
    "sin": Recipe(_unary(_arr), np.sin),
    "cos": Recipe(_unary(_arr), np.cos),
    "tanh": Recipe(_unary(_arr), lambda x: (np.exp(2 * x) - 1) / (np.exp(2 * x) + 1)),
    "sigmoid": Recipe(_unary(_arr), lambda x: 1 / (1 + np.exp(-x))),
    "erf": Recipe(_unary(_arr), np.vectorize(math.erf, otypes=[np.float64])),
    "lgamma": Recipe(_unary(_pos), np.vectorize(math.lgamma, otypes=[np.float64])),
    "digamma": Recipe(_unary(_pos), _mp("digamma")),
    "polygamma": Recipe(_unary(_pos, ({"n": 1}, {"n": 2}, {"n": 3})), _mp("polygamma")),
    "erfinv": Recipe(_unary(_unit), _mp("erfinv")),
    "asin": Recipe(_unary(_unit), _libm("asin")),
    "acos": Recipe(_unary(_unit), _libm("acos")),
    "atan": Recipe(_unary(_arr), _libm("atan")),
    "asinh": Recipe(_unary(_arr), _libm("asinh")),
    "acosh": Recipe(_unary(_above_one), _libm("acosh")),
    "atanh": Recipe(_unary(_unit), _libm("atanh")),
    "erfc": Recipe(_unary(_arr), _libm("erfc")),
    "expm1": Recipe(_unary(_arr), _libm("expm1")),
    "tan": Recipe(_unary(_unit), _libm("tan")),
    "sinh": Recipe(_unary(_arr), _libm("sinh")),
    "cosh": Recipe(_unary(_arr), _libm("cosh")),
    "atan2": Recipe(_binary(_away), _libm("atan2")),
    "hypot": Recipe(_binary(_away), _libm("hypot")),
    "relu": Recipe(_unary(_away), lambda x: np.where(x > 0, x, 0 * x), NUM),
    "gelu": Recipe(_unary(_arr, ({"approximate": "none"}, {"approximate": "tanh"})), _gelu),
    "silu": Recipe(_unary(_arr), lambda x: x / (1 + np.exp(-x))),
    "leaky_relu": Recipe(_unary(_away, ({}, {"negative_slope": 0.2})),
                         lambda x, negative_slope: np.where(x > 0, x, negative_slope * x)),
    "floor": Recipe(_unary(_quarters), np.floor, NUM, grad_make=_unary(_between_quarters)),
    "ceil": Recipe(_unary(_quarters), np.ceil, NUM, grad_make=_unary(_between_quarters)),
    "round": Recipe(_unary(_quarters), _round_half_even, NUM, grad_make=_unary(_between_quarters)),
    "sign": Recipe(_unary(_quarters), lambda x: (x > 0).astype(np.int8) - (x < 0).astype(np.int8), NUM,
                   grad_make=_unary(_between_quarters)),
    "stop_gradient": Recipe(_unary(_arr), lambda x: x, ALL),
    "add": Recipe(_binary(_arr), lambda a, b: a + b, NUM),
    "sub": Recipe(_binary(_arr), lambda a, b: a - b, NUM),
    "straight_through": Recipe(_binary(_arr), lambda a, b: b + 0 * a),
    "mul": Recipe(_binary(_arr), lambda a, b: a * b, NUM),
    "div": Recipe(_binary(_arr, _away), lambda a, b: a / b),
    "pow": Recipe(_pow_cases, _pow_oracle, NUM),
    "bitwise": Recipe(_bitwise_cases, _bitwise_oracle, INTS + ("bool",)),
    "floor_divide": Recipe(_divmod_cases, _py_binary(lambda a, b: a // b), NUM),
    "remainder": Recipe(_divmod_cases, _py_binary(lambda a, b: a % b), NUM),
    "fmod": Recipe(_divmod_cases, _py_binary(lambda a, b: math.fmod(a, b) if isinstance(a, float)
                                             else (abs(a) % abs(b)) * (-1 if a < 0 else 1)), NUM),
    "cumsum": Recipe(_scan_cases, _scan_oracle(lambda acc, v: acc + v), NUM),
    "cumprod": Recipe(_scan_cases, _scan_oracle(lambda acc, v: acc * v), NUM, grad_make=_cumprod_grad_cases),
    "logcumsumexp": Recipe(_logcumsumexp_cases, _scan_oracle(lambda acc, v: np.logaddexp(acc, v)), FLOATS,
                           grad_make=_logcumsumexp_grad_cases),
    "argsort": Recipe(_argsort_cases, _argsort_oracle, ALL, out="i64"),
    "cumarg": Recipe(_cumarg_cases, _cumarg_oracle, ALL, out="i64"),
    "maximum": Recipe(_distinct_pair, lambda a, b: np.where(a >= b, a, b + 0 * a), NUM),
    "minimum": Recipe(_distinct_pair, lambda a, b: np.where(a <= b, a, b + 0 * a), NUM),
    "eq": _cmp(lambda a, b: a == b),
    "ne": _cmp(lambda a, b: a != b),
    "lt": _cmp(lambda a, b: a < b),
    "le": _cmp(lambda a, b: a <= b),
    "gt": _cmp(lambda a, b: a > b),
    "ge": _cmp(lambda a, b: a >= b),
    "logical_and": Recipe(_binary(_arr), lambda a, b: a & b, ("bool",)),
    "logical_or": Recipe(_binary(_arr), lambda a, b: a | b, ("bool",)),
    "logical_not": Recipe(_unary(_arr), lambda a: ~a, ("bool",)),
    "where": Recipe(_where, lambda c, a, b: np.where(c, a, b), ALL),
    "cast": Recipe(_cast, lambda x, dtype: x.astype(dtype.np_dtype) if dtype.kind != "float" else x, ALL,
                   out="attr", grad_make=lambda rng, dt: [([_arr(rng, (3, 4), dt)], {"dtype": dt})]),
    "reduce_sum": Recipe(_reduce, _reduce_oracle(np.sum), NUM),
    "reduce_mean": Recipe(_reduce_nonempty, _reduce_oracle(np.mean)),
    "reduce_max": Recipe(_reduce_nonempty, _reduce_oracle(np.max), NUM),
    "reduce_min": Recipe(_reduce_nonempty, _reduce_oracle(np.min), NUM),
    "argmax": Recipe(_argmax, _argmax_oracle, NUM, out="i64"),
    "reshape": Recipe(_movement([((3, 4), {"shape": [2, 6]}), ((12,), {"shape": [3, 1, 4]}), ((), {"shape": [1, 1]}),
                                 ((2, 0, 3), {"shape": [0, 6]}), ((0,), {"shape": [3, 0]})]),
                      lambda x, shape: np.array(x.ravel().tolist(), x.dtype).reshape(shape), ALL),
    "broadcast_to": Recipe(_movement([((3, 1), {"shape": [2, 3, 4]}), ((), {"shape": [2, 2]}),
                                      ((1, 0), {"shape": [5, 0]}), ((4,), {"shape": [4]})]),
                           lambda x, shape: x | np.zeros(shape, bool) if x.dtype == bool else x + np.zeros(shape),
                           ALL),
    "permute": Recipe(_movement([((2, 3, 4), {"perm": [2, 0, 1]}), ((5,), {"perm": [0]}), ((), {"perm": []}),
                                 ((0, 3), {"perm": [1, 0]})]),
                      lambda x, perm: np.einsum(x, list(range(x.ndim)), list(perm)) if x.ndim else x, ALL),
    "slice": Recipe(_movement([((5, 7), {"starts": [1, 0], "stops": [4, 7], "steps": [2, 3]}),
                               ((6,), {"starts": [0], "stops": [6], "steps": [4]}),
                               ((6,), {"starts": [2], "stops": [2], "steps": [1]}),
                               ((3, 0), {"starts": [1, 0], "stops": [3, 0], "steps": [1, 1]}),
                               ((), {"starts": [], "stops": [], "steps": []})]), _slice_oracle, ALL),
    "concat": Recipe(_concat, lambda *xs, axis: np.concatenate(xs, axis), ALL),
    "as_strided": Recipe(_movement([((12,), {"size": [5, 4], "stride": [2, 1], "offset": 0}),
                                    ((12,), {"size": [3, 3], "stride": [1, 1], "offset": 2}),
                                    ((12,), {"size": [3, 2], "stride": [0, 4], "offset": 1}),
                                    ((7,), {"size": [], "stride": [], "offset": 6}),
                                    ((4,), {"size": [0, 3], "stride": [1, 1], "offset": 9})]),
                         lambda x, size, stride, offset: np.array(
                             [x[offset + sum(c * s for c, s in zip(i, stride))] for i in np.ndindex(*size)],
                             x.dtype).reshape(size), ALL),
    "diagonal": Recipe(_movement([((3, 4), {"offset": 0, "axis1": 0, "axis2": 1}),
                                  ((3, 4), {"offset": 2, "axis1": 1, "axis2": 0}),
                                  ((2, 3, 4), {"offset": -1, "axis1": 2, "axis2": 0}),
                                  ((2, 3, 4), {"offset": 1, "axis1": 0, "axis2": 1}),
                                  ((3, 4), {"offset": 5, "axis1": 0, "axis2": 1}),
                                  ((0, 3), {"offset": 0, "axis1": 1, "axis2": 0})]),
                       _diagonal_oracle, ALL),
    "flip": Recipe(_movement([((3, 4), {"axes": [0]}), ((3, 4), {"axes": [0, 1]}), ((3, 4), {"axes": [-1]}),
                              ((0, 2), {"axes": [1]})]),
                   lambda x, axes: x[tuple(slice(None, None, -1) if i in [a % x.ndim for a in axes] else slice(None)
                                          for i in range(x.ndim))], ALL),
    "squeeze": Recipe(_movement([((3, 1, 4, 1), {"axes": [1, 3]}), ((3, 1, 4, 1), {"axes": [-1]}),
                                 ((1,), {"axes": [0]}), ((0, 1), {"axes": [1]})]),
                      lambda x, axes: x.reshape([s for i, s in enumerate(x.shape) if i not in
                                                 [a % x.ndim for a in axes]]), ALL),
    "unsqueeze": Recipe(_movement([((3, 4), {"axes": [0]}), ((3, 4), {"axes": [-1]}), ((3, 4), {"axes": [0, 3]}),
                                   ((), {"axes": [0]}), ((0,), {"axes": [1]})]),
                        lambda x, axes: x.reshape(_unsqueezed(x.shape, axes)), ALL),
    "pad": Recipe(_pad, lambda x, pads, value: _pad_oracle(x, pads, value), ALL),
    "matmul": Recipe(_matmul, _matmul_oracle),
    "matmul_bias": Recipe(_matmul_bias, _matmul_bias_oracle),
    "scaled_cast": Recipe(_scaled_cast, _scaled_cast_oracle, ("f32", "f16", "bf16"), out="attr"),
    "fp8_matmul": Recipe(_fp8_matmul, _fp8_matmul_oracle, ("f32", "f16", "bf16")),
    "full": Recipe(_full, lambda shape, value, dtype: np.ones(shape) * value, ALL, out="attr"),
    "arange": Recipe(_arange, _arange_oracle, ALL, out="attr"),
    "triu": Recipe(_tri, _tri_oracle(True), ALL),
    "tril": Recipe(_tri, _tri_oracle(False), ALL),
    "gather": Recipe(_gather, _gather_oracle, ALL),
    "index_select": Recipe(_index_select, _index_select_oracle, ALL),
    "scatter_add": Recipe(_scatter_add, _scatter_add_oracle, NUM),
    "scatter": Recipe(_scatter, _scatter_oracle, ALL, grad_make=_scatter_unique),
    "segment_sum": Recipe(_segment_sum, _segment_sum_oracle, NUM),
    "random_uniform": Recipe(_random, _random_oracle(False), out="attr"),
    "random_normal": Recipe(_random, _random_oracle(True), out="attr"),
    "scaled_dot_product_attention": Recipe(_attention_cases, _attention_oracle),
    "scaled_dot_product_attention_stats": Recipe(_attention_cases, _attention_stats_oracle, out="acc"),
    "scaled_dot_product_attention_backward": Recipe(_attention_backward_cases, _attention_backward_oracle),
    "scaled_dot_product_attention_bias_grad": Recipe(_attention_bias_cases, _attention_bias_oracle),
    # world size 1 (the reference of one op has no other ranks): the identity, several inputs packed flat
    "all_reduce": Recipe(_collective(True), _packed_oracle, NUM),
    "broadcast": Recipe(_collective(False), _packed_oracle, NUM),
    "all_gather": Recipe(_collective(False), _packed_oracle, NUM),
    "reduce_scatter": Recipe(_collective(True), _packed_oracle, NUM),
    # host copies (offloading): the identity on values, byte for byte
    "offload": Recipe(_movement([((3, 4), {}), ((5,), {}), ((), {}), ((0, 3), {})]), lambda x: x, ALL),
    "reload": Recipe(_movement([((3, 4), {}), ((5,), {}), ((), {}), ((0, 3), {})]), lambda x: x, ALL),
    "conv": Recipe(_conv_cases, _channels_first(_conv_oracle, (True, False), True)),
    "conv_grad_input": Recipe(_conv_grad_input_cases, _channels_first(_conv_grad_input_oracle, (True, False), True)),
    "conv_grad_weight": Recipe(_conv_grad_weight_cases, _channels_first(_conv_grad_weight_oracle, (True, True), False)),
}


def _unsqueezed(shape, axes):
    rank = len(shape) + len(axes)
    ax = {a % rank for a in axes}
    it = iter(shape)
    return [1 if i in ax else next(it) for i in range(rank)]


def _pad_oracle(x, pads, value):
    out = np.full([s + lo + hi for s, (lo, hi) in zip(x.shape, pads)], value, x.dtype)
    out[tuple(slice(lo, lo + s) for s, (lo, _) in zip(x.shape, pads))] = x
    return out


# ---- the table ----------------------------------------------------------------------------------------

OPS = sorted(REGISTRY)
# ops whose VJP is by definition not their value's derivative (each has its own test below)
NOT_DERIVATIVE = {"straight_through": "the result is y's values with x's gradient"}
DIFF_OPS = sorted(n for n, d in REGISTRY.items() if d.vjp is not None and n not in NOT_DERIVATIVE)
TOL = {"f64": (1e-12, 1e-12), "f32": (3e-6, 1e-5), "f16": (2e-3, 2e-3), "bf16": (1.6e-2, 1.6e-2)}


def _recipe(name: str) -> Recipe:
    if name not in RECIPES:
        pytest.fail(f"op {name!r} has no sample-input recipe: add one to RECIPES in tests/ops/test_registry.py")
    return RECIPES[name]


def _rng(*key) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _ttype(a: np.ndarray) -> TensorType:
    return TensorType(a.shape, dtype_of(a.dtype))


def _one_op_graph(name: str, ins: list[np.ndarray], attrs: dict) -> Graph:
    g = Graph(name)
    vals = [g.add_input(_ttype(a)) for a in ins]
    g.outputs = [Builder(g).emit(name, *vals, **attrs)]
    return verify(g)


def _widen(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) if a.dtype.kind == "f" or a.dtype.name == "bfloat16" else a


def _expected_dtype(recipe: Recipe, dt: DType, attrs: dict) -> str:
    return {"same": dt.name, "bool": "bool", "i64": "i64", "attr": dtype_of(attrs.get("dtype", dt)).name,
            "acc": "f64" if dt.name == "f64" else "f32"}[recipe.out]


def _check_case(name: str, recipe: Recipe, dt: DType, ins: list[np.ndarray], attrs: dict) -> None:
    opdef = REGISTRY[name]
    norm = opdef.normalize_attrs(attrs)
    want = opdef.infer([_ttype(a) for a in ins], **norm)
    g = _one_op_graph(name, ins, attrs)
    (got,) = run_graph(g, ins)
    assert g.outputs[0].type == want
    assert want.dtype.name == _expected_dtype(recipe, dt, attrs), f"{name}: result dtype {want.dtype}"
    raw = np.asarray(opdef.ref(*[a.astype(np.float32) if opdef.compute_f32 and a.dtype.itemsize == 2 and
                                 a.dtype.kind != "i" else a for a in ins], **norm))
    assert raw.shape == want.shape, f"{name}: reference shape {raw.shape} but infer says {want}"
    with np.errstate(all="ignore"):
        expected = np.asarray(recipe.oracle(*[_widen(a) for a in ins], **norm))
    assert expected.shape == want.shape, f"{name} {attrs}: oracle shape {expected.shape} vs infer {want}"
    assert got.shape == want.shape and got.dtype == want.dtype.np_dtype
    if want.dtype.is_float:
        rtol, atol = TOL[want.dtype.name]
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol,
                                   err_msg=f"{name} {dt} {attrs}")
    else:
        np.testing.assert_array_equal(got, expected.astype(want.dtype.np_dtype), err_msg=f"{name} {dt} {attrs}")


@pytest.mark.parametrize("dt", ALL)
@pytest.mark.parametrize("name", OPS)
def test_reference_matches_numpy(name: str, dt: str) -> None:
    """(a)+(b): shape/dtype rule and reference vs the oracle for accepted dtypes; DTypeError otherwise."""
    recipe = _recipe(name)
    dtype = dtype_of(dt)
    cases = recipe.make(_rng(name, dt), dtype)
    assert cases, f"{name}: the recipe made no cases"
    if dt not in recipe.dtypes:
        opdef = REGISTRY[name]
        for ins, attrs in cases:
            with pytest.raises(DTypeError):
                opdef.infer([_ttype(a) for a in ins], **opdef.normalize_attrs(attrs))
        return
    for ins, attrs in cases:
        _check_case(name, recipe, dtype, ins, attrs)


def _vjp_graph(name: str, ins: list[np.ndarray], attrs: dict) -> tuple[Graph, list[int]]:
    """inputs: the op's inputs then a cotangent; outputs: the VJP for each float input (in `wrt`)."""
    g = Graph("vjp")
    vals = [g.add_input(_ttype(a)) for a in ins]
    b = Builder(g)
    y = b.emit(name, *vals, **attrs)
    ct = g.add_input(y.type)
    wrt = [i for i, v in enumerate(vals) if v.dtype.is_float]
    grads = autodiff(g, y, [vals[i] for i in wrt], seed=ct)
    assert all(gr is not None for gr in grads), f"{name}: a float input got no gradient"
    g.outputs = list(grads)
    return verify(g), wrt


def _loss(name: str, ins: list[np.ndarray], attrs: dict, ct: np.ndarray) -> float:
    (y,) = run_graph(_one_op_graph(name, ins, attrs), ins)
    return float(np.sum(y * ct))


def _finite_difference(name, ins, attrs, ct, i, eps=1e-6) -> np.ndarray:
    out = np.zeros(ins[i].shape)
    for pos in np.ndindex(*ins[i].shape):
        hi = [a.copy() for a in ins]
        lo = [a.copy() for a in ins]
        hi[i][pos] += eps
        lo[i][pos] -= eps
        out[pos] = (_loss(name, hi, attrs, ct) - _loss(name, lo, attrs, ct)) / (2 * eps)
    return out


@pytest.mark.parametrize("name", DIFF_OPS)
def test_vjp_matches_finite_differences(name: str) -> None:
    """(c): autodiff's VJP of every differentiable op vs central differences, float64, reference executor."""
    recipe = _recipe(name)
    rng = _rng(name, "grad")
    make = recipe.grad_make or recipe.make
    cases = [(ins, attrs) for ins, attrs in make(rng, dtype_of("f64")) if all(a.size for a in ins)]
    assert cases, f"{name}: no non-empty float64 sample for the gradient check"
    for ins, attrs in cases:
        g, wrt = _vjp_graph(name, ins, attrs)
        ct = rng.standard_normal(g.inputs[-1].type.shape)
        grads = run_graph(g, ins + [ct])
        for i, got in zip(wrt, grads):
            want = _finite_difference(name, ins, attrs, ct, i)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"{name} d/dinput{i} {attrs}")


def test_straight_through_passes_the_whole_gradient_to_its_first_input() -> None:
    """straight_through(x, y) is y, and its VJP gives x the cotangent as it is and y none."""
    rng = _rng("straight_through", "grad")
    x, y, ct = (rng.standard_normal((3, 4)) for _ in range(3))
    g = Graph("vjp")
    vx, vy = g.add_input(_ttype(x)), g.add_input(_ttype(y))
    out = Builder(g).emit("straight_through", vx, vy)
    seed = g.add_input(out.type)
    gx, gy = autodiff(g, out, [vx, vy], seed=seed)
    assert gy is None
    g.outputs = [out, gx]
    got_out, got_gx = run_graph(verify(g), [x, y, ct])
    np.testing.assert_array_equal(got_out, y)
    np.testing.assert_array_equal(got_gx, ct)


@pytest.mark.parametrize("name", OPS)
def test_declaration_is_complete(name: str) -> None:
    """A valid category; a VJP or a non-empty reason why not; a recipe in this table."""
    opdef = REGISTRY[name]
    assert opdef.name == name
    assert opdef.category in CATEGORIES
    if opdef.vjp is None:
        assert isinstance(opdef.nondiff, str) and opdef.nondiff.strip(), f"{name}: nondiff needs a reason"
    _recipe(name)


def test_every_recipe_names_a_registered_op() -> None:
    assert sorted(set(RECIPES) - set(REGISTRY)) == []


@pytest.mark.parametrize("name", ["reduce_max", "reduce_min"])
def test_extreme_over_zero_size_axis_is_a_shape_error(name: str) -> None:
    with pytest.raises(ShapeError, match="zero-size"):
        REGISTRY[name].infer([TensorType((3, 0), dtype_of("f32"))], axes=(1,), keepdim=False)


def test_philox_known_answer() -> None:
    """The test's own Philox matches the Random123 known-answer vector for counter 0 and key 0."""
    assert _philox(0, 0) == (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)
