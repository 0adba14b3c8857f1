"""F.pad's reflect, replicate and circular modes with negative pads (a crop) against torch in f64: values and
gradients, eagerly and inside @flame.compile; reflect and replicate read the uncropped input, circular
wraps around what the crop keeps; and the pads torch refuses (or fills from unwritten memory) raise."""

import numpy as np
import pytest
import torch

import flame
from tests.nn_parity.common import check_weighted

_R = np.random.default_rng(3)
X = {2: _R.standard_normal((2, 3, 6)), 4: _R.standard_normal((2, 3, 5, 6)), 6: _R.standard_normal((2, 3, 5, 6, 4))}

CASES = [
    ("reflect", (-1, 2)),
    ("reflect", (2, -2, -1, 3)),
    ("reflect", (-2, -1, 1, -2, 2, 0)),
    ("replicate", (-2, 3)),
    ("replicate", (1, -2, -3, 2)),
    ("replicate", (0, -1, 2, 2, -2, 1)),
    ("circular", (-1, 2)),
    ("circular", (2, -1, -2, 1)),
    ("circular", (-1, -1, 1, -3, 2, 0)),
]


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("mode, pad", CASES, ids=[f"{m}{p}" for m, p in CASES])
def test_negative_pads_match_torch(mode, pad, compiled):
    check_weighted(lambda L, t: L.nn.functional.pad(t, pad, mode=mode), X[len(pad)], compiled)


@pytest.mark.parametrize("mode, pad", [("replicate", (-3, -2)), ("reflect", (-5, 0)), ("circular", (4, -2))])
def test_pads_that_leave_too_little_raise(mode, pad):
    x = np.random.default_rng(4).standard_normal((1, 2, 5))
    if mode != "circular":  # torch refuses; its circular mode reads memory it never wrote
        with pytest.raises(RuntimeError, match="too small"):
            torch.nn.functional.pad(torch.tensor(x), pad, mode=mode)
    with pytest.raises(flame.ShapeError, match=r"leaves(.|\n)*test_pad_negative"):
        flame.nn.functional.pad(flame.tensor(x), pad, mode=mode)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape, pad", [((3, 4), (1, 1, 1, 1)), ((5,), (1, 1)), ((2, 3, 4, 5, 6), (1, 1)),
                                        ((2, 3, 4), (1, 1, 1, 1, 1, 1))])
def test_pads_of_other_ranks_raise_as_torch(mode, shape, pad):
    """A non-constant pad takes 1 to 3 trailing dims of a batched or unbatched input (flame padded any)."""
    x = np.ones(shape)
    with pytest.raises(NotImplementedError) as theirs:
        torch.nn.functional.pad(torch.tensor(x), pad, mode=mode)
    with pytest.raises(NotImplementedError, match=r"(.|\n)*test_pad_negative") as mine:
        flame.nn.functional.pad(flame.tensor(x), pad, mode=mode)
    assert str(theirs.value).splitlines()[0] in str(mine.value)
