"""simplify_algebra: one test per rule (IR before -> after), and the float identities it must refuse."""

import numpy as np
import pytest

from flame.ir import parse, print_graph
from flame.passes.simplify import RULES, simplify_algebra


def run(check, text, expect=None):
    return check(text, simplify_algebra, expect)


# ---- arithmetic ---------------------------------------------------------------------------------


@pytest.mark.parametrize("order", ["%0, %1", "%1, %0"], ids=["x_first", "x_second"])
def test_mul_by_one_either_side(check, order):
    run(
        check,
        f"""
        graph f(%0: f32[2,3] data) {{
          %1 = full {{shape=[], value=1.0, dtype=f32}} : f32[]
          %2 = mul {order} : f32[2,3]
          return %2
        }}""",
        """
        graph f(%0: f32[2,3] data) {
          %1 = full {shape=[], value=1.0, dtype=f32} : f32[]
          return %0
        }""",
    )


def test_mul_by_a_wider_one_becomes_a_broadcast(check):
    out = run(
        check,
        """
        graph f(%0: f32[3] data) {
          %1 = full {shape=[2,3], value=1, dtype=f32} : f32[2,3]
          %2 = mul %0, %1 : f32[2,3]
          return %2
        }""",
    )
    assert "%2 = broadcast_to %0 {shape=[2, 3]} : f32[2,3]" in out and "mul" not in out


def test_mul_by_a_value_that_rounds_to_one_in_f16(check):
    # the reference stores full {value=1.0001} as f16 1.0, so the rule sees the stored element
    out = run(
        check,
        """
        graph f(%0: f16[4] data) {
          %1 = full {shape=[], value=1.0001, dtype=f16} : f16[]
          %2 = mul %0, %1 : f16[4]
          return %2
        }""",
    )
    assert "return %0" in out


@pytest.mark.parametrize("dtype", ["f32", "i64"])
def test_mul_by_zero_is_kept(check, dtype):
    # x*0 -> 0 is wrong for floats (NaN*0, inf*0 are NaN; -1*0 is -0); not worth it for ints alone
    out = run(
        check,
        f"""
        graph f(%0: {dtype}[4] data) {{
          %1 = full {{shape=[], value=0, dtype={dtype}}} : {dtype}[]
          %2 = mul %0, %1 : {dtype}[4]
          return %2
        }}""",
    )
    assert "mul %0, %1" in out


@pytest.mark.parametrize("order", ["%0, %1", "%1, %0"], ids=["x_first", "x_second"])
def test_add_zero_int(check, order):
    out = run(
        check,
        f"""
        graph f(%0: i32[4] data) {{
          %1 = full {{shape=[], value=0, dtype=i32}} : i32[]
          %2 = add {order} : i32[4]
          return %2
        }}""",
    )
    assert "add" not in out and "return %0" in out


def test_add_positive_zero_float_is_kept(check):
    # -0.0 + 0.0 = +0.0, so x + 0.0 is not x
    out = run(
        check,
        """
        graph f(%0: f32[4] data) {
          %1 = full {shape=[], value=0.0, dtype=f32} : f32[]
          %2 = add %0, %1 : f32[4]
          return %2
        }""",
    )
    assert "add %0, %1" in out


@pytest.mark.parametrize("order", ["%0, %1", "%1, %0"], ids=["x_first", "x_second"])
def test_add_negative_zero_float(check, order):
    out = run(
        check,
        f"""
        graph f(%0: f32[4] data) {{
          %1 = full {{shape=[], value=-0.0, dtype=f32}} : f32[]
          %2 = add {order} : f32[4]
          return %2
        }}""",
    )
    assert "add" not in out and "return %0" in out


@pytest.mark.parametrize("dtype, zero", [("f32", "0.0"), ("f64", "0"), ("i64", "0")])
def test_sub_zero(check, dtype, zero):
    out = run(
        check,
        f"""
        graph f(%0: {dtype}[4] data) {{
          %1 = full {{shape=[], value={zero}, dtype={dtype}}} : {dtype}[]
          %2 = sub %0, %1 : {dtype}[4]
          return %2
        }}""",
    )
    assert "sub" not in out and "return %0" in out


