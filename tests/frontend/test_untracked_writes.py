"""Writes no gradient is recorded for — under no_grad, through detach() or .data — into a tensor that
has a gradient history, as torch does them: the tensor holds the new values, and its gradient flows on
through the history it had (frontend/indexing.py `_untracked`, the op straight_through). Against torch
in float64, eagerly and inside @flame.compile."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame


def _no_grad(lib, write):
    with lib.no_grad():
        write()


# each: (lib, y) -> None, a write into y (made from x with a gradient history) that records no gradient
WRITES = {
    "detach().zero_()": lambda lib, y: y.detach().zero_(),
    "no_grad y[0] = 5": lambda lib, y: _no_grad(lib, lambda: y.__setitem__(0, 5.0)),
    "no_grad mul_": lambda lib, y: _no_grad(lib, lambda: y.mul_(2)),
    "no_grad view fill_": lambda lib, y: _no_grad(lib, lambda: y[1:].fill_(1.0)),
    "no_grad -=": lambda lib, y: _no_grad(lib, lambda: y.__isub__(0.5)),
    "detach()[1:].add_": lambda lib, y: y.detach()[1:].add_(1),
    "detach().t() write": lambda lib, y: y.detach().reshape(3, 1).t()[0, 2:].copy_(lib.ones(1, dtype=y.dtype)),
    ".data.mul_": lambda lib, y: y.data.mul_(10),
    ".data[0].fill_": lambda lib, y: y.data[0].fill_(7.0),
    # into an expanded view through detach(): a fill, which torch takes (the view's elements share memory)
    "detach() of an expand, fill_": lambda lib, y: y.expand(2, 3).detach().fill_(1.5),
    "detach() of an expand, masked_fill_": lambda lib, y: (
        y.expand(2, 3).detach().masked_fill_(lib.tensor([[True, False, False], [False, False, True]]), 1.5)
    ),
}


def _write_then_use(lib, name, x):
    y = x * 2
    WRITES[name](lib, y)
    return (y * y + y * x).sum()


def _torch(body, *arrays, wanted=1):
    ts = [torch.tensor(a, dtype=torch.float64, requires_grad=i < wanted) for i, a in enumerate(arrays)]
    loss = body(torch, *ts)
    loss.backward()
    return float(loss.detach()), [t.grad.numpy() for t in ts[:wanted]], ts[0].detach().numpy()


def _flame(body, compiled, *arrays, wanted=1):
    ts = [flame.tensor(a, dtype=flame.float64, requires_grad=i < wanted) for i, a in enumerate(arrays)]
    if compiled:

        @flame.compile
        def step(*args):
            loss = body(flame, *args)
            loss.backward()
            return loss

        loss = step(*ts)
    else:
        loss = body(flame, *ts)
        loss.backward()
    return float(loss.item()), [t.grad.numpy() for t in ts[:wanted]], ts[0].detach().numpy()


def _agree(body, *arrays, wanted=1):
    want = _torch(body, *arrays, wanted=wanted)
    for compiled in (False, True):
        got = _flame(body, compiled, *arrays, wanted=wanted)
        what = "compiled" if compiled else "eager"
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12, err_msg=f"{what}: loss")
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12, err_msg=f"{what}: gradient")
        np.testing.assert_array_equal(got[2], want[2], err_msg=f"{what}: the leaf's values")


@pytest.mark.parametrize("name", WRITES)
def test_an_untracked_write_keeps_the_history_and_changes_the_values(name):
    _agree(lambda lib, x: _write_then_use(lib, name, x), np.array([1.0, 2.0, 3.0]))


def _leaf_detach_write(lib, p, x):
    p.detach().zero_()  # the leaf stays a leaf: its gradient comes from what reads it after
    return (p * x + p).sum()


def _leaf_view_write(lib, p, x):
    with lib.no_grad():
        p[0] = 5.0
    return (p * p * x).sum()


def _view_taken_before(lib, p, x):
    y = p * 2
    v = y[1:]  # read after its base was written: the new values, y's history
    with lib.no_grad():
        y.mul_(3)
    return (v * v * x[1:]).sum()


def _detached_read_after(lib, p, x):
    y = p * 2
    d = y.detach()
    d.add_(1)
    return (y * d * x).sum()


def _two_backwards_around_an_update(lib, p, x):
    (p * x).sum().backward()
    with lib.no_grad():
        p.mul_(2)
    return (p * p * x).sum()


@pytest.mark.parametrize(
    "body",
    [_leaf_detach_write, _leaf_view_write, _view_taken_before, _detached_read_after, _two_backwards_around_an_update],
    ids=lambda f: f.__name__.strip("_"),
)
def test_leaves_views_and_aliases_around_an_untracked_write(body):
    _agree(body, np.array([1.0, 2.0, 3.0]), np.array([1.0, -1.0, 2.0]))


def test_an_op_recorded_before_the_write_refuses_the_backward_eagerly_and_compiled():
    """torch refuses this backward (the product saved y, written since under no_grad), and so do flame's
    eager backward and the backward inside @flame.compile, naming the product's line
    (tests/frontend/test_counted_writes.py)."""

    def body(lib, x):
        y = x * 2
        w = y * y  # saves y
        with lib.no_grad():
            y.mul_(2)
        return (w + y * x).sum()

    x = np.array([1.0, -2.0, 0.5])
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        _torch(body, x)
    for compiled in (False, True):
        with pytest.raises(RuntimeError, match=r"modified by an inplace operation(.|\n)*w = y \* y"):
            _flame(body, compiled, x)


def test_the_write_is_gone_from_the_optimised_graph():
    """straight_through matters to autodiff alone: after simplification the graph reads the new values
    directly."""

    @flame.compile
    def step(x):
        y = x * 2
        with flame.no_grad():
            y.mul_(3)
        loss = (y * y).sum()
        loss.backward()
        return loss

    x = flame.tensor(np.array([1.0, 2.0]), requires_grad=True)
    assert any(op.name == "straight_through" for op in step.trace(x).ops)
    assert not any(op.name == "straight_through" for op in step.optimized(x).ops)


@pytest.mark.parametrize("alias", ["data", "detach"])
def test_a_leafs_version_counts_writes_through_detach_and_not_through_data(alias):
    got = []
    for lib in (torch, flame):
        p = lib.ones(3, requires_grad=True)
        before = p._version
        (p.data if alias == "data" else p.detach()).add_(1)
        got.append((p._version - before, p.detach().sum().item()))
    assert got[0] == got[1]


def test_a_value_read_and_then_overwritten_in_place_is_torch_eagerly_and_compiled():
    """Eager backward recomputes x[None] + w from x's storage (torch saves nothing of an add); x's view
    was written (with no gradient to keep) and then written again with one: the add reads the values x
    had when it was recorded (frontend/leaf_writes.py), as torch's sin reads the sum it saved."""

    def body(lib, w, x):
        v = x[None]
        y = (v + w).sin()
        v.mul_(3)
        v[0].sub_(w[0])
        return (y * y).sum() + v.sum()

    w, x = np.array([0.5, -1.0]), np.array(0.7)
    want = _torch(body, w, x)
    for compiled in (False, True):
        got = _flame(body, compiled, w, x)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)


