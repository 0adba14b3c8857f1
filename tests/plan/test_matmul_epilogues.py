"""Which cuBLASLt epilogue each GEMM of a training step gets (tanh-GELU with its pre-activation as aux,
BGRAD bias gradients where the target asks for them: FLAME_MATMUL_BGRAD=1, Target.bgrad_epilogue),
and that the plan with those epilogues computes on the reference executor what the unfused graph
computes. The GPU side: tests/runtime/test_gpu_matmul_epilogues.py."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import flame
import flame.nn as nn
import flame.nn.functional as F
import flame.optim as optim
from flame.explain import explain_plan
from flame.ir import Builder, Graph, TensorType, f32, print_graph, verify
from flame.passes.fuse import fuse
from flame.plan.build import to_plan
from flame.plan.memory import check_plan
from flame.plan.steps import KernelLaunch, MatmulCall
from flame.runtime.backend import capabilities
from flame.runtime.reference import run_graph, run_plan
from flame.target import MATMUL_EPILOGUES
from tests.passes.fuse_cases import build

CUDA = replace(capabilities("cuda"), bgrad_epilogue=True)  # every epilogue, BGRAD included


def mlp_step(approximate: str, width: int = 16, dtype: str = "f32", backward: bool = True):
    """(graph, inputs) of an MLP 8 -> width -> width -> 4 with GELU(approximate): an AdamW training
    step, or the forward alone."""
    g = flame.Generator(5)
    model = nn.Sequential(nn.Linear(8, width, generator=g, dtype=dtype), nn.GELU(approximate),
                          nn.Linear(width, width, generator=g, dtype=dtype), nn.GELU(approximate),
                          nn.Linear(width, 4, generator=g, dtype=dtype))
    opt = optim.AdamW(model.parameters(), lr=0.01)

    def train_step(x, y):
        loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    def forward(x):
        return model(x)

    r = np.random.default_rng(2)
    x = r.standard_normal((24, 8)).astype(flame.ir.dtype_of(dtype).np_dtype)
    return build(train_step, x, r.integers(0, 4, 24)) if backward else build(forward, x)


def _calls(plan) -> list[MatmulCall]:
    return [s for s in plan.steps if isinstance(s, MatmulCall)]


def _run_both(g: Graph, inputs, target=CUDA):
    """(the fused plan's outputs on the reference executor, the unfused graph's), and the plan."""
    plan = to_plan(fuse(g, target), target=target)
    check_plan(plan)
    got = run_plan(plan, [a.copy() for a in inputs])
    return got, run_graph(g, [a.copy() for a in inputs]), plan


def _close(got, want, rtol, atol):
    for i, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=rtol, atol=atol,
                                   err_msg=f"output {i}")


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_tanh_gelu_training_step_epilogues(dtype):
    """Forward: bias + tanh-GELU in the GEMM, the pre-activation written as aux for the backward; the
    last Linear: bias. Backward: each weight-gradient GEMM also writes its Linear's bias gradient."""
    g, inputs = mlp_step("tanh", dtype=dtype)
    got, want, plan = _run_both(g, inputs)
    epilogues = sorted(c.epilogue for c in _calls(plan))
    assert epilogues.count("bias_gelu_aux") == 2 and epilogues.count("bias") == 1
    # the hidden Linears' (the last may ride in the loss's kernel); dW = dy^T x (the weight's layout,
    # ir/ops/linalg.py) sums its operand a = dy^T over k: bgrad_a
    assert epilogues.count("bgrad_a") >= 2
    for c in _calls(plan):
        if c.epilogue == "bias_gelu_aux":
            assert c.aux is not None and plan.buffers[c.aux].shape == plan.buffers[c.out].shape
        if c.epilogue.startswith("bgrad"):
            size = c.m if c.epilogue == "bgrad_a" else c.n
            assert plan.buffers[c.bgrad].shape[-1] == size and c.bgrad not in (c.out, c.a, c.b)
    gelus = [s for s in plan.steps if isinstance(s, KernelLaunch) and any(o.name == "gelu" for o in s.ops)]
    assert not gelus  # no GELU kernel in the forward
    column_sums = [s for s in plan.steps if isinstance(s, KernelLaunch) and s.ops[-1].name == "reduce_sum"
                   and list(s.ops[-1].attrs["axes"]) == [0] and len(s.ops) == 1]
    assert not column_sums
    _close(got, want, *((1e-5, 1e-5) if dtype == "f32" else (0.1, 2e-2)))


