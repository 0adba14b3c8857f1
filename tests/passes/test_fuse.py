"""The fusion pass: fused plans compute what unfused plans and the op-by-op oracle compute (on the
reference executor, memory plan applied), known patterns become the expected number of kernels,
every kernel boundary has a reason, and the IR with kernels round-trips through the parser."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flame.ir import Builder, Graph, TensorType, bf16, f32, i64, parse, print_graph, verify
from flame.passes.fuse import fuse
from flame.passes.pipeline import remat, run_pipeline
from flame.passes.remat import is_recompute
from flame.plan.build import to_plan
from flame.plan.memory import check_plan, memory_report
from flame.plan.steps import KernelLaunch, LibraryCall
from flame.runtime.backend import capabilities
from flame.runtime.reference import run_graph, run_plan
from flame.target import DEFAULT_TARGET, Target
from tests.passes.conftest import assert_same_bits, random_array
from tests.passes.fuse_cases import (
    COMPOSITES,
    composite,
    cross_entropy,
    cross_entropy_bf16,
    layer_norm_params,
    mlp_adamw,
    square_bf16,
)
from tests.passes.test_random_graphs import graphs


def launches(g: Graph) -> list:
    return [s for s in to_plan(g).steps if isinstance(s, (KernelLaunch, LibraryCall))]


def check_fused(g: Graph, inputs: list[np.ndarray], target: Target = DEFAULT_TARGET) -> Graph:
    """fuse(g): verified, g untouched, and fused plan == unfused plan == oracle, bit for bit."""
    before = print_graph(g)
    fused = fuse(g, target)
    verify(fused)
    assert print_graph(g) == before
    assert fused.groups and [op for k in fused.groups for op in k.ops] == fused.ops
    assert all(k.reason for k in fused.groups)
    want = run_graph(g, inputs)
    for plan in (to_plan(fused, target=target), to_plan(g, target=target)):
        check_plan(plan)
        got_all = run_plan(plan, [a.copy() for a in inputs])  # plans update aliased inputs in place
        for i, (w, got) in enumerate(zip(want, got_all)):
            assert_same_bits(got, w, f"output {i}")
    text = print_graph(fused)
    assert print_graph(parse(text)) == text
    return fused


@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "bwd"])
@pytest.mark.parametrize("name", sorted(COMPOSITES))
def test_composites_fused_equal_unfused(name, backward):
    check_fused(*composite(name, backward))


@pytest.mark.parametrize("backward", [False, True], ids=["fwd", "bwd"])
def test_cross_entropy(backward):
    check_fused(*cross_entropy(backward))


def test_mlp_adamw_step():
    g, inputs, _ = mlp_adamw()
    check_fused(g, inputs)


@pytest.mark.parametrize("name,count", [("softmax", 1), ("log_softmax", 1), ("layer_norm", 1), ("rms_norm", 1),
                                        ("gelu_chain", 1)])
def test_forward_kernel_counts(name, count):
    g, _ = composite(name)
    assert len(launches(fuse(g))) == count
    assert len(launches(g)) > count


def test_layer_norm_backward_carries_weight_and_bias_gradients():
    """dx, dweight and dbias: one row kernel accumulating the two column sums, and the fold."""
    fused = check_fused(*layer_norm_params())
    ks = launches(fused)
    assert [k.name.rsplit("_", 1)[0] for k in ks] == ["reduce_mean_mean_sum_rows_f32",
                                                       "reduce_mean_mean_sum_rows_f32_fold"]
    (rows,) = [k for k in fused.groups if k.kind == "rows"]
    assert len([op for op in rows.ops if op.name == "reduce_sum" and list(op.attrs["axes"]) == [0]]) == 2


def test_recomputed_layer_norm_output_rides_in_the_backward_row_kernel():
    """The LayerNorm output that m's gradient reads is recomputed inside the LayerNorm backward's row
    kernel (same rows, one segment), which keeps carrying the weight and bias gradients: no kernel of
    its own for the recomputation, no separate column sums."""
    from tests.passes.fuse_cases import layer_norm_linear

    g, inputs = layer_norm_linear()
    fused = check_fused(remat(g), inputs)
    (rows,) = [k for k in fused.groups if any(is_recompute(op) for op in k.ops)]
    assert rows.kind == "rows"
    assert len([op for op in rows.ops if op.name == "reduce_sum" and list(op.attrs["axes"]) == [0]]) == 2
    assert not [k for k in fused.groups if k.kind == "reduction"]


@pytest.mark.parametrize("reader", ["matmul", "sum", "scaled_matmul", "exp", "scaled_exp", "output"])
def test_an_add_of_positive_zero_goes_only_where_its_sum_is_accumulated(reader):
    """concat(...) + (+0.0) (what a sum of disjoint slabs becomes) loses the add when every reader,
    through views and sign-only ops (a LoRA step's scaling by alpha / r), is an accumulator starting
    at +0.0 (the sign of a zero cannot reach its result); an elementwise reader or a graph output
    keeps it. Bit-exact either way, -0.0 inputs included."""
    from flame.passes.prepare_fusion import drop_zero_signs

    g = Graph("zero_sign")
    b = Builder(g)
    x, y, w = (g.add_input(TensorType((2, 3), f32)), g.add_input(TensorType((2, 3), f32)),
               g.add_input(TensorType((3, 5), f32)))
    s = b.add(b.concat(x, y, axis=0), b.full(shape=(), value=0.0, dtype=f32))
    flat = b.reshape(s, shape=[4, 3])
    two = b.full(shape=(), value=2.0, dtype=f32)
    g.outputs = [{"matmul": lambda: b.matmul(flat, w), "sum": lambda: b.reduce_sum(flat, axes=[0]),
                  "scaled_matmul": lambda: b.matmul(b.mul(flat, two), w), "exp": lambda: b.exp(flat),
                  "scaled_exp": lambda: b.exp(b.mul(flat, two)), "output": lambda: flat}[reader]()]
    verify(g)
    dropped = not any(op.name == "add" and op.inputs[0].producer.name == "concat" for op in drop_zero_signs(g).ops)
    assert dropped == (reader in ("matmul", "sum", "scaled_matmul"))
    r = np.random.default_rng(1)
    inputs = [r.standard_normal(v.type.shape).astype(np.float32) for v in g.inputs]
    inputs[0][0] = -0.0  # a row of negative zeros: the add would make them +0.0
    check_fused(g, inputs)


def test_cross_entropy_backward_is_one_row_kernel():
    """The count of the labels not ignored (torch's default ignore_index, -100: the labels are unknown
    while tracing), gather of the label logits, the row kernel (loss terms and d logits, one-hot computed
    in place, each row weighted by 1 / count), the sum: the max is detached, so no tie-splitting terms
    reach the backward."""
    fused = check_fused(*cross_entropy(True))
    names = [k.name.split("_f32")[0].split("_bool")[0] for k in launches(fused)]
    assert names == ["reduce_sum_rows", "gather", "reduce_softmax_rows", "reduce_sum_rows"]
    assert not any(op.name == "eq" and op.inputs[0].producer is None for op in fused.ops)


@pytest.mark.parametrize("vocab", [40, 3000])
def test_bf16_cross_entropy_reads_and_writes_bf16(vocab):
    """F.cross_entropy(logits.float()) of bf16 logits on the CUDA target: the row kernel converts the
    bf16 logits in registers and writes the gradient as bf16 (its epilogue), the gather reads bf16,
    and no f32 [N, C] buffer is planned (issue 13: a 1 GiB f32 copy and a 1 GiB f32 gradient)."""
    target = capabilities("cuda")
    fused = check_fused(*cross_entropy_bf16(vocab=vocab), target)
    plan = to_plan(fused, target=target)
    assert not [b for b in plan.buffers.values() if b.dtype == f32 and math.prod(b.shape) == 16 * vocab]
    (ce,) = [s for s in plan.steps if isinstance(s, KernelLaunch) and s.name.startswith("reduce_softmax_rows")]
    logits_like = [plan.buffers[b] for b in ce.args if math.prod(plan.buffers[b].shape) == 16 * vocab]
    assert [b.dtype for b in logits_like] == [bf16, bf16]  # reads the logits, writes the gradient
    big = [s.name.rsplit("_", 1)[0] for s in plan.steps if isinstance(s, KernelLaunch)
           and any(math.prod(plan.buffers[b].shape) == 16 * vocab for b in s.args)]
    assert big == ["gather_bf16_16x1", "reduce_softmax_rows_f32"]  # the only kernels touching [N, C]


def test_conversions_move_to_the_wide_side_of_views():
    """r(u(x)) -> u(r(x)) for a widening u and a view or gather r; u(r(y)) -> r(u(y)) for a narrowing u
    and a relabelling view r of a computed y: only the narrow values cross the kernel boundary."""
    g = Graph("moves")
    b = Builder(g)
    x, y = g.add_input(TensorType((2, 8, 40), bf16)), g.add_input(TensorType((16, 40), f32))
    wide = b.reshape(b.cast(x, dtype=f32), shape=[16, 40])  # merges dims: a kernel boundary
    d = b.mul(b.exp(wide), y)
    g.outputs = [b.reshape(b.cast(b.reshape(d, shape=[2, 8, 40]), dtype=bf16), shape=[16, 40])]
    rng = np.random.default_rng(0)
    fused = check_fused(verify(g), [random_array(v.type, rng) for v in g.inputs])
    text = print_graph(fused)
    assert "= reshape %0 {shape=[16, 40]} : bf16[16,40]" in text and "{dtype=bf16} : bf16[16,40]" in text
    plan = to_plan(fused)
    (k,) = [s for s in plan.steps if isinstance(s, KernelLaunch)]
    assert [plan.buffers[a].dtype for a in k.args] == [bf16, f32, bf16]


def test_widening_conversion_is_recomputed_in_each_reading_kernel():
    """h = bf16 matmul result .float(), read by a forward kernel and a backward kernel: each converts
    the bf16 value itself; the backward's copy is a recomputation (saved: the bf16 value)."""
    target = capabilities("cuda")
    fused = check_fused(*square_bf16(), target)
    plan = to_plan(fused, target=target)
    assert not [b for b in plan.buffers.values() if b.role == "temporary" and b.dtype == f32 and b.shape == (16, 8)]
    h = fused.ops[[op.name for op in fused.ops].index("matmul")].out  # the first matmul's result
    casts = [op for op in fused.ops if op.name == "cast" and op.inputs == (h,)]
    assert len(casts) == 2 and [is_recompute(op) for op in casts] == [False, True]
    assert len({next(k for k in fused.groups if op in k.ops) for op in casts}) == 2
    assert "recomputed in the backward: 1 values" in str(memory_report(plan))


def test_a_conversion_read_twice_by_one_op_is_recomputed_or_left_whole(monkeypatch):
    """A bf16 model whose AdamW update reads a widened [1] value twice in one op (g.float() ** 2 as
    g * g): recompute_in rewired that op once per read, and taking the recomputation back (the kernel
    did not fit) then unwired it twice: the compile failed with "list.remove(x): x not in list"
    (found on the CPU, 2026-11-27). Now it compiles and trains as it does without fusion."""
    import flame
    import flame.optim as optim
    from tests.runtime.test_reference_segments import batch, mse_step, small_model

    def run():
        model = small_model(flame.bf16)
        step = mse_step(model, optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1))
        x, y = batch(np.random.default_rng(0), flame.bf16)
        return [step(x, y).item() for _ in range(3)]

    fused = run()
    monkeypatch.setenv("FLAME_FUSE", "0")
    np.testing.assert_allclose(fused, run(), rtol=2e-2)