def _detached_takes_a_gradient(lib, x, w):
    y = x * 2
    d = y.detach()
    d += w  # d takes the write's history (w's gradient); y only the values
    return (d * d).sum() + (y * y).sum()


def _detached_copy_from_a_leaf(lib, x, w):
    y = x * 2
    d = y.detach()
    d.copy_(w)
    return (d * y).sum()


@pytest.mark.parametrize(
    "body", [_detached_takes_a_gradient, _detached_copy_from_a_leaf], ids=lambda f: f.__name__.strip("_")
)
def test_a_detached_tensor_written_with_a_gradient_takes_it_and_its_source_the_values(body):
    _agree(body, np.array([1.0, 2.0, 3.0]), np.array([0.5, -1.0, 2.0]), wanted=2)


def test_a_write_with_a_gradient_into_a_view_of_a_detached_tensor_is_refused():
    x = flame.tensor([1.0, 2.0, 3.0], requires_grad=True)
    w = flame.tensor([0.5, -1.0, 2.0], requires_grad=True)
    y = x * 2
    with pytest.raises(flame.FlameError, match="view of a detach"):
        y.detach()[1:].add_(w[1:])


# writes through .data after ops saved the tensor for their backward: torch's .data shares the storage but not
# the version counter, so those backwards read the storage as it is then (frontend/data_writes.py)
def _data_scales_a_saved_result(lib, x, w):
    y = (x * w).exp()  # exp's backward reads its result
    y.data.mul_(3)
    return (y * w).sum()


def _data_zeroes_a_saved_result(lib, x, w):
    y = (x * w).tanh()
    y.data.zero_()
    return (y + x).sum()


def _data_shifts_a_saved_input(lib, x, w):
    h = x * 1.5
    y = h * w  # mul's backward (for w) reads h
    h.data.add_(5)
    return y.sum()


def _data_copy_into_a_saved_input(lib, x, w):
    h = x * w
    y = h * h
    h.data.copy_(lib.ones(3, dtype=h.dtype))
    return y.sum()


def _data_item_of_a_saved_input(lib, x, w):
    h = x * w
    y = h.sigmoid() * h
    h.data[1] = 10.0
    return y.sum()


def _data_view_of_a_saved_result(lib, x, w):
    y = (x * w).exp()
    y.data[0:2].mul_(2)
    return (y * y).sum()


def _data_of_a_leaf_read_after(lib, x, w):
    y = w * x  # reads w before the write
    w.data.add_(1)
    return (w * y).sum()


def _data_of_an_argument(lib, x, w):
    y = x * w
    x.data.mul_(3)
    return y.sum()


DATA_WRITES = [
    _data_scales_a_saved_result, _data_zeroes_a_saved_result, _data_shifts_a_saved_input,
    _data_copy_into_a_saved_input, _data_item_of_a_saved_input, _data_view_of_a_saved_result,
    _data_of_a_leaf_read_after, _data_of_an_argument,
]


def _flame_backward_outside(body, *arrays):
    """body compiled, its loss differentiated by an eager backward() outside (compiled_outputs.py)."""
    ts = [flame.tensor(a, dtype=flame.float64, requires_grad=True) for a in arrays]
    loss = flame.compile(lambda *args: body(flame, *args))(*ts)
    loss.backward()
    return float(loss.item()), [t.grad.numpy() for t in ts], ts[0].detach().numpy()


@pytest.mark.parametrize("body", DATA_WRITES, ids=lambda f: f.__name__.strip("_"))
def test_a_write_through_data_is_what_the_saved_tensors_backward_reads_as_torch(body):
    x, w = np.array([1.0, 2.0, 3.0]), np.array([0.5, -1.0, 2.0])
    _agree(body, x, w, wanted=2)
    want, got = _torch(body, x, w, wanted=2), _flame_backward_outside(body, x, w)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12, err_msg="backward outside: loss")
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12, err_msg="backward outside: gradients")
    np.testing.assert_array_equal(got[2], want[2], err_msg="backward outside: the leaf's values")
