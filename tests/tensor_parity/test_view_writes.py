"""Writes through views against torch, eagerly and inside @flame.compile: a view returned after its base
was written (through the base or through another view of it) holds the base's new values, as torch's
views share storage; views of views, transposes, diagonals, selects and chunks alike."""

import numpy as np
import pytest

import flame
from tests.tensor_parity.common import check

X = np.arange(12, dtype=np.float32).reshape(3, 4)


def view_then_base_written(L, x):
    y = x * 1
    w = y[1:]
    y.add_(1000)
    return w


def view_then_sibling_written(L, x):
    y = x * 1
    w = y[1:]
    y[2:].add_(1000)
    return y, w


def view_of_view_written(L, x):
    y = x.clone()
    w = y[1:]
    w[:, 1:].add_(1000)
    return y, w


def transpose_then_setitem(L, x):
    y = x.clone()
    t = y.T
    d = y.diagonal()
    y[0] = -1
    return t, d


def chunks_then_copy(L, x):
    y = x * 2
    a, b = y.chunk(2, 1)
    a.copy_(b)
    return a, b, y


def select_then_sub(L, x):
    y = x + 0
    s = y.select(1, 2)
    r = y.reshape(-1)
    s.sub_(y[:, 0])
    return s, r


def input_view_written(L, x):
    v = x[1]
    x[1:].mul_(3)
    return v, x


def augmented_bitwise_assignments_write_in_place(L, x):
    y = x.long()
    alias, v = y, y[1:]
    alias ^= 5  # x ^= y, x <<= y, x >>= y update x itself (Python would otherwise rebind the name)
    v <<= 2
    v[:, 1:] >>= 1
    return y, v


CASES = {
    f.__name__: f
    for f in (
        augmented_bitwise_assignments_write_in_place,
        view_then_base_written,
        view_then_sibling_written,
        view_of_view_written,
        transpose_then_setitem,
        chunks_then_copy,
        select_then_sub,
        input_view_written,
    )
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", CASES)
def test_views_see_writes(name, compiled):
    check(CASES[name], X, compiled=compiled)


NEGATIVE_STEP_WRITES = {
    "add_": lambda v: v.add_(1),
    "x[0] = 5": lambda v: v.__setitem__(0, 5.0),
    "a view of it, fill_": lambda v: v[0].fill_(5),
    "its transpose, copy_": lambda v: v.t().copy_(v.t() * 2),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("write", NEGATIVE_STEP_WRITES)
def test_a_write_into_a_negative_step_slice_is_refused(write, compiled):
    """torch refuses a negative step; flame reads one as NumPy's (docs/coming_from_pytorch.md), as a copy,
    so a write into it (or a view of it), which could not reach the input, raises instead of being lost."""
    import torch

    with pytest.raises(ValueError, match="step must be greater than zero"):
        NEGATIVE_STEP_WRITES[write](torch.zeros(3, 4)[:, ::-1])

    def fn(x):
        y = x * 1
        NEGATIVE_STEP_WRITES[write](y[:, ::-2])
        return y

    x = flame.tensor(X)
    with pytest.raises(flame.errors.ViewError, match="negative step"):
        flame.compile(fn)(x) if compiled else fn(x)
    np.testing.assert_array_equal(x.numpy(), X)
