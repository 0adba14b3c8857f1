"""plan_memory on the reference executor: best-fit offsets never overlap live buffers (random graphs,
with aliases and foldable transposes, agree with run_graph), aliased outputs are written into the
input's own buffer when legal and copied otherwise, matmuls fold transposes and apply epilogues, and
memory_report describes a training step before it runs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flame
from flame.ir import Builder, Graph, TensorType, dtype_of, verify
from flame.plan.build import to_plan
from flame.plan.memory import check_plan
from flame.plan.steps import ALIGN, Copy, KernelLaunch, LibraryCall, MatmulCall
from flame.runtime.reference import _matmul, run_graph, run_plan
from tests.runtime.cases import random_graph
from tests.runtime.test_plan import fake_lower

f32 = dtype_of("f32")


def _with_extras(rng: np.random.Generator, n_ops: int) -> tuple[Graph, list[np.ndarray]]:
    """A random graph, plus matmuls of transposed operands and outputs aliased to inputs."""
    g, inputs = random_graph(rng, n_ops)
    b = Builder(g)
    sq = g.inputs[3]
    vals = [v for v in [*g.inputs[:3], *(op.out for op in g.ops)] if v.shape == (4, 6)]
    t = b.matmul(vals[int(rng.integers(len(vals)))], b.transpose_last(sq))  # folded: tb
    vals.append(b.matmul(b.transpose_last(b.transpose_last(t)), sq))
    for i in rng.choice(3, size=int(rng.integers(0, 3)), replace=False):
        g.aliases[len(g.outputs)] = int(i)
        g.outputs.append(vals[int(rng.integers(len(vals)))])
    if rng.integers(2):
        g.aliases[len(g.outputs)] = 3
        g.outputs.append(b.mul(sq, 0.5))
    return verify(g), inputs


def _run_and_compare(g, inputs, lower=fake_lower):
    plan = to_plan(g, lower)
    check_plan(plan)
    want = run_graph(g, inputs)
    arrays = [a.copy() for a in inputs]
    got = run_plan(plan, arrays)
    for w, o in zip(want, got):
        np.testing.assert_allclose(o, w, rtol=1e-5, atol=1e-6)
    for o, i in g.aliases.items():  # the input array itself holds the new value, as after compile's
        if got[o] is not arrays[i]:  # writeback, which only runs where the plan could not update in place
            arrays[i][...] = got[o]
    for o, i in g.aliases.items():
        np.testing.assert_allclose(arrays[i], want[o], rtol=1e-5, atol=1e-6)
    return plan, arrays, got


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n_ops=st.integers(1, 24))
def test_random_plans_with_aliases_match_the_oracle(seed, n_ops):
    g, inputs = _with_extras(np.random.default_rng(seed), n_ops)
    _run_and_compare(g, inputs)


def test_best_fit_reuses_and_aligns():
    g = Graph("sizes")
    b = Builder(g)
    x = g.add_input(TensorType((64, 64), f32))
    big = b.exp(x)  # 16 KiB, dead after `small`
    small = b.reduce_sum(big, axes=[1], keepdim=True)  # 256 B
    y = b.mul(b.sin(b.add(x, small)), 2.0)  # 16 KiB values that can take big's slot
    g.outputs = [b.reduce_sum(y, axes=[0, 1], keepdim=False)]
    plan, _, _ = _run_and_compare(verify(g), [np.ones((64, 64), np.float32)])
    temps = [b for b in plan.buffers.values() if b.role in ("temporary", "scratch")]
    assert all(t.offset % ALIGN == 0 for t in temps)
    assert plan.arena_size < sum(-(-t.nbytes // ALIGN) * ALIGN for t in temps)
    assert plan.arena_size <= 2 * 16384 + 2 * ALIGN  # two big slots at most, whatever the order


def _sgd_graph(later_reader: bool) -> Graph:
    g = Graph("sgd")
    b = Builder(g)
    p = g.add_input(TensorType((32,), f32), "param")
    grad = g.add_input(TensorType((32,), f32))
    new = b.sub(p, b.mul(grad, 0.1))
    g.outputs = [b.reduce_sum(b.mul(p, p), axes=[0], keepdim=False)] if later_reader else []
    g.aliases[len(g.outputs)] = 0
    g.outputs.append(new)
    if later_reader:  # p is read again after the update: the update must not overwrite it early
        g.outputs.append(b.add(p, 1.0))
    return verify(g)


def test_aliased_output_is_written_into_the_input_buffer():
    g = _sgd_graph(False)
    plan = to_plan(g, fake_lower)
    assert plan.outputs[0] == plan.inputs[0]
    assert not any(isinstance(s, Copy) for s in plan.steps)
    p, grad = np.ones(32, np.float32), np.full(32, 2.0, np.float32)
    (out,) = run_plan(plan, [p, grad])
    assert out is p
    np.testing.assert_allclose(p, 0.8)


def test_alias_with_a_later_reader_gets_a_copy():
    g = _sgd_graph(True)
    plan, arrays, got = _run_and_compare(g, [np.ones(32, np.float32), np.full(32, 2.0, np.float32)])
    last = plan.steps[-1]
    assert isinstance(last, Copy) and last.dst == plan.inputs[0]
    assert got[1] is arrays[0]
    np.testing.assert_allclose(got[2], 2.0)  # read the old p


def test_matmul_folds_a_transpose_and_skips_its_kernel():
    g = Graph("mm")
    b = Builder(g)
    x = g.add_input(TensorType((8, 16), f32))
    w = g.add_input(TensorType((4, 16), f32), "param")
    wt = b.transpose_last(w)
    g.outputs = [b.matmul(x, wt), b.matmul(b.transpose_last(x), b.transpose_last(b.transpose_last(x)))]
    rng = np.random.default_rng(0)
    plan, _, _ = _run_and_compare(verify(g), [rng.standard_normal((8, 16), np.float32),
                                              rng.standard_normal((4, 16), np.float32)])
    calls = [s for s in plan.steps if isinstance(s, LibraryCall)]
    assert calls[0].tb and calls[0].b == plan.inputs[1]
    assert calls[1].ta and calls[1].tb and calls[1].a == plan.inputs[0]
    assert len([s for s in plan.steps if isinstance(s, KernelLaunch)]) == 1  # x^T, read by a permute


def test_reference_matmul_epilogues():
    g = Graph("mm")
    b = Builder(g)
    a = g.add_input(TensorType((5, 3), f32))
    w = g.add_input(TensorType((3, 4), f32))
    b.matmul(a, w)
    op = g.ops[-1]
    rng = np.random.default_rng(1)
    av, wv, bias = (rng.standard_normal(s).astype(np.float32) for s in ((5, 3), (3, 4), (4,)))
    for ep, want in [("bias", av @ wv + bias), ("relu", np.maximum(av @ wv, 0)),
                     ("bias_relu", np.maximum(av @ wv + bias, 0))]:
        call = MatmulCall.of(op, 0, 1, 3, epilogue=ep, bias=2 if "bias" in ep else None)
        bufs = {0: av, 1: wv, 2: bias, 3: np.empty((5, 4), np.float32)}
        _matmul(call, bufs, None)
        np.testing.assert_allclose(bufs[3], want, rtol=1e-5, atol=1e-6)


def _mlp_step():
    rng = np.random.default_rng(0)
    params = [flame.tensor((rng.standard_normal((10, 32)) * 0.3).astype(np.float32), requires_grad=True),
              flame.tensor(np.zeros(32, np.float32), requires_grad=True),
              flame.tensor((rng.standard_normal((32, 1)) * 0.3).astype(np.float32), requires_grad=True)]
    w1, b1, w2 = params

    @flame.compile
    def step(x, y):
        h = (x @ w1 + b1).tanh()
        loss = ((h @ w2 - y) ** 2).mean()
        loss.backward()
        with flame.no_grad():
            for p in params:
                p.copy_(p - 0.05 * p.grad)
                p.grad = None
        return loss

    x = flame.tensor(rng.standard_normal((64, 10)).astype(np.float32))
    y = flame.tensor(rng.standard_normal((64, 1)).astype(np.float32))
    return step, params, x, y


def test_compiled_sgd_step_updates_parameters_in_place():
    step, params, x, y = _mlp_step()
    before = [p._data for p in params]
    values = [p._data.copy() for p in params]
    losses = [float(step(x, y)) for _ in range(3)]
    assert losses[-1] < losses[0]
    for p, data, v in zip(params, before, values):
        assert p._data is data and not np.allclose(p._data, v)


def test_memory_report_of_a_training_step():
    step, params, x, y = _mlp_step()
    rep = step.memory_report(x, y)
    assert rep.peak == rep.arena + sum(rep.bound.values())
    assert rep.bound["param"] == (10 * 32 + 32 + 32) * 4 and rep.bound["input"] == (64 * 10 + 64) * 4
    assert rep.live_at_peak and all(line for *_, line in rep.live_at_peak)
    saved = [s for s, _, _ in rep.saved]
    assert any("tanh" in s for s in saved), saved  # h is kept for the backward of tanh and of h @ w2
    assert rep.saved_bytes >= 64 * 32 * 4
    text = str(rep)
    assert text.startswith("memory plan of step: peak ") and "saved for backward:" in text
    first = params[0]._data
    step(x, y)  # the report's trace is reused by the first call
    assert params[0]._data is first


@pytest.mark.parametrize("shape", [(0, 3), (2, 3)])
def test_an_argument_updated_in_place_and_returned_is_returned_as_updated(shape):
    @flame.compile
    def step(b):
        b.fill_(0.5)
        return b.sum(), b

    b = flame.zeros(*shape)
    total, same = step(b)
    np.testing.assert_array_equal(same.numpy(), np.full(shape, 0.5, np.float32))
    np.testing.assert_array_equal(b.numpy(), np.full(shape, 0.5, np.float32))
    assert float(total) == 0.5 * np.prod(shape)
