"""Config.splat_loads / FLAME_SPLAT_LOADS (on by default): an elementwise kernel's input constant along
the innermost dim (a norm's per-row statistic where the kernel recomputes the norm's output, as FP8
training's cast of an RMSNorm output does) is read once per vector on the vector path instead of
holding the kernel to one element per thread. Planned for the CUDA target: off, the kernel is the
element-by-element one it was; on, it takes 16-byte vectors and a scalar load of the statistic, its
values on the reference executor are unchanged, and its source compiles with NVRTC for sm_90; (marked
gpu) on and off write the same bytes."""

from __future__ import annotations

import numpy as np
import pytest

import flame
from flame.codegen.nvrtc import compile_cubin
from flame.frontend.dispatch import apply
from flame.ir.dtypes import f8e4m3
from tests.conftest import on_device


def _norm_cast(x, r, w, s):
    """x * r * w cast to FP8 with scale s: x [rows, d] bf16, r [rows, 1] f32 (a per-row statistic), w [d]."""
    return apply("scaled_cast", (x.float() * r * w.float()).reshape(-1, x.shape[-1]), s, dtype=f8e4m3)


def _data(rows: int = 64, d: int = 256, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = flame.tensor(rng.standard_normal((2, rows, d)).astype(np.float32)).to(flame.bf16)
    r = flame.tensor(rng.uniform(0.5, 2.0, (2, rows, 1)).astype(np.float32))
    w = flame.tensor(rng.standard_normal(d).astype(np.float32)).to(flame.bf16)
    return x, r, w, flame.tensor(np.float32(40.0))


def _kernel(monkeypatch, on: str, seed: int = 0):
    monkeypatch.setenv("FLAME_SPLAT_LOADS", on)
    step = flame.compile(_norm_cast)
    got = step(*_data(seed=seed))
    (k,) = step._last.plan.kernels()
    return k, np.asarray(got.numpy()).view(np.uint8).copy()


def test_a_per_row_input_reads_once_per_vector_when_on(cuda_target, monkeypatch):
    off, got_off = _kernel(monkeypatch, "0")
    on, got_on = _kernel(monkeypatch, "1")
    assert "vector path" not in off.source  # the per-row input holds it to one element per thread
    assert "vector path: 8 elements per 16-byte access" in on.source
    assert "flame_vec<float" not in on.source  # the statistic: one float per vector
    np.testing.assert_array_equal(got_on, got_off)
    eager = _norm_cast(*_data())
    np.testing.assert_array_equal(got_on, np.asarray(eager.numpy()).view(np.uint8))
    for k in (off, on):
        assert compile_cubin(k.source, "sm_90")[:4] == b"\x7fELF"


def test_a_row_shorter_than_a_vector_keeps_the_element_path(cuda_target, monkeypatch):
    """d = 4: a vector of 8 would span two rows of the statistic, so the kernel stays element by element."""
    monkeypatch.setenv("FLAME_SPLAT_LOADS", "1")
    step = flame.compile(_norm_cast)
    x, r, w, s = _data(rows=16, d=4)
    got = step(x, r, w, s)
    (k,) = step._last.plan.kernels()
    assert "vector path" not in k.source
    np.testing.assert_array_equal(np.asarray(got.numpy()).view(np.uint8),
                                  np.asarray(_norm_cast(x, r, w, s).numpy()).view(np.uint8))


@pytest.mark.gpu
@pytest.mark.parametrize("rows,d", [(64, 256), (2048, 4096), (33, 72)])
def test_gpu_splat_loads_write_the_element_paths_bytes(monkeypatch, rows, d):
    got = {}
    with on_device("cuda"):
        for on in ("0", "1"):
            monkeypatch.setenv("FLAME_SPLAT_LOADS", on)
            step = flame.compile(_norm_cast)
            y = step(*_data(rows, d, seed=3))
            got[on] = np.asarray(y.numpy()).view(np.uint8).copy()
    np.testing.assert_array_equal(got["1"], got["0"])
