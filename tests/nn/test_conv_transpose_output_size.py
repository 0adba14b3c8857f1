"""ConvTranspose1d/2d/3d forward(x, output_size) against torch's: the sizes it takes (the spatial sizes,
or with the batch and channel dimensions, batched or not) give torch's output; a size of another length
or outside [least, least + stride - 1] raises torch's ValueError, naming the sizes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn


def _pair(d: int):
    torch.manual_seed(d)
    theirs = getattr(torch.nn, f"ConvTranspose{d}d")(2, 3, 3, stride=2, padding=1)
    mine = getattr(nn, f"ConvTranspose{d}d")(2, 3, 3, stride=2, padding=1)
    mine.load_state_dict({k: flame.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    return mine, theirs


def _input(d: int, batched: bool) -> np.ndarray:
    shape = ((1,) if batched else ()) + (2,) + (4,) * d
    return np.random.default_rng(d).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("extra", [0, 1])
def test_output_size_gives_torchs_output(d, batched, extra):
    mine, theirs = _pair(d)
    x = _input(d, batched)
    size = [7 + extra] * d
    full = list(x.shape[:-d - 1]) + [3] + size  # with the batch and channel dimensions
    for want in (size, full):
        expected = theirs(torch.tensor(x), output_size=want).detach().numpy()
        got = mine(flame.tensor(x), output_size=want).numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("which", ["short", "long", "small", "large"])
def test_output_size_torch_refuses_raises_its_value_error(d, batched, which):
    mine, theirs = _pair(d)
    x = _input(d, batched)
    want = {"short": [7] * (d - 1) if d > 1 else [1, 3, 7, 7, 7, 7],
            "long": [5] + [7] * (d + 2 if batched else d + 1) if d > 1 else [1, 1, 1, 7][:x.ndim + 1],
            "small": [6] * d, "large": [9] * d}[which]
    with pytest.raises(ValueError) as theirs_error:
        theirs(torch.tensor(x), output_size=want)
    with pytest.raises(ValueError) as mine_error:
        mine(flame.tensor(x), output_size=want)
    head = str(theirs_error.value).split("(")[0].split(" but")[0]
    assert head in str(mine_error.value)
