"""Config.merge_row_passes / FLAME_MERGE_ROW_PASSES (on by default): a row kernel computes in one pass
every reduction whose input reads no result of that pass, and its per-element stores join the first
pass that has what they read, instead of a pass per reduction and one for the stores. Planned for the
CUDA target: the kernel header counts the passes, the values on the reference executor are eager's,
the sources compile with NVRTC for sm_90; (marked gpu) merged and unmerged kernels write the same bytes
on every row schedule."""

from __future__ import annotations

import re

import numpy as np
import pytest

import flame
from flame.codegen.nvrtc import compile_cubin
from tests.conftest import on_device
from tests.ops.test_everyday_ops import check


def _outputs_and_amaxes(x, w):
    """A scaled copy stored per element and two per-row reductions that only leave the kernel (the
    amaxes an FP8 backward takes of its gradients beside them)."""
    y = (x.float() * w.float()).to(flame.bf16)
    return y, y.float().abs().amax(-1), (x.float() * x.float()).sum(-1)


def _norm_and_amax(x, w):
    """A LayerNorm (the variance reads the mean: two reductions in turn) and its output's amax."""
    xf = x.float()
    mu = xf.mean(-1, keepdim=True)
    var = ((xf - mu) * (xf - mu)).mean(-1, keepdim=True)
    y = ((xf - mu) * (var + 1e-5).rsqrt() * w.float()).to(flame.bf16)
    return y, y.float().abs().amax(-1)


def _inputs_reduced(x, w):
    """A min-max scaling: the min and max of a kernel input itself (nothing in the kernel computes what
    they read), the scaled values stored, and the sum of the stored values (a reduction only leaving the
    kernel). The sum adds rounded values: a sum of products would leave NVRTC free to fuse the product
    into the sum (an FMA) in one kernel and not in the other, and the test compares bits."""
    lo, hi = x.aminmax(dim=-1)
    y = ((x - lo[:, None]) / (hi - lo)[:, None] * w).to(flame.bf16)
    return lo, hi, y, y.float().sum(-1)


_DTYPE = {_inputs_reduced: flame.f32}  # the others take bf16


def _data(rows: int, d: int, seed: int = 0, dtype=flame.bf16):
    rng = np.random.default_rng(seed)
    x = flame.tensor(rng.standard_normal((rows, d)).astype(np.float32)).to(dtype)
    w = flame.tensor(rng.standard_normal(d).astype(np.float32)).to(dtype)
    return x, w


def _compiled(monkeypatch, fn, on: str, rows: int = 64, d: int = 256, seed: int = 0):
    monkeypatch.setenv("FLAME_MERGE_ROW_PASSES", on)
    step = flame.compile(fn)
    got = step(*_data(rows, d, seed, _DTYPE.get(fn, flame.bf16)))
    return step._last.plan, [np.asarray(t.numpy()).view(np.uint8).copy() for t in got]


def _passes(plan) -> list[int]:
    """Each row kernel's passes, as its header says."""
    return [int(n) for k in plan.kernels() for n in re.findall(r"new schedule: .*?(\d+) pass(?:es)? over the row",
                                                                 k.source.split("\n#include")[0])]


@pytest.mark.parametrize("rows,d", [(64, 256), (256, 11008)])  # rows held in registers; streamed rows
def test_reductions_only_leaving_the_kernel_join_the_store_pass(cuda_target, monkeypatch, rows, d):
    on, got_on = _compiled(monkeypatch, _outputs_and_amaxes, "1", rows, d)
    off, got_off = _compiled(monkeypatch, _outputs_and_amaxes, "0", rows, d)
    assert _passes(on) == [1] and _passes(off) == [3]
    eager = [np.asarray(t.numpy()).view(np.uint8) for t in _outputs_and_amaxes(*_data(rows, d))]
    for a, b, c in zip(got_on, got_off, eager):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
    for plan in (on, off):
        for k in plan.kernels():
            assert compile_cubin(k.source, "sm_90")[:4] == b"\x7fELF"


def test_reductions_of_kernel_inputs(cuda_target, monkeypatch):
    on, got_on = _compiled(monkeypatch, _inputs_reduced, "1")
    off, got_off = _compiled(monkeypatch, _inputs_reduced, "0")
    assert _passes(on) == [2] and _passes(off) == [4]
    eager = [np.asarray(t.numpy()).view(np.uint8) for t in _inputs_reduced(*_data(64, 256, dtype=flame.f32))]
    for a, b, c in zip(got_on, got_off, eager):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)


def test_a_gradient_beside_reductions_of_a_kernel_input(cuda_target):
    """aminmax's backward: its kernel's reductions read the input itself (a KeyError once)."""
    x = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    check(lambda t: tuple(t.aminmax(dim=1)), lambda t: tuple(t.aminmax(dim=1)), x, mode="compiled")


def test_a_reduction_reading_another_keeps_a_pass_of_its_own(cuda_target, monkeypatch):
    """mean, then the variance (it reads the mean), then the stores with the amax beside them: 3
    passes merged, 4 unmerged."""
    on, got_on = _compiled(monkeypatch, _norm_and_amax, "1")
    off, got_off = _compiled(monkeypatch, _norm_and_amax, "0")
    assert _passes(on) == [3] and _passes(off) == [4]
    for a, b in zip(got_on, got_off):
        np.testing.assert_array_equal(a, b)
    for k in on.kernels():
        assert compile_cubin(k.source, "sm_90")[:4] == b"\x7fELF"


@pytest.mark.gpu
@pytest.mark.parametrize("fn", [_outputs_and_amaxes, _norm_and_amax, _inputs_reduced])
@pytest.mark.parametrize("rows,d", [(64, 256), (33, 72), (512, 4096), (256, 11008), (4, 65536), (8, 24)])
def test_gpu_merged_passes_write_the_unmerged_bytes(monkeypatch, fn, rows, d):
    """Warp rows, rows held in registers, streamed rows, rows split across blocks (few long rows),
    rows that are no whole vectors."""
    got = {}
    with on_device("cuda"):
        for on in ("0", "1"):
            got[on] = _compiled(monkeypatch, fn, on, rows, d, seed=5)[1]
    for a, b in zip(got["1"], got["0"]):
        np.testing.assert_array_equal(a, b)
