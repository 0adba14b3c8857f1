"""A reduction, sort or difference whose result holds the same values as its input (a 0-d input's
prod / max / min / nanmedian / sort / msort along dim 0, diff with n=0, rot90 by a multiple of four turns,
repeat_interleave once, batch_norm of an empty batch)
returns a new tensor, as torch's:
a write into the result leaves the input as it was, eagerly and inside @flame.compile. A 0-d tensor's
movedim(0, 0) is a view of it, as torch's (the write reaches it)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame

CASES = {
    "prod": ((), lambda x: x.prod(0)),
    "prod keepdim": ((), lambda x: x.prod(0, keepdim=True)),
    "max": ((), lambda x: x.max(0).values),
    "min": ((), lambda x: x.min(0, keepdim=True).values),
    "nanmedian": ((), lambda x: x.nanmedian(0).values),
    "sort": ((), lambda x: x.sort(0).values),
    "msort": ((), lambda x: x.msort()),
    "diff n=0": ((3,), lambda x: x.diff(n=0)),
    "rot90 k=0": ((2, 2), lambda x: x.rot90(0)),
    "repeat_interleave once": ((2,), lambda x: x.repeat_interleave(1)),
    "repeat_interleave once along a dim": ((2, 1), lambda x: x.repeat_interleave(1, dim=1)),
    "rot90 k=4": ((2, 2), lambda x: x.rot90(4, (1, 0))),
    "movedim (a view)": ((), lambda x: x.movedim(0, -1)),
}


def _write_through(lib, shape, f):
    x = lib.tensor(np.full(shape, 1.5))
    f(x).mul_(3.0)
    return x


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_write_into_the_result_reaches_the_input_only_as_in_torch(case):
    shape, f = case
    want = _write_through(torch, shape, f).numpy()
    np.testing.assert_array_equal(_write_through(flame, shape, f).numpy(), want)

    @flame.compile
    def step(x):
        f(x).mul_(3.0)
        return x * 1.0

    np.testing.assert_array_equal(step(flame.tensor(np.full(shape, 1.5))).numpy(), want)


INTEGER_CASES = {
    "trunc": lambda x: x.trunc(),
    "fix": lambda x: x.fix(),
    "nan_to_num": lambda x: x.nan_to_num(),
    "torch.nan_to_num": lambda x: (torch if isinstance(x, torch.Tensor) else flame).nan_to_num(x),
}


@pytest.mark.parametrize("f", INTEGER_CASES.values(), ids=INTEGER_CASES.keys())
def test_identity_ops_of_an_integer_tensor_return_a_new_tensor(f):
    """trunc / fix / nan_to_num of integers hold the input's values in a new tensor, as torch's: a write
    into the result leaves the input as it was, eagerly and inside @flame.compile."""

    def write_through(lib):
        x = lib.tensor([1, 2, 3])
        f(x).add_(10)
        return x.tolist()

    assert write_through(flame) == write_through(torch) == [1, 2, 3]

    @flame.compile
    def step(x):
        f(x).add_(10)
        return x * 1

    assert step(flame.tensor([1, 2, 3])).tolist() == [1, 2, 3]


def test_diff_of_a_0d_tensor_is_torchs_error():
    with pytest.raises(RuntimeError, match="diff expects input to be at least one-dimensional"):
        torch.tensor(1.0).diff()
    with pytest.raises(flame.errors.ShapeError, match="diff expects input to be at least one-dimensional"):
        flame.tensor(1.0).diff()


def test_batch_norm_of_an_empty_batch_is_a_new_tensor():
    """torch's training batch_norm of an empty batch returns an empty tensor of its own: an in-place
    write into it is no write into a leaf that requires grad (flame returned the input itself)."""
    x = flame.zeros(1, 4, 0, requires_grad=True)
    y = flame.nn.functional.batch_norm(x, None, None, training=True)
    assert y is not x and y.requires_grad and tuple(y.shape) == (1, 4, 0)
    y.masked_fill_(flame.zeros(0, dtype=flame.bool), 0.0)  # torch allows it: y is no leaf