def test_sub_negative_zero_and_zero_minus_x_are_kept(check):
    # x - (-0.0) = x + 0.0 (turns -0.0 into +0.0); 0 - x is not x
    out = run(
        check,
        """
        graph f(%0: f32[4] data) {
          %1 = full {shape=[], value=-0.0, dtype=f32} : f32[]
          %2 = sub %0, %1 : f32[4]
          %3 = full {shape=[], value=0.0, dtype=f32} : f32[]
          %4 = sub %3, %0 : f32[4]
          return %2, %4
        }""",
    )
    assert "sub %0, %1" in out and "sub %3, %0" in out


def test_sub_self_int_is_zero(check):
    run(
        check,
        """
        graph f(%0: i64[2,2] data) {
          %1 = sub %0, %0 : i64[2,2]
          return %1
        }""",
        """
        graph f(%0: i64[2,2] data) {
          %1 = full {shape=[2, 2], value=0, dtype=i64} : i64[2,2]
          return %1
        }""",
    )


def test_sub_self_float_is_kept(check):
    # inf - inf and NaN - NaN are NaN
    assert "sub %0, %0" in run(
        check,
        """
        graph f(%0: f32[4] data) {
          %1 = sub %0, %0 : f32[4]
          return %1
        }""",
    )


def test_div_by_one(check):
    out = run(
        check,
        """
        graph f(%0: f32[4] data) {
          %1 = full {shape=[], value=1.0, dtype=f32} : f32[]
          %2 = div %0, %1 : f32[4]
          %3 = div %1, %0 : f32[4]
          return %2, %3
        }""",
    )
    assert "return %0, %2" in out and "%2 = div %1, %0" in out


@pytest.mark.parametrize("shape, dims", [("[]", "4"), ("[2,4]", "2,4")], ids=["scalar", "broadcast_full"])
def test_pow_by_one_and_zero(check, shape, dims):
    # pow(x, 1) -> x and pow(x, +-0) -> 1 hold in IEEE for every x (NaN, inf, -0.0); pow(1, x) is kept
    out = run(
        check,
        f"""
        graph f(%0: f32[4] data) {{
          %1 = full {{shape={shape}, value=1.0, dtype=f32}} : f32[{shape.strip("[]")}]
          %2 = pow %0, %1 : f32[{dims}]
          %3 = full {{shape={shape}, value=-0.0, dtype=f32}} : f32[{shape.strip("[]")}]
          %4 = pow %0, %3 : f32[{dims}]
          %5 = pow %1, %0 : f32[{dims}]
          return %2, %4, %5
        }}""",
    )
    assert "pow %0" not in out and "pow %1, %0" in out


def test_pow_by_a_scalar_two_is_a_square(check):
    # pow(x, 2) -> x * x for a constant 2 (the correctly rounded square, as torch's pow kernels and NumPy's
    # power compute a scalar 2); pow(2, x) and an integer pow are kept
    out = run(
        check,
        """
        graph f(%0: f32[4] data, %1: i32[4] data) {
          %2 = full {shape=[], value=2.0, dtype=f32} : f32[]
          %3 = pow %0, %2 : f32[4]
          %4 = pow %2, %0 : f32[4]
          %5 = full {shape=[], value=2, dtype=i32} : i32[]
          %6 = pow %1, %5 : i32[4]
          %7 = full {shape=[4], value=2.0, dtype=f32} : f32[4]
          %8 = pow %0, %7 : f32[4]
          return %3, %4, %6, %8
        }""",
    )
    assert "mul %0, %0" in out and "pow %2, %0" in out and "pow %1, %5" in out and "pow %0" not in out


def test_square_matches_torch_bit_for_bit():
    """x ** 2 in f32 and bf16 (autocast's f32 and an f32 loss over bf16 data) equals torch's x ** 2."""
    import torch

    import flame

    rng = np.random.default_rng(5)
    x = (rng.standard_normal(4096) * 10 ** rng.uniform(-20, 18, 4096)).astype(np.float32)
    for dt, tdt in ((flame.float32, torch.float32), (flame.bfloat16, torch.bfloat16)):
        got = flame.compile(lambda t: t ** 2)(flame.tensor(x).to(dt)).float().numpy()
        want = (torch.from_numpy(x).to(tdt) ** 2).float().numpy()
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op, value", [("mul", 1.0), ("div", 1.0), ("sub", 0.0), ("add", -0.0)])
def test_identities_with_a_broadcast_full(check, op, value):
    # x*1, x/1, x-(+0), x+(-0) fold when the constant is a full of the result's shape
    out = run(
        check,
        f"""
        graph f(%0: f32[2,3] data) {{
          %1 = full {{shape=[2,3], value={value}, dtype=f32}} : f32[2,3]
          %2 = {op} %0, %1 : f32[2,3]
          return %2
        }}""",
    )
    assert "return %0" in out


