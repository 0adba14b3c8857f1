"""A fused group that writes pointwise values of one tensor only transposed (FP8 training's cast of an
activation read transposed by a backward GEMM: scaled_cast then permute) is the tiled transpose of
codegen/transpose.py with the pointwise ops applied as the tile fills (lower_tiled_map): planned for the
CUDA target, its values on the reference executor are the unfused ops' (eager) and NumPy's bit for bit,
its source compiles with NVRTC for sm_90, FLAME_TILED_MAP=0 gives the elementwise kernel back, and
(marked gpu) the kernel itself writes NumPy's bytes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from flame.codegen.nvrtc import compile_cubin
from flame.frontend.dispatch import apply
from flame.ir.dtypes import f8e4m3, f8e5m2, fp8_max
from tests.conftest import on_device

CASES = [  # (input shape, source dtype, FP8 dtype): tiled 2-d, odd extents, a batch, f32 and f16 sources
    ((96, 200), "bfloat16", f8e4m3),
    ((130, 77), "bfloat16", f8e5m2),
    ((3, 40, 72), "float32", f8e4m3),
    ((64, 129), "float16", f8e5m2),
]


def _data(shape, dtype: str, seed: int = 0) -> np.ndarray:
    """Normal values with some past the FP8 range and a NaN (the saturation and NaN paths)."""
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 40
    a.reshape(-1)[:3] = (np.nan, 1e6, -1e6)
    return a


def _cast_t(x, s, dtype):
    return apply("scaled_cast", x, s, dtype=dtype).transpose(-1, -2)


def _want(a: np.ndarray, src: str, scale: float, dtype) -> torch.Tensor:
    """scaled_cast's definition (ir/ops/fp8.py) in torch: the source's values times the scale, saturated
    to the format's range (NaN kept), rounded once to FP8; transposed."""
    lim = fp8_max(dtype)
    x = torch.tensor(a).to(getattr(torch, src)).float()
    fp8 = torch.float8_e4m3fn if dtype == f8e4m3 else torch.float8_e5m2
    return (x * scale).clamp(-lim, lim).to(fp8).transpose(-1, -2).contiguous()


def _same(got, want) -> None:
    """The same FP8 values bit for bit, NaN as NaN whatever its sign bit (torch's NaN has it set)."""
    g, w = np.asarray(got.numpy()).astype(np.float32), want.float().numpy()
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    keep = ~np.isnan(w)
    np.testing.assert_array_equal(_bits(got.numpy())[keep], want.view(torch.uint8).numpy()[keep])


def _bits(a) -> np.ndarray:
    return np.asarray(a).view(np.uint8)


def _run(shape, src: str, dtype, seed: int = 0):
    a = _data(shape, src, seed)
    x = flame.tensor(a).to(getattr(flame, src))
    s = flame.tensor(np.float32(3.5))
    step = flame.compile(_cast_t)
    got = step(x, s, dtype)
    return step, a, got, _cast_t(x, s, dtype)


@pytest.mark.parametrize("shape,src,dtype", CASES)
def test_cast_then_transpose_is_one_tiled_kernel(cuda_target, shape, src, dtype):
    step, a, got, eager = _run(shape, src, dtype)
    kernels = step._last.plan.kernels()
    assert [k.name.rsplit("_", 1)[0] for k in kernels] == [
        f"fused_scaled_cast_{dtype.name}_{'x'.join(map(str, (*shape[:-2], shape[-1], shape[-2])))}_tiled"
    ]
    _same(got, _want(a, src, 3.5, dtype))
    np.testing.assert_array_equal(_bits(got.numpy()), _bits(eager.numpy()))  # the unfused ops, one by one
    (k,) = kernels
    assert "__shared__" in k.source and "flame_saturate_" in k.source
    assert compile_cubin(k.source, "sm_90")[:4] == b"\x7fELF"


def _chain_t(x, s):
    """bf16 work before the cast (constants and the scale read per element): all of it in the tile."""
    return apply("scaled_cast", (x * 1.5 + 0.25).sigmoid() * s, s, dtype=f8e4m3).transpose(0, 1)


def _chain(seed: int = 0):
    a = _data((96, 200), "bfloat16", seed)
    x, s = flame.tensor(a).to(flame.bf16), flame.tensor(np.float32(3.0))
    step = flame.compile(_chain_t)
    return step, step(x, s), _chain_t(x, s)


def test_a_pointwise_chain_before_the_cast_is_in_the_tile(cuda_target):
    step, got, eager = _chain()
    (k,) = step._last.plan.kernels()
    assert k.name.startswith("fused_mul_add_sigmoid_") and k.name.rsplit("_", 1)[0].endswith("_f8e4m3_200x96_tiled")
    np.testing.assert_array_equal(_bits(got.numpy()), _bits(eager.numpy()))
    assert compile_cubin(k.source, "sm_90")[:4] == b"\x7fELF"


def test_thin_transpose_keeps_the_elementwise_kernel(cuda_target):
    step, a, got, eager = _run((4, 300), "bfloat16", f8e4m3)
    (k,) = step._last.plan.kernels()
    assert "_tiled_" not in k.name
    np.testing.assert_array_equal(_bits(got.numpy()), _bits(eager.numpy()))


