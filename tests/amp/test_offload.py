"""Offloading under an activation budget: where the Target's rates make a host copy cheaper than
recomputing, the solver moves kept activations to pinned host memory after their last forward use
and back before their backward use. The values come back byte for byte (gradients bit-identical to
the plan without a budget on the reference executor, and close to torch's), the host buffers are
outside the device arena, the memory report lists them, and the plan overlaps each copy with compute
(its Wait after the next compute step). On a GPU the copies run on their own stream while compute
runs, and the measured peak stays within the plan."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
import torch

import flame
import flame.compiler as compiler
import flame.nn as nn
from flame.plan.memory import planned_peak
from flame.plan.steps import HostCopy, Wait

LAYERS, WIDTH, BATCH = 3, 32, 64


@pytest.fixture
def slow_compute(monkeypatch):
    """A Target whose compute is so slow next to its host link that offloading beats recomputing."""
    settings = compiler._settings

    def slow(executor_name, optimize):
        key, target = settings(executor_name, optimize)
        rates = dict(matmul_rate=1.0, matmul_rate_f32=1.0, memory_bandwidth=1.0, host_link_bandwidth=1e15)
        return key, dataclasses.replace(target, **rates)

    monkeypatch.setattr(compiler, "_settings", slow)


def _model(width=WIDTH):
    flame.manual_seed(0)
    return nn.Sequential(*[m for _ in range(LAYERS) for m in (nn.Linear(width, width), nn.LayerNorm(width), nn.GELU())])


def _run(budget=None, width=WIDTH, batch=BATCH):
    model = _model(width)

    def step(x):
        loss = (model(x) ** 2).mean()
        loss.backward()
        return loss

    f = flame.compile(step, name="step", activation_budget=budget)
    x = flame.tensor(np.random.default_rng(1).standard_normal((batch, width)).astype(np.float32))
    report = f.memory_report(x)
    loss = f(x)
    return f, report, loss.item(), [p.grad.numpy().copy() for p in model.parameters()]


def test_offload_round_trips_values_exactly(slow_compute):
    _, base, loss0, grads0 = _run()
    f, report, loss, grads = _run(0.2)
    assert report.offloaded, str(report)
    assert loss == loss0
    for g, g0 in zip(grads, grads0):
        assert g.tobytes() == g0.tobytes()
    # and against torch (f64)
    tm = torch.nn.Sequential(
        *[m for _ in range(LAYERS) for m in (torch.nn.Linear(WIDTH, WIDTH), torch.nn.LayerNorm(WIDTH), torch.nn.GELU())]
    ).double()
    with torch.no_grad():
        for tp, p in zip(tm.parameters(), _model().parameters()):
            tp.copy_(torch.from_numpy(p.numpy().astype(np.float64)))
    x = torch.from_numpy(np.random.default_rng(1).standard_normal((BATCH, WIDTH)))
    (tm(x) ** 2).mean().backward()
    for g, tp in zip(grads, tm.parameters()):
        np.testing.assert_allclose(g, tp.grad.numpy(), rtol=2e-4, atol=2e-6)
    # what is offloaded is held on the host, outside the arena, and no longer counts as saved
    a = report.activation
    assert a.kept == report.saved_bytes <= a.bytes < base.saved_bytes
    plan = f._last.plan
    hosts = [b for b in plan.buffers.values() if b.role == "host"]
    assert len(hosts) == len(report.offloaded) and all(b.offset is None for b in hosts)
    assert {kind for kind, *_ in a.choices} == {"recompute", "offload"}
    assert "offloaded to host memory" in str(report) and "offload " in str(report)


def test_each_copy_overlaps_compute_in_the_plan(slow_compute):
    f, report, _, _ = _run(0.2)
    steps = f._last.plan.steps
    copies = [i for i, s in enumerate(steps) if isinstance(s, HostCopy)]
    assert len(copies) == 2 * len(report.offloaded)
    for i in copies:
        copy = steps[i]
        wait = next(j for j in range(i + 1, len(steps)) if isinstance(steps[j], Wait) and steps[j].out == copy.out)
        assert steps[wait].stream == "host"
        between = [s for s in steps[i + 1 : wait] if s.ops and not isinstance(s, HostCopy)]
        assert between, f"nothing runs while {copy.format(f._last.plan.graph.numbering())} does"
        if not copy.to_host:  # a reload's wait sits right before the step reading it
            assert copy.out in steps[wait + 1].reads or any(copy.out in s.reads for s in steps[wait + 1 : wait + 2])


def test_explain_lists_saved_recomputed_and_offloaded(slow_compute):
    from flame.explain import explain_plan

    f, _, _, _ = _run(0.2)
    c = f._last
    text = explain_plan("step", c.graph, c.plan)
    for words in ("saved for backward", "recomputed in the backward", "offloaded to host memory", "activation budget"):
        assert words in text


@pytest.mark.gpu
def test_gpu_offload_copies_overlap_compute_and_the_peak_stays_within_the_plan(slow_compute):
    import cupy

    flame.set_device("cuda")
    width, batch = 1024, 8192
    _, _, loss0, grads0 = _run(None, width, batch)
    flame.cuda.synchronize()
    flame.cuda.reset_peak_memory_stats()
    before = flame.cuda.memory_allocated()
    f, report, loss, grads = _run(0.2, width, batch)
    flame.cuda.synchronize()
    assert report.offloaded
    assert flame.cuda.max_memory_allocated() - before <= 1.05 * planned_peak(f._last.plan) + (1 << 20)
    np.testing.assert_allclose(loss, loss0, rtol=1e-5)
    for g, g0 in zip(grads, grads0):
        np.testing.assert_allclose(g, g0, rtol=1e-4, atol=1e-6)
    # timeline: the same plan with its copies on the compute stream (no overlap) takes longer
    from flame.runtime.cuda import CudaExecutor

    plan = f._last.plan
    serial = dataclasses.replace(plan, steps=[dataclasses.replace(s, overlap=False) if isinstance(s, HostCopy) else s
                                              for s in plan.steps if not (isinstance(s, Wait) and s.stream == "host")])
    rng = np.random.default_rng(0)
    arrays = [cupy.asarray(rng.standard_normal(v.type.shape).astype(v.type.dtype.np_dtype)) for v in plan.graph.inputs]

    def timed(run):
        run(list(arrays))
        cupy.cuda.Device().synchronize()
        start = time.perf_counter()
        for _ in range(5):
            run(list(arrays))
        cupy.cuda.Device().synchronize()
        return time.perf_counter() - start

    overlapped, sequential = timed(CudaExecutor().compile(plan)), timed(CudaExecutor().compile(serial))
    assert overlapped < 0.95 * sequential, (overlapped, sequential)
