"""adaptive_max_pool1d/2d/3d, unfold and fold (and their nn modules) against torch on the CPU: values
and gradients, eagerly and compiled, divisible and uneven windows, dilation, padding and stride; fold
as unfold's adjoint; their errors; a step planned for the GPU whose kernels compile."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import flame
import flame.nn as nn
import flame.nn.functional as F
from flame.errors import ShapeError
from tests.ops.test_everyday_ops import MODES, check, check_gpu_step, randn


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size,out", [((8, 6), 1), ((8, 6), (4, 3)), ((7, 5), (3, 2)), ((7, 5), (None, 4)),
                                      ((5, 9), (5, 9)), ((6, 6), (4, 4))])
def test_adaptive_max_pool2d(size, out, mode):
    x = randn(2, 3, *size)
    check(lambda t: F.adaptive_max_pool2d(t, out), lambda t: TF.adaptive_max_pool2d(t, out), x, mode=mode)
    check(lambda t: F.adaptive_max_pool2d(t, out), lambda t: TF.adaptive_max_pool2d(t, out), x[0], mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_adaptive_max_pool1d_3d_and_modules(mode):
    x1, x3 = randn(2, 3, 10), randn(1, 2, 5, 6, 7)
    check(lambda t: F.adaptive_max_pool1d(t, 4), lambda t: TF.adaptive_max_pool1d(t, 4), x1, mode=mode)
    check(lambda t: F.adaptive_max_pool3d(t, (2, 3, 4)), lambda t: TF.adaptive_max_pool3d(t, (2, 3, 4)), x3,
          mode=mode)
    check(lambda t: nn.AdaptiveMaxPool2d((3, 2))(t), lambda t: torch.nn.AdaptiveMaxPool2d((3, 2))(t),
          randn(2, 3, 7, 5), mode=mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=(2, 3), stride=2), dict(kernel_size=3, padding=1),
                                dict(kernel_size=(3, 2), dilation=(2, 1), padding=(1, 0), stride=(1, 2))])
def test_unfold_and_fold(kw, mode):
    x = randn(2, 3, 7, 6)
    check(lambda t: F.unfold(t, **kw), lambda t: TF.unfold(t, **kw), x, mode=mode)
    check(lambda t: nn.Unfold(**kw)(t), lambda t: torch.nn.Unfold(**kw)(t), x[0], mode=mode)
    cols = TF.unfold(torch.tensor(x), **kw).numpy()
    check(lambda c: F.fold(c, (7, 6), **kw), lambda c: TF.fold(c, (7, 6), **kw), cols, mode=mode)
    check(lambda c: nn.Fold((7, 6), **kw)(c), lambda c: torch.nn.Fold((7, 6), **kw)(c), cols[0], mode=mode)


def test_fold_is_the_adjoint_of_unfold():
    """<unfold(x), c> == <x, fold(c)> for any x and c: fold sums overlapping blocks."""
    kw = dict(kernel_size=3, dilation=2, padding=2, stride=2)
    x, c = flame.tensor(randn(1, 2, 9, 8)), flame.tensor(randn(1, 2 * 9, 20, key=1))
    lhs = (F.unfold(x, **kw) * c).sum().item()
    rhs = (x * F.fold(c, (9, 8), **kw)).sum().item()
    np.testing.assert_allclose(lhs, rhs, rtol=1e-5)


def test_errors():
    with pytest.raises(ShapeError, match="unfold: a \\[5, 5\\] kernel"):
        F.unfold(flame.ones(1, 1, 3, 3), 5)
    with pytest.raises(ShapeError, match="fold: input \\[1, 8, 4\\] needs C \\* 4 rows and 9 columns"):
        F.fold(flame.ones(1, 8, 4), (4, 4), 2)
    with pytest.raises(ShapeError, match="adaptive_max_pool2d: output_size must be an int or 2 values"):
        F.adaptive_max_pool2d(flame.ones(1, 1, 4, 4), (1, 2, 3))


def test_a_step_of_them_plans_and_compiles_for_the_gpu(cuda_target):
    w = nn.Parameter(flame.randn(3, 12, generator=flame.Generator(2)))

    def body(x):
        cols = F.unfold(x, 2, stride=1, padding=1)  # [N, 12, L]
        y = F.fold(cols * (w @ cols).softmax(-1).repeat(1, 4, 1), (6, 5), 2, padding=1)
        loss = F.adaptive_max_pool2d(y, (3, 2)).sum() + F.adaptive_max_pool2d(y, 1).sum()
        loss.backward()
        return loss

    check_gpu_step(body, w, flame.tensor(randn(2, 3, 6, 5)))