@pytest.mark.parametrize("shape", [(64, 3000), (3, 20000), (1000, 7), (2, 3, 50)])
def test_column_reductions_ride_in_the_row_kernel(shape):
    g = Graph("columns")
    b = Builder(g)
    x, dy = g.add_input(TensorType(shape, f32)), g.add_input(TensorType(shape, f32))
    lead = list(range(len(shape) - 1))
    y = b.mul(x, b.rsqrt(b.reduce_mean(b.mul(x, x), axes=[len(shape) - 1], keepdim=True)))
    g.outputs = [y, b.reduce_sum(b.mul(y, dy), axes=lead), b.reduce_mean(dy, axes=lead, keepdim=True)]
    rng = np.random.default_rng(0)
    fused = check_fused(verify(g), [rng.standard_normal(shape).astype(np.float32) for _ in range(2)])
    assert len(launches(fused)) == 2 and launches(fused)[1].name.rsplit("_", 1)[0].endswith("_fold")


def test_one_hot_of_an_arange_is_computed_in_the_row_kernel():
    """A cross-entropy gradient's one-hot, eq(reshape(arange), targets) with the targets reshaped
    from [4, 8] (a view the row domain cannot index: read as it is): the arange and its reshape are
    free ops the row kernel computes from the element's index, not a buffer it reads per row."""
    g = Graph("one_hot")
    b = Builder(g)
    x, t = g.add_input(TensorType((32, 64), f32)), g.add_input(TensorType((4, 8), i64))
    e = b.exp(x)
    columns = b.reshape(b.arange(start=0, stop=64, step=1, dtype=i64), shape=[1, 64])
    onehot = b.eq(columns, b.reshape(t, shape=[32, 1]))
    one, zero = (b.full(shape=[], value=v, dtype=f32) for v in (1.0, 0.0))
    g.outputs = [b.sub(b.div(e, b.reduce_sum(e, axes=[1], keepdim=True)), b.where(onehot, one, zero))]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 64)).astype(np.float32)
    fused = check_fused(verify(g), [x, rng.integers(0, 64, (4, 8))])
    (k,) = [s for s in launches(fused) if isinstance(s, KernelLaunch)]
    assert any(op.name == "arange" for grp in fused.groups if grp.kind == "rows" for op in grp.ops)
    assert "arange" not in k.name and k.n_inputs == 2  # x and the targets' view


