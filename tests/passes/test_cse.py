"""eliminate_common_subexpressions: what merges and what must not."""

import pytest

from flame.ir import dtypes
from flame.ir.builder import Builder
from flame.ir.graph import Graph
from flame.passes.cse import eliminate_common_subexpressions as cse


def test_same_op_same_inputs_merge_and_outputs_follow(check):
    check(
        """
        graph f(%0: f32[4] data, %1: f32[4] data) {
          %2 = sub %0, %1 : f32[4]
          %3 = sub %0, %1 : f32[4]
          %4 = exp %2 : f32[4]
          %5 = exp %3 : f32[4]
          %6 = sub %1, %0 : f32[4]
          return %4, %5, %6
        }""",
        cse,
        """
        graph f(%0: f32[4] data, %1: f32[4] data) {
          %2 = sub %0, %1 : f32[4]
          %3 = exp %2 : f32[4]
          %4 = sub %1, %0 : f32[4]
          return %3, %3, %4
        }""",
    )


@pytest.mark.parametrize("op", ["add", "mul", "eq", "ne"])
def test_commutative_ops_merge_across_operand_order(check, op):
    out_t = "bool" if op in ("eq", "ne") else "f32"
    out = check(
        f"""
        graph f(%0: f32[4] data, %1: f32[2,1] data) {{
          %2 = {op} %0, %1 : {out_t}[2,4]
          %3 = {op} %1, %0 : {out_t}[2,4]
          return %2, %3
        }}""",
        cse,
    )
    assert "return %2, %2" in out


@pytest.mark.parametrize("op", ["maximum", "minimum", "sub"])
def test_order_sensitive_ops_do_not_merge_swapped(check, op):
    out = check(
        f"""
        graph f(%0: f32[4] data, %1: f32[4] data) {{
          %2 = {op} %0, %1 : f32[4]
          %3 = {op} %1, %0 : f32[4]
          return %2, %3
        }}""",
        cse,
    )
    assert "return %2, %3" in out


def test_attributes_must_be_equal(check):
    out = check(
        """
        graph f(%0: f32[2,3] data) {
          %1 = reduce_sum %0 {axes=[1], keepdim=true} : f32[2,1]
          %2 = reduce_sum %0 {axes=[1], keepdim=true} : f32[2,1]
          %3 = reduce_sum %0 {axes=[0], keepdim=true} : f32[1,3]
          %4 = leaky_relu %0 {negative_slope=0.1} : f32[2,3]
          %5 = leaky_relu %0 {negative_slope=0.2} : f32[2,3]
          %6 = leaky_relu %0 {negative_slope=0.1} : f32[2,3]
          %7 = cast %0 {dtype=f16} : f16[2,3]
          %8 = cast %0 {dtype=bf16} : bf16[2,3]
          return %1, %2, %3, %4, %5, %6, %7, %8
        }""",
        cse,
    )
    assert "return %1, %1, %2, %3, %4, %3, %5, %6" in out


def test_full_constants_merge_by_stored_element(check):
    out = check(
        """
        graph f(%0: f32[4] data) {
          %1 = full {shape=[], value=1, dtype=f32} : f32[]
          %2 = full {shape=[], value=1.0, dtype=f32} : f32[]
          %3 = full {shape=[], value=0.0, dtype=f32} : f32[]
          %4 = full {shape=[], value=-0.0, dtype=f32} : f32[]
          %5 = full {shape=[], value=nan, dtype=f32} : f32[]
          %6 = full {shape=[], value=nan, dtype=f32} : f32[]
          %7 = full {shape=[4], value=1.0, dtype=f32} : f32[4]
          %8 = full {shape=[], value=1, dtype=f64} : f64[]
          return %1, %2, %3, %4, %5, %6, %7, %8
        }""",
        cse,
    )
    assert "return %1, %1, %2, %3, %4, %4, %5, %6" in out


def test_nan_constants_of_other_signs_stay_apart():
    # the IR text spells both `nan`; their stored elements differ in the sign bit (np.signbit)
    g = Graph("f")
    b = Builder(g)
    nan = float("nan")
    g.outputs = [b.full(shape=(), value=nan, dtype=dtypes.f32), b.full(shape=(), value=-nan, dtype=dtypes.f32),
                 b.full(shape=(), value=-nan, dtype=dtypes.f32)]
    out = cse(g)
    assert len(out.ops) == 2 and out.outputs[1] is out.outputs[2] and out.outputs[0] is not out.outputs[1]


def test_identical_random_draws_merge_different_ones_do_not(check):
    # random_uniform is a pure function of (seed, offset): two identical draws are the same numbers
    out = check(
        """
        graph f(%0: i64[] state, %1: i64[] state) {
          %2 = random_uniform %0, %1 {shape=[3], dtype=f32} : f32[3]
          %3 = random_uniform %0, %1 {shape=[3], dtype=f32} : f32[3]
          %4 = random_uniform %1, %0 {shape=[3], dtype=f32} : f32[3]
          %5 = random_normal %0, %1 {shape=[3], dtype=f32} : f32[3]
          return %2, %3, %4, %5
        }""",
        cse,
    )
    assert "return %2, %2, %3, %4" in out


def test_merged_aliased_outputs_stay_aliased(check):
    check(
        """
        graph step(%0: i64[] state, %1: i64[] state) {
          %2 = full {shape=[], value=1, dtype=i64} : i64[]
          %3 = add %0, %2 : i64[]
          %4 = add %2, %0 : i64[]
          return %3 -> %0, %4 -> %1
        }""",
        cse,
        """
        graph step(%0: i64[] state, %1: i64[] state) {
          %2 = full {shape=[], value=1, dtype=i64} : i64[]
          %3 = add %0, %2 : i64[]
          return %3 -> %0, %3 -> %1
        }""",
    )
