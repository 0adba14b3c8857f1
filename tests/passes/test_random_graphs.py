"""Property: the whole SIMPLIFY pipeline preserves what random graphs compute on the reference
executor (bit for bit, NaN matching NaN), and its result verifies."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flame.errors import FlameError
from flame.ir import Builder, Graph, TensorType, f16, f32, f64, i32, i64, print_graph, verify
from flame.passes.pipeline import run_pipeline

SHAPES = [(), (1,), (3,), (2, 1), (1, 3), (2, 3), (2, 1, 3)]
FLOAT_CONSTS = [0.0, -0.0, 1.0, -1.0, 2.0, 0.5, math.nan, math.inf]
INT_CONSTS = [0, 1, 2, -1]
UNARY = {
    "float": ["neg", "abs", "exp", "tanh", "relu", "sigmoid", "floor", "sqrt", "log"],
    "int": ["neg", "abs", "relu"],
}
BINARY = {
    "float": ["add", "sub", "mul", "div", "maximum", "minimum", "pow"],
    "int": ["add", "sub", "mul", "maximum", "minimum"],
}


def _const(draw, b, like):
    values = FLOAT_CONSTS if like.dtype.is_float else INT_CONSTS
    shape = draw(st.sampled_from([(), like.shape]))
    return b.full(shape=shape, value=draw(st.sampled_from(values)), dtype=like.dtype)


def _binary(draw, b, x, pool):
    same = [v for v in pool if v.dtype == x.dtype]
    y = _const(draw, b, x) if draw(st.booleans()) else draw(st.sampled_from(same))
    x, y = draw(st.permutations([x, y]))
    return b.emit(draw(st.sampled_from(BINARY[x.dtype.kind])), x, y)


def _movement(draw, b, x, pool):
    rank, kind = x.type.rank, draw(st.sampled_from(["reshape", "bcast", "permute", "slice", "flip", "unsq"]))
    if kind == "reshape":
        return b.reshape(x, shape=draw(st.sampled_from([(x.type.numel,), x.shape + (1,), (1,) + x.shape])))
    if kind == "bcast":
        shape = tuple(draw(st.sampled_from([1, 2])) if s == 1 else s for s in x.shape)
        return b.broadcast_to(x, shape=draw(st.sampled_from([(), (2,)])) + shape)
    if kind == "permute":
        return b.permute(x, perm=draw(st.permutations(range(rank))))
    if kind == "slice":
        starts = [draw(st.integers(0, min(1, s))) for s in x.shape]
        return b.slice(x, starts=starts, stops=list(x.shape), steps=[draw(st.integers(1, 2)) for _ in x.shape])
    axes = sorted(draw(st.sets(st.integers(0, max(rank - 1, 0)), max_size=rank)))
    if kind == "flip":
        return b.flip(x, axes=axes)
    return b.squeeze(b.unsqueeze(x, axes=[0]), axes=[0])


def _round_trip(draw, b, x, pool):
    """Pairs the rules undo: neg/neg, permute/inverse, widening cast and back, flip/flip."""
    kind = draw(st.sampled_from(["neg", "permute", "cast", "flip"]))
    if kind == "neg":
        return b.neg(b.neg(x))
    if kind == "permute":
        perm = draw(st.permutations(range(x.type.rank)))
        inverse = [perm.index(i) for i in range(len(perm))]
        return b.permute(b.permute(x, perm=perm), perm=inverse)
    if kind == "cast":
        wide = {f16: f32, f32: f64, i32: i64}.get(x.dtype, f64)
        return b.cast(b.cast(x, dtype=wide), dtype=draw(st.sampled_from([x.dtype, f32])))
    axes = [draw(st.integers(0, max(x.type.rank - 1, 0)))] if x.type.rank else []
    return b.flip(b.flip(x, axes=axes), axes=axes)


def _reduce(draw, b, x, pool):
    ops = ["reduce_sum", "reduce_max", "reduce_min"] + (["reduce_mean"] if x.dtype.is_float else [])
    axes = sorted(draw(st.sets(st.integers(0, max(x.type.rank - 1, 0)), max_size=x.type.rank)))
    return b.emit(draw(st.sampled_from(ops)), x, axes=axes, keepdim=draw(st.booleans()))


def _where(draw, b, x, pool):
    same = [v for v in pool if v.dtype == x.dtype]
    y = draw(st.sampled_from(same))
    cond = b.gt(x, y) if draw(st.booleans()) else b.full(shape=(), value=draw(st.booleans()), dtype="bool")
    return b.where(cond, x, draw(st.sampled_from([x, y])))


def _other(draw, b, x, pool):
    kind = draw(st.sampled_from(["cast", "concat", "pad", "arange", "self"]))
    if kind == "cast":
        return b.cast(x, dtype=draw(st.sampled_from([f32, f64, f16, i32, i64])))
    if kind == "concat" and x.type.rank:  # (concat of 0-d tensors raises IndexError in the IR today)
        return b.concat(*[x] * draw(st.integers(1, 2)), axis=0)
    if kind in ("pad", "concat"):
        return b.pad(x, pads=[(draw(st.integers(0, 1)), 0) for _ in x.shape], value=draw(st.sampled_from([0, 1])))
    if kind == "arange":
        return b.arange(start=draw(st.integers(-2, 2)), stop=3, dtype=x.dtype)
    return b.emit(draw(st.sampled_from(BINARY[x.dtype.kind])), x, x)


STEPS = [
    _binary,
    _binary,
    _movement,
    _round_trip,
    _reduce,
    _where,
    _other,
    lambda draw, b, x, pool: b.emit(draw(st.sampled_from(UNARY[x.dtype.kind])), x),
]


@st.composite
def graphs(draw) -> Graph:
    g = Graph("random")
    b = Builder(g)
    pool = [
        g.add_input(TensorType(draw(st.sampled_from(SHAPES)), dt), draw(st.sampled_from(["data", "param", "state"])))
        for dt in draw(st.lists(st.sampled_from([f32, f32, i64, f16]), min_size=1, max_size=3))
    ]
    for _ in range(draw(st.integers(3, 16))):
        step = draw(st.sampled_from(STEPS))
        x = pool[-1] if draw(st.booleans()) else draw(st.sampled_from(pool))  # mostly chains
        try:
            pool.append(step(draw, b, x, pool))
        except FlameError:
            continue  # shapes or dtypes that do not fit: leave the op out (a half-built chain is dead code)
    g.outputs = [pool[-1]] + draw(st.lists(st.sampled_from(pool), max_size=2))
    for i, out in enumerate(g.outputs):
        j = draw(st.integers(0, len(g.inputs) - 1))
        if g.inputs[j].type == out.type and j not in g.aliases.values() and draw(st.booleans()):
            g.aliases[i] = j
    return verify(g)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the reference casting inf or NaN (to f16, to ints)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(g=graphs(), seed=st.integers(0, 2**16))
def test_pipeline_preserves_reference_results(g, seed, same_results):
    before = print_graph(g)
    out = run_pipeline(g, debug=True)
    verify(out)
    assert print_graph(g) == before
    same_results(g, out, seed=seed, trials=2)
    assert len(out.ops) <= len(g.ops) + sum(op.name == "broadcast_to" for op in g.ops) + 1
