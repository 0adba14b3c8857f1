"""eliminate_dead_code: ops that reach no output go; inputs, outputs, roles and aliases stay."""

from flame.ir import parse
from flame.passes.dce import eliminate_dead_code


def test_dead_chain_removed_unused_input_kept(check):
    check(
        """
        graph f(%0: f32[4] data, %1: f32[4] param, %2: i64[] state) {
          %3 = exp %0 : f32[4]
          %4 = neg %3 : f32[4]
          %5 = tanh %0 : f32[4]
          %6 = mul %5, %5 : f32[4]
          return %6
        }""",
        eliminate_dead_code,
        """
        graph f(%0: f32[4] data, %1: f32[4] param, %2: i64[] state) {
          %3 = tanh %0 : f32[4]
          %4 = mul %3, %3 : f32[4]
          return %4
        }""",
    )


def test_outputs_that_are_inputs_and_aliases_preserved(check):
    check(
        """
        graph step(%0: f32[4] param, %1: f32[4] state) {
          %2 = full {shape=[], value=0.5, dtype=f32} : f32[]
          %3 = mul %0, %2 : f32[4]
          %4 = add %1, %1 : f32[4]
          return %3 -> %0, %1, %3
        }""",
        eliminate_dead_code,
        """
        graph step(%0: f32[4] param, %1: f32[4] state) {
          %2 = full {shape=[], value=0.5, dtype=f32} : f32[]
          %3 = mul %0, %2 : f32[4]
          return %3 -> %0, %1, %3
        }""",
    )


def test_graph_without_outputs_keeps_only_its_inputs(check):
    check(
        """
        graph f(%0: f32[4] data) {
          %1 = exp %0 : f32[4]
          return
        }""",
        eliminate_dead_code,
        """
        graph f(%0: f32[4] data) {
          return
        }""",
    )


def test_locations_kept():
    g = parse("""
        graph f(%0: f32[4] data) {
          %1 = exp %0 : f32[4]  # a.py:1  y = x.exp()
          %2 = neg %0 : f32[4]  # a.py:2  unused = -x
          return %1
        }""")
    (op,) = eliminate_dead_code(g).ops
    assert op.loc == "a.py:1  y = x.exp()"