@pytest.mark.parametrize("limit", [1 << 16, 16])
def test_a_big_general_column_sum_is_a_kernel_of_its_own(monkeypatch, limit):
    """A LayerNorm backward's dx summed over the batch ([2, 8, 16] -> [1, 8, 16], a result that depends
    on a kept dim: a position embedding's gradient) rides in the row kernel beside dweight while it has
    at most GENERAL_MAX_RESULTS elements; past it, it is a column reduction of its own reading dx."""
    from flame.passes import fuse_columns

    monkeypatch.setattr(fuse_columns, "GENERAL_MAX_RESULTS", limit)
    g = Graph("position_grad")
    b = Builder(g)
    x, dy = g.add_input(TensorType((2, 8, 16), f32)), g.add_input(TensorType((2, 8, 16), f32))
    y = b.mul(x, b.rsqrt(b.reduce_mean(b.mul(x, x), axes=[2], keepdim=True)))
    dx = b.mul(dy, b.add(y, b.reduce_sum(b.mul(y, dy), axes=[2], keepdim=True)))
    g.outputs = [dx, b.reduce_sum(b.mul(y, dy), axes=[0, 1]), b.reduce_sum(dx, axes=[0], keepdim=True)]
    rng = np.random.default_rng(0)
    fused = check_fused(verify(g), [rng.standard_normal((2, 8, 16)).astype(np.float32) for _ in range(2)])
    alone = [grp for grp in fused.groups if grp.kind == "reduction"]
    assert len(alone) == (0 if limit > 128 else 1)
    assert all(grp.ops[0].out.shape == (1, 8, 16) for grp in alone)


