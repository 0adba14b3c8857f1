"""run_pipeline: the SIMPLIFY list to a fixed point, debug verification, timings and dumps."""

import pytest

from flame.errors import VerifyError
from flame.ir import Graph, Op, parse, print_graph
from flame.passes.pipeline import SIMPLIFY, run_pipeline

TRAINISH = """
graph step(%0: f32[2,3] data, %1: f32[3] param, %2: i64[] state) {
  %3 = full {shape=[2,3], value=1.0, dtype=f32} : f32[2,3]
  %4 = mul %0, %3 : f32[2,3]
  %5 = neg %4 : f32[2,3]
  %6 = neg %5 : f32[2,3]
  %7 = neg %6 : f32[2,3]
  %8 = broadcast_to %1 {shape=[2,3]} : f32[2,3]
  %9 = add %7, %8 : f32[2,3]
  %10 = full {shape=[], value=2.0, dtype=f32} : f32[]
  %11 = full {shape=[], value=3.0, dtype=f32} : f32[]
  %12 = mul %10, %11 : f32[]
  %13 = add %8, %5 : f32[2,3]
  %14 = add %13, %12 : f32[2,3]
  %15 = permute %14 {perm=[1,0]} : f32[3,2]
  %16 = permute %15 {perm=[1,0]} : f32[2,3]
  %17 = full {shape=[], value=1, dtype=i64} : i64[]
  %18 = add %2, %17 : i64[]
  %19 = sub %18, %18 : i64[]
  %20 = add %2, %19 : i64[]
  %21 = exp %9 : f32[2,3]
  return %16, %20 -> %2, %9
}
"""


def test_simplify_reaches_a_fixed_point(same_results):
    g = parse(TRAINISH)
    out = run_pipeline(g, debug=True)
    assert print_graph(out) == print_graph(
        parse("""
        graph step(%0: f32[2,3] data, %1: f32[3] param, %2: i64[] state) {
          %3 = neg %0 : f32[2,3]
          %4 = add %3, %1 : f32[2,3]
          %5 = full {shape=[], value=6.0, dtype=f32} : f32[]
          %6 = add %4, %5 : f32[2,3]
          return %6, %2 -> %2, %4
        }""")
    )
    same_results(g, out)
    assert print_graph(g) == print_graph(parse(TRAINISH)), "the input graph was modified"
    assert print_graph(run_pipeline(out)) == print_graph(out)


def test_dump_and_timings_name_every_stage():
    stages, timings = [], []
    run_pipeline(parse(TRAINISH), dump=lambda name, g, s: stages.append((name, print_graph(g), s)), timings=timings)
    names = [n for n, _, _ in stages]
    per_round = [p.__name__ for p in SIMPLIFY]
    k = len(per_round)
    assert names[0] == "traced" and names[1:k + 1] == per_round
    assert names[k + 1:2 * k + 1] == [f"{n} (round 2)" for n in per_round]
    assert [n for n, _ in timings] == names[1:]
    assert all(s >= 0 for _, s in timings)
    assert stages[-1][1] == stages[-k - 1][1]  # the last round changed nothing


def _breaks_the_graph(g: Graph) -> Graph:
    g = g.copy()
    g.ops.append(Op("exp", (g.inputs[0],), {}, g.inputs[0].type.with_shape((7,))))
    return g


def test_debug_verifies_after_each_pass_and_names_it(monkeypatch):
    g = parse(TRAINISH)
    run_pipeline(g, [_breaks_the_graph])  # not checked without debug
    with pytest.raises(VerifyError, match="after _breaks_the_graph: exp: result type should be f32"):
        run_pipeline(g, [_breaks_the_graph], debug=True)
    monkeypatch.setenv("FLAME_DEBUG", "1")
    with pytest.raises(VerifyError, match="after _breaks_the_graph"):
        run_pipeline(g, [_breaks_the_graph])


def test_rounds_are_capped():
    calls = []

    def grows(g: Graph) -> Graph:
        calls.append(1)
        g = g.copy()
        g.ops.append(Op("neg", (g.inputs[0],), {}, g.inputs[0].type))
        return g

    out = run_pipeline(parse(TRAINISH), [grows], max_rounds=3)
    assert len(calls) == 3 and len(out.ops) == len(parse(TRAINISH).ops) + 3


def test_empty_graph():
    g = parse("graph f() {\n  return\n}")
    assert print_graph(run_pipeline(g, debug=True)) == "graph f() {\n  return\n}\n"


