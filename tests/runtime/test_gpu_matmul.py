"""Matmul through cuBLASLt (runtime.matmul) for every transpose / batch / broadcast combination and
dtype, against NumPy in float64 on the same (rounded) inputs, by relative Frobenius error."""

from __future__ import annotations

import itertools
import zlib

import numpy as np
import pytest

from flame.ir.dtypes import dtype_of

# (a batch, b batch): none, shared operand, equal, partial broadcast both ways
BATCHES = [((), ()), ((3,), ()), ((), (3,)), ((2, 3), (2, 3)), ((2, 1), (1, 3)), ((4, 1, 2), (3, 1))]
SIZES = [(33, 65, 17), (1, 8, 1), (128, 64, 96)]
LIMIT = {"f64": 1e-12, "f32": 1e-5, "f16": 2e-3, "bf16": 1e-2}


def _operand(rng, batch, rows, cols, transposed, dt):
    """An operand of logical shape batch+[rows, cols], stored transposed if asked."""
    shape = batch + ((cols, rows) if transposed else (rows, cols))
    return rng.standard_normal(shape).astype(dtype_of(dt).np_dtype)


def _rel_err(got, a, b, ta, tb):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = np.matmul(np.swapaxes(a64, -1, -2) if ta else a64, np.swapaxes(b64, -1, -2) if tb else b64)
    assert got.shape == want.shape
    return np.linalg.norm(got.astype(np.float64) - want) / max(np.linalg.norm(want), 1e-30)


@pytest.mark.gpu
@pytest.mark.parametrize("dt", ["f32", "f16", "bf16", "f64"])
@pytest.mark.parametrize("ta,tb", list(itertools.product([False, True], repeat=2)))
@pytest.mark.parametrize("batches", BATCHES, ids=[f"{a}x{b}" for a, b in BATCHES])
def test_matmul_layouts(dt, ta, tb, batches):
    import cupy

    from flame.runtime.matmul import matmul_into

    rng = np.random.default_rng(zlib.crc32(repr((dt, ta, tb, batches)).encode()))
    for m, k, n in SIZES:
        a = _operand(rng, batches[0], m, k, ta, dt)
        b = _operand(rng, batches[1], k, n, tb, dt)
        batch = np.broadcast_shapes(batches[0], batches[1])
        out = cupy.full(batch + (m, n), np.nan, dtype=a.dtype)
        for _ in range(2):  # the second call reuses the planned Matmul with new operands
            matmul_into(out, cupy.asarray(a), cupy.asarray(b), ta=ta, tb=tb)
        err = _rel_err(out.get(), a, b, ta, tb)
        assert err < LIMIT[dt], f"{dt} ta={ta} tb={tb} {batches} {(m, k, n)}: error {err:.2e}"


@pytest.mark.gpu
def test_tf32_only_when_allowed(monkeypatch):
    import cupy

    from flame.runtime import matmul

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((256, 1024)).astype(np.float32), rng.standard_normal((1024, 256)).astype(np.float32)
    errs = {}
    for allow in (False, True):
        monkeypatch.setattr(matmul, "allow_tf32", allow)
        out = cupy.empty((256, 256), np.float32)
        matmul.matmul_into(out, cupy.asarray(a), cupy.asarray(b))
        errs[allow] = _rel_err(out.get(), a, b, False, False)
    assert errs[False] < 1e-6 < 1e-4 < errs[True] < 1e-2, errs


@pytest.mark.gpu
def test_zero_sized_matmul():
    import cupy

    from flame.runtime.matmul import matmul_into

    out = cupy.full((2, 3, 4), np.nan, dtype=np.float32)
    matmul_into(out, cupy.ones((2, 3, 0), np.float32), cupy.ones((2, 0, 4), np.float32))
    assert float(abs(out).max()) == 0.0


@pytest.mark.gpu
@pytest.mark.parametrize("epilogue", ["none", "bias", "bgrad_a"])
def test_autotune_times_every_algorithm_and_keeps_a_correct_one(monkeypatch, epilogue):
    """FLAME_MATMUL_AUTOTUNE: a GEMM of at least TUNE_MIN_FLOPS gets every algorithm of its plan
    timed once (outside a capture), remembers its choice, and still computes the product (and the
    epilogue's bias or bias gradient); smaller ones keep the heuristic's first without timing."""
    import cupy

    from flame.runtime import matmul

    monkeypatch.setattr(matmul, "autotune", True)
    monkeypatch.setattr(matmul, "TUNE_MIN_FLOPS", 2 * 256 * 512 * 384)
    timed = []
    real = matmul.algorithm_times
    monkeypatch.setattr(matmul, "algorithm_times",
                        lambda gemm, call, s: timed.append(len(gemm.algorithms)) or real(gemm, call, s))
    rng = np.random.default_rng(5)
    for m, k, n, tuned in ((256, 384, 512, True), (64, 32, 48, False)):
        ta = epilogue == "bgrad_a"  # cuBLASLt sums a only when it is stored [k, m]
        a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        bias = rng.standard_normal(n).astype(np.float32)
        before = len(timed)
        for _ in range(3):
            out = cupy.full((m, n), np.nan, np.float32)
            grad = cupy.full(m, np.nan, np.float32) if epilogue == "bgrad_a" else None
            matmul.matmul_into(out, cupy.asarray(a), cupy.asarray(b), ta=ta, epilogue=epilogue,
                               bias=cupy.asarray(bias) if epilogue == "bias" else None, bgrad=grad)
            want = (a.T if ta else a).astype(np.float64) @ b + (bias if epilogue == "bias" else 0)
            np.testing.assert_allclose(out.get(), want, rtol=1e-4, atol=1e-3)
            if grad is not None:
                np.testing.assert_allclose(grad.get(), a.sum(axis=0), rtol=1e-4, atol=1e-3)
        assert len(timed) - before == (1 if tuned else 0)  # timed at the first call only
    assert timed and all(n >= 1 for n in timed)
