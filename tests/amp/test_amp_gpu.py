"""On a GPU: the autocast block step, the GradScaler step (replayed as one CUDA graph, the skip and the
scale update on the device) and the memory-budgeted step give what the reference executor gives, and
the budgeted plan's pool growth stays under its planned peak."""

from __future__ import annotations

import numpy as np
import pytest

import flame
from tests.amp import test_grad_scaler as gs
from tests.amp import test_remat as rm

pytestmark = pytest.mark.gpu


def _on(device, fn):
    from flame.runtime import device as dev

    old = dev._chosen[:]
    dev._chosen[:] = [device]
    dev.executor.cache_clear()
    try:
        return fn()
    finally:
        dev._chosen[:] = old
        dev.executor.cache_clear()


def _scaler_run():
    x, lin, opt, scaler = gs._flame_setup()

    @flame.compile
    def step(x, s):
        loss = (lin(x) ** 2).mean() * s
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        return loss

    out = []
    for s in gs.SCHEDULE:
        step(x, flame.tensor(s))
        out.append((scaler.get_scale(), int(scaler._growth_tracker.item()), lin.weight.numpy().copy()))
    return out


def test_grad_scaler_step_on_the_gpu_matches_the_reference():
    want, got = _on("reference", _scaler_run), _on("cuda", _scaler_run)
    for (s0, t0, w0), (s1, t1, w1) in zip(want, got):
        assert s0 == s1 and t0 == t1
        np.testing.assert_allclose(w1, w0, rtol=1e-4, atol=1e-5)


def test_memory_budget_on_the_gpu_matches_the_reference_and_the_plan():
    import cupy

    def run():
        return rm._run(budget=rm.BUDGET)

    _, _, ref_report, ref_loss, ref_grads = _on("reference", run)
    pool = cupy.get_default_memory_pool()

    def gpu():
        before = pool.used_bytes()
        out = rm._run(budget=rm.BUDGET)
        return out, pool.used_bytes() - before

    (_, _, report, loss, grads), grown = _on("cuda", gpu)
    assert report.peak <= report.budget.bytes
    assert abs(loss - ref_loss) <= 1e-5 * abs(ref_loss)
    for a, b in zip(grads, ref_grads):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert grown <= report.budget.unconstrained_peak


def test_autocast_block_on_the_gpu_matches_torch():
    from tests.amp.test_autocast import test_block_forward_and_gradients_match_torch_autocast_in_bf16 as check

    _on("cuda", lambda: check(True))
