"""The generated flash-attention kernels (codegen/flash_attention.py, templates/flash_attention.cu.j2):
rendered from each recorded score modification, forward and backward, and compiled with NVRTC for sm_90
(bf16 / f16 through mma.sync, f32 by the plain path, head dims 64 and 128, odd lengths, L != S), in both
forms of FLAME_FLASH_PIPELINE (off: synchronous tile loads; on: cp.async double buffering and ldmatrix in
dynamic shared memory), with whole tiles skipped from the keep mask's band. The lowering choice:
tests/plan/test_attention_lowering.py; GPU runs: tests/runtime/test_gpu_flash_attention.py."""

from __future__ import annotations

import numpy as np
import pytest

import flame
from flame.codegen import flash_attention
from flame.codegen.kernel import FLASH_PIPELINE_ENV, codegen_settings
from flame.codegen.nvrtc import compile_cubin
from flame.ir.ops.attention import BACKWARD, FORWARD, STATS, extras_of, float_extras
from tests.passes.test_score_mod import MODS, _attention, _causal, _extras

B, H = 2, 3
ELF = b"\x7fELF"


def _ops(mod, dtype="bf16", dim=64, length=100, keys=100):
    """The forward, stats and backward attention ops of a training step over modification `mod`."""
    rng = np.random.default_rng(0)
    qkv = [flame.tensor(rng.standard_normal((B, H, n, dim)).astype(np.float32)).to(dtype) for n in (length, keys, keys)]
    extras = {
        n: flame.tensor(a.astype(np.float32)).to(dtype) if a.dtype.kind == "f" else flame.tensor(a)
        for n, a in _extras(length, keys).items()
    }
    fn = _attention(flame, mod)
    names = list(extras)

    def loss(q, k, v, *xs):
        return fn(q, k, v, dict(zip(names, xs))).float().sum()

    g = flame.compile(flame.value_and_grad(loss, (0, 1, 2))).optimized(*qkv, *extras.values())
    by_name = {op.name: op for op in g.ops}
    return by_name[FORWARD], by_name[STATS], by_name[BACKWARD]


@pytest.fixture(params=["0", "1"], ids=["sync", "pipelined"])
def pipeline(request, monkeypatch):
    """Each FLAME_FLASH_PIPELINE setting: whether the f16 / bf16 kernels take the pipelined form."""
    monkeypatch.setenv(FLASH_PIPELINE_ENV, request.param)
    return request.param == "1"


def _compiles(kernels):
    for k in kernels:
        assert compile_cubin(k.source, "sm_90")[:4] == ELF, k.name


@pytest.mark.parametrize("name", sorted(MODS))
def test_each_modification_renders_and_compiles_forward_and_backward(name, pipeline):
    fwd, stats, bwd = _ops(MODS[name], length=100, keys=100 if "causal" in name or "window" in name else 75)
    assert flash_attention.unsupported(fwd) == "" and flash_attention.unsupported(stats) == ""
    (kernel,) = flash_attention.lower_forward(fwd, with_stats=True)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in kernel.source
    assert "flame_score_mod(" in kernel.source and kernel.n_outputs == 2
    _compiles([kernel, *flash_attention.lower_forward(stats, with_stats=False)])
    why = flash_attention.unsupported(bwd)
    if float_extras(extras_of(bwd)):
        assert "float operands" in why  # a per-head slope, a bias table: their gradients need reductions
        return
    assert why == ""
    kernels = flash_attention.lower_backward(bwd)
    assert [k.name.split("_bf16")[0] for k in kernels] == [
        "flash_attention_backward_prep",
        "flash_attention_backward_mma",
        "flash_attention_backward_dq",
    ]
    assert kernels[1].source.count("flame_mma(") >= 6  # S^T, dP^T, dV, dK, dQ on tensor cores
    _compiles(kernels)


@pytest.mark.parametrize("dim", [64, 128])
@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
def test_dtypes_and_head_dims_compile_at_odd_lengths(dtype, dim, pipeline):
    fwd, _, bwd = _ops(MODS["causal+document+softcap"], dtype, dim, length=77, keys=77)
    (kernel,) = flash_attention.lower_forward(fwd, with_stats=True)
    assert ("mma.sync" in kernel.source) == (dtype != "f32")
    _compiles([kernel, *flash_attention.lower_backward(bwd)])
    fwd, _, _ = _ops(MODS["softcap"], dtype, dim, length=70, keys=130)  # L != S
    _compiles(flash_attention.lower_forward(fwd, with_stats=False))


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "plain"])
@pytest.mark.parametrize("dim", [64, 128])
def test_attention_without_a_modification_renders_and_compiles(causal, dim, pipeline):
    """No modification (causal or not): in the pipelined form only the tiles that need a mask compute one."""
    fwd, _, bwd = _ops(_causal if causal else (lambda lib, s, x: s), "bf16", dim, length=100, keys=75)
    assert fwd.attrs["score_mod"] is None and fwd.attrs["is_causal"] == causal
    (kernel,) = flash_attention.lower_forward(fwd, with_stats=True)
    kernels = flash_attention.lower_backward(bwd)
    assert [("if (whole)" in k.source) for k in (kernel, *kernels)] == [pipeline, False, pipeline, False]
    assert ("k0 + BN - 1 <= m0" in kernel.source) == (pipeline and causal)  # per m tile of a warp's rows
    _compiles([kernel, *kernels])


