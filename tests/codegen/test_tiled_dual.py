"""A pointwise value needed both in its own layout and transposed (FP8 training: a cast that one fp8_matmul
reads as it is and another transposed, since cuBLASLt's FP8 GEMM takes both operands K-major) is ONE tiled
kernel that reads the source once and writes the value as the tile fills and its transpose through shared
memory (passes/fuse_transposes.py, codegen/transpose.lower_tiled_map): planned for the CUDA target, the
transpose kernel is gone, the values on the reference executor are the unfused ops' (eager) bit for bit,
the kernel compiles with NVRTC for sm_90, and (marked gpu) it writes torch's bytes at sizes that are not
multiples of the tile and at the Llama weights' shapes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from flame.codegen.nvrtc import compile_cubin
from flame.frontend.dispatch import apply
from flame.ir.dtypes import f8e4m3, f8e5m2, fp8_max
from tests.conftest import on_device

CASES = [  # (x's shape [m, k], x's dtype, x8's FP8 dtype): odd extents, f32 / f16 / bf16 sources
    ((96, 200), "bfloat16", f8e4m3),
    ((130, 72), "float32", f8e5m2),
    ((72, 136), "float16", f8e4m3),
]


def _data(shape, seed: int = 0) -> np.ndarray:
    """Normal values with some past the FP8 range and a NaN (the saturation and NaN paths)."""
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 40
    a.reshape(-1)[:3] = (np.nan, 1e6, -1e6)
    return a


def _cast(x, s, dtype):
    return apply("scaled_cast", x, s, dtype=dtype)


def _gemm(a8, b8, inv):
    return apply("fp8_matmul", a8, b8, inv, inv, out_dtype=flame.bf16)


def _gemms(x, w, g, s, dtype):
    """x8 read as it is (y = x8 @ w8^T) and transposed (z = g8 @ x8): a forward and a weight-gradient GEMM."""
    x8, inv = _cast(x, s, dtype), s.reciprocal()
    y = _gemm(x8, _cast(w, s, f8e4m3), inv)
    z = _gemm(_cast(g, s, f8e4m3), x8.transpose(0, 1), inv)
    return y, z, x8


def _chain(x, w, g, s, dtype):
    """Pointwise work before the cast, its result returned too: two values written in x's layout."""
    h = (x * 1.5 + 0.25).sigmoid()
    return (h, *_gemms(h * 30.0, w, g, s, dtype))


def _want(a: np.ndarray, src: str, scale: float, dtype) -> torch.Tensor:
    """scaled_cast's definition (ir/ops/fp8.py) in torch: the source's values times the scale, saturated
    to the format's range (NaN kept), rounded once to FP8."""
    lim = fp8_max(dtype)
    x = torch.tensor(a).to(getattr(torch, src)).float()
    fp8 = torch.float8_e4m3fn if dtype == f8e4m3 else torch.float8_e5m2
    return (x * scale).clamp(-lim, lim).to(fp8)


def _bits(a) -> np.ndarray:
    return np.asarray(a).view(np.uint8)


def _same(got, want: torch.Tensor) -> None:
    """The same FP8 values bit for bit, NaN as NaN whatever its sign bit (torch's NaN has it set)."""
    g, w = np.asarray(got.numpy()).astype(np.float32), want.float().numpy()
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    keep = ~np.isnan(w)
    np.testing.assert_array_equal(_bits(got.numpy())[keep], want.contiguous().view(torch.uint8).numpy()[keep])


def _inputs(shape, src: str):
    m, k = shape
    x = flame.tensor(_data(shape)).to(getattr(flame, src))
    w = flame.tensor(np.random.default_rng(1).standard_normal((48, k)).astype(np.float32))
    g = flame.tensor(np.random.default_rng(2).standard_normal((32, m)).astype(np.float32)).to(flame.bf16)
    return x, w, g, flame.tensor(np.float32(3.5))


def _dual_kernel(step):
    kernels = step._last.plan.kernels()
    assert not [k.name for k in kernels if k.name.startswith("permute_")]  # no transpose kernel of its own
    (k,) = [k for k in kernels if "_and_transposed_tiled_" in k.name]
    return k