@pytest.mark.parametrize("op, dtype", [("neg", "f32"), ("neg", "i32"), ("logical_not", "bool")])
def test_involutions(check, op, dtype):
    out = run(
        check,
        f"""
        graph f(%0: {dtype}[4] data) {{
          %1 = {op} %0 : {dtype}[4]
          %2 = {op} %1 : {dtype}[4]
          %3 = {op} %2 : {dtype}[4]
          return %2, %3
        }}""",
    )
    assert "return %0, %2" in out and f"%2 = {op} %0" in out  # (CSE then merges %2 with %1)


def test_cast_to_same_dtype(check):
    out = run(
        check,
        """
        graph f(%0: f32[4] data) {
          %1 = cast %0 {dtype=f32} : f32[4]
          return %1
        }""",
    )
    assert "return %0" in out


@pytest.mark.parametrize("src, via", [("f16", "f32"), ("bf16", "f64"), ("i32", "i64"), ("bool", "f16")])
def test_cast_round_trip_through_exact_widening(check, src, via):
    out = run(
        check,
        f"""
        graph f(%0: {src}[4] data) {{
          %1 = cast %0 {{dtype={via}}} : {via}[4]
          %2 = cast %1 {{dtype={src}}} : {src}[4]
          return %2
        }}""",
    )
    assert "return %0" in out


@pytest.mark.parametrize("src, via", [("f32", "f16"), ("f32", "i64"), ("i64", "i32"), ("f16", "bf16")])
def test_cast_round_trip_through_lossy_dtype_is_kept(check, src, via):
    out = run(
        check,
        f"""
        graph f(%0: {src}[4] data) {{
          %1 = cast %0 {{dtype={via}}} : {via}[4]
          %2 = cast %1 {{dtype={src}}} : {src}[4]
          return %2
        }}""",
    )
    assert "return %2" in out


def test_where_same_branches(check):
    out = run(
        check,
        """
        graph f(%0: bool[2,3] data, %1: f32[3] data) {
          %2 = where %0, %1, %1 : f32[2,3]
          return %2
        }""",
    )
    assert "%2 = broadcast_to %1 {shape=[2, 3]} : f32[2,3]" in out and "where" not in out


@pytest.mark.parametrize("cond, picked", [("true", "%0"), ("false", "%1")])
def test_where_constant_condition(check, cond, picked):
    out = run(
        check,
        f"""
        graph f(%0: f32[4] data, %1: f32[4] data) {{
          %2 = full {{shape=[4], value={cond}, dtype=bool}} : bool[4]
          %3 = where %2, %0, %1 : f32[4]
          return %3
        }}""",
    )
    assert f"return {picked}" in out


# ---- movement -----------------------------------------------------------------------------------


def test_reshape_to_same_shape(check):
    assert "return %0" in run(
        check,
        """
        graph f(%0: f32[2,3] data) {
          %1 = reshape %0 {shape=[2,3]} : f32[2,3]
          return %1
        }""",
    )


def test_reshape_chain_is_one_reshape(check):
    run(
        check,
        """
        graph f(%0: f32[2,3] data) {
          %1 = reshape %0 {shape=[6]} : f32[6]
          %2 = reshape %1 {shape=[3,2]} : f32[3,2]
          %3 = reshape %2 {shape=[1,6]} : f32[1,6]
          return %3
        }""",
        """
        graph f(%0: f32[2,3] data) {
          %1 = reshape %0 {shape=[6]} : f32[6]
          %2 = reshape %0 {shape=[3, 2]} : f32[3,2]
          %3 = reshape %0 {shape=[1, 6]} : f32[1,6]
          return %3
        }""",
    )


