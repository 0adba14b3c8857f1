"""Tensor.as_strided / torch.as_strided against torch's, in f64: sliding windows, overlapping and strided
reads, an explicit storage_offset, views (transposed, sliced: their storage is their base's, their
offset the default; storage beyond the view's own elements gets no gradient), 0-d and empty sizes;
values and gradients (an element read twice gets both),
eager and inside @flame.compile; torch's errors (negative strides, lengths that differ, an offset or
extent beyond the storage); as_strided_ is a clear NotImplementedError."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame

X = np.random.default_rng(0).standard_normal(12)

CASES = {
    "sliding windows": (lambda x: x, ((5, 4), (2, 1))),
    "overlapping": (lambda x: x, ((4, 4), (1, 1))),
    "strided": (lambda x: x, ((3, 2), (4, 2))),
    "offset": (lambda x: x, ((3,), (3,), 2)),
    "broadcast (stride 0)": (lambda x: x, ((3, 4), (0, 1), 1)),
    "of a transposed view": (lambda x: x.view(3, 4).t(), ((2, 3), (1, 4))),
    "of a sliced view": (lambda x: x.view(3, 4)[1:, 1:], ((2, 2), (1, 1))),
    # storage outside the view's own elements is read, and torch's gradient reaches none of it
    "of a column, reading beside it": (lambda x: x.view(3, 4).t()[1], ((2, 3), (3, 1), 2)),
    "of a slice, reading before it": (lambda x: x[4:], ((3,), (1,), 2)),
    "of every other column": (lambda x: x.view(3, 4)[:, ::2], ((2, 3), (1, 2), 1)),
    "0-d": (lambda x: x, ((), (), 5)),
    "empty": (lambda x: x, ((0, 3), (1, 1), 40)),
}


def _run(lib, name, compiled):
    view, args = CASES[name]
    x = lib.tensor(X, requires_grad=True)
    w = lib.tensor(np.cos(np.arange(int(np.prod(args[0])))).reshape(args[0]))

    def step(x):
        y = view(x).as_strided(*args)
        (y * w).sum().backward()
        return y.detach()

    y = (flame.compile(step) if compiled else step)(x)
    return y.numpy(), x.grad.numpy()


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("name", CASES)
def test_as_strided_as_torch(name, compiled):
    for a, b in zip(_run(torch, name, False), _run(flame, name, compiled)):
        np.testing.assert_allclose(b, a, rtol=1e-12)


def test_the_function_and_a_detached_view():
    for lib in (torch, flame):
        x = lib.tensor(X, requires_grad=True)
        np.testing.assert_array_equal(lib.as_strided(x, (2, 2), (3, 1), 1).detach().numpy(), X[[[1, 2], [4, 5]]])
        assert not x.detach().as_strided((2,), (1,)).requires_grad


@pytest.mark.parametrize("args", [((4, 3), (4, 1)), ((3,), (-1,)), ((3, 2), (1,)), ((2, 2), (1, 1), 11),
                                  ((2, 2), (1, 1), -1)])
def test_errors_as_torch(args):
    messages = []
    for lib in (torch, flame):
        with pytest.raises(RuntimeError) as e:
            lib.tensor(X).as_strided(*args)
        messages.append(str(e.value).split("\n")[0])
    assert messages[1] == messages[0]


def test_in_place_restride_is_refused_clearly():
    with pytest.raises(NotImplementedError, match="as_strided_: flame does not restride a tensor in place"):
        flame.tensor(X).as_strided_((2,), (1,))


WRITES = {
    "add_": lambda y: y.add_(1.0),
    "item assignment": lambda y: y.__setitem__(0, 5.0),
    "copy_": lambda y: y.copy_(flame.zeros(y.shape, dtype=y.dtype)),
    "zero_": lambda y: y.zero_(),
    "into a view of it": lambda y: y[1].mul_(2.0),
}


@pytest.mark.parametrize("write", WRITES.values(), ids=WRITES.keys())
def test_a_write_into_its_result_is_refused_where_torch_would_write_into_the_input(write):
    """torch's as_strided is a view, so such a write changes the input; flame's result is a copy, and a
    write into it would silently leave the input as it was: refused, eagerly and while tracing."""
    with pytest.raises(flame.errors.ViewError, match="a write into the result of as_strided"):
        write(flame.tensor(X).as_strided((3, 2), (2, 1)))

    @flame.compile
    def step(x):
        write(x.as_strided((3, 2), (2, 1)))
        return x

    with pytest.raises(flame.errors.ViewError, match="a write into the result of as_strided"):
        step(flame.tensor(X))
    y = flame.tensor(X).as_strided((3, 2), (2, 1)).clone()
    write(y)  # a clone is the user's own tensor
