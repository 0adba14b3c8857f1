"""max_unpool1d/2d/3d and nn.MaxUnpoolNd, and adaptive_max_poolNd's return_indices, against torch on the
CPU in f64: values, indices and gradients, eager and compiled; max_unpool's output_size and its errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import flame
import flame.nn as nn
import flame.nn.functional as F
from flame.errors import IndexValueError, ShapeError
from tests.ops.test_everyday_ops import MODES, check, randn


def _f64(*shape, key=0):
    return randn(*shape, key=key).astype(np.float64)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("d,size,out", [(1, (10,), 4), (2, (8, 6), (4, 3)), (2, (7, 5), (3, 2)), (2, (7, 5), (None, 4)),
                                        (2, (5, 9), (5, 9)), (3, (5, 6, 7), (2, 3, 4))])
def test_adaptive_max_pool_return_indices(d, size, out, mode):
    x = _f64(2, 3, *size)
    x[0, 0].flat[3] = x[0, 0].flat[4] = 9.0  # a tie: the first in row-major order wins
    name = f"adaptive_max_pool{d}d"
    f, tf = getattr(F, name), getattr(TF, name)
    check(lambda t: f(t, out, return_indices=True), lambda t: tf(t, out, return_indices=True), x, mode=mode)
    check(lambda t: f(t, out, True), lambda t: tf(t, out, True), x[0], mode=mode)


def test_adaptive_max_pool_module_return_indices_and_nan():
    x = _f64(1, 2, 7, 5)
    x[0, 1, 2, 3] = x[0, 1, 1, 0] = np.nan  # the last NaN of a window is its maximum
    y, i = nn.AdaptiveMaxPool2d((3, 2), return_indices=True)(flame.tensor(x))
    ty, ti = torch.nn.AdaptiveMaxPool2d((3, 2), return_indices=True)(torch.tensor(x))
    np.testing.assert_array_equal(y.numpy(), ty.numpy())
    np.testing.assert_array_equal(i.numpy(), ti.numpy())
    assert i.dtype == flame.int64


def test_adaptive_max_pool_sees_a_changed_input():
    x = flame.ones(1, 1, 4, 4)
    a = F.adaptive_max_pool2d(x, 2)
    x.add_(1.0)
    assert a is not F.adaptive_max_pool2d(x, 2) and float(F.adaptive_max_pool2d(x, 2).max()) == 2.0


UNPOOL = [(1, (9,), dict(kernel_size=2)), (1, (10,), dict(kernel_size=3, stride=2, padding=1)),
          (2, (6, 8), dict(kernel_size=2)), (2, (7, 6), dict(kernel_size=3, stride=2, padding=1)),
          (2, (6, 7), dict(kernel_size=(2, 3), stride=(2, 1))), (3, (4, 6, 5), dict(kernel_size=2))]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("d,size,kw", UNPOOL)
def test_max_unpool_inverts_max_pool(d, size, kw, mode):
    x = _f64(2, 3, *size)
    pool, unpool = f"max_pool{d}d", f"max_unpool{d}d"

    def fn(lib, t):
        y, i = getattr(lib, pool)(t, return_indices=True, **kw)
        return getattr(lib, unpool)(y, i, output_size=t.shape[2:], **kw), i

    check(lambda t: fn(F, t), lambda t: fn(TF, t), x, mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_max_unpool_of_given_indices_and_modules(mode):
    """Indices given as data (overlapping windows name one position twice: a value is kept, and each
    value's gradient is the output gradient at its index), unbatched input, the default output size."""
    x = _f64(2, 4, 3)
    idx = np.random.default_rng(1).integers(0, 35, size=(2, 4, 3))
    check(lambda t, i: F.max_unpool2d(t, i, 3, 2, 1), lambda t, i: TF.max_unpool2d(t, i, 3, 2, 1), x, idx, mode=mode)
    check(lambda t, i: nn.MaxUnpool2d(3, 2, 1)(t, i), lambda t, i: torch.nn.MaxUnpool2d(3, 2, 1)(t, i),
          x, idx, mode=mode)
    x1, i1 = _f64(2, 3, 4), np.random.default_rng(2).integers(0, 9, size=(2, 3, 4))
    check(lambda t, i: nn.MaxUnpool1d(2)(t, i, [2, 3, 9]), lambda t, i: torch.nn.MaxUnpool1d(2)(t, i, [2, 3, 9]),
          x1, i1, mode=mode)
    x3, i3 = _f64(1, 2, 2, 2, 3), np.random.default_rng(3).integers(0, 4 * 4 * 6, size=(1, 2, 2, 2, 3))
    check(lambda t, i: nn.MaxUnpool3d(2)(t, i), lambda t, i: torch.nn.MaxUnpool3d(2)(t, i), x3, i3, mode=mode)


def test_max_unpool_module_attributes_match_torch():
    for d in (1, 2, 3):
        ours, theirs = getattr(nn, f"MaxUnpool{d}d")(2, padding=1), getattr(torch.nn, f"MaxUnpool{d}d")(2, padding=1)
        assert (ours.kernel_size, ours.stride, ours.padding) == (theirs.kernel_size, theirs.stride, theirs.padding)
        assert repr(ours) == repr(theirs)


def test_max_unpool_errors_as_torch():
    x, i = flame.tensor(_f64(1, 1, 4, 3)), flame.tensor(np.arange(12).reshape(1, 1, 4, 3) * 5)
    tx, ti = torch.tensor(x.numpy()), torch.tensor(i.numpy())
    with pytest.raises(RuntimeError, match="invalid max index"):
        TF.max_unpool2d(tx, ti, 2)
    with pytest.raises(IndexValueError, match="invalid max index: 50 .*8x6"):
        F.max_unpool2d(x, i, 2)
    with pytest.raises(ValueError):
        TF.max_unpool2d(tx, ti, 2, output_size=(12, 6))
    with pytest.raises(ShapeError, match="invalid output_size"):
        F.max_unpool2d(x, i, 2, output_size=(12, 6))
    with pytest.raises(ShapeError, match="shape of indices"):
        F.max_unpool2d(x, i[..., :2], 2)
