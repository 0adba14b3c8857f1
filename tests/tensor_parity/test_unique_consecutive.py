"""unique_consecutive (flame.* and Tensor.*) against torch: runs of equal values or slices along a dim,
return_inverse and return_counts, NaN (each its own run), -0.0 beside 0.0, 0-d and empty inputs, integer
and bool dtypes; eager only (its output size depends on the values), so inside @flame.compile it raises
a TraceError; torch's errors, for unique(dim=) too: a dim out of range (IndexError, never wrapped onto
another dim) and another dim of size 0 (RuntimeError)."""

import numpy as np
import pytest
import torch

import flame
from tests.tensor_parity.common import check

N = np.nan
INPUTS = {
    "ints": np.array([1, 1, 2, 2, 3, 1, 1, 2]),
    "floats": np.array([N, N, 1.0, 1.0, -0.0, 0.0, 2.5]),
    "bools": np.array([True, True, False, True]),
    "0-d": np.array(3.0),
    "empty": np.zeros(0),
    "2-D": np.array([[1, 1, 2], [1, 1, 2], [3, 3, 3], [1, 1, 2]]),
}
CALLS = {
    "plain": lambda L, x: L.unique_consecutive(x),
    "inverse and counts": lambda L, x: L.unique_consecutive(x, return_inverse=True, return_counts=True),
    "counts method": lambda L, x: x.unique_consecutive(return_counts=True),
    "dim 0": lambda L, x: L.unique_consecutive(x, return_inverse=True, return_counts=True, dim=0),
    "dim -1": lambda L, x: x.unique_consecutive(return_inverse=True, dim=-1),
}


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("x", INPUTS)
def test_matches_torch(x, call):
    check(CALLS[call], INPUTS[x], compiled=False)


def test_inside_compile_it_says_why_it_cannot():
    with pytest.raises(flame.errors.TraceError, match="unique_consecutive"):
        flame.compile(lambda x: flame.unique_consecutive(x))(flame.tensor(INPUTS["ints"]))


def test_a_dim_out_of_range_raises():
    for x in (INPUTS["0-d"], INPUTS["2-D"]):
        with pytest.raises(IndexError):
            torch.unique_consecutive(torch.tensor(x), dim=2)
        with pytest.raises(flame.FlameError):
            flame.unique_consecutive(flame.tensor(x), dim=2)


SLICE_ERRORS = {
    "dim 2 of a 2-D tensor": (np.array([[1.0, 2.0], [1.0, 2.0]]), 2, IndexError),
    "dim -3 of a 2-D tensor": (np.array([[1.0, 2.0], [1.0, 2.0]]), -3, IndexError),
    "dim 0 of a 0-d tensor": (np.array(2.0), 0, IndexError),
    "dim 0 beside a dim of size 0": (np.zeros((3, 0)), 0, RuntimeError),
    "dim 1 beside a dim of size 0": (np.zeros((0, 3)), -1, RuntimeError),
}


@pytest.mark.parametrize("name", ["unique", "unique_consecutive"])
@pytest.mark.parametrize("case", list(SLICE_ERRORS))
def test_slices_along_a_dim_raise_as_torch(name, case):
    x, dim, theirs = SLICE_ERRORS[case]
    check(lambda L, t: getattr(L, name)(t, dim=dim, return_inverse=True, return_counts=True), x, compiled=False,
          error=theirs)