def test_erf_gelu_stays_a_kernel_after_the_gemm():
    """cuBLASLt has no erf-GELU: the GEMM takes the bias, the GELU is the kernel right after it;
    the backward still gets the BGRAD epilogues."""
    g, inputs = mlp_step("none")
    got, want, plan = _run_both(g, inputs)
    epilogues = [c.epilogue for c in _calls(plan)]
    assert epilogues.count("bias") == 3 and "bias_gelu_aux" not in epilogues and "bgrad_a" in epilogues
    steps = [s for s in plan.steps if isinstance(s, (KernelLaunch, MatmulCall))]
    for i, s in enumerate(steps):
        if isinstance(s, MatmulCall) and s.epilogue == "bias" and i + 1 < len(steps):
            nxt = steps[i + 1]
            assert isinstance(nxt, KernelLaunch) and [o.name for o in nxt.ops] == ["gelu"]
            break
    else:
        raise AssertionError("no bias GEMM followed by its GELU kernel")
    _close(got, want, 1e-5, 1e-5)


def test_aux_needs_a_width_multiple_of_8():
    """cuBLASLt's aux has a leading dimension that is a multiple of 8: at width 12 the backward's
    pre-activation is written by the bias GEMM and the GELU runs as a kernel; in a forward alone
    nothing reads the pre-activation, so bias + GELU are both in the GEMM at any width."""
    g, inputs = mlp_step("tanh", width=12)
    got, want, plan = _run_both(g, inputs)
    assert not [c for c in _calls(plan) if "gelu" in c.epilogue]
    _close(got, want, 1e-5, 1e-5)
    g, inputs = mlp_step("tanh", width=12, backward=False)
    got, want, plan = _run_both(g, inputs)
    assert [c.epilogue for c in _calls(plan)] == ["bias_gelu", "bias_gelu", "bias"]
    assert all(c.aux is None for c in _calls(plan))
    _close(got, want, 1e-5, 1e-5)


def _matmul_and_sum(transposed: bool, side: str) -> Graph:
    """out = a @ b with a sum over k of operand `side`; a read transposed (a folded permute) if asked."""
    g = Graph("bgrad")
    bld = Builder(g)
    x = g.add_input(TensorType((20, 13) if transposed else (13, 20), f32))
    b = g.add_input(TensorType((20, 11), f32))
    a = bld.permute(x, perm=[1, 0]) if transposed else x
    v, axes = (a, [1]) if side == "a" else (b, [0])
    g.outputs = [bld.matmul(a, b), bld.reduce_sum(v, axes=axes, keepdim=side == "b")]
    return verify(g)


@pytest.mark.parametrize("side", ["a", "b"])
@pytest.mark.parametrize("transposed", [False, True])
def test_bias_gradient_of_either_operand(side, transposed):
    g = _matmul_and_sum(transposed, side)
    r = np.random.default_rng(3)
    inputs = [r.standard_normal(v.type.shape).astype(np.float32) for v in g.inputs]
    got, want, plan = _run_both(g, inputs)
    (call,) = _calls(plan)
    # cuBLASLt sums only an operand stored [k, ...] (bgrad_supported): b as stored; a stored [m, k] is
    # refused, and a read through the permute shares its kernel with the sum (no lone sum to absorb)
    marked = side == "b"  # (b is never transposed here)
    assert call.epilogue == (f"bgrad_{side}" if marked else "none")
    assert len([s for s in plan.steps if isinstance(s, KernelLaunch) and s.grid]) == (0 if marked else 1)
    if marked:
        assert plan.buffers[call.bgrad].nbytes == (call.m if side == "a" else call.n) * 4
        assert f"epilogue {call.epilogue}" in print_graph(fuse(g, CUDA))
    _close(got, want, 1e-5, 1e-5)


@pytest.mark.parametrize("through", ["same", "reshaped"])
def test_bias_gradient_of_a_batched_linear(through):
    """A Linear on [batch, tokens, features]: its weight gradient reads dy flattened to [m, n] and
    transposed, its bias gradient sums dy over (0, 1), directly or through another reshape of the
    same data: the sum is the GEMM's BGRAD epilogue, no kernel of its own."""
    g = Graph("bgrad3")
    bld = Builder(g)
    root = g.add_input(TensorType((4, 5, 11), f32) if through == "same" else TensorType((20, 11), f32))
    x = g.add_input(TensorType((20, 13), f32))
    dy = root if through == "same" else bld.reshape(root, shape=[4, 5, 11])
    flat = bld.reshape(root, shape=[20, 11]) if through == "same" else root
    g.outputs = [bld.matmul(bld.permute(flat, perm=[1, 0]), x), bld.reduce_sum(dy, axes=[0, 1], keepdim=True)]
    verify(g)
    r = np.random.default_rng(4)
    inputs = [r.standard_normal(v.type.shape).astype(np.float32) for v in g.inputs]
    got, want, plan = _run_both(g, inputs)
    (call,) = _calls(plan)
    assert call.epilogue == "bgrad_a"
    assert not [s for s in plan.steps if isinstance(s, KernelLaunch) and s.grid]
    _close(got, want, 1e-5, 1e-5)


