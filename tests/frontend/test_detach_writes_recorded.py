"""A write through `detach()` whose operand carries a gradient (`y.detach().mul_(w)`) records it into the
detached tensor, as torch's: its node saved a clone of the tensor as it was before the write (mul_ reads
it for w's gradient), so the write's own ops read the value from before it began, and no refusal follows,
eager and compiled; a node recorded before the write that saved the tensor still refuses. torch float64 is
the oracle: both raise, or both give the same gradients (None and zero alike for an unused input)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.frontend.torch_oracle import agrees_with_torch

X, W = np.array([0.5, -2.0, 1.25]), np.array([1.5, 2.0, -0.5])

CASES = {
    "mul_": lambda lib, y, w: y.detach().mul_(w),
    "mul_ after a clamp_": lambda lib, y, w: (y.detach().clamp_(min=-1.0), y.detach().mul_(w)),
    "div_": lambda lib, y, w: y.detach().div_(w),
    "addcmul_": lambda lib, y, w: y.detach().addcmul_(w, w),
    "mul_ of a node that saved it before": lambda lib, y, w: (_saved(lib, y, w), y.detach().mul_(w)),
}
SAVED = {}


def _saved(lib, y, w):
    SAVED[lib.__name__] = y * w  # mul saved y for w's gradient: the write through detach() changes it


def _body(lib, case):
    def run(x, w):
        y = x * 1
        CASES[case](lib, y, w)
        loss = (y * y).sum()
        return loss + SAVED.pop(lib.__name__).sum() if lib.__name__ in SAVED else loss

    return run


@pytest.mark.parametrize("how", ["eager", "compiled"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_recorded_write_through_detach_is_torchs(case, how):
    SAVED.clear()
    agrees_with_torch(lambda lib: _body(lib, case), (X, W), how, "modified by an inplace operation")
