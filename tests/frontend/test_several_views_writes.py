"""An in-place write into one of several views a call returned (split, chunk, unbind, split_with_sizes), or a
view of one, against torch: refused where the write records a gradient (torch's multi-output view check,
before its leaf check), let through under no_grad, through detach() or .data, and for the calls whose
pieces torch does not mark (tensor_split, hsplit, unsafe_split, unsafe_chunk); eager and compiled. Where
neither refuses, the values and gradients agree."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.frontend.torch_oracle import agrees_with_torch

RNG = np.random.default_rng(11)
X, W = RNG.standard_normal((4, 6)), RNG.standard_normal(6)

CASES = {
    "split": lambda lib, y, w: y.split(2)[0].mul_(2),
    "split of a leaf": lambda lib, y, w: y.split(2)[1].add_(1),
    "split with sizes": lambda lib, y, w: y.split([1, 3])[1].mul_(3),
    "chunk": lambda lib, y, w: y.chunk(2)[1].zero_(),
    "unbind": lambda lib, y, w: y.unbind(0)[2].mul_(w),
    "a view of an unbind output": lambda lib, y, w: y.unbind(1)[0].unsqueeze(0).mul_(2),
    "item assignment into a chunk": lambda lib, y, w: y.chunk(2)[0].__setitem__(0, 5.0),
    "under no_grad": lambda lib, y, w: _no_grad(lib, lambda: y.split(2)[0].mul_(2)),
    "through detach()": lambda lib, y, w: y.split(2)[0].detach().mul_(2),
    "through .data": lambda lib, y, w: y.unbind(0)[1].data.add_(1),
    "tensor_split": lambda lib, y, w: y.tensor_split(2)[0].mul_(2),
    "hsplit": lambda lib, y, w: y.hsplit(3)[1].mul_(2),
    "unsafe_split": lambda lib, y, w: y.unsafe_split(2)[0].mul_(2),
    "unsafe_chunk": lambda lib, y, w: y.unsafe_chunk(2)[1].mul_(w),
    "a tensor with no gradient, a value with one": lambda lib, y, w: y.detach().split(2)[0].add_(w),
}


def _no_grad(lib, fn):
    with lib.no_grad():
        fn()


# torch's unsafe_split and unsafe_chunk give a wrong gradient after the write (its documentation says so):
# flame's is the gradient of the same write through a slice
SLICED = {"unsafe_split": lambda lib, y, w: y[0:2].mul_(2), "unsafe_chunk": lambda lib, y, w: y[2:4].mul_(w)}


def _body(lib, case):
    def run(x, w):
        y = x if case == "split of a leaf" else x * 1
        (SLICED if lib is torch and case in SLICED else CASES)[case](lib, y, w)
        return (y * y).sum() if y is not x else (x * 1).sum()

    return run


@pytest.mark.parametrize("how", ["eager", "compiled"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_write_into_one_of_several_views_is_torchs(case, how):
    agrees_with_torch(lambda lib: _body(lib, case), (X, W), how, "returns multiple views")