def test_without_the_epilogues_the_same_step_runs_as_kernels():
    """A target whose library runs only the old epilogues: same results, GELU and sums as kernels."""
    g, inputs = mlp_step("tanh")
    old = replace(CUDA, matmul_epilogues=frozenset({"bias", "relu", "bias_relu"}))
    got_old, want, plan_old = _run_both(g, inputs, old)
    got_new, _, plan_new = _run_both(g, inputs)
    assert {c.epilogue for c in _calls(plan_old)} <= {"none", "bias"}
    assert len(plan_new.steps) < len(plan_old.steps)
    _close(got_old, want, 1e-5, 1e-5)
    _close(got_new, got_old, 1e-5, 1e-5)


def test_by_default_a_bias_gradient_is_a_column_kernel_of_its_own():
    """Without Target.bgrad_epilogue (the default: runtime/backend.bgrad_enabled says why) each
    Linear's bias gradient is one column reduction over the tokens, neither a GEMM epilogue nor carried
    by the kernel that computes its input, and `flame explain` says so; the results are those of the unfused
    graph."""
    g, inputs = mlp_step("none")
    default = capabilities("cuda")
    assert not default.bgrad_epilogue
    got, want, plan = _run_both(g, inputs, default)
    assert not [c for c in _calls(plan) if c.epilogue.startswith("bgrad")]
    column_sums = [s for s in plan.steps if isinstance(s, KernelLaunch) and [o.name for o in s.ops] == ["reduce_sum"]
                   and list(s.ops[0].attrs["axes"]) == [0]]
    assert sorted(s.ops[0].inputs[0].shape for s in column_sums) == [(24, 4), (24, 16), (24, 16)]  # one per Linear
    assert all(s.reason.startswith("bias gradient (") and "FLAME_MATMUL_BGRAD=1" in s.reason for s in column_sums)
    _close(got, want, 1e-5, 1e-5)


def test_every_epilogue_is_one_the_runtime_maps():
    from flame.runtime import matmul

    assert set(MATMUL_EPILOGUES) | {"none"} == matmul.SUPPORTED_EPILOGUES
    assert CUDA.matmul_epilogues == frozenset(MATMUL_EPILOGUES)
    # the transposed issue swaps cuBLASLt's A and B: flame's bgrad_a is BGRADB, bgrad_b is BGRADA
    assert matmul._EPILOG_NAMES["bgrad_a"] == "BGRADB" and matmul._EPILOG_NAMES["bgrad_b"] == "BGRADA"


def test_explain_and_plan_text_name_the_epilogue_and_its_results():
    g, _ = mlp_step("tanh")
    fused = fuse(g, CUDA)
    plan = to_plan(fused, target=CUDA)
    report = explain_plan("step", fused, plan)
    assert "cuBLASLt call, epilogue bias_gelu_aux" in report and "cuBLASLt call, epilogue bgrad_a" in report
    lines = [ln for ln in str(plan).splitlines() if 'epilogue="bias_gelu_aux"' in ln]
    assert lines and all(ln.split(" = call")[0].count(", ") == 1 for ln in lines)  # out, aux


def test_a_bias_gradient_rides_a_gemm_only_over_an_operand_stored_k_first(monkeypatch):
    """cuBLASLt's BGRADA sums a stored transposed (read as ta), BGRADB b as stored. With as many tokens
    as hidden units, the first layer's weight gradient reads the GELU backward's result: where a kernel
    writes it transposed (not folded), its bias gradient runs as a reduction of its own, whose reason
    says so (on a GPU the call raised before); where the kernel writes it [k, ...], the bias gradient
    rides the GEMM as bgrad_a over it."""
    import flame
    import flame.nn as nn
    from flame.plan.steps import KernelLaunch, MatmulCall

    monkeypatch.setenv("FLAME_MATMUL_BGRAD", "1")
    flame.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 32)).to(flame.bf16)

    @flame.compile
    def step(x):
        loss = (model(x).float() ** 2).mean()
        loss.backward()
        return loss

    x = flame.tensor(np.random.default_rng(0).standard_normal((128, 32)).astype(np.float32)).to(flame.bf16)
    plan = step._lookup(step._args([x])).plan
    calls = [s for s in plan.steps if isinstance(s, MatmulCall)]
    assert all(s.ta for s in calls if s.epilogue == "bgrad_a")
    assert not any(s.tb for s in calls if s.epilogue == "bgrad_b")
    fallback = [s for s in plan.steps if isinstance(s, KernelLaunch) and "not stored [k, ...]" in s.reason]
    riding = [s for s in calls if s.epilogue.startswith("bgrad")]
    assert len(riding) + len(fallback) == 2  # the two bias gradients: in their GEMMs or, said why, of their own
    step(x)
    grads = [p.grad.numpy().astype(np.float32) for p in model.parameters()]
    assert all(np.isfinite(g).all() for g in grads) and np.abs(grads[1]).sum() > 0  # the first bias's gradient