def test_a_reduction_over_unit_dims_is_its_input_reshaped():
    """Sums over no dims or dims of size 1 (found by the random-graph test: a rows kernel holding a
    sum over no axes of a sum it computes had nothing to load) become the reshape plus +0.0 they
    compute, bit for bit as the reference (-0.0 sums to +0.0; a max keeps it)."""
    g = Graph("unit")
    b = Builder(g)
    x = g.add_input(TensorType((2, 1), f32))
    h = b.add(b.neg(x), b.reduce_sum(b.neg(x), axes=[0], keepdim=False))
    s = b.reduce_sum(b.reduce_sum(h, axes=[1], keepdim=True), axes=[], keepdim=False)
    g.outputs = [s, b.reduce_max(b.neg(x), axes=[1], keepdim=False), b.reduce_mean(x, axes=[1], keepdim=True)]
    fused = check_fused(verify(g), [np.array([[0.0], [0.0]], np.float32)])  # -x: -0.0
    assert [tuple(op.attrs["axes"]) for op in fused.ops if op.name.startswith("reduce_")] == [(0,)]


def test_softmax_is_one_row_kernel_with_a_telling_name():
    (k,) = launches(fuse(composite("softmax")[0]))
    assert k.name.startswith("reduce_softmax_rows_f32_")
    assert k.source.startswith("// flame fused kernel (rows) for IR ops: %1 = reduce_max")


