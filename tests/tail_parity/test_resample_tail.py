"""grid_sample's bicubic mode and 5-D volumes, affine_grid's 3-D maps and interpolate's antialias=True
against torch in f64: values and the gradients of the input and of the grid (or theta), eager and
compiled, every padding mode and align_corners."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.tail_parity.common import check_fn, raises_like, rng

R = rng(7)
X4 = R.standard_normal((2, 3, 5, 6))
X5 = R.standard_normal((2, 2, 4, 5, 3))
GRID4 = R.uniform(-1.3, 1.3, (2, 4, 3, 2))
GRID5 = R.uniform(-1.3, 1.3, (2, 3, 2, 4, 3))
GRID4[0, 0, 0] = [-1.0, 1.0]  # the corners, on pixel edges (or centres with align_corners)
GRID5[0, 0, 0, 0] = [1.0, -1.0, 1.0]
THETA3 = np.array([[[0.9, -0.2, 0.1, 0.05], [0.3, 1.1, -0.05, 0.0], [0.1, 0.0, 0.8, -0.1]],
                   [[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]]])

COMPILED = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
ALIGN = pytest.mark.parametrize("align", [False, True])
PADDING = pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])


@COMPILED
@ALIGN
@PADDING
def test_grid_sample_bicubic(padding, align, compiled):
    fn = lambda F, x, g: F.nn.functional.grid_sample(x, g, mode="bicubic", padding_mode=padding, align_corners=align)
    check_fn(fn, [X4, GRID4], compiled)


@COMPILED
@ALIGN
@PADDING
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_5d(mode, padding, align, compiled):
    fn = lambda F, x, g: F.nn.functional.grid_sample(x, g, mode=mode, padding_mode=padding, align_corners=align)
    check_fn(fn, [X5, GRID5], compiled)


@COMPILED
@PADDING
def test_grid_sample_nearest_gives_the_grid_a_zero_gradient(padding, compiled):
    """nearest's grid gets torch's gradient, zeros (not None: round's zero gradient, the grid in the graph)."""
    fn = lambda F, x, g: F.nn.functional.grid_sample(x, g, mode="nearest", padding_mode=padding, align_corners=False)
    check_fn(fn, [X4, GRID4], compiled)


@COMPILED
@ALIGN
def test_affine_grid_5d_and_a_volume_warp(align, compiled):
    check_fn(lambda F, t: F.nn.functional.affine_grid(t, (2, 2, 3, 4, 5), align_corners=align), [THETA3], compiled)
    warp = lambda F, x, t: F.nn.functional.grid_sample(
        x, F.nn.functional.affine_grid(t, (2, 2, 3, 2, 4), align_corners=align), align_corners=align)
    check_fn(warp, [X5, THETA3], compiled)


@COMPILED
@pytest.mark.parametrize(
    "name,fn,arrays",
    [
        ("bicubic_5d", lambda F, x, g: F.nn.functional.grid_sample(x, g, mode="bicubic", align_corners=False),
         [X5, GRID5]),
        ("grid_5d_of_4d", lambda F, x, g: F.nn.functional.grid_sample(x, g, align_corners=False), [X4, GRID5]),
        ("theta_2d_for_5d", lambda F, t: F.nn.functional.affine_grid(t, (2, 1, 2, 2, 2), align_corners=False),
         [R.standard_normal((2, 2, 3))]),
        ("affine_grid_3d_size", lambda F, t: F.nn.functional.affine_grid(t, (2, 1, 2), align_corners=False),
         [R.standard_normal((2, 2, 3))]),
    ],
)
def test_errors(name, fn, arrays, compiled):
    raises_like(fn, arrays, compiled)


X_AA = R.standard_normal((2, 2, 13, 11))
AA_SIZES = [
    dict(size=(5, 4)),  # shrinking by 2.6 and 2.75
    dict(scale_factor=0.3),
    dict(scale_factor=(0.37, 0.61), recompute_scale_factor=True),
    dict(size=(4, 11)),  # one axis kept
    dict(size=(1, 1)),
    dict(size=(20, 7)),  # growing one axis, shrinking the other
    dict(scale_factor=1.7),  # growing: the filters at their plain support
]


@COMPILED
@ALIGN
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("kw", AA_SIZES, ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()))
def test_interpolate_antialias(kw, mode, align, compiled):
    fn = lambda F, x: F.nn.functional.interpolate(x, mode=mode, align_corners=align, antialias=True, **kw)
    check_fn(fn, [X_AA], compiled)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_interpolate_antialias_f32(mode):
    import torch

    import flame

    x = X_AA.astype(np.float32)
    for kw in AA_SIZES:
        got = flame.nn.functional.interpolate(flame.tensor(x), mode=mode, antialias=True, **kw).numpy()
        want = torch.nn.functional.interpolate(torch.tensor(x), mode=mode, antialias=True, **kw).numpy()
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=str(kw))


