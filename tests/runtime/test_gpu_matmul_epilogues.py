"""On a GPU: every cuBLASLt epilogue flame issues (runtime/matmul.py) against NumPy on small and odd
shapes, transposed operands and every float dtype; no allocation from the second call on (the aux and
bias-gradient outputs are the caller's buffers); and a compiled training step with those epilogues
on the CUDA executor against the same plan on the reference executor."""

from __future__ import annotations

import zlib
from dataclasses import replace

import numpy as np
import pytest

from flame.ir.dtypes import dtype_of
from flame.ir.ops.elementwise import gelu_tanh

pytestmark = pytest.mark.gpu

LIMIT = {"f32": 1e-5, "f16": 3e-3, "bf16": 2e-2}  # relative Frobenius error vs float64
SHAPES = [(33, 17, 24), (8, 5, 8), (128, 96, 64), (1, 3, 16), (257, 64, 40)]  # m, k, n (n % 8 == 0: aux)
FORWARD = ["gelu", "bias_gelu", "gelu_aux", "bias_gelu_aux", "bias", "relu", "bias_relu"]


def _rel(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


def _operands(rng, m, k, n, ta, tb, dt):
    np_dt = dtype_of(dt).np_dtype
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(np_dt)
    b = (rng.standard_normal((n, k) if tb else (k, n)) / np.sqrt(k)).astype(np_dt)
    a64 = np.swapaxes(a, 0, 1).astype(np.float64) if ta else a.astype(np.float64)
    b64 = np.swapaxes(b, 0, 1).astype(np.float64) if tb else b.astype(np.float64)
    return a, b, a64, b64


@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("epilogue", FORWARD)
def test_forward_epilogues(dt, ta, tb, epilogue):
    import cupy

    from flame.runtime.matmul import matmul_into

    rng = np.random.default_rng(zlib.crc32(repr((dt, ta, tb, epilogue)).encode()))
    for m, k, n in SHAPES:
        a, b, a64, b64 = _operands(rng, m, k, n, ta, tb, dt)
        bias = (0.5 * rng.standard_normal(n)).astype(a.dtype) if "bias" in epilogue else None
        z = a64 @ b64 + (0 if bias is None else bias.astype(np.float64))
        want = gelu_tanh(z) if "gelu" in epilogue else (np.maximum(z, 0) if "relu" in epilogue else z)
        out = cupy.full((m, n), np.nan, a.dtype)
        aux = cupy.full((m, n), np.nan, a.dtype) if epilogue.endswith("_aux") else None
        for _ in range(2):  # the second call reuses the planned Matmul (and re-points its aux)
            matmul_into(out, cupy.asarray(a), cupy.asarray(b), ta, tb, epilogue,
                        None if bias is None else cupy.asarray(bias), aux=aux)
        what = f"{epilogue} {dt} ta={ta} tb={tb} {(m, k, n)}"
        assert _rel(out.get(), want) < LIMIT[dt], what
        if aux is not None:
            assert _rel(aux.get(), z) < LIMIT[dt], f"aux of {what}"


@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("side", ["a", "b"])
def test_bias_gradient_epilogues(dt, ta, tb, side):
    """bgrad_a: sum over k of op(a) ([m], cuBLASLt's BGRADB in the transposed issue); bgrad_b: of
    op(b) ([n], BGRADA). Odd m, n; k >= 2."""
    import cupy

    from flame.runtime.matmul import bgrad_supported, matmul_into

    rng = np.random.default_rng(zlib.crc32(repr((dt, ta, tb, side)).encode()))
    if not bgrad_supported(f"bgrad_{side}", ta, tb):  # cuBLASLt refuses it: a clear error, no call
        a, b, _, _ = _operands(rng, 8, 4, 8, ta, tb, dt)
        with pytest.raises(ValueError, match="stored"):
            matmul_into(cupy.empty((8, 8), a.dtype), cupy.asarray(a), cupy.asarray(b), ta, tb, f"bgrad_{side}",
                        bgrad=cupy.empty((1, 8), a.dtype))
        return
    for m, k, n in [(33, 17, 21), (8, 2, 5), (128, 96, 64), (3, 300, 7)]:
        a, b, a64, b64 = _operands(rng, m, k, n, ta, tb, dt)
        out = cupy.full((m, n), np.nan, a.dtype)
        bgrad = cupy.full((1, m if side == "a" else n), np.nan, a.dtype)
        for _ in range(2):
            matmul_into(out, cupy.asarray(a), cupy.asarray(b), ta, tb, f"bgrad_{side}", bgrad=bgrad)
        what = f"bgrad_{side} {dt} ta={ta} tb={tb} {(m, k, n)}"
        assert _rel(out.get(), a64 @ b64) < LIMIT[dt], what
        want = a64.sum(1) if side == "a" else b64.sum(0)
        assert _rel(bgrad.get()[0], want) < LIMIT[dt], f"bgrad of {what}"


@pytest.mark.parametrize("epilogue", ["bias_gelu_aux", "bgrad_b", "bgrad_a"])
def test_no_allocation_after_the_first_call(epilogue):
    """A call allocates nothing for the aux / bias gradient (nvmath's Matmul allocated both in every
    execute(), flame used to take its output handlers off); flame points cuBLASLt at the
    caller's buffers, so from the second call on nothing is requested from CuPy's pool."""
    import cupy
    from cupy.cuda import memory_hook

    from flame.runtime.matmul import matmul_into

    class Requested(memory_hook.MemoryHook):
        name = "flame_epilogue_requested"

        def __init__(self):
            self.total = 0

        def malloc_preprocess(self, device_id, size, mem_size):
            self.total += mem_size

    m, k, n = 256, 128, 64
    ta = epilogue == "bgrad_a"  # the layout cuBLASLt sums (bgrad_supported): a stored [k, m]
    a = cupy.asarray(np.random.default_rng(0).standard_normal((k, m) if ta else (m, k)).astype(np.float32))
    b = cupy.asarray(np.random.default_rng(1).standard_normal((k, n)).astype(np.float32))
    out = cupy.empty((m, n), cupy.float32)
    kw = {"aux": cupy.empty((m, n), cupy.float32)} if epilogue.endswith("_aux") else {
        "bgrad": cupy.empty(m if epilogue == "bgrad_a" else n, cupy.float32)}
    bias = cupy.zeros(n, cupy.float32) if "bias" in epilogue else None
    ws = cupy.empty(32 << 20, cupy.uint8)
    matmul_into(out, a, b, ta, epilogue=epilogue, bias=bias, workspace=ws, **kw)
    cupy.cuda.Device().synchronize()
    hook = Requested()
    with hook:
        for _ in range(3):
            matmul_into(out, a, b, ta, epilogue=epilogue, bias=bias, workspace=ws, **kw)
        cupy.cuda.Device().synchronize()
    assert hook.total == 0


@pytest.mark.parametrize("approximate", ["tanh", "none"])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_compiled_training_step_matches_the_reference(monkeypatch, approximate, dtype):
    """The MLP training step of tests/plan/test_matmul_epilogues.py (GEMMs with bias_gelu_aux / bias
    and bgrad_a epilogues) run by the CUDA executor, replayed as a CUDA graph over three calls, equals
    the same plan on the reference executor."""
    import cupy

    from flame.passes.fuse import fuse
    from flame.plan.build import to_plan
    from flame.runtime.backend import capabilities
    from flame.runtime.cuda import CudaExecutor
    from flame.runtime.reference import run_plan
    from tests.plan.test_matmul_epilogues import mlp_step

    monkeypatch.setenv("FLAME_CUDA_GRAPHS", "1")
    g, inputs = mlp_step(approximate, dtype=dtype)
    target = replace(capabilities("cuda"), bgrad_epilogue=True)  # BGRAD too (off by default)
    plan = to_plan(fuse(g, target), target=target)
    epilogues = {s.epilogue for s in plan.steps if hasattr(s, "epilogue")}
    assert "bgrad_a" in epilogues and (approximate != "tanh" or "bias_gelu_aux" in epilogues)
    run = CudaExecutor().compile(plan)
    ref_in = [a.copy() for a in inputs]
    dev_in = [cupy.asarray(a) for a in inputs]
    tol = (1e-4, 1e-5) if dtype == "f32" else (0.1, 3e-2)
    for call in range(3):  # aliased inputs (parameters, moments) are updated in place by both
        want = run_plan(plan, ref_in)
        got = run(dev_in)
        for i, (w, o) in enumerate(zip(want, got)):
            np.testing.assert_allclose(cupy.asnumpy(o).astype(np.float64), np.asarray(w, np.float64),
                                       rtol=tol[0], atol=tol[1], err_msg=f"call {call} output {i}")
        for i, v in g.aliases.items():
            ref_in[v] = np.array(want[i])
            dev_in[v] = got[i]