def test_switch_off_gives_the_elementwise_kernel(cuda_target, monkeypatch):
    monkeypatch.setenv("FLAME_TILED_MAP", "0")
    step, a, got, eager = _run((96, 200), "bfloat16", f8e4m3)
    (k,) = step._last.plan.kernels()
    assert k.name.startswith("fused_scaled_cast_f8e4m3_") and "_tiled_" not in k.name
    np.testing.assert_array_equal(_bits(got.numpy()), _bits(eager.numpy()))
    assert compile_cubin(k.source, "sm_90")[:4] == b"\x7fELF"


@pytest.mark.gpu
@pytest.mark.parametrize(
    "shape,src,dtype", CASES + [((2048, 4096), "bfloat16", f8e4m3), ((300, 260), "bfloat16", f8e5m2)]
)
@pytest.mark.parametrize("wide", ["0", "1"])  # FLAME_WIDE_BYTE_TILES
def test_gpu_tiled_cast_transpose_writes_numpys_bytes(monkeypatch, shape, src, dtype, wide):
    monkeypatch.setenv("FLAME_WIDE_BYTE_TILES", wide)
    with on_device("cuda"):
        step, a, got, _ = _run(shape, src, dtype, seed=1)
        assert any("_tiled_" in k.name for k in step._last.plan.kernels())
        _same(got, _want(a, src, 3.5, dtype))


@pytest.mark.gpu
def test_gpu_tiled_chain_writes_the_elementwise_kernels_bytes(monkeypatch):
    """The tiled kernel computes what the elementwise kernel it replaces computes (FLAME_TILED_MAP=0), bit
    for bit, on the GPU."""
    got = {}
    with on_device("cuda"):
        for tiled in ("1", "0"):
            monkeypatch.setenv("FLAME_TILED_MAP", tiled)
            step, y, _ = _chain(seed=2)
            assert any("_tiled_" in k.name for k in step._last.plan.kernels()) == (tiled == "1")
            got[tiled] = _bits(y.numpy()).copy()
    np.testing.assert_array_equal(got["1"], got["0"])


WIDE = [((300, 260), (1, 0)), ((2, 129, 1000), (0, 2, 1)), ((4096, 256), (1, 0))]  # odd and even, a batch


def _permute_kernel(shape, perm, dtype):
    from benchmarks.scripts.transpose import permute_op
    from flame.codegen import lower, single

    (k,) = lower(single(permute_op(shape, perm, dtype)))
    return k


@pytest.mark.parametrize("dtype", ["f8e4m3", "f8e5m2", "bool"])
def test_wide_byte_tiles_are_a_switch_and_compile(monkeypatch, dtype):
    """FLAME_WIDE_BYTE_TILES=1: 1-byte transposes with both extents >= 128 take 128 x 128 tiles; off (the
    default) they keep 64 x 64; every kernel compiles for sm_90."""
    for shape, perm in WIDE:
        assert "tile[64][" in _permute_kernel(shape, perm, dtype).source
    monkeypatch.setenv("FLAME_WIDE_BYTE_TILES", "1")
    for shape, perm in WIDE:
        k = _permute_kernel(shape, perm, dtype)
        assert "tile[128][" in k.source
        assert compile_cubin(k.source, "sm_90")[:4] == b"\x7fELF"
    assert "tile[64][" in _permute_kernel((64, 128, 4096), (0, 2, 1), "bf16").source  # 2-byte tiles as before


def test_wide_byte_tiles_of_a_cast_transpose_compile_and_agree(cuda_target, monkeypatch):
    monkeypatch.setenv("FLAME_WIDE_BYTE_TILES", "1")
    step, a, got, eager = _run((300, 260), "bfloat16", f8e4m3)
    (k,) = step._last.plan.kernels()
    assert "_tiled_" in k.name and "tile[128][" in k.source
    _same(got, _want(a, "bfloat16", 3.5, f8e4m3))
    assert compile_cubin(k.source, "sm_90")[:4] == b"\x7fELF"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f8e4m3", "f8e5m2", "bool"])
@pytest.mark.parametrize("offset", [0, 1])  # 1: buffers one element past 16-byte alignment (scalar path)
def test_gpu_wide_byte_tiles_are_exact(monkeypatch, dtype, offset):
    from benchmarks.scripts.transpose import check

    monkeypatch.setenv("FLAME_WIDE_BYTE_TILES", "1")
    for shape, perm in WIDE + [((64, 128, 4096), (0, 2, 1)), ((4096, 11008), (1, 0))]:
        k = _permute_kernel(shape, perm, dtype)
        assert "tile[128][" in k.source
        assert check(k, shape, perm, dtype, offset) == "exact", (shape, perm)


@pytest.mark.parametrize("src,words", [("bfloat16", True), ("float16", True), ("float32", False)])
def test_casts_from_narrow_sources_pack_words(cuda_target, src, words):
    """An FP8 cast's tiled transpose packs 4 x 4 blocks into words (Config.byte_words) from 2-byte sources;
    from f32 it keeps the byte tile, the faster one there."""
    step, a, got, _ = _run((256, 512), src, f8e4m3)
    (k,) = [k for k in step._last.plan.kernels() if "_tiled_" in k.name]
    assert ("tilew[" in k.source) is words
    _same(got, _want(a, src, 3.5, f8e4m3))