@COMPILED
@pytest.mark.parametrize(
    "name,fn,arrays",
    [
        ("antialias_nearest", lambda F, x: F.nn.functional.interpolate(x, scale_factor=0.5, antialias=True), [X_AA]),
        ("antialias_3d", lambda F, x: F.nn.functional.interpolate(x, scale_factor=0.5, mode="linear",
                                                                   antialias=True), [X_AA[0]]),
        ("antialias_5d", lambda F, x: F.nn.functional.interpolate(x, scale_factor=0.5, mode="trilinear",
                                                                   antialias=True), [X5]),
    ],
)
def test_antialias_errors(name, fn, arrays, compiled):
    raises_like(fn, arrays, compiled, match="nti-alias option is restricted to bilinear")


def test_bicubic_volume_and_antialias_step_for_the_gpu(cuda_target):
    """A bicubic warp, a trilinear volume warp and an antialiased shrink in one step planned for the CUDA
    target: the reference executor agrees with eager, and every kernel compiles with NVRTC."""
    import flame
    import flame.nn.functional as F
    from tests.ops.test_everyday_ops import check_gpu_step

    theta = flame.nn.Parameter(flame.tensor(THETA3.astype(np.float32)))
    x4, x5 = flame.tensor(X4.astype(np.float32)), flame.tensor(X5.astype(np.float32))
    g4 = flame.tensor(GRID4.astype(np.float32))

    def body(a, b, g):
        grid = F.affine_grid(theta, (2, 2, 3, 2, 4), align_corners=False)
        loss = F.grid_sample(b, grid, padding_mode="reflection", align_corners=False).square().mean()
        loss = loss + F.grid_sample(a * theta.sum(), g, mode="bicubic", padding_mode="border").mean()
        loss = loss + F.interpolate(a * theta.mean(), size=(2, 3), mode="bicubic", antialias=True).square().sum()
        loss.backward()
        return loss

    check_gpu_step(body, theta, x4, x5, g4)


@pytest.mark.parametrize("mode, shape", [("linear", (1, 2, 5)), ("bilinear", (1, 2, 4, 5)), ("bicubic", (1, 2, 4, 5)),
                                         ("trilinear", (1, 2, 3, 4, 5))])
@pytest.mark.parametrize("dtype", ["uint8", "int32", "int64"])
def test_interpolate_of_integers_is_refused_not_zeroed(mode, shape, dtype):
    """The weighted modes of an integer input raise (their weights would round to 0 in the integer dtype);
    nearest keeps the integers, as torch's."""
    x = np.arange(int(np.prod(shape))).reshape(shape).astype(dtype)
    with pytest.raises(NotImplementedError, match=f"interpolate: mode '{mode}' is not implemented for an integer"):
        flame.nn.functional.interpolate(flame.tensor(x), scale_factor=1.5, mode=mode)
    got = flame.nn.functional.interpolate(flame.tensor(x[:1].astype(np.uint8)), scale_factor=2.0, mode="nearest")
    want = torch.nn.functional.interpolate(torch.tensor(x[:1].astype(np.uint8)), scale_factor=2.0, mode="nearest")
    np.testing.assert_array_equal(got.numpy(), want.numpy())
