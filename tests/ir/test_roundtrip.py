"""print -> parse -> print is the identity: hand-written graphs covering every attribute kind, aliases
and source locations; a hypothesis property over random valid graphs; a traced two-layer MLP. The
text's pieces as data (printer.graph_data, the plan cache's form) read back as the text does."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flame
from flame.ir import ALL_DTYPES, REGISTRY, Builder, Graph, TensorType, f32, f64, i64, parse, print_graph
from flame.ir.graph import CheckpointLoc, FusionGroup, Kind
from flame.ir.parser import graph_from_data
from flame.ir.printer import graph_data
from flame.ir.registry import _COERCE

EVERY_ATTR_KIND = """\
graph kinds(%0: f32[2,3] data, %1: i64[2,3] param, %2: f32[] scalar, %3: i64[] state, %4: bool[2,3] const) {
  %5 = reduce_sum %0 {axes=[0, 1], keepdim=true} : f32[1,1]
  %6 = leaky_relu %0 {negative_slope=0.125} : f32[2,3]
  %7 = gelu %6 {approximate="tanh"} : f32[2,3]
  %8 = cast %1 {dtype=bf16} : bf16[2,3]
  %9 = pad %0 {pads=[[1, 0], [0, 2]], value=-1.5} : f32[3,5]
  %10 = pad %1 {pads=[[0, 0], [1, 1]], value=7} : i64[2,5]
  %11 = full {shape=[], value=true, dtype=bool} : bool[]
  %12 = full {shape=[2, 0], value=inf, dtype=f64} : f64[2,0]
  %13 = full {shape=[3], value=-inf, dtype=f16} : f16[3]
  %14 = full {shape=[1], value=1e-300, dtype=f64} : f64[1]
  %15 = argmax %0 {axis=-1, keepdim=false} : i64[2]
  %16 = arange {start=0, stop=2.5, step=0.5, dtype=f32} : f32[5]
  %17 = reduce_max %2 {axes=[], keepdim=false} : f32[]
  %18 = where %4, %0, %2 : f32[2,3]
  %19 = concat %0, %0, %0 {axis=0} : f32[6,3]
  %20 = random_normal %3, %3 {shape=[4, 1], dtype=f32} : f32[4,1]
  %21 = slice %19 {starts=[1, 0], stops=[6, 3], steps=[2, 1]} : f32[3,3]
  %22 = scaled_dot_product_attention %0, %0, %0, %2 {scale=0.5, is_causal=true, enable_gqa=false, \
score_mod=graph score_mod(%0: f32[2,2] data, %1: f32[] data) {; %2 = div %0, %1 : f32[2,2]; %3 = tanh %2 : f32[2,2]; \
%4 = gelu %3 {approximate="tanh"} : f32[2,2]; %5 = mul %4, %1 : f32[2,2]; return %5; }, score_mod_grad=none, \
where_mask=false} : f32[2,3]
  return %5, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %20, %21, %22
}
"""

ALIASED = """\
graph step(%0: f32[4] param, %1: f32[4] data, %2: f32[] scalar, %3: i64[] state) {
  %4 = mul %1, %2 : f32[4]
  %5 = sub %0, %4 : f32[4]
  %6 = full {shape=[], value=1, dtype=i64} : i64[]
  %7 = add %3, %6 : i64[]
  return %4, %5 -> %0, %7 -> %3
}
"""

WITH_LOCS = """\
graph located(%0: f32[3] data) {
  %1 = relu %0 : f32[3]  # train.py:14  h = x.relu()
  %2 = reduce_sum %1 {axes=[0], keepdim=false} : f32[]  # train.py:15  d = {"loss": h.sum()}
  %3 = exp %0 : f32[3]
  return %2, %3
}
"""

EMPTY = """\
graph nothing() {
  return
}
"""


def _roundtrip(text: str, locs: bool = False) -> str:
    return print_graph(parse(text), locs=locs)


def test_every_attribute_kind_roundtrips() -> None:
    assert _roundtrip(EVERY_ATTR_KIND) == EVERY_ATTR_KIND


def test_every_attribute_kind_is_exercised() -> None:
    g = parse(EVERY_ATTR_KIND)
    kinds = {REGISTRY[op.name].attrs[k].kind for op in g.ops for k in op.attrs}
    assert kinds == set(_COERCE), f"kinds not covered: {set(_COERCE) - kinds}"


def test_a_graph_attribute_is_a_graph_that_prints_and_parses_back() -> None:
    op = parse(EVERY_ATTR_KIND).ops[-1]
    sub = op.attrs["score_mod"].graph
    assert [o.name for o in sub.ops] == ["div", "tanh", "gelu", "mul"] and op.attrs["score_mod_grad"] is None
    assert sub.ops[2].attrs == {"approximate": "tanh"} and len(sub.inputs) == 2
    assert parse(print_graph(sub)).ops[-1].out.type == sub.outputs[0].type


def test_a_malformed_graph_attribute_names_the_inner_line() -> None:
    bad = EVERY_ATTR_KIND.replace("%3 = tanh %2 : f32[2,2]", "%3 = tanh %9 : f32[2,2]")
    try:
        parse(bad)
    except flame.errors.ParseError as e:
        assert "bad graph attribute" in str(e) and "'%9' is not a defined value" in str(e)
    else:
        raise AssertionError("a graph attribute reading an undefined value parsed")


def test_parsed_values_are_typed() -> None:
    g = parse(EVERY_ATTR_KIND)
    by_name = {op.name: op for op in g.ops}
    assert by_name["cast"].attrs["dtype"] is flame.bf16
    assert by_name["reduce_sum"].attrs == {"axes": (0, 1), "keepdim": True}
    assert math.isinf(g.ops[7].attrs["value"]) and g.ops[7].attrs["value"] > 0
    assert g.roles == ["data", "param", "scalar", "state", "const"]
    assert [str(v.type) for v in g.inputs] == ["f32[2,3]", "i64[2,3]", "f32[]", "i64[]", "bool[2,3]"]


def test_aliases_roundtrip() -> None:
    g = parse(ALIASED)
    assert g.aliases == {1: 0, 2: 3}
    assert print_graph(g) == ALIASED


def test_locations_roundtrip_with_locs_true() -> None:
    g = parse(WITH_LOCS)
    assert g.ops[0].loc == "train.py:14  h = x.relu()"
    assert g.ops[2].loc is None
    assert print_graph(g, locs=True) == WITH_LOCS
    assert _roundtrip(WITH_LOCS, locs=True) == WITH_LOCS
    assert "#" not in print_graph(g)  # locs=False drops them


def test_empty_graph_roundtrips() -> None:
    assert _roundtrip(EMPTY) == EMPTY


def test_nan_attribute_roundtrips_as_text() -> None:
    text = "graph n(%0: f32[2] data) {\n  %1 = full {shape=[2], value=nan, dtype=f32} : f32[2]\n  return %1\n}\n"
    assert _roundtrip(text) == text


# ---- random valid graphs ----------------------------------------------------------------------------

SHAPES = [(), (1,), (3,), (2, 3), (3, 1), (2, 0), (1, 2, 3)]
FLOAT_ATTR = st.floats(allow_nan=False, width=64) | st.sampled_from([0.0, -0.0, 1e-300, 1e300, 0.1])
LOC = st.text(alphabet="abc xyz.:=(){}[]#%,\"'", min_size=1, max_size=20).map(str.strip).filter(bool)


def _pick(draw, g: Graph, pred=lambda v: True):
    vals = [v for v in g.inputs + [op.out for op in g.ops] if pred(v)]
    return draw(st.sampled_from(vals)) if vals else None


def _float_unary(draw, b, x):
    name = draw(st.sampled_from(["exp", "tanh", "relu", "gelu", "leaky_relu", "neg"]))
    if name == "gelu":
        return b.gelu(x, approximate=draw(st.sampled_from(["none", "tanh"])))
    if name == "leaky_relu":
        return b.leaky_relu(x, negative_slope=draw(FLOAT_ATTR))
    return b.emit(name, x)


def _emit_random_op(draw, b: Builder) -> None:
    g = b.graph
    x = _pick(draw, g)
    kind = draw(st.sampled_from(["unary", "binary", "cast", "reduce", "permute", "reshape", "full", "pad",
                                 "argmax", "concat"]))
    if kind == "unary" and x.dtype.is_float:
        _float_unary(draw, b, x)
    elif kind == "binary":
        y = _pick(draw, g, lambda v: v.type == x.type)
        names = ["eq", "logical_and"] if x.dtype.kind == "bool" else ["add", "mul", "maximum", "eq"]
        b.emit(draw(st.sampled_from(names)), x, y)
    elif kind == "cast":
        b.cast(x, dtype=draw(st.sampled_from(ALL_DTYPES)))
    elif kind == "reduce" and x.dtype.kind != "bool":
        axes = draw(st.lists(st.integers(0, max(x.type.rank - 1, 0)), unique=True, max_size=x.type.rank))
        b.reduce_sum(x, axes=axes, keepdim=draw(st.booleans()))
    elif kind == "permute":
        b.permute(x, perm=draw(st.permutations(range(x.type.rank))))
    elif kind == "reshape":
        b.reshape(x, shape=[x.type.numel])
    elif kind == "full":
        value = draw(st.integers(-10**12, 10**12) | FLOAT_ATTR | st.booleans())
        b.full(shape=draw(st.sampled_from(SHAPES)), value=value, dtype=draw(st.sampled_from(ALL_DTYPES)))
    elif kind == "pad":
        pads = draw(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)), min_size=x.type.rank,
                             max_size=x.type.rank))
        b.pad(x, pads=pads, value=0)
    elif kind == "argmax" and x.dtype.kind != "bool" and x.type.rank and 0 not in x.shape:
        b.argmax(x, axis=draw(st.integers(-x.type.rank, x.type.rank - 1)), keepdim=draw(st.booleans()))
    elif kind == "concat" and x.type.rank:
        b.concat(*([x] * draw(st.integers(1, 3))), axis=0)


@st.composite
def graphs(draw) -> Graph:
    g = Graph(draw(st.from_regex(r"[a-z_][a-z0-9_.\-]{0,8}", fullmatch=True)))
    for _ in range(draw(st.integers(1, 4))):
        g.add_input(TensorType(draw(st.sampled_from(SHAPES)), draw(st.sampled_from(ALL_DTYPES))),
                    draw(st.sampled_from(flame.ir.ROLES)))
    b = Builder(g)
    for _ in range(draw(st.integers(0, 8))):
        b.loc = draw(st.none() | LOC)
        _emit_random_op(draw, b)
    everything = g.inputs + [op.out for op in g.ops]
    g.outputs = draw(st.lists(st.sampled_from(everything), min_size=1, max_size=4))
    for o, v in enumerate(g.outputs):
        # an input is replaced by at most one output (two would race: the verifier rejects it)
        same = [i for i, w in enumerate(g.inputs) if w.type == v.type and i not in g.aliases.values()]
        if same and draw(st.booleans()):
            g.aliases[o] = draw(st.sampled_from(same))
    return g


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(), st.booleans())
def test_random_graphs_roundtrip(g: Graph, locs: bool) -> None:
    text = print_graph(g, locs=locs)
    again = parse(text)
    assert print_graph(again, locs=locs) == text
    assert again.aliases == g.aliases and again.roles == g.roles
    assert [op.name for op in again.ops] == [op.name for op in g.ops]
    stored = graph_from_data(json.loads(json.dumps(graph_data(g))))  # as the plan cache stores it
    assert print_graph(stored) == print_graph(g)
    assert stored.aliases == g.aliases and stored.roles == g.roles


# ---- the text's pieces as data (the plan cache's form) --------------------------------------------


def _stored(g: Graph) -> Graph:
    return graph_from_data(json.loads(json.dumps(graph_data(g))))


def test_graph_data_reads_back_as_the_text_does() -> None:
    for text in (EVERY_ATTR_KIND, ALIASED):
        g = parse(text)
        again = _stored(g)
        assert print_graph(again) == print_graph(g)
        assert again.aliases == g.aliases and again.roles == g.roles
        assert [(k, type(v), v) for op in again.ops for k, v in op.attrs.items() if k != "score_mod"] == [
            (k, type(v), v) for op in g.ops for k, v in op.attrs.items() if k != "score_mod"
        ]


KERNELS = """\
graph fused(%0: f32[4] data, %1: f32[4] data) {
  # kernel 0 (elementwise): the first kernel
  %2 = mul %0, %1 : f32[4]
  %3 = relu %2 : f32[4]
  # kernel 1 (rows): a reduction
  %4 = reduce_sum %3 {axes=[0], keepdim=false} : f32[]
  return %2, %4
}
"""


def test_graph_data_keeps_fusion_groups_with_their_outputs_and_checkpoint_marks() -> None:
    g = parse(KERNELS)
    g.ops[1].loc = CheckpointLoc("", 7, True)
    again = _stored(g)
    assert print_graph(again) == print_graph(g)
    assert [(k.kind, k.reason, [g.ops.index(op) for op in k.ops]) for k in g.groups] == [
        (k.kind, k.reason, [again.ops.index(op) for op in k.ops]) for k in again.groups
    ]
    assert [[again.numbering()[v] for v in k.outputs] for k in again.groups] == [[2, 3], [4]]
    assert isinstance(again.ops[1].loc, CheckpointLoc) and again.ops[1].loc.saved


def test_graph_data_refuses_a_group_of_ops_not_side_by_side() -> None:
    g = parse(KERNELS)
    g.groups[0] = FusionGroup((g.ops[0], g.ops[2]), Kind.ELEMENTWISE, "apart", ())
    with pytest.raises(TypeError, match="not consecutive"):
        graph_data(g)


# ---- a traced model ---------------------------------------------------------------------------------

def _mlp(x, w1, b1, w2, b2):
    h = (x @ w1 + b1).relu()
    return (h @ w2 + b2).softmax(-1)


def test_traced_mlp_roundtrips() -> None:
    rng = np.random.default_rng(0)
    args = [flame.tensor(rng.standard_normal(s).astype(np.float32)) for s in [(8, 5), (5, 16), (16,), (16, 3), (3,)]]
    g = flame.compile(_mlp).trace(*args)
    text = print_graph(g)
    assert text.startswith("graph _mlp(%0: f32[8,5] data, %1: f32[5,16] data")
    assert "matmul" in text and "relu" in text
    assert print_graph(parse(text)) == text
    located = print_graph(g, locs=True)
    assert "test_roundtrip.py:" in located
    assert print_graph(parse(located), locs=True) == located


def test_traced_graph_with_parameters_and_aliases_roundtrips() -> None:
    w = flame.tensor(np.ones((3,), np.float32), requires_grad=True)
    step = flame.tensor(np.zeros((), np.int64))

    def update(x):
        loss = (x * w).sum()
        with flame.no_grad():
            w.copy_(w - 0.1 * x)
        step.copy_(step + 1)
        return loss

    g = flame.compile(update).trace(flame.tensor(np.arange(3, dtype=np.float32)))
    assert sorted(g.aliases.values()) == sorted(i for i, r in enumerate(g.roles) if r != "data")
    assert {g.inputs[i].type for i in g.aliases.values()} == {TensorType((3,), f32), TensorType((), i64)}
    text = print_graph(g, locs=True)
    assert print_graph(parse(text), locs=True) == text


def test_f64_scalar_constant_roundtrips() -> None:
    g = Graph("c")
    x = g.add_input(TensorType((2,), f64))
    g.outputs = [Builder(g).mul(x, 0.1)]
    text = print_graph(g)
    assert "value=0.1," in text
    assert print_graph(parse(text)) == text


def test_repeated_constants_print_as_the_first_did() -> None:
    """Builder.const keeps what emit made of a (type, value, dtype) before: the second of each pair prints as
    the first, and 0.0 keeps its sign."""
    g = Graph("consts")
    x, n = g.add_input(TensorType((2,), f32)), g.add_input(TensorType((2,), i64))
    b = Builder(g)
    for like, value in ((x, 1), (x, 1.0), (x, True), (x, -0.0), (x, 0.0), (x, float("nan")), (n, 3), (n, True)):
        b.add(like, value)
        b.add(like, value)
    lines = [line.split(" = ", 1)[1] for line in print_graph(g).splitlines() if " full " in line]
    assert lines[0::2] == lines[1::2]
    assert "value=-0.0" in lines[6] and "value=0.0" in lines[8] and "value=nan" in lines[10]
