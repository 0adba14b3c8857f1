"""The rewrite driver's look-ahead (passes/_rewrite.first_change): the first op a rule changes, found on the
graph itself, and a rewrite that skips the rule before it gives the graph a full rewrite gives."""

import pytest

from flame.ir import parse, print_graph
from flame.passes._rewrite import first_change, rewrite
from flame.passes.fold_constants import _fold, fold_constants
from flame.passes.simplify import _simplify, simplify_algebra

# a mul by 1.0 at position 3 (simplified), an add of two constants at position 5 (folded)
TEXT = """
graph f(%0: f32[2,3] data, %1: f32[2,3] param) {
  %2 = exp %0 : f32[2,3]
  %3 = add %2, %1 : f32[2,3]
  %4 = full {shape=[], value=1.0, dtype=f32} : f32[]
  %5 = mul %3, %4 : f32[2,3]
  %6 = full {shape=[], value=2.0, dtype=f32} : f32[]
  %7 = add %6, %4 : f32[]
  %8 = mul %5, %7 : f32[2,3]
  return %8
}"""

PLAIN = """
graph f(%0: f32[2,3] data, %1: f32[2,3] param) {
  %2 = exp %0 : f32[2,3]
  %3 = add %2, %1 : f32[2,3]
  %4 = tanh %3 : f32[2,3]
  return %4
}"""


@pytest.mark.parametrize("rule, at", [(_simplify, 3), (_fold, 5)], ids=["simplify", "fold"])
def test_first_change_is_the_first_op_the_rule_replaces(rule, at):
    g = parse(TEXT)
    assert first_change(g, rule) == at
    assert print_graph(rewrite(g, rule, checked=at)) == print_graph(rewrite(g, rule))
    assert print_graph(g) == print_graph(parse(TEXT))  # the look-ahead left the graph as it was


@pytest.mark.parametrize("rule", [_simplify, _fold], ids=["simplify", "fold"])
def test_a_graph_the_rule_leaves_alone_is_returned_itself(rule):
    g = parse(PLAIN)
    assert first_change(g, rule) == len(g.ops)
    assert rewrite(g, rule, checked=len(g.ops)) is g


@pytest.mark.parametrize("pass_", [simplify_algebra, fold_constants], ids=["simplify", "fold"])
def test_the_passes_give_what_a_full_rewrite_gives(pass_):
    rule = _simplify if pass_ is simplify_algebra else _fold
    g = parse(TEXT)
    assert print_graph(pass_(g)) == print_graph(rewrite(g, rule))
    plain = parse(PLAIN)
    assert pass_(plain) is plain
