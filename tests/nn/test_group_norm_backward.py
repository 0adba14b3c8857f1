"""GroupNorm's backward planned for CUDA (channels-last, between convolutions): its row sums, dx and the
per-channel dweight/dbias sums are one row kernel and its fold (the column sums ride in the row kernel:
indexmap.column_map, codegen/rows_columns.Columns); the compiled step matches PyTorch on the reference
executor (f32, bf16) and, marked gpu, on CUDA."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import flame
import flame.nn.functional as F
from flame.codegen.nvrtc import compile_cubin
from flame.ir.graph import Kind
from flame.ir.indexmap import is_reduction, trailing_reduced
from flame.plan.steps import KernelLaunch

SHAPES = [  # N, C, H, W, groups
    (2, 8, 5, 5, 4),  # H*W = 25, C/G = 2
    (1, 9, 3, 5, 3),  # batch 1, odd C/G = 3
    (2, 12, 7, 3, 2),  # C/G = 6
    (3, 64, 4, 4, 32),  # many groups
    (2, 16, 4, 4, 4),  # H = W = G: channels-last [N, H, W, G, C/G] permuted to its groups keeps its shape
]
GPU_SHAPES = SHAPES + [
    (256, 64, 4, 4, 32),  # 8192 rows: a slot of the row kernel visits several rows
    (16, 128, 32, 32, 32),  # rows of 4096 (512 threads), several rows per block
    (8, 96, 9, 7, 32),  # odd C/G = 3: partials per row element
]
TORCH = {"f32": torch.float32, "bf16": torch.bfloat16}
DTYPES = {"f32": flame.float32, "bf16": flame.bfloat16}



def _arrays(shape):
    n, c, h, w, _ = shape
    rng = np.random.default_rng(sum(shape))
    f = lambda *s, k=1.0: (rng.standard_normal(s) * k).astype(np.float32)  # noqa: E731
    return dict(x=f(n, c, h, w), w0=f(c, c, 3, 3, k=0.3), gw=1 + f(c, k=0.5), gb=f(c, k=0.5), w1=f(c, c, 3, 3, k=0.3),
                dy=f(n, c, h, w))


def _compiled(shape, t):
    """conv -> GroupNorm -> SiLU -> conv, compiled; a call sets the gradients of sum(y * dy) for the
    input and every parameter."""
    groups = shape[4]

    @flame.compile
    def step(x):
        h = F.conv2d(x, t["w0"], padding=1)
        y = F.conv2d(F.silu(F.group_norm(h, groups, t["gw"], t["gb"])), t["w1"], padding=1)
        loss = (y * t["dy"]).sum()
        loss.backward()
        return loss

    return step


def _flame_grads(shape, a, dtype):
    t = {k: flame.tensor(v, DTYPES[dtype], requires_grad=k != "dy") for k, v in a.items()}
    _compiled(shape, t)(t["x"])
    return {k: t[k].grad.float().numpy() for k in ("x", "w0", "gw", "gb", "w1")}


def _torch_grads(shape, a, dtype):
    t = {k: torch.tensor(v, dtype=TORCH[dtype], requires_grad=k != "dy") for k, v in a.items()}
    h = TF.conv2d(t["x"], t["w0"], padding=1)
    y = TF.conv2d(TF.silu(TF.group_norm(h, shape[4], t["gw"], t["gb"], eps=1e-5)), t["w1"], padding=1)
    (y * t["dy"]).sum().backward()
    return {k: t[k].grad.float().numpy() for k in ("x", "w0", "gw", "gb", "w1")}


def _close(got, want, dtype, f32_tol=1e-5):
    for k in want:
        scale = np.abs(want[k]).max()
        tol = f32_tol if dtype == "f32" else 3e-2
        np.testing.assert_allclose(got[k], want[k], rtol=tol * 10, atol=tol * scale, err_msg=k)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_group_norm_backward_matches_torch(shape, dtype, cuda_target):
    a = _arrays(shape)
    got = _flame_grads(shape, a, dtype)
    _close(got, _torch_grads(shape, a, dtype if dtype == "f32" else "f32"), dtype)


def _column_sums(launch) -> list:
    return [op for op in launch.ops if is_reduction(op) and trailing_reduced(op) is None]


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("shape", SHAPES + GPU_SHAPES[len(SHAPES):], ids=str)
def test_group_norm_backward_is_two_kernels(shape, dtype, cuda_target, tmp_path, monkeypatch):
    """No column reduction is a kernel of its own: dweight and dbias ride in the row kernel computing
    the backward's two row sums and dx, and its fold is the only other kernel that touches them. The
    kernels compile with NVRTC. bf16 computes in f32 and its backward recomputes the normalised value
    from the bf16 input, in the same kernel."""
    monkeypatch.setenv("FLAME_CACHE_DIR", str(tmp_path))
    entry = _planned(shape, dtype)
    launches = [s for s in entry.plan.steps if isinstance(s, KernelLaunch) and s.grid]
    carrying = [k for k in launches if _column_sums(k)]
    assert len(carrying) == 2 and carrying[1].name.startswith(carrying[0].name.rsplit("_", 1)[0] + "_fold")
    assert len(_column_sums(carrying[0])) == 2  # dweight, dbias
    assert not [k for k in entry.graph.groups if k.kind == Kind.REDUCTION]
    rows = [op for op in carrying[0].ops if op.name == "reduce_sum" and trailing_reduced(op)]
    assert len(rows) >= 2  # the backward's row sums (and dx) in the same kernel
    cubin = compile_cubin("\n".join(dict.fromkeys(k.source for k in carrying)), "sm_90", "gn_bwd")
    assert all(k.name.encode() in cubin for k in carrying)


def _planned(shape, dtype="f32"):
    """The compiled step's cache entry (plan and graph), traced and planned but not run."""
    t = {k: flame.tensor(v, DTYPES[dtype], requires_grad=k != "dy") for k, v in _arrays(shape).items()}
    step = _compiled(shape, t)
    return step._lookup(step._args((t["x"],)))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=str)
def test_gpu_group_norm_backward_matches_torch(shape, dtype):
    """The CUDA row kernel with its column partials and the fold against PyTorch (f32: 1e-5 relative
    to the largest gradient; bf16 against an f32 PyTorch run)."""
    a = _arrays(shape)
    got = _flame_grads(shape, a, dtype)
    # f32 on the GPU: sums of up to 16384 terms per channel in another order than torch's CPU loops
    _close(got, _torch_grads(shape, a, "f32"), dtype, f32_tol=1e-4)