def test_causal_and_window_tiles_are_skipped_from_the_keep_band():
    fwd, _, bwd = _ops(MODS["window+document"], length=100, keys=100)
    source = flash_attention.lower_forward(fwd, True)[0].source
    assert "lo = q0 + (-2LL)" in source and "hi = q0 + BM + (0LL)" in source  # i - 3 < j <= i
    assert "lo = k0 - (0LL)" in flash_attention.lower_backward(bwd)[1].source
    fwd, _, _ = _ops(MODS["document"], length=100, keys=75)
    assert "lo = q0" not in flash_attention.lower_forward(fwd, True)[0].source  # data-dependent: no skipping


def test_what_the_template_does_not_take_is_said():
    fwd, _, _ = _ops(MODS["softcap"], dim=32, length=8, keys=8)
    assert "head dims 64 and 128" in flash_attention.unsupported(fwd)
    fwd, _, _ = _ops(MODS["softcap"], dtype="f64", length=8, keys=8)
    assert "f16, bf16 or f32" in flash_attention.unsupported(fwd)


@pytest.mark.parametrize("dim", [64, 128])
def test_the_pipelined_form_is_the_default_and_a_setting(dim, monkeypatch):
    fwd, _, bwd = _ops(MODS["causal+document+softcap"], "bf16", dim, length=77, keys=77)
    monkeypatch.setenv(FLASH_PIPELINE_ENV, "0")
    synchronous = [*flash_attention.lower_forward(fwd, True), *flash_attention.lower_backward(bwd)]
    assert codegen_settings()[-1] is False  # part of every compile and plan cache key
    assert all("cp.async" not in k.source and k.smem == 0 for k in synchronous)
    monkeypatch.delenv(FLASH_PIPELINE_ENV)
    assert codegen_settings()[-1] is True
    (forward,) = flash_attention.lower_forward(fwd, True)
    prep, main, dq = flash_attention.lower_backward(bwd)
    for k in (forward, main):  # double-buffered tiles in dynamic shared memory, fragments through ldmatrix
        assert "cp.async.cg.shared.global" in k.source and "cp.async.wait_group 0" in k.source
        assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in k.source and "extern __shared__" in k.source
    row = (dim + 8) * 2
    bn = 64 if dim == 64 else 32
    rows = 128 if dim == 64 else 64  # the forward's query rows: 2 m tiles per warp at head dim 64
    # Q, two K and two V tiles: of 128 keys at head dim 64 (Q's fragments read from shared memory per tile)
    assert forward.smem == rows * row + 4 * (128 if dim == 64 else bn) * row
    assert ("unsigned qf[MT]" in forward.source) == (dim != 64)
    # K, V, 2 Q, 2 dO, dS^T, 2 LSE, 2 Delta (the f32 dQ rows are staged in the tile's Q and dO buffers)
    assert main.smem == 6 * bn * row + bn * (bn + 8) * 2 + 4 * bn * 4
    assert prep.smem == dq.smem == 0 and forward.name != synchronous[0].name  # another source, another name
    # sm_90: each warp's dQ rows staged in shared memory and added by one bulk reduction (else atomics)
    assert "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32" in main.source
    assert "cp.reduce.async.bulk" not in synchronous[2].source and "atomicAdd(dq" in synchronous[2].source
    fwd32, _, _ = _ops(MODS["softcap"], "f32", dim, length=40, keys=40)  # f32 keeps its plain path
    (plain,) = flash_attention.lower_forward(fwd32, True)
    assert "cp.async" not in plain.source and plain.smem == 0
    monkeypatch.setenv(FLASH_PIPELINE_ENV, "maybe")
    with pytest.raises(flame.ArgumentError, match="FLAME_FLASH_PIPELINE"):
        flash_attention.lower_forward(fwd, True)


@pytest.mark.parametrize("name", ["causal+document+softcap", "softcap"])
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_the_hopper_forward_renders_and_compiles_for_sm_90a(name, dtype, monkeypatch):
    """FLAME_FLASH_WGMMA=1 and an sm_90 target: the head-dim-64 forward (and a stats op alone) is the wgmma
    form, two warpgroups a block, declaring its architecture-specific instructions (NVRTC compiles it for
    sm_90a), at odd lengths and L != S; head dim 128, another target or the switch off keep mma.sync."""
    from flame.codegen.kernel import FLASH_WGMMA_ENV
    from flame.codegen.nvrtc import ARCH_SPECIFIC

    monkeypatch.setenv(FLASH_WGMMA_ENV, "1")
    fwd, stats, _ = _ops(MODS[name], dtype, 64, length=77, keys=77 if "causal" in name else 130)
    kernels = [*flash_attention.lower_forward(fwd, with_stats=True, arch="sm_90"),
               *flash_attention.lower_forward(stats, with_stats=False, arch="sm_90")]
    for k in kernels:
        assert ARCH_SPECIFIC in k.source and "wgmma.mma_async" in k.source and "mma.sync" not in k.source
        assert k.block == 256 and k.smem > 48 * 1024 and "flame_score_mod(" in k.source
    _compiles(kernels)
    (other,) = flash_attention.lower_forward(fwd, with_stats=True, arch="sm_100")
    assert "wgmma" not in other.source and other.block == 128
    wide, _, _ = _ops(MODS[name], dtype, 128, length=77, keys=77 if "causal" in name else 130)
    assert "wgmma" not in flash_attention.lower_forward(wide, with_stats=True, arch="sm_90")[0].source
    monkeypatch.setenv(FLASH_WGMMA_ENV, "0")
    assert "wgmma" not in flash_attention.lower_forward(fwd, with_stats=True, arch="sm_90")[0].source
