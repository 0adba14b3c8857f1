"""grid_sample and affine_grid against torch on the CPU: values and the gradients of the image and of
the grid (or theta), eagerly and compiled, every mode, padding mode and align_corners, points inside,
on the edges and outside; their errors; a warp planned for the GPU whose kernels compile."""

from __future__ import annotations

import numpy as np
import pytest
import torch.nn.functional as TF

import flame
import flame.nn as nn
import flame.nn.functional as F
from flame.errors import ShapeError
from tests.ops.test_everyday_ops import MODES, check, check_gpu_step, randn


def _grid(n, ho, wo, key=0):
    """Points inside, outside (to 1.4) and exactly on pixel centres and edges, never halfway between two
    pixels (where nearest rounding and the bilinear gradient's floor are ties)."""
    g = np.random.default_rng(key).uniform(-1.4, 1.4, (n, ho, wo, 2)).astype(np.float32)
    g[0, 0, 0] = [-1.0, 1.0]
    g[0, 0, 1] = [1.0, -1.0]
    return g


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("interp", ["bilinear", "nearest"])
def test_grid_sample(interp, padding_mode, align_corners, mode):
    x, g = randn(2, 3, 5, 6), _grid(2, 4, 3)
    kw = dict(mode=interp, padding_mode=padding_mode, align_corners=align_corners)
    wrt = [0, 1] if interp == "bilinear" else [0]
    check(lambda a, b: F.grid_sample(a, b, **kw), lambda a, b: TF.grid_sample(a, b, **kw), x, g, wrt=wrt, mode=mode,
          rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("align_corners", [False, True])
def test_affine_grid_and_a_warp(align_corners, mode):
    theta = np.array([[[0.9, -0.2, 0.1], [0.3, 1.1, -0.05]], [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]], np.float32)
    check(lambda t: F.affine_grid(t, (2, 3, 4, 5), align_corners=align_corners),
          lambda t: TF.affine_grid(t, (2, 3, 4, 5), align_corners=align_corners), theta, mode=mode)
    x = randn(2, 3, 4, 5)
    check(lambda a, t: F.grid_sample(a, F.affine_grid(t, (2, 3, 4, 5), align_corners), align_corners=align_corners),
          lambda a, t: TF.grid_sample(a, TF.affine_grid(t, (2, 3, 4, 5), align_corners), align_corners=align_corners),
          x, theta, mode=mode, rtol=1e-4, atol=1e-5)


def test_the_identity_warp_returns_the_image():
    x = flame.tensor(randn(1, 2, 6, 7))
    theta = flame.tensor(np.array([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]], np.float32))
    for align in (False, True):
        y = F.grid_sample(x, F.affine_grid(theta, (1, 2, 6, 7), align), align_corners=align)
        np.testing.assert_allclose(y.numpy(), x.numpy(), rtol=1e-5, atol=1e-6)


def test_errors():
    with pytest.raises(ValueError, match="expected mode to be"):
        F.grid_sample(flame.ones(1, 1, 2, 2), flame.zeros(1, 1, 1, 2), mode="area")
    with pytest.raises(ShapeError, match="bicubic interpolation only supports 4D input"):
        F.grid_sample(flame.ones(1, 1, 2, 2, 2), flame.zeros(1, 1, 1, 1, 3), mode="bicubic")
    with pytest.raises(ValueError, match="expected padding_mode to be"):
        F.grid_sample(flame.ones(1, 1, 2, 2), flame.zeros(1, 1, 1, 2), padding_mode="wrap")
    with pytest.raises(ShapeError, match="grid_sample: expected input \\[N, C, H, W\\] and grid"):
        F.grid_sample(flame.ones(1, 1, 2, 2), flame.zeros(1, 1, 1, 3))
    with pytest.raises(ShapeError, match="affine_grid: theta must be \\[N, 2, 3\\]"):
        F.affine_grid(flame.zeros(1, 3, 3), (1, 1, 2, 2))


def test_a_warp_plans_and_compiles_for_the_gpu(cuda_target):
    theta = nn.Parameter(flame.tensor(np.array([[[0.9, 0.1, 0.0], [-0.1, 0.9, 0.0]]] * 2, np.float32)))

    def body(x):
        grid = F.affine_grid(theta, (2, 3, 8, 8), align_corners=False)
        loss = F.grid_sample(x, grid, padding_mode="reflection").square().mean()
        loss = loss + F.grid_sample(x, grid, mode="nearest").mean()
        loss.backward()
        return loss

    check_gpu_step(body, theta, flame.tensor(randn(2, 3, 8, 8)), atol=1e-6)
