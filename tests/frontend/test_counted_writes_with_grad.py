"""In-place writes recorded with a gradient into a tensor a node saved (its result, as exp's; an input, as
mul's; a view of one, or the base of a saved view) make the backward raise torch's RuntimeError, eagerly
and inside @flame.compile (the backward inside, or outside on the compiled result), naming the line that
recorded the node; where nothing saved the old value (an add, the in-place op's own node, a clone) the
gradient is torch's. A write into a tensor that requires no grad, which a node saved, raises too. Against
torch in float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame

MODIFIED = "modified by an inplace operation"
X, W = np.array([0.1, 0.5, -0.3]), np.array([1.5, -2.0, 0.7])


def _exp_result(lib, x, w):
    y = x.exp()
    z = y * 1
    y.mul_(2)
    return z.sum() + y.sum()


def _sigmoid_result(lib, x, w):
    y = x.sigmoid()
    y.add_(1)
    return y.sum()


def _saved_input_of_mul(lib, x, w):
    y = x * 1
    z = y * w  # mul saves y for w's gradient
    y.mul_(2)
    return z.sum() + y.sum()


def _view_of_a_saved_result(lib, x, w):
    y = x.exp()
    y[1:].mul_(2)
    return y.sum()


def _base_of_a_saved_view(lib, x, w):
    y = x * 1
    v = y[1:]
    z = v * w[1:]
    y.mul_(3)
    return z.sum()


def _item_of_a_saved_input(lib, x, w):
    y = x * 1
    z = y * w
    y[0] = 5.0
    return z.sum()


def _copy_of_itself_through_mul(lib, x, w):
    y = x * 1
    y.copy_(y * w)  # mul saved y, which copy_ then changes
    return y.sum()


def _requires_no_grad(lib, x, w):
    c = w.detach() * 1
    z = x * c  # mul saves c for x's gradient
    c.mul_(2)
    return z.sum()


def _add_then_scaled(lib, x, w):
    y = x + 1
    y.mul_(2)
    return y.sum()


def _own_node(lib, x, w):
    y = x * 1
    y.mul_(w)  # its node reads y as it was (torch's clones it)
    y.mul_(w)
    return y.sum()


def _own_node_through_a_view(lib, x, w):
    y = x * 1
    y[1:].mul_(w[1:])
    return (y * 2).sum()


def _clone_written(lib, x, w):
    y = x.exp()
    z = y.clone()
    z.mul_(2)
    return z.sum() + y.sum()


def _inplace_relu_after_mul(lib, x, w):
    y = x * w
    lib.nn.functional.relu(y, inplace=True)
    return (y * y).sum()


def _residual_into_batch_norm(lib, x, w):
    h = lib.nn.functional.linear(x.view(1, 3).expand(4, 3) * w, lib.eye(3, dtype=x.dtype) + w.view(3, 1))
    h = lib.nn.functional.batch_norm(h, None, None, training=True)
    h += x
    lib.nn.functional.relu(h, inplace=True)
    return (h * h).sum()


def _divided_then_added(lib, x, w):
    y = x / (w.abs() + 0.5)  # div saves its inputs, not the quotient
    y += w
    return (y * y).sum()


def _copy_of_exp_then_target_written(lib, x, w):
    v1 = x * 1
    v2 = v1.exp()
    v1.copy_(v2)  # v1 takes a node of its own: exp saved v2, not v1
    v1.mul_(2)
    return (v1 + v2).sum()


def _copy_of_exp_then_source_written(lib, x, w):
    v1 = x * 1
    v2 = v1.exp()
    v1.copy_(v2)
    v2.mul_(2)  # exp saved v2
    return (v1 + v2).sum()


def _copy_into_a_tensor_without_grad(lib, x, w):
    y = w.detach() * 0
    s = x.exp()
    y.copy_(s)
    y.mul_(3)
    return (y * s).sum()


def _copy_into_a_view_then_base_written(lib, x, w):
    y = w.detach().repeat(2) * 0
    s = x.exp()
    y[1:4].copy_(s)
    y.mul_(3)
    return y.sin().sum()


def _copy_into_a_view_then_source_written(lib, x, w):
    y = w.detach().repeat(2) * 0
    s = x.exp()
    y[1:4].copy_(s)
    s.mul_(3)
    return y.sin().sum()


def _copy_over_a_tanh(lib, x, w):
    y = x.tanh()
    y.copy_(w)  # tanh's node takes a zero gradient, and saved y
    return y.sum()


def _copy_of_exp_over_a_mul(lib, x, w):
    h = x.exp()
    y = x * 1
    y.copy_(h)
    y.mul_(2)
    return (y + h).sum()


def _copy_of_exp_then_detached_target_written(lib, x, w):
    h = x.exp()
    y = x * 1
    y.copy_(h)
    y.detach().mul_(2)
    return (y + h).sum()


def _fill_after_a_saved_use(lib, x, w):
    y = x * 1
    z = y.sin()
    y.fill_(2.0)
    return (y + z).sum()


def _zero_after_a_use_that_saves_nothing(lib, x, w):
    y = x * 1
    z = y * 3
    y.zero_()
    return (y + z).sum()


PROGRAMS = [
    _exp_result, _sigmoid_result, _saved_input_of_mul, _view_of_a_saved_result, _base_of_a_saved_view,
    _item_of_a_saved_input, _copy_of_itself_through_mul, _requires_no_grad,
    _add_then_scaled, _own_node, _own_node_through_a_view, _clone_written, _inplace_relu_after_mul,
    _residual_into_batch_norm, _divided_then_added, _copy_of_exp_then_target_written,
    _copy_of_exp_then_source_written, _copy_into_a_tensor_without_grad, _copy_into_a_view_then_base_written,
    _copy_into_a_view_then_source_written, _copy_over_a_tanh, _copy_of_exp_over_a_mul,
    _copy_of_exp_then_detached_target_written, _fill_after_a_saved_use, _zero_after_a_use_that_saves_nothing,
]


def _torch(body):
    x, w = (torch.tensor(a, requires_grad=True) for a in (X, W))
    try:
        body(torch, x, w).backward()
    except RuntimeError as e:
        assert MODIFIED in str(e)
        return None
    return [None if t.grad is None else t.grad.numpy() for t in (x, w)]


def _flame(body, way: str):
    x, w = (flame.tensor(a, dtype=flame.float64, requires_grad=True) for a in (X, W))
    try:
        if way == "eager":
            body(flame, x, w).backward()
        elif way == "backward inside":
            flame.compile(lambda x, w: body(flame, x, w).backward())(x, w)
        else:
            flame.compile(lambda x, w: body(flame, x, w))(x, w).backward()
    except RuntimeError as e:
        return str(e)
    return [None if t.grad is None else t.grad.numpy() for t in (x, w)]


@pytest.mark.parametrize("way", ["eager", "backward inside", "backward outside"])
@pytest.mark.parametrize("body", PROGRAMS, ids=lambda f: f.__name__.strip("_"))
def test_a_write_with_a_gradient_into_a_saved_tensor_raises_as_torch(body, way):
    want, got = _torch(body), _flame(body, way)
    if want is None:
        assert isinstance(got, str), f"torch raises; flame gave {got}"
        assert MODIFIED in got and "test_counted_writes_with_grad.py" in got, got
        return
    assert not isinstance(got, str), got
    for g, t in zip(got, want):
        assert (g is None) == (t is None)
        if t is not None:
            np.testing.assert_allclose(g, t, rtol=1e-12, atol=1e-14)