def test_squeeze_unsqueeze_chain(check):
    out = run(
        check,
        """
        graph f(%0: f32[2,1,3] data) {
          %1 = squeeze %0 {axes=[1]} : f32[2,3]
          %2 = unsqueeze %1 {axes=[0]} : f32[1,2,3]
          %3 = unsqueeze %1 {axes=[1]} : f32[2,1,3]
          %4 = squeeze %0 {axes=[]} : f32[2,1,3]
          return %2, %3, %4
        }""",
    )
    assert "%2 = reshape %0 {shape=[1, 2, 3]} : f32[1,2,3]" in out
    assert "return %2, %0, %0" in out


def test_broadcast_to_same_shape_and_chains(check):
    out = run(
        check,
        """
        graph f(%0: f32[3] data) {
          %1 = broadcast_to %0 {shape=[3]} : f32[3]
          %2 = broadcast_to %0 {shape=[2,3]} : f32[2,3]
          %3 = broadcast_to %2 {shape=[4,2,3]} : f32[4,2,3]
          return %1, %3
        }""",
    )
    assert "%2 = broadcast_to %0 {shape=[4, 2, 3]} : f32[4,2,3]" in out and "return %0, %2" in out


def test_permute_compose(check):
    out = run(
        check,
        """
        graph f(%0: f32[2,3,4] data) {
          %1 = permute %0 {perm=[1,2,0]} : f32[3,4,2]
          %2 = permute %1 {perm=[2,0,1]} : f32[2,3,4]
          %3 = permute %1 {perm=[1,0,2]} : f32[4,3,2]
          %4 = permute %0 {perm=[0,1,2]} : f32[2,3,4]
          return %2, %3, %4
        }""",
    )
    assert "%2 = permute %0 {perm=[2, 1, 0]} : f32[4,3,2]" in out and "return %0, %2, %0" in out


def test_slice_covering_everything(check):
    out = run(
        check,
        """
        graph f(%0: f32[1,3] data) {
          %1 = slice %0 {starts=[0,0], stops=[1,3], steps=[5,1]} : f32[1,3]
          %2 = slice %0 {starts=[0,1], stops=[1,3], steps=[1,1]} : f32[1,2]
          %3 = slice %0 {starts=[0,0], stops=[1,3], steps=[1,2]} : f32[1,2]
          return %1, %2, %3
        }""",
    )
    assert "return %0, %1, %2" in out


def test_flip_twice_and_flip_of_size_one(check):
    out = run(
        check,
        """
        graph f(%0: f32[1,3] data) {
          %1 = flip %0 {axes=[1]} : f32[1,3]
          %2 = flip %1 {axes=[-1]} : f32[1,3]
          %3 = flip %0 {axes=[0]} : f32[1,3]
          %4 = flip %1 {axes=[0,1]} : f32[1,3]
          return %2, %3, %4
        }""",
    )
    assert "return %0, %0, %2" in out and "%2 = flip %1 {axes=[0, 1]}" in out


def test_pad_by_nothing(check):
    out = run(
        check,
        """
        graph f(%0: f32[2,3] data) {
          %1 = pad %0 {pads=[[0,0],[0,0]], value=5} : f32[2,3]
          %2 = pad %0 {pads=[[0,1],[0,0]]} : f32[3,3]
          return %1, %2
        }""",
    )
    assert "return %0, %1" in out


def test_concat_of_one(check):
    assert "return %0" in run(
        check,
        """
        graph f(%0: f32[2,3] data) {
          %1 = concat %0 {axis=1} : f32[2,3]
          return %1
        }""",
    )


@pytest.mark.parametrize("op", ["reduce_max", "reduce_min"])
def test_extreme_over_size_one_axes(check, op):
    out = run(
        check,
        f"""
        graph f(%0: f32[2,1] data) {{
          %1 = {op} %0 {{axes=[1], keepdim=true}} : f32[2,1]
          %2 = {op} %0 {{axes=[1]}} : f32[2]
          %3 = {op} %0 {{axes=[0]}} : f32[1]
          return %1, %2, %3
        }}""",
    )
    assert "%1 = reshape %0 {shape=[2]} : f32[2]" in out and "return %0, %1, %2" in out


def test_reduce_sum_over_nothing_is_kept(check):
    # sum starts from +0.0, so a -0.0 element comes out +0.0
    assert "reduce_sum" in run(
        check,
        """
        graph f(%0: f32[2,1] data) {
          %1 = reduce_sum %0 {axes=[1], keepdim=true} : f32[2,1]
          return %1
        }""",
    )


# ---- broadcasts sunk into their users -----------------------------------------------------------