@pytest.mark.parametrize("shape,src,dtype", CASES)
def test_a_cast_read_as_it_is_and_transposed_is_one_tiled_kernel(cuda_target, shape, src, dtype):
    x, w, g, s = _inputs(shape, src)
    step = flame.compile(_gemms)
    got = step(x, w, g, s, dtype)
    k = _dual_kernel(step)
    assert k.name.startswith(f"fused_scaled_cast_{dtype.name}_{shape[0]}x{shape[1]}_and_transposed_tiled_")
    assert "__shared__" in k.source and k.n_outputs == 2
    eager = _gemms(x, w, g, s, dtype)  # the unfused ops, one by one
    for a, b in zip(got, eager):
        np.testing.assert_array_equal(_bits(a.numpy()), _bits(b.numpy()))
    _same(got[2], _want(_data(shape), src, 3.5, dtype))
    assert compile_cubin(k.source, "sm_90")[:4] == b"\x7fELF"


def test_a_pointwise_chain_writes_each_value_it_returns(cuda_target):
    x, w, g, s = _inputs((96, 200), "bfloat16")
    step = flame.compile(_chain)
    got = step(x, w, g, s, f8e4m3)
    k = _dual_kernel(step)
    assert k.name.startswith("fused_mul_add_sigmoid_") and k.n_outputs == 3  # h, x8 and x8^T
    for a, b in zip(got, _chain(x, w, g, s, f8e4m3)):
        np.testing.assert_array_equal(_bits(a.numpy()), _bits(b.numpy()))
    assert compile_cubin(k.source, "sm_90")[:4] == b"\x7fELF"


def test_switch_off_gives_the_elementwise_kernel(cuda_target, monkeypatch):
    monkeypatch.setenv("FLAME_TILED_MAP", "0")
    x, w, g, s = _inputs((96, 200), "bfloat16")
    step = flame.compile(_gemms)
    got = step(x, w, g, s, f8e4m3)
    assert not any("_tiled_" in k.name for k in step._last.plan.kernels())
    for a, b in zip(got, _gemms(x, w, g, s, f8e4m3)):
        np.testing.assert_array_equal(_bits(a.numpy()), _bits(b.numpy()))


def _both(x, s, dtype):
    """x8 and x8^T as the step's outputs: the vertical rule puts them in one kernel, the same tiled kernel."""
    x8 = _cast(x, s, dtype)
    return x8, x8.transpose(-1, -2)


def test_a_batch_of_transposes_with_the_value_compiles(cuda_target):
    a = _data((3, 40, 72))
    x, s = flame.tensor(a), flame.tensor(np.float32(3.5))
    step = flame.compile(_both)
    x8, x8t = step(x, s, f8e4m3)
    (k,) = step._last.plan.kernels()
    assert k.name.startswith("fused_scaled_cast_f8e4m3_3x40x72_and_transposed_tiled_")
    want = _want(a, "float32", 3.5, f8e4m3)
    _same(x8, want)
    _same(x8t, want.transpose(-1, -2))
    assert compile_cubin(k.source, "sm_90")[:4] == b"\x7fELF"


GPU_CASES = CASES + [  # a batch, the Llama-7B block's weights and gradients in both orientations, an f32 input
    ((3, 40, 72), "float32", f8e4m3),
    ((4096, 11008), "bfloat16", f8e4m3),
    ((11008, 4096), "bfloat16", f8e4m3),
    ((4096, 11008), "bfloat16", f8e5m2),
    ((1024, 4096), "bfloat16", f8e4m3),
    ((4096, 2048), "float32", f8e4m3),  # (a square value and its transpose are two kernels unless a GEMM reads it)
    ((300, 260), "bfloat16", f8e5m2),
]


@pytest.mark.gpu
@pytest.mark.parametrize("shape,src,dtype", GPU_CASES)
@pytest.mark.parametrize("wide", ["0", "1"])  # FLAME_WIDE_BYTE_TILES
def test_gpu_dual_tiled_cast_writes_torchs_bytes(monkeypatch, shape, src, dtype, wide):
    monkeypatch.setenv("FLAME_WIDE_BYTE_TILES", wide)
    with on_device("cuda"):
        a = _data(shape, seed=3)
        x, s = flame.tensor(a).to(getattr(flame, src)), flame.tensor(np.float32(3.5))
        step = flame.compile(_both)
        x8, x8t = step(x, s, dtype)
        (k,) = step._last.plan.kernels()
        assert "_and_transposed_tiled_" in k.name
        want = _want(a, src, 3.5, dtype)
        _same(x8, want)
        _same(x8t, want.transpose(-1, -2))
