"""F.fractional_max_pool2d/3d and nn.FractionalMaxPool2d/3d against PyTorch's: exact values, indices and
input gradients from the same `_random_samples` (float64 and float32, eager and compiled, batched and
unbatched, output_size and output_ratio, NaNs); without samples, the windows' starts drawn from flame's
RNG follow PyTorch's distribution; the errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn
import flame.nn.functional as F

MODES = ("eager", "compiled")
CASES = [  # d, input shape, kernel_size, output_size, output_ratio
    (2, (2, 3, 9, 11), (2, 3), (4, 5), None),
    (2, (3, 7, 7), 2, (3, 6), None),
    (2, (1, 2, 10, 10), 3, (1, 8), None),
    (2, (2, 2, 12, 9), 2, None, (0.5, 0.7)),
    (3, (2, 2, 6, 7, 8), (2, 3, 2), (3, 4, 5), None),
    (3, (2, 5, 6, 7), 2, None, 0.6),
]


def _samples(shape, d, seed):
    n = shape[0] if len(shape) == d + 2 else 1
    return np.random.default_rng(seed).random((n, shape[-d - 1], d))


def _run(mode, fn, *args):
    return fn(*args) if mode == "eager" else flame.compile(fn)(*args)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_values_indices_and_gradients_match_pytorch(mode, dtype, case):
    d, shape, k, out, ratio = CASES[case]
    rng = np.random.default_rng(case)
    x = rng.standard_normal(shape).astype(dtype)
    x.reshape(-1)[::7] = x.reshape(-1)[3]  # ties: the first maximum in row-major order wins
    s = _samples(shape, d, case).astype(dtype)
    tx = torch.tensor(x, requires_grad=True)
    ty, ti = getattr(torch.nn.functional, f"fractional_max_pool{d}d")(
        tx, k, output_size=out, output_ratio=ratio, return_indices=True, _random_samples=torch.tensor(s))
    ct = rng.standard_normal(tuple(ty.shape)).astype(dtype)
    (ty * torch.tensor(ct)).sum().backward()

    def body(x, s):
        y, i = getattr(F, f"fractional_max_pool{d}d")(x, k, out, ratio, True, _random_samples=s)
        (y * flame.tensor(ct)).sum().backward()
        return y, i

    fx = flame.tensor(x, requires_grad=True)
    y, i = _run(mode, body, fx, flame.tensor(s))
    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
    np.testing.assert_array_equal(i.numpy(), ti.numpy())
    assert i.dtype == flame.int64
    np.testing.assert_allclose(fx.grad.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-6 if dtype == "float32" else 1e-14)


@pytest.mark.parametrize("mode", MODES)
def test_nan_is_the_maximum_and_modules_match_pytorch(mode):
    x = np.random.default_rng(5).standard_normal((2, 3, 8, 8))
    x[0, 1, 2, 3] = x[1, 2, 5, 5] = np.nan
    s = _samples(x.shape, 2, 5)
    theirs = torch.nn.FractionalMaxPool2d(3, output_size=4, return_indices=True, _random_samples=torch.tensor(s))
    mine = nn.FractionalMaxPool2d(3, output_size=4, return_indices=True, _random_samples=flame.tensor(s))
    ty, ti = theirs(torch.tensor(x))
    y, i = _run(mode, lambda x: mine(x), flame.tensor(x))
    np.testing.assert_array_equal(y.numpy(), ty.numpy())
    np.testing.assert_array_equal(i.numpy(), ti.numpy())
    x3 = np.random.default_rng(6).standard_normal((1, 2, 5, 6, 7))
    s3 = _samples(x3.shape, 3, 6)
    theirs3 = torch.nn.FractionalMaxPool3d(2, output_ratio=0.5, _random_samples=torch.tensor(s3))
    mine3 = nn.FractionalMaxPool3d(2, output_ratio=0.5, _random_samples=flame.tensor(s3))
    np.testing.assert_array_equal(_run(mode, lambda x: mine3(x), flame.tensor(x3)).numpy(),
                                  theirs3(torch.tensor(x3)).numpy())
    assert list(mine3.state_dict()) == list(theirs3.state_dict()) == ["_random_samples"]


@pytest.mark.parametrize("mode", MODES)
def test_drawn_windows_follow_pytorchs_distribution(mode):
    """An increasing plane puts each window's maximum at its last element, so the indices name the
    windows' starts: their frequencies over many planes match PyTorch's (both draw u uniformly)."""
    n_planes, size, out, k = 4000, 10, 4, 2
    x = np.broadcast_to(np.arange(size, dtype=np.float32), (1, n_planes, size, size)) * 1.0
    x = x + np.arange(size, dtype=np.float32)[:, None] * size

    def counts(idx):
        starts = idx % size - (k - 1)  # the width's window starts
        return np.stack([np.bincount(starts[..., j].ravel(), minlength=size) for j in range(out)]) / starts[..., 0].size

    torch.manual_seed(0)
    ti = torch.nn.functional.fractional_max_pool2d(torch.tensor(x), k, output_size=out, return_indices=True)[1]
    flame.manual_seed(0)
    i = _run(mode, lambda x: F.fractional_max_pool2d(x, k, output_size=out, return_indices=True)[1], flame.tensor(x))
    assert np.abs(counts(i.numpy()) - counts(ti.numpy())).max() < 0.04
    assert len(np.unique(i.numpy()[0, :, 0, 1])) > 1  # the planes draw their own samples
    i2 = _run(mode, lambda x: F.fractional_max_pool2d(x, k, output_size=out, return_indices=True)[1], flame.tensor(x))
    assert not np.array_equal(i.numpy(), i2.numpy())  # every call draws again


def test_errors_match_pytorch():
    x = np.zeros((2, 3, 7, 9))
    cases = [
        (2, x, 3, {"output_size": (6, 4)}),
        (2, x, 3, {"output_size": (3, 4), "_random_samples": np.random.random((2, 3, 3))}),
        (2, x, 3, {"output_size": (3, 4), "_random_samples": np.random.random((1, 3, 2))}),
        (3, np.zeros((2, 3, 5, 6, 7)), 2, {"output_size": (5, 4, 4)}),
        (3, np.zeros((2, 3, 5, 6, 7)), 2, {"output_size": (3, 4, 4), "_random_samples": np.random.random((2, 3, 2))}),
    ]
    for d, xa, k, kw in cases:
        tkw = {a: torch.tensor(v) if isinstance(v, np.ndarray) else v for a, v in kw.items()}
        fkw = {a: flame.tensor(v) if isinstance(v, np.ndarray) else v for a, v in kw.items()}
        with pytest.raises(RuntimeError) as theirs_err:
            getattr(torch.nn.functional, f"fractional_max_pool{d}d")(torch.tensor(xa), k, **tkw)
        with pytest.raises(RuntimeError) as mine_err:
            getattr(F, f"fractional_max_pool{d}d")(flame.tensor(xa), k, **fkw)
        assert str(theirs_err.value) in str(mine_err.value)
    with pytest.raises(ValueError, match="requires specifying either an output_size or an output_ratio"):
        F.fractional_max_pool2d(flame.tensor(x), 2)
    for kw in ({}, {"output_size": 2, "output_ratio": 0.5}, {"output_ratio": 1.5}):
        with pytest.raises(ValueError) as theirs_err:
            torch.nn.FractionalMaxPool2d(2, **kw)
        with pytest.raises(ValueError) as mine_err:
            nn.FractionalMaxPool2d(2, **kw)
        assert str(mine_err.value) == str(theirs_err.value)
