"""An in-place op written into a view (a slice, a row, a transpose, a diagonal, as_strided, unfold, a view
of a view) whose torch node saves its result (exp_, tanh_, sigmoid_), then another write torch's version
counter counts into the same storage: into the view again, another view of the base, the base itself, under
no_grad or through detach(). torch's node of the first op saved the view as its output, which shares the
base's counter, so its backward raises; flame raises too, naming the op, where it gave a gradient. A write
through .data instead is not counted: torch's node reads the storage as the backward finds it, and so does
flame's (it read the values from before the write). Writes
whose first op saved nothing of its result (mul_ by a number) and reads with no later write give torch's
gradient. Eagerly, inside @flame.compile and outside it on the compiled result; against torch in float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.frontend.backward_ways import WAYS, grad_or_none, run_backward, same_as_torch

X = np.random.default_rng(0).uniform(0.2, 0.9, (4, 6))
VIEWS = {
    "row": lambda y: y[0],
    "slice with a step": lambda y: y[1:3, ::2],
    "transpose": lambda y: y.t(),
    "diagonal": lambda y: y.diagonal(1),
    "as_strided": lambda y: y.as_strided((2, 2), (6, 1), 2),
    "unfold": lambda y: y.unfold(1, 2, 2),
    "view of a view": lambda y: y[1:3][0],
}
FIRST = {  # name: the first in-place op, into the view, and whether its node saved its result
    "exp_": (lambda v: v.exp_(), True),
    "tanh_": (lambda v: v.tanh_(), True),
    "sigmoid_": (lambda v: v.sigmoid_(), True),
    "mul_ by a number": (lambda v: v.mul_(2.5), False),
}


def _no_grad_add(lib, y, view):
    with lib.no_grad():
        y.add_(1)


THEN = {  # the second write, into the storage of base y (view: the first write's view, taken again)
    "into the view again": lambda lib, y, view: view(y).mul_(3),
    "into another row": lambda lib, y, view: y[3].mul_(2),
    "into the base": lambda lib, y, view: y.mul_(2),
    "under no_grad": _no_grad_add,
    "through detach()": lambda lib, y, view: y.detach().mul_(2),
    "through .data": lambda lib, y, view: y.data.mul_(2),
    "into the view through .data": lambda lib, y, view: view(y.data).add_(0.5),
    "into the view through detach()": lambda lib, y, view: view(y.detach()).add_(0.5),
    "none (a read)": lambda lib, y, view: y * 2,
}


def _body(view: str, first: str, then: str):
    def body(lib, x):
        y = x * 1
        FIRST[first][0](VIEWS[view](y))
        THEN[then](lib, y, VIEWS[view])
        return (y * y.detach()).sum()

    return body


CASES = [(v, f, t) for v in VIEWS for f in FIRST for t in THEN]


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize(("view", "first", "then"), CASES, ids=[" / ".join(c) for c in CASES])
def test_a_write_after_an_in_place_op_into_a_view_like_torch(view, first, then, way):
    body = _body(view, first, then)
    want = grad_or_none(torch, body, "eager", torch.tensor(X, requires_grad=True), "")
    got = grad_or_none(
        flame, body, way, flame.tensor(X, dtype=flame.float64, requires_grad=True), "test_inplace_views_like_torch.py"
    )
    same_as_torch(got, want, rtol=1e-12)


@pytest.mark.parametrize("view", list(VIEWS))
def test_torch_refuses_a_write_after_exp_into_a_view(view):
    """The oracle: a write into another part of the base after exp_ into a view is torch's error."""
    body = _body(view, "exp_", "into another row")
    assert grad_or_none(torch, body, "eager", torch.tensor(X, requires_grad=True), "") is None


COPIES = {  # a view op's result that torch (and flame) make a copy, its strides allowing no view
    "reshape of a transpose": lambda y: y.t().reshape(-1),
    "reshape of a column slice": lambda y: y.narrow(1, 1, 2).reshape(-1),
    "flatten of an expand": lambda y: y[:1].expand(3, 6).flatten(),
}


def _no_grad_mul(lib, y):
    with lib.no_grad():
        y[1].mul_(2)


LATER = {
    "a write into a row": lambda lib, y: y[1].mul_(2),
    "under no_grad": _no_grad_mul,
    "through .data": lambda lib, y: y.data.mul_(1.5),
}


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("later", list(LATER))
@pytest.mark.parametrize("copy", list(COPIES))
def test_a_write_into_the_base_leaves_a_copy_a_view_op_made_as_it_was(copy, later, way):
    """cumprod saves its input, here a copy: a later write into the base neither changes it (torch's
    gradient, where flame's compiled backward raised its in-place error as for a view) nor, through .data,
    is read by its backward (flame's compiled backward read the base's new values through it)."""

    def body(lib, x):
        y = x * 1
        r = COPIES[copy](y).cumprod(0)
        LATER[later](lib, y)
        return (r * 0.5).sum() + (y * y.detach()).sum()

    want = grad_or_none(torch, body, "eager", torch.tensor(X, requires_grad=True), "")
    assert want is not None
    got = grad_or_none(flame, body, way, flame.tensor(X, dtype=flame.float64, requires_grad=True), "")
    same_as_torch(got, want, rtol=1e-12)


OVERLAPPING = {  # views two of whose elements share a location (no stride of 0)
    "unfold with a step below its size": lambda y: y.unfold(1, 3, 2),
    "as_strided windows": lambda y: y.as_strided((3, 3), (1, 1)),
}


def _no_grad_write(lib, v):
    with lib.no_grad():
        v.mul_(2)


OVERLAP_WRITES = {
    "mul_": lambda lib, v: v.mul_(2),
    "add_ under no_grad": _no_grad_write,
    "copy_": lambda lib, v: v.copy_(v.detach() * 0 + 0.5),
}
FILLS = {"zero_": lambda lib, v: v.zero_(), "fill_": lambda lib, v: v.fill_(0.25)}


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("write", list(OVERLAP_WRITES))
@pytest.mark.parametrize("view", list(OVERLAPPING))
def test_a_computed_write_into_overlapping_windows_is_refused(view, write, way):
    """torch writes such a view element by element, a shared location taking the op once per element that
    reaches it (0.3 doubled twice: 1.2); flame wrote each location once (0.6), with another gradient. It
    raises flame's OverlapError naming the line instead."""

    def body(lib, x):
        y = x * 1
        OVERLAP_WRITES[write](lib, OVERLAPPING[view](y))
        return (y * y.detach()).sum()

    torch_y = torch.tensor(X, requires_grad=True) * 1
    _no_grad_write(torch, torch_y.detach().unfold(1, 3, 2))  # (the oracle: torch computes it, twice over)
    assert torch_y[0, 2].item() == pytest.approx(X[0, 2] * 4)
    with pytest.raises(flame.errors.OverlapError, match="refers to a single memory location") as e:
        run_backward(flame, body, flame.tensor(X, dtype=flame.float64, requires_grad=True), way)
    assert "test_inplace_views_like_torch.py" in str(e.value)


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("fill", list(FILLS))
@pytest.mark.parametrize("view", list(OVERLAPPING))
def test_a_fill_of_overlapping_windows_is_torchs(view, fill, way):
    def body(lib, x):
        y = x * 1
        FILLS[fill](lib, OVERLAPPING[view](y))
        return (y * y.detach()).sum()

    want = grad_or_none(torch, body, "eager", torch.tensor(X, requires_grad=True), "")
    got = grad_or_none(flame, body, way, flame.tensor(X, dtype=flame.float64, requires_grad=True), "")
    same_as_torch(got, want, rtol=1e-12)