def test_adamw_updates_every_parameter_in_one_launch():
    g, _, n_params = mlp_adamw()
    fused = fuse(g)
    params = {i for i, r in enumerate(g.roles) if r == "param"}
    new_params = {fused.outputs[o] for o, i in fused.aliases.items() if i in params}
    writers = [k for k in fused.groups if new_params & set(k.outputs)]
    assert len(new_params) == n_params and len(writers) == 1
    assert len(launches(fused)) < len(launches(g)) // 2


def test_elementwise_chain_is_one_kernel_with_several_outputs():
    g = Graph("chain")
    b = Builder(g)
    x, y = g.add_input(TensorType((8, 32), f32)), g.add_input(TensorType((32,), f32))
    h = b.gelu(b.mul(b.add(x, y), 2.0))
    g.outputs = [h, b.exp(h), b.reduce_sum(h, axes=[1], keepdim=True)]
    fused = check_fused(verify(g), [random_array(v.type, np.random.default_rng(0)) for v in g.inputs])
    assert len(launches(fused)) == 1 and fused.groups[0].kind == "rows" and len(fused.groups[0].outputs) == 3


def test_reduction_used_at_another_shape_is_a_boundary():
    g = Graph("other_shape")
    b = Builder(g)
    x = g.add_input(TensorType((8, 8), f32))
    s = b.reduce_sum(x, axes=[1], keepdim=False)  # [8] per row ...
    g.outputs = [b.add(x, s)]  # ... added along the other axis (broadcast over rows)
    fused = check_fused(verify(g), [np.arange(64, dtype=np.float32).reshape(8, 8)])
    assert len(fused.groups) == 2
    assert "another shape" in print_graph(fused)


def test_matmul_epilogue_is_marked_and_kept_correct():
    g = Graph("linear")
    b = Builder(g)
    x, w, bias = (g.add_input(TensorType(s, f32)) for s in ((8, 16), (16, 4), (4,)))
    g.outputs = [b.relu(b.add(b.matmul(x, w), bias))]
    verify(g)
    fused = fuse(g)
    assert fused.groups[0].kind == "matmul" and fused.groups[0].epilogue == "bias_relu"
    inputs = [random_array(v.type, np.random.default_rng(1)) for v in g.inputs]
    for supported in ((), ("bias", "relu", "bias_relu")):  # what the runtime's GEMM library runs: the Target says
        plan = to_plan(fused, target=dataclasses.replace(DEFAULT_TARGET, matmul_epilogues=frozenset(supported)))
        steps = [s for s in plan.steps if isinstance(s, (KernelLaunch, LibraryCall))]
        assert len(steps) == (1 if supported else 2)
        got = run_plan(plan, [a.copy() for a in inputs])[0]
        np.testing.assert_allclose(got, run_graph(g, inputs)[0], rtol=1e-5, atol=1e-6)


def test_fuse_switch(monkeypatch):
    import flame

    def f(x):
        return (x * 2.0).exp()

    monkeypatch.setenv("FLAME_FUSE", "0")
    assert flame.compile(f).optimized(np.ones(4, np.float32)).groups is None
    monkeypatch.setenv("FLAME_FUSE", "1")
    assert flame.compile(f).optimized(np.ones(4, np.float32)).groups is not None


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(g=graphs(), seed=st.integers(0, 2**16))
def test_random_graphs_fused_plan_matches_oracle(g, seed):
    g = run_pipeline(g)
    rng = np.random.default_rng(seed)
    inputs = [random_array(v.type, rng) for v in g.inputs]
    fused = fuse(g)
    verify(fused)
    assert all(k.reason for k in fused.groups)
    plan = to_plan(fused)
    check_plan(plan)
    for i, (w, got) in enumerate(zip(run_graph(g, inputs), run_plan(plan, [a.copy() for a in inputs]))):
        assert_same_bits(got, w, f"output {i}")