def test_broadcast_sunk_into_elementwise_user(check):
    out = run(
        check,
        """
        graph f(%0: f32[2,3] data, %1: f32[3] data) {
          %2 = broadcast_to %1 {shape=[2,3]} : f32[2,3]
          %3 = add %0, %2 : f32[2,3]
          return %3
        }""",
    )
    assert "%3 = add %0, %1 : f32[2,3]" in out


def test_broadcast_kept_when_it_sets_the_result_shape(check):
    out = run(
        check,
        """
        graph f(%0: f32[1] data, %1: f32[1] data, %2: f32[3,1] data, %3: f32[3,1] data) {
          %4 = broadcast_to %0 {shape=[3]} : f32[3]
          %5 = mul %4, %1 : f32[3]
          %6 = broadcast_to %2 {shape=[3,4]} : f32[3,4]
          %7 = broadcast_to %3 {shape=[3,4]} : f32[3,4]
          %8 = sub %6, %7 : f32[3,4]
          return %5, %8
        }""",
    )
    assert "%5 = mul %4, %1 : f32[3]" in out
    assert "%8 = sub %2, %7 : f32[3,4]" in out  # one of the two broadcasts is needed


def test_broadcast_condition_of_where_sunk(check):
    out = run(
        check,
        """
        graph f(%0: bool[3] data, %1: f32[2,3] data, %2: f32[2,3] data) {
          %3 = broadcast_to %0 {shape=[2,3]} : bool[2,3]
          %4 = where %3, %1, %2 : f32[2,3]
          return %4
        }""",
    )
    assert "where %0, %1, %2" in out


def test_full_constant_sunk_as_a_scalar(check):
    run(
        check,
        """
        graph f(%0: f32[2,3] data) {
          %1 = full {shape=[2,3], value=2.5, dtype=f32} : f32[2,3]
          %2 = mul %0, %1 : f32[2,3]
          return %2
        }""",
        """
        graph f(%0: f32[2,3] data) {
          %1 = full {shape=[2, 3], value=2.5, dtype=f32} : f32[2,3]
          %2 = full {shape=[], value=2.5, dtype=f32} : f32[]
          %3 = mul %0, %2 : f32[2,3]
          return %3
        }""",
    )


def test_unary_user_keeps_its_broadcast(check):
    assert "exp %1" in run(
        check,
        """
        graph f(%0: f32[3] data) {
          %1 = broadcast_to %0 {shape=[2,3]} : f32[2,3]
          %2 = exp %1 : f32[2,3]
          return %2
        }""",
    )


# ---- the driver ---------------------------------------------------------------------------------


def test_rewritten_ops_keep_the_users_line():
    g = parse("""
        graph f(%0: f32[2,3] data) {
          %1 = unsqueeze %0 {axes=[0]} : f32[1,2,3]  # model.py:3  y = x[None]
          %2 = reshape %1 {shape=[6]} : f32[6]  # model.py:4  v = y.flatten()
          %3 = permute %0 {perm=[1,0]} : f32[3,2]  # model.py:5  w = x.T
          %4 = permute %3 {perm=[1,0]} : f32[2,3]  # model.py:6  u = w.T
          %5 = mul %4, %4 : f32[2,3]  # model.py:7  t = u * u
          return %2, %5
        }""")
    out = print_graph(simplify_algebra(g), locs=True)
    assert "%2 = reshape %0 {shape=[6]} : f32[6]  # model.py:4  v = y.flatten()" in out
    assert "mul %0, %0 : f32[2,3]  # model.py:7  t = u * u" in out


def test_rewrite_of_an_aliased_output_to_its_own_input():
    # p * 1 -> p: the output that replaces p is p itself. The alias stays (output 0 still replaces
    # input 0's buffer, with the value it already holds); the memory planner sees a self-copy to skip.
    g = parse("""
        graph step(%0: f32[4] param) {
          %1 = full {shape=[], value=1.0, dtype=f32} : f32[]
          %2 = mul %0, %1 : f32[4]
          return %2 -> %0, %2
        }""")
    out = print_graph(simplify_algebra(g))
    assert "return %0 -> %0, %0" in out
    assert print_graph(parse(out)) == out


def test_every_rule_is_named_after_a_registered_op():
    from flame.ir import REGISTRY

    assert set(RULES) <= set(REGISTRY)
