"""fold_constants: ops on constants become `full` when their result is uniform."""

import pytest

from flame.ir import parse, print_graph
from flame.passes.fold_constants import fold_constants


def test_scalar_arithmetic_folds(check):
    check(
        """
        graph f(%0: f32[4] data) {
          %1 = full {shape=[], value=2.0, dtype=f32} : f32[]
          %2 = full {shape=[], value=3.0, dtype=f32} : f32[]
          %3 = mul %1, %2 : f32[]
          %4 = add %0, %3 : f32[4]
          return %4
        }""",
        fold_constants,
        """
        graph f(%0: f32[4] data) {
          %1 = full {shape=[], value=2.0, dtype=f32} : f32[]
          %2 = full {shape=[], value=3.0, dtype=f32} : f32[]
          %3 = full {shape=[], value=6.0, dtype=f32} : f32[]
          %4 = add %0, %3 : f32[4]
          return %4
        }""",
    )


def test_large_uniform_results_fold_without_materializing():
    # elementwise and movement ops of `full`s are uniform at any size: computed once on 0-d arrays
    g = parse("""
        graph f() {
          %0 = full {shape=[1,4096], value=0.5, dtype=f32} : f32[1,4096]
          %1 = broadcast_to %0 {shape=[4096,4096]} : f32[4096,4096]
          %2 = full {shape=[], value=3, dtype=f32} : f32[]
          %3 = pow %1, %2 : f32[4096,4096]
          %4 = permute %3 {perm=[1,0]} : f32[4096,4096]
          %5 = cast %4 {dtype=f16} : f16[4096,4096]
          return %5
        }""")
    out = print_graph(fold_constants(g))
    assert "%5 = full {shape=[4096, 4096], value=0.125, dtype=f16} : f16[4096,4096]" in out
    assert "return %5" in out


def test_small_reductions_of_constants_fold(check):
    out = check(
        """
        graph f() {
          %0 = full {shape=[10,3], value=0.1, dtype=f32} : f32[10,3]
          %1 = reduce_sum %0 {axes=[0]} : f32[3]
          %2 = reduce_max %0 {axes=[0,1]} : f32[]
          return %1, %2
        }""",
        fold_constants,
    )
    assert "%1 = full {shape=[3], value=1.0000001192092896, dtype=f32} : f32[3]" in out  # 10 x 0.1f
    assert "%2 = full {shape=[], value=0.10000000149011612, dtype=f32} : f32[]" in out
    assert "return %1, %2" in out


def test_non_uniform_results_stay(check):
    # no dense-constant op in the IR: arange + 1 is not uniform, triu of ones neither
    out = check(
        """
        graph f() {
          %0 = arange {start=0, stop=4, dtype=i64} : i64[4]
          %1 = full {shape=[], value=1, dtype=i64} : i64[]
          %2 = add %0, %1 : i64[4]
          %3 = full {shape=[3,3], value=1.0, dtype=f32} : f32[3,3]
          %4 = triu %3 : f32[3,3]
          %5 = pad %3 {pads=[[1,0],[0,0]], value=2} : f32[4,3]
          return %2, %4, %5
        }""",
        fold_constants,
    )
    assert "return %2, %4, %5" in out


def test_uniform_results_of_non_uniform_constants_fold(check):
    out = check(
        """
        graph f() {
          %0 = arange {start=0, stop=5, dtype=i32} : i32[5]
          %1 = full {shape=[], value=0, dtype=i32} : i32[]
          %2 = mul %0, %1 : i32[5]
          %3 = full {shape=[2,2], value=1.0, dtype=f32} : f32[2,2]
          %4 = pad %3 {pads=[[1,0],[0,0]], value=1} : f32[3,2]
          %5 = arange {start=7, stop=8, dtype=f32} : f32[1]
          %6 = neg %5 : f32[1]
          return %2, %4, %6
        }""",
        fold_constants,
    )
    assert "%2 = full {shape=[5], value=0, dtype=i32} : i32[5]" in out
    assert "%4 = full {shape=[3, 2], value=1.0, dtype=f32} : f32[3,2]" in out
    assert "%6 = full {shape=[1], value=-7.0, dtype=f32} : f32[1]" in out


def test_signed_zeros_are_not_uniform(check):
    out = check(
        """
        graph f() {
          %0 = arange {start=-1, stop=2, dtype=f32} : f32[3]
          %1 = full {shape=[], value=0.0, dtype=f32} : f32[]
          %2 = mul %0, %1 : f32[3]
          return %2
        }""",
        fold_constants,
    )
    assert "return %2" in out  # [-0.0, 0.0, 0.0]


@pytest.mark.parametrize("op, value", [("sqrt", "nan"), ("log", "-inf"), ("neg", "-0.0")])
def test_special_values_fold(check, op, value):
    x = {"sqrt": "-1.0", "log": "0.0", "neg": "0.0"}[op]
    out = check(
        f"""
        graph f() {{
          %0 = full {{shape=[2], value={x}, dtype=f32}} : f32[2]
          %1 = {op} %0 : f32[2]
          return %1
        }}""",
        fold_constants,
    )
    assert f"%1 = full {{shape=[2], value={value}, dtype=f32}}" in out


def test_low_precision_folds_as_the_reference_computes(check):
    # f16 arithmetic is computed in f32 and rounded once, as on the GPU
    out = check(
        """
        graph f() {
          %0 = full {shape=[], value=0.1, dtype=f16} : f16[]
          %1 = full {shape=[], value=0.2, dtype=bf16} : bf16[]
          %2 = cast %1 {dtype=f16} : f16[]
          %3 = add %0, %2 : f16[]
          %4 = gt %3, %0 : bool[]
          return %3, %4
        }""",
        fold_constants,
    )
    assert "value=true, dtype=bool" in out


def test_ops_reading_data_do_not_fold(check):
    out = check(
        """
        graph f(%0: f32[2] data, %1: i64[] state) {
          %2 = full {shape=[], value=1.0, dtype=f32} : f32[]
          %3 = add %0, %2 : f32[2]
          %4 = full {shape=[], value=5, dtype=i64} : i64[]
          %5 = random_uniform %4, %1 {shape=[2], dtype=f32} : f32[2]
          %6 = random_uniform %4, %4 {shape=[2], dtype=f32} : f32[2]
          return %3, %5, %6
        }""",
        fold_constants,
    )
    assert "return %3, %5, %6" in out  # the last draw is constant but not uniform


def test_folded_constant_keeps_the_users_line():
    g = parse("""
        graph f() {
          %0 = full {shape=[], value=2.0, dtype=f32} : f32[]
          %1 = exp %0 : f32[]  # a.py:9  e = math.e ** 2
          return %1
        }""")
    assert fold_constants(g).ops[-1].loc == "a.py:9  e = math.e ** 2"


def test_concat_of_equal_constants_folds_unequal_does_not(check):
    out = check(
        """
        graph f() {
          %0 = full {shape=[2], value=-0.0, dtype=bf16} : bf16[2]
          %1 = full {shape=[3], value=-0.0, dtype=bf16} : bf16[3]
          %2 = full {shape=[3], value=0.0, dtype=bf16} : bf16[3]
          %3 = concat %0, %1 {axis=0} : bf16[5]
          %4 = concat %0, %2 {axis=0} : bf16[5]
          return %3, %4
        }""",
        fold_constants,
    )
    assert "%3 = full {shape=[5], value=-0.0, dtype=bf16} : bf16[5]" in out and "return %3, %4" in out