def test_a_rewrite_that_changes_nothing_returns_its_graph():
    from flame.passes._rewrite import rewrite

    g = parse(TRAINISH)
    assert rewrite(g, lambda op, b: None) is g

    def emit_only(op, b):  # emits an op it does not use: the graph changed (DCE would take it out)
        if op.name == "exp":
            b.emit("neg", op.inputs[0])
        return None

    def replace(op, b):
        return b.emit("neg", b.emit("neg", op.inputs[0])) if op.name == "exp" else None

    for rule in (emit_only, replace):
        out = rewrite(g, rule)
        assert out is not g and len(out.ops) == len(g.ops) + 1  # (replace: two negs for the exp)


def test_a_round_where_every_pass_returns_its_graph_ends_without_printing(monkeypatch):
    import flame.passes.pipeline as pipeline

    printed = []
    monkeypatch.setattr(pipeline, "print_graph", lambda g: printed.append(g) or print_graph(g))
    g = parse(TRAINISH)
    simplified = run_pipeline(g)
    printed.clear()
    assert run_pipeline(simplified, text=print_graph(simplified)) is simplified
    assert printed == []  # the passes returned the graph they were given: no text to compare


def _counting_prints(monkeypatch) -> list:
    import flame.passes.pipeline as pipeline

    printed = []
    monkeypatch.setattr(pipeline, "print_graph", lambda g: printed.append(g) or print_graph(g))
    return printed


def test_a_round_that_changes_the_ops_goes_on_without_printing(monkeypatch):
    printed = _counting_prints(monkeypatch)
    out = run_pipeline(parse(TRAINISH))
    assert printed == []  # every round either removed or replaced ops, or changed nothing
    assert print_graph(out) == print_graph(run_pipeline(out))


def test_a_round_that_rebuilds_the_same_text_ends_the_pipeline(monkeypatch):
    """A pass returning a new graph of the same text (a copy): the texts are compared, and equal, so the
    pipeline stops after that round, as it stops for a text unchanged."""
    printed = _counting_prints(monkeypatch)
    calls = []

    def copies(g: Graph) -> Graph:
        calls.append(1)
        return g.copy()

    g = parse(TRAINISH)
    out = run_pipeline(g, [copies], text=print_graph(g))
    assert len(calls) == 1 and print_graph(out) == print_graph(g)
    assert len(printed) == 1  # the copy; the input's text was given

    printed.clear()
    calls.clear()
    run_pipeline(g, [copies])
    assert len(calls) == 1 and len(printed) == 2  # without the input's text, it is printed to compare


def test_a_round_that_changes_an_attribute_only_goes_on(monkeypatch):
    """Ops of the same names in the same order: the texts are printed, differ, and another round runs."""
    printed = _counting_prints(monkeypatch)
    calls = []

    def doubles_first_full(g: Graph) -> Graph:
        calls.append(1)
        g = g.copy()
        op = g.ops[0]
        if op.attrs["value"] < 4.0:
            op.attrs = {**op.attrs, "value": op.attrs["value"] * 2}
        return g

    out = run_pipeline(parse(TRAINISH), [doubles_first_full])
    assert out.ops[0].attrs["value"] == 4.0
    assert len(calls) == 3  # 1 -> 2 -> 4, then a round that leaves the text as it is
    assert len(printed) == 4  # the input once, then each round's result


def _cyclic_ir_garbage(build) -> tuple[object, int]:
    """build()'s result and how many Ops and Values it left to the cyclic collector."""
    import gc

    from flame.ir.graph import Value

    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        out = build()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
    finally:
        gc.set_debug(0)
        (gc.enable if was else gc.disable)()
    found = sum(type(o) in (Op, Value) for o in gc.garbage)
    gc.garbage.clear()
    return out, found


def test_the_graphs_a_pipeline_replaces_are_freed_without_the_collector(same_results):
    g = parse(TRAINISH)
    out, left = _cyclic_ir_garbage(lambda: run_pipeline(g))
    assert left == 0
    assert print_graph(g) == print_graph(parse(TRAINISH))  # the input stays whole
    assert print_graph(out) == print_graph(run_pipeline(parse(TRAINISH)))
    assert all(op.out.producer is op for gr in (g, out) for op in gr.ops)


def test_a_dumped_graph_stays_whole():
    seen = []
    run_pipeline(parse(TRAINISH), dump=lambda stage, graph, sec: seen.append(graph))
    assert len({id(gr) for gr in seen}) > 2
    assert all(op.out.producer is op for gr in seen for op in gr.ops)


def test_discard_frees_the_ops_it_is_given_but_those_kept():
    from flame.ir.graph import discard

    g = parse(TRAINISH)
    kept = g.ops[:3]
    discard(g.ops, set(kept))
    assert all(op.out.producer is op for op in kept)
    with pytest.raises(AttributeError):
        g.ops[3].out.producer  # noqa: B018 - reading it is the point
