"""Sample graphs shared by the runtime tests: one-op graphs for every registered op (odd sizes,
broadcasting, zero-size dims, permuted inputs) and random multi-op graphs. Inputs are NumPy arrays;
the CPU tests run them through plans on the reference executor, the GPU tests on CUDA."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from flame.ir import REGISTRY, Builder, Graph, TensorType, dtype_of, verify
from flame.ir.dtypes import DType

FLOATS = ("f32", "f16", "bf16", "f64")
INTS = ("i32", "i64")
NUM = FLOATS + INTS
ALL = NUM + ("bool",)
Case = tuple[list[np.ndarray], dict]


def arr(rng, shape, dt: DType, lo=-2.0, hi=2.0) -> np.ndarray:
    if dt.kind == "float":
        return np.asarray(rng.uniform(lo, hi, shape)).astype(dt.np_dtype)
    if dt.kind == "int":
        return np.asarray(rng.integers(-5, 6, shape)).astype(dt.np_dtype)
    return np.asarray(rng.random(shape) < 0.5)


def _pos(rng, shape, dt):
    return arr(rng, shape, dt, 0.25, 3.0) if dt.kind == "float" else arr(rng, shape, dt)


def _unit(rng, shape, dt):
    return arr(rng, shape, dt, -0.9, 0.9)


def _above_one(rng, shape, dt):
    return arr(rng, shape, dt, 1.2, 3.0)


def _away(rng, shape, dt):
    """Values at least 0.25 from zero, of either sign (atan2's gradient is singular at the origin)."""
    return arr(rng, shape, dt, 0.25, 2.0) * np.where(rng.random(shape) < 0.5, -1, 1).astype(dt.np_dtype)


def _quarters(rng, shape, dt):
    if dt.kind != "float":
        return arr(rng, shape, dt)
    return np.asarray(rng.integers(-12, 13, shape) / 4.0).astype(dt.np_dtype)


UNARY_SHAPES = [(3, 5), (7,), (), (2, 0, 3), (129, 257)]
BINARY_SHAPES = [((3, 4), (3, 4)), ((3, 1), (4,)), ((2, 1, 5), (3, 1)), ((), (2, 3)), ((0, 3), (1, 3)),
                 ((65, 1), (1, 1031))]


def _unary(fill=arr, **attrs):
    return lambda rng, dt: [([fill(rng, s, dt)], dict(attrs)) for s in UNARY_SHAPES]


def _binary(fill=arr, fill_b=None):
    fill_b = fill_b or fill
    return lambda rng, dt: [([fill(rng, a, dt), fill_b(rng, b, dt)], {}) for a, b in BINARY_SHAPES]


def _reduce(rng, dt):
    x = arr(rng, (4, 37, 5), dt)
    big = arr(rng, (3, 4099), dt)
    return [([x], {"axes": [1], "keepdim": False}), ([x], {"axes": [0, 2], "keepdim": True}),
            ([x], {"axes": [0, 1, 2], "keepdim": False}), ([x], {"axes": [], "keepdim": False}),
            ([big], {"axes": [1], "keepdim": True}), ([big], {"axes": [0], "keepdim": False}),
            ([arr(rng, (0, 3), dt)], {"axes": [1], "keepdim": False})]


def _reduce_sum(rng, dt):
    return _reduce(rng, dt) + [([arr(rng, (0, 3), dt)], {"axes": [0], "keepdim": False})]


def _argmax(rng, dt):
    x = arr(rng, (4, 37, 5), dt)
    return [([x], {"axis": a, "keepdim": k}) for a, k in ((0, False), (1, True), (-1, False))]


def _where(rng, dt):
    return [([arr(rng, c, dtype_of("bool")), arr(rng, a, dt), arr(rng, b, dt)], {})
            for c, a, b in (((3, 4), (3, 4), (3, 4)), ((3, 1), (1, 4), ()), ((5,), (2, 5), (2, 1)))]


def _cast(rng, dt):
    x = arr(rng, (5, 7), dt) if dt.kind != "float" else _quarters(rng, (5, 7), dt)
    return [([x], {"dtype": to}) for to in ALL]


def _index(rng, dt):
    x = arr(rng, (5, 7), dt)
    i0 = rng.integers(0, 5, (3, 7)).astype(np.int64)
    i1 = rng.integers(0, 7, (5, 9)).astype(np.int32)
    return [([x, i0], {"axis": 0}), ([x, i1], {"axis": 1})]


def _index_select(rng, dt):
    x = arr(rng, (5, 7, 3), dt)
    return [([x, rng.integers(0, 7, (4,)).astype(np.int64)], {"axis": 1}),
            ([x, rng.integers(0, 5, (6,)).astype(np.int32)], {"axis": 0})]


def _scatter_add(rng, dt):
    x = arr(rng, (5, 7), dt)
    idx = rng.integers(0, 5, (8, 7)).astype(np.int64)
    return [([x, idx, arr(rng, (8, 7), dt)], {"axis": 0})]


def _segment_sum(rng, dt):
    """Repeated indices along an outer and an inner axis (the slice lengths take the 4-wide path and not)."""
    i0 = rng.integers(0, 5, (8,)).astype(np.int64)
    i1 = rng.integers(0, 3, (7,)).astype(np.int32)
    return [([i0, arr(rng, (8, 12), dt)], {"axis": 0, "size": 5}),
            ([i1, arr(rng, (2, 7, 3), dt)], {"axis": 1, "size": 3})]


def _scatter(rng, dt):
    x = arr(rng, (5, 7), dt)
    idx = rng.integers(0, 5, (8, 7)).astype(np.int64)  # duplicates: the last write wins
    along = rng.integers(0, 7, (5, 9)).astype(np.int32)
    return [([x, idx, arr(rng, (8, 7), dt)], {"axis": 0}), ([x, along, arr(rng, (5, 9), dt)], {"axis": 1})]


def _matmul(rng, dt):
    shapes = [((3, 5), (5, 4)), ((2, 3, 5), (5, 7)), ((5, 6), (4, 6, 2)), ((2, 1, 3, 4), (1, 3, 4, 5)),
              ((33, 65), (65, 17)), ((1, 8), (8, 1)), ((2, 3, 0), (2, 0, 4))]
    return [([arr(rng, a, dt), arr(rng, b, dt)], {}) for a, b in shapes]


def _matmul_bias(rng, dt):
    """_matmul's products with a bias vector over their columns."""
    return [([a, b, arr(rng, (b.shape[-1],), dt)], kw) for (a, b), kw in _matmul(rng, dt)]


def _scaled_cast(rng, dt):
    """x of dt and an f32 scale; a power-of-two scale keeps x * scale exact, a large value saturates."""
    out = []
    for shape, fmt in (((3, 5), "f8e4m3"), ((129, 257), "f8e5m2"), ((2, 0, 3), "f8e4m3"), ((), "f8e5m2")):
        x = arr(rng, shape, dt, -600.0, 600.0)
        out.append(([x, np.array(0.5 if fmt == "f8e5m2" else 2.0, np.float32)], {"dtype": fmt}))
    return out


def _fp8_matmul(rng, dt):
    """FP8 a [m, k] and b [n, k] (dims multiples of 16, cuBLASLt's FP8 rule), f32 inverse scales; dt is
    the result's dtype."""
    import ml_dtypes

    e4, e5 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
    out = []
    for fa, fb, (m, n, k) in ((e4, e4, (16, 32, 16)), (e5, e4, (48, 16, 64)), (e4, e5, (32, 32, 32)),
                              (e4, e4, (0, 16, 32))):
        a, b = rng.uniform(-8, 8, (m, k)).astype(fa), rng.uniform(-8, 8, (n, k)).astype(fb)
        out.append(([a, b, np.array(0.5, np.float32), np.array(0.25, np.float32)], {"out_dtype": dt}))
    return out


def _attention(rng, dt, backward=False):
    """q, k, v [, mask]: causal with L != S, a broadcast bool mask, grouped-query heads. The backward's
    out and stats are the forward's (the op's contract: cuDNN's backward reads them)."""
    q, k, v = arr(rng, (2, 4, 5, 8), dt), arr(rng, (2, 2, 7, 8), dt), arr(rng, (2, 2, 7, 8), dt)
    keep = rng.random((5, 7)) < 0.6
    cases = [([q, k, v], {"scale": 0.35, "is_causal": True, "enable_gqa": True}),
             ([q, k[:, :1].repeat(4, 1), v[:, :1].repeat(4, 1), keep], {"scale": 0.35})]
    if backward:
        sdpa, stats = REGISTRY["scaled_dot_product_attention"], REGISTRY["scaled_dot_product_attention_stats"]
        go = arr(rng, q.shape, dt)
        cases = [(ins[:3] + [sdpa.ref(*ins, **sdpa.normalize_attrs(attrs)).astype(q.dtype), go,
                             stats.ref(*ins, **stats.normalize_attrs(attrs)).astype(np.float64 if dt.name == "f64"
                                                                                    else np.float32)] + ins[3:],
                  attrs)
                 for ins, attrs in cases]
    return cases


def _attention_bias(rng, dt):
    """The backward's inputs with an additive mask (a [L, S] bias and one per batch row, [B, 1, L, S]):
    the mask's gradient."""
    sdpa, stats = REGISTRY["scaled_dot_product_attention"], REGISTRY["scaled_dot_product_attention_stats"]
    q, k, v, go = (arr(rng, s, dt) for s in ((2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 8), (2, 4, 5, 8)))
    cases = []
    for mask in (arr(rng, (5, 7), dt), arr(rng, (2, 1, 5, 7), dt)):
        attrs = sdpa.normalize_attrs({"scale": 0.35})
        ins = [q, k, v, mask]
        lse = stats.ref(*ins, **attrs).astype(np.float64 if dt.name == "f64" else np.float32)
        cases.append(([q, k, v, sdpa.ref(*ins, **attrs).astype(q.dtype), go, lse, mask], {"scale": 0.35}))
    return cases


def _conv(rng, dt, which="conv"):
    """A strided, padded, grouped 2-d convolution (odd sizes) and a dilated 1-d one with batch 1; the
    gradients on the same shapes."""
    specs = [((3, 6, 9, 11), (8, 3, 3, 3), {"stride": [2, 1], "padding": [[1, 1], [1, 2]], "dilation": [1, 1],
                                           "groups": 2}),
             ((1, 5, 13), (4, 5, 3), {"stride": [1], "padding": [[2, 2]], "dilation": [2]})]
    conv = REGISTRY["conv"]
    out = []
    for xs, ws, a in specs:
        x, w = arr(rng, xs, dt), arr(rng, ws, dt)
        dy = arr(rng, conv.infer([TensorType(xs, dt), TensorType(ws, dt)], **conv.normalize_attrs(a)).shape, dt)
        out.append({"conv": ([x, w], a), "conv_grad_input": ([dy, w], {**a, "input_shape": xs}),
                    "conv_grad_weight": ([x, dy], {**a, "weight_shape": ws})}[which])
    return out


def _movement(rng, dt):
    x = arr(rng, (3, 4, 5), dt)
    return {
        "reshape": [([x], {"shape": [12, 5]}), ([x], {"shape": [60]})],
        "broadcast_to": [([arr(rng, (3, 1, 5), dt)], {"shape": [2, 3, 4, 5]}), ([arr(rng, (), dt)], {"shape": [3]})],
        "permute": [([x], {"perm": [2, 0, 1]}), ([x], {"perm": [1, 0, 2]}),
                    ([arr(rng, (3, 1, 5), dt)], {"perm": [1, 0, 2]})],
        "slice": [([x], {"starts": [1, 0, 1], "stops": [3, 4, 5], "steps": [1, 2, 3]})],
        "concat": [([x, arr(rng, (3, 2, 5), dt)], {"axis": 1}), ([x, x, x], {"axis": 0})],
        "flip": [([x], {"axes": [0, 2]})],
        "as_strided": [([arr(rng, (24,), dt)], {"size": [5, 4], "stride": [3, 1], "offset": 2}),
                       ([arr(rng, (24,), dt)], {"size": [3, 2, 2], "stride": [0, 8, 2], "offset": 1})],
        "diagonal": [([x], {"offset": 1, "axis1": 2, "axis2": 0}), ([x], {"offset": -1, "axis1": 1, "axis2": 2})],
        "squeeze": [([arr(rng, (3, 1, 5), dt)], {"axes": [1]})],
        "unsqueeze": [([x], {"axes": [0, 3]})],
        "pad": [([x], {"pads": [[1, 0], [0, 2], [1, 1]], "value": 1})],
        "triu": [([x], {"k": 1}), ([arr(rng, (7, 7), dt)], {"k": -1})],
        "tril": [([x], {"k": 0})],
    }


def _seed_offset(rng):
    return [np.asarray(int(rng.integers(0, 2**40)), np.int64), np.asarray(int(rng.integers(0, 2**33)), np.int64)]


def _float_unary(fill=arr, **attrs):
    return (FLOATS, _unary(fill, **attrs))


# name -> (main dtypes, maker(rng, dtype) -> [(inputs, attrs)])
TABLE: dict[str, tuple[tuple[str, ...], Callable]] = {
    "neg": (NUM, _unary()), "abs": (NUM, _unary()), "exp": _float_unary(), "log": _float_unary(_pos),
    "sqrt": _float_unary(_pos), "rsqrt": _float_unary(_pos), "reciprocal": _float_unary(_pos),
    "sin": _float_unary(), "cos": _float_unary(), "tanh": _float_unary(), "sigmoid": _float_unary(),
    "erf": _float_unary(), "relu": (NUM, _unary()), "gelu": _float_unary(), "silu": _float_unary(),
    "leaky_relu": _float_unary(negative_slope=0.2), "floor": (NUM, _unary(_quarters)),
    "ceil": (NUM, _unary(_quarters)), "round": (NUM, _unary(_quarters)), "sign": (NUM, _unary()),
    "stop_gradient": (ALL, _unary()),
    "lgamma": _float_unary(_pos), "digamma": _float_unary(_pos), "polygamma": _float_unary(_pos, n=1),
    "erfinv": _float_unary(_unit),
    "asin": _float_unary(_unit), "acos": _float_unary(_unit), "atan": _float_unary(), "asinh": _float_unary(),
    "acosh": _float_unary(_above_one), "atanh": _float_unary(_unit), "erfc": _float_unary(),
    "atan2": (FLOATS, _binary(_away, _away)),
    "hypot": (FLOATS, _binary(_away, _away)),
    "expm1": _float_unary(), "tan": _float_unary(_unit), "sinh": _float_unary(), "cosh": _float_unary(),
    "add": (NUM, _binary()), "sub": (NUM, _binary()), "mul": (NUM, _binary()), "straight_through": (FLOATS, _binary()),
    "div": (FLOATS, _binary(arr, _pos)), "pow": (FLOATS, _binary(_pos)), "maximum": (NUM, _binary()),
    "minimum": (NUM, _binary()), "logical_and": (("bool",), _binary()), "logical_or": (("bool",), _binary()),
    "logical_not": (("bool",), _unary()), "where": (ALL, _where), "cast": (ALL, _cast),
    "gather": (ALL, _index), "index_select": (ALL, _index_select), "scatter_add": (NUM, _scatter_add),
    "segment_sum": (NUM, _segment_sum),
    "scatter": (ALL, _scatter),
    "matmul": (FLOATS, _matmul), "matmul_bias": (FLOATS, _matmul_bias),
    "scaled_cast": (("f32", "f16", "bf16"), _scaled_cast),
    "fp8_matmul": (("f32", "f16", "bf16"), _fp8_matmul), "reduce_sum": (NUM, _reduce_sum),
    "reduce_mean": (FLOATS, _reduce),
    "reduce_max": (NUM, lambda r, d: _reduce(r, d)[:-1]), "reduce_min": (NUM, lambda r, d: _reduce(r, d)[:-1]),
    "argmax": (NUM, _argmax),
    "scaled_dot_product_attention": (FLOATS, _attention),
    "scaled_dot_product_attention_backward": (FLOATS, lambda rng, dt: _attention(rng, dt, backward=True)),
    # always decomposed, with f16/bf16 GEMMs rounded to the input dtype as cuBLAS does: the half cases
    # are held to half tolerances in tests/nn/test_attention_bias.py and passes/test_decompose_attention.py
    "scaled_dot_product_attention_bias_grad": (("f32", "f64"), _attention_bias),
    "conv": (FLOATS, _conv),
    "conv_grad_input": (FLOATS, lambda rng, dt: _conv(rng, dt, "conv_grad_input")),
    "conv_grad_weight": (FLOATS, lambda rng, dt: _conv(rng, dt, "conv_grad_weight")),
}
for _cmp in ("eq", "ne", "lt", "le", "gt", "ge"):
    TABLE[_cmp] = (ALL, _binary(_quarters))
for _mv in ("reshape", "broadcast_to", "permute", "slice", "concat", "flip", "as_strided", "diagonal", "squeeze",
            "unsqueeze", "pad", "triu", "tril"):
    TABLE[_mv] = (ALL, lambda rng, dt, _mv=_mv: _movement(rng, dt)[_mv])
TABLE["full"] = (ALL, lambda rng, dt: [([], {"shape": [3, 5], "value": 1, "dtype": dt}),
                                       ([], {"shape": [], "value": 0, "dtype": dt})])
TABLE["arange"] = (NUM, lambda rng, dt: [([], {"start": 1, "stop": 20, "step": 3, "dtype": dt})])
TABLE["random_uniform"] = (FLOATS, lambda rng, dt: [(_seed_offset(rng), {"shape": [7, 1001], "dtype": dt})])
TABLE["random_normal"] = (FLOATS, lambda rng, dt: [(_seed_offset(rng), {"shape": [7, 1001], "dtype": dt})])


def _nonzero(rng, shape, dt):
    """Divisors: floats at least 0.25 away from zero, integers in [-5, 5] without 0."""
    if dt.kind == "float":
        return np.asarray(rng.uniform(0.25, 3.0, shape) * rng.choice([-1.0, 1.0], shape)).astype(dt.np_dtype)
    return np.asarray(rng.choice([-5, -4, -3, -2, -1, 1, 2, 3, 4, 5], shape)).astype(dt.np_dtype)


def _scan(rng, dt):
    x = arr(rng, (4, 37, 5), dt, -1.2, 1.2)
    return [([x], {"axis": 1}), ([x], {"axis": 0}), ([x], {"axis": -1}), ([arr(rng, (3, 0), dt)], {"axis": 1}),
            ([arr(rng, (), dt)], {"axis": 0})]


def _cumarg(rng, dt):
    """argsort's cases (ties, NaNs) as cummax's and cummin's: descending picks the extreme."""
    return [(ins, {"axis": attrs["axis"], "largest": attrs["descending"]}) for ins, attrs in _argsort(rng, dt)]


def _argsort(rng, dt):
    x = _quarters(rng, (4, 37, 5), dt) if dt.kind == "float" else arr(rng, (4, 37, 5), dt)  # ties
    if dt.kind == "float":
        x.reshape(-1)[::7] = np.nan
    return [([x], {"axis": a, "descending": d}) for a in (1, -1, 0) for d in (False, True)] + \
        [([arr(rng, (2, 300), dt)], {"axis": 1, "descending": True})]


# the 8-bit integers on the ops image and mask pipelines use (wrapping arithmetic, as NumPy)
NARROW = ("i8", "u8")
for _name in ("add", "sub", "mul", "maximum", "eq", "lt", "where", "reduce_sum", "reduce_max", "argmax", "gather",
              "index_select", "reshape", "permute", "concat"):
    TABLE[_name] = (TABLE[_name][0] + NARROW, TABLE[_name][1])


def _cast_narrow(rng, dt):
    """Casts to and from i8 / u8; floats sent to them are in range (C leaves negative float -> u8 undefined)."""
    x = arr(rng, (5, 7), dt)
    safe = np.abs(x) * 3 if dt.kind == "float" else x
    return [([x], {"dtype": to}) for to in ALL + NARROW if to not in NARROW] + \
        [([safe], {"dtype": to}) for to in NARROW]


TABLE["cast"] = (ALL + NARROW, _cast_narrow)


def _bitwise(rng, dt):
    """and / or / xor (and on ints, the shifts with counts past the width and negative ones)."""
    fns = ("and", "or", "xor") if dt.kind == "bool" else ("and", "or", "xor", "lshift", "rshift")
    out = [(pair, {"fn": fn}) for fn in fns for pair, _ in _binary()(rng, dt)]
    if dt.kind == "int":
        counts = np.array([-1, 0, 3, 7, 8, 31, 32, 64, 70] if dt.itemsize > 1 else [-1, 0, 3, 7, 8, 9, 100, 1, 2])
        x = np.array([-5, 5, 1, -1, 7, -7, 2, 0, 100])
        if dt.name == "u8":
            x, counts = np.abs(x), np.abs(counts)
        out += [([x.astype(dt.np_dtype), counts.astype(dt.np_dtype)], {"fn": fn}) for fn in ("lshift", "rshift")]
    return out


def _int_pow(rng, dt):
    """Integer pow: small bases and exponents (negative ones too), and overflowing powers that wrap."""
    if dt.kind == "float":
        return _binary(_pos)(rng, dt)
    big = np.asarray(rng.integers(0 if dt.name == "u8" else -40, 41, (5, 7))).astype(dt.np_dtype)
    e = np.asarray(rng.integers(0 if dt.name == "u8" else -3, 30, (5, 7))).astype(dt.np_dtype)
    return _binary()(rng, dt) + [([big, e], {})]


TABLE["bitwise"] = (INTS + ("bool",) + NARROW, _bitwise)
TABLE["pow"] = (NUM + NARROW, _int_pow)
TABLE["floor_divide"] = (NUM, _binary(_quarters, _nonzero))
TABLE["remainder"] = (NUM, _binary(_quarters, _nonzero))
TABLE["fmod"] = (NUM, _binary(_quarters, _nonzero))
TABLE["cumsum"] = (NUM + NARROW, _scan)
TABLE["cumprod"] = (NUM, _scan)
TABLE["argsort"] = (ALL + NARROW, _argsort)
TABLE["logcumsumexp"] = (FLOATS, _scan)
TABLE["cumarg"] = (ALL + NARROW, _cumarg)
TABLE["scaled_dot_product_attention_stats"] = (FLOATS, _attention)


def _collective(name: str, reduce: bool):
    """World size 1 (a plan runs them through the process's communicator: the identity): one input
    keeps its shape, several are packed flat; avg only for floats."""
    def make(rng, dt):
        one = [arr(rng, (3, 5), dt)] if name in ("all_gather", "reduce_scatter") else [arr(rng, (3, 5), dt)]
        many = [arr(rng, (3, 5), dt), arr(rng, (7,), dt), arr(rng, (2, 1, 2), dt)]
        ops = [{"op": "sum"}, {"op": "max"}] + ([{"op": "avg"}] if dt.kind == "float" else []) if reduce else [{}]
        return [([*ins], dict(a)) for ins in (one, many) for a in ops]
    return make


TABLE["offload"] = (ALL, _unary())  # host copies: the identity, through host memory and back
TABLE["reload"] = (ALL, _unary())

for _c, _r in (("all_reduce", True), ("broadcast", False), ("all_gather", False), ("reduce_scatter", True)):
    TABLE[_c] = (NUM, _collective(_c, _r))


def one_op_graph(name: str, inputs: list[np.ndarray], attrs: dict, permuted: bool = False) -> Graph:
    """A graph computing op `name` on inputs. permuted=True feeds each rank>=2 input through a
    transpose of its last two axes first (the graph then takes the transposed arrays), so kernels
    see inputs produced by another op rather than bound directly."""
    g = Graph(name)
    vals = []
    b = Builder(g)
    for x in inputs:
        if permuted and x.ndim >= 2:
            v = g.add_input(TensorType(x.shape[:-2] + (x.shape[-1], x.shape[-2]), dtype_of(x.dtype)))
            vals.append(b.transpose_last(v))
        else:
            vals.append(g.add_input(TensorType(x.shape, dtype_of(x.dtype))))
    g.outputs = [b.emit(name, *vals, **attrs)]
    return verify(g)


def permuted_inputs(inputs: list[np.ndarray]) -> list[np.ndarray]:
    return [np.ascontiguousarray(np.swapaxes(x, -1, -2)) if x.ndim >= 2 else x for x in inputs]


def all_cases(seed: int = 0):
    """(id, name, dtype, inputs, attrs) for every op x accepted dtype x sample."""
    from flame.ir import REGISTRY

    missing = set(REGISTRY) - set(TABLE)
    assert not missing, f"no runtime test case for ops {sorted(missing)}"
    out = []
    for name, (dtypes, make) in TABLE.items():
        for dn in dtypes:
            rng = np.random.default_rng([seed, len(out)])
            for j, (inputs, attrs) in enumerate(make(rng, dtype_of(dn))):
                out.append((f"{name}-{dn}-{j}", name, dn, inputs, attrs))
    return out


# ---- random multi-op graphs ---------------------------------------------------------------------

_UN = ("exp", "tanh", "neg", "sigmoid", "relu", "sin")
_BIN = ("add", "mul", "sub", "maximum")


def random_graph(rng: np.random.Generator, n_ops: int = 12) -> tuple[Graph, list[np.ndarray]]:
    """A random f32 graph over [4, 6] values: unary, binary (with broadcasting of reductions),
    reductions with keepdim, reshape/permute views, transposes and matmuls; several outputs."""
    g = Graph("random")
    b = Builder(g)
    f32 = dtype_of("f32")
    vals = [g.add_input(TensorType((4, 6), f32)) for _ in range(3)]
    sq = g.add_input(TensorType((6, 6), f32), "param")
    for _ in range(n_ops):
        kind = rng.integers(0, 7)
        x = vals[rng.integers(len(vals))]
        if kind == 0:
            v = b.emit(str(rng.choice(_UN)), x)
        elif kind == 1:
            v = b.emit(str(rng.choice(_BIN)), x, vals[rng.integers(len(vals))])
        elif kind == 2:
            v = b.add(x, b.reduce_sum(x, axes=[int(rng.integers(2))], keepdim=True))
        elif kind == 3:
            v = b.reshape(b.reshape(x, shape=[2, 12]), shape=[4, 6])
        elif kind == 4:
            v = b.matmul(x, sq)
        elif kind == 5:
            v = b.transpose_last(b.transpose_last(b.mul(x, 0.5)))
        else:
            v = b.squeeze(b.unsqueeze(x, axes=[0]), axes=[0])
        vals.append(v)
    picks = rng.choice(np.arange(len(vals)), size=3)
    g.outputs = [vals[int(i)] for i in picks]
    inputs = [arr(rng, v.type.shape, f32, -1.0, 1.0) for v in g.inputs]
    return verify(g), inputs
