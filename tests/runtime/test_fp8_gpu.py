"""FP8 on the GPU (cuBLASLt's FP8 GEMM, the FP8 cast kernels, the recipe end to end), with the
FLAME_FP8_GEMM switch on: each against the reference executor's exact emulation (FP8-rounded inputs,
f32 accumulation). These are the tests that must pass before the switch may default to on."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import flame
import flame.nn.functional as F

E4M3, E5M2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2


@pytest.fixture
def fp8_on(monkeypatch):
    from flame.runtime import matmul

    monkeypatch.setattr(matmul, "fp8_gemm", True)


@pytest.mark.gpu
@pytest.mark.parametrize("fa,fb", [(E4M3, E4M3), (E5M2, E4M3), (E4M3, E5M2)])
@pytest.mark.parametrize("out", ["bfloat16", "float32"])
@pytest.mark.parametrize("mnk", [(64, 48, 32), (256, 512, 1024), (16, 16, 16)])
def test_fp8_gemm_matches_an_f32_gemm_of_fp8_inputs(fp8_on, fa, fb, out, mnk):
    import cupy

    from flame.runtime.matmul import fp8_matmul_into

    m, n, k = mnk
    rng = np.random.default_rng(m + n + k)
    a = rng.uniform(-8, 8, (m, k)).astype(fa)
    b = rng.uniform(-8, 8, (n, k)).astype(fb)
    ia, ib = np.float32(0.5), np.float32(0.03125)
    dt = ml_dtypes.bfloat16 if out == "bfloat16" else np.float32
    got = cupy.empty((m, n), dt)
    # CuPy has no FP8 types: the operands go as their bytes, their formats named
    fp8_matmul_into(got, cupy.asarray(a.view(np.uint8)), cupy.asarray(b.view(np.uint8)), cupy.asarray(np.array(ia)),
                    cupy.asarray(np.array(ib)), formats=(np.dtype(fa).name, np.dtype(fb).name))
    want = (a.astype(np.float64) @ b.astype(np.float64).T) * (float(ia) * float(ib))
    err = np.linalg.norm(cupy.asnumpy(got).astype(np.float64) - want) / np.linalg.norm(want)
    # Hopper's FP8 tensor cores keep about 13 significant bits in their sums, so an f32 result is good to
    # about 2^-13 relative, not to f32's 2^-24 (2.4e-5 to 1.1e-4 measured on an H100); bf16's rounding is 2^-9
    assert err < (1e-2 if out == "bfloat16" else 2.0**-11)


@pytest.mark.gpu
@pytest.mark.parametrize("scaling", ["current", "delayed"])
def test_fp8_recipe_end_to_end_agrees_with_the_reference(fp8_on, scaling):
    """A compiled training step of two Linears (FP8 forward, dgrad and wgrad; amax, scales and the
    delayed state in the CUDA graph), three steps on the GPU and on the reference executor."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 32, 64)).astype(np.float32)
    w0 = [(rng.standard_normal(s) * 0.05).astype(np.float32) for s in ((128, 64), (64, 128))]
    results = {}
    for device in ("cuda", "reference"):
        flame.set_device(device)
        ws = [flame.nn.Parameter(flame.tensor(w)) for w in w0]
        opt = flame.optim.AdamW(ws, lr=1e-3)
        recipe = flame.amp.Float8Recipe(scaling=scaling, amax_history_len=4)

        @flame.compile
        def step(xi, ws=ws, opt=opt, recipe=recipe):
            with flame.autocast(dtype=recipe):
                loss = (F.linear(F.gelu(F.linear(xi, ws[0])), ws[1]).float() ** 2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss

        losses = [step(flame.tensor(x)).item() for _ in range(3)]
        results[device] = (losses, [w.numpy() for w in ws])
    flame.set_device("cuda")
    np.testing.assert_allclose(results["cuda"][0], results["reference"][0], rtol=2e-2)
    for got, want in zip(results["cuda"][1], results["reference"][1]):
        assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-2


@pytest.mark.gpu
def test_fp8_gemm_without_the_switch_says_so(monkeypatch):
    from flame.errors import UnverifiedError
    from flame.runtime import matmul

    monkeypatch.setattr(matmul, "fp8_gemm", False)
    flame.set_device("cuda")
    w = flame.nn.Parameter(flame.tensor(np.ones((32, 32), np.float32)))
    x = flame.tensor(np.ones((16, 32), np.float32))
    assert x.to(flame.float8_e4m3fn).numpy().dtype == np.dtype(E4M3)  # FP8 tensors on the GPU read back as FP8
    with pytest.raises(UnverifiedError, match="FLAME_FP8_GEMM=0"):
        with flame.autocast(dtype=flame.float8_e4m3fn):
            F.linear(flame.tensor(np.ones((16, 32), np.float32)), w).numpy()
