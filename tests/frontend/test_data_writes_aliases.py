"""A `.data` tensor shares its tensor's storage but has a version counter of its own, as torch's: a write
into the tensor that torch's counter counts (under no_grad, through detach(), or with a gradient recorded)
does not count for a node that saved the `.data` tensor (mul's node saves only the operand the other's
gradient needs, here the `.data` one), and that node reads the storage as the backward finds it
(frontend/data_writes.py). Against torch in float64: eager, compiled with the backward inside, and
compiled with the backward run on its result outside. A write through the `.data` tensor itself (or a
view of it) counts on its own counter: a node that saved it raises torch's error."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.frontend.backward_ways import WAYS, grad_or_none, run_backward, same_as_torch


def _no_grad_add(lib, y):
    with lib.no_grad():
        y.add_(1)


def _detached_mul(lib, y):
    y.detach().mul_(2)


def _recorded_mul(lib, y):
    y.mul_(2)


def _data_mul(lib, y):
    y.data.mul_(2)


WRITES = {"no_grad-add_": _no_grad_add, "detach-mul_": _detached_mul, "mul_": _recorded_mul, "data-mul_": _data_mul}


def _times_data(lib, x, write):  # mul saved y.data
    y = x * 2
    out = (y * y.data).sum()
    write(lib, y)
    return out


def _data_times(lib, x, write):
    y = x * 2
    out = (y.data * y).sum()
    write(lib, y)
    return out


def _times_view_of_data(lib, x, write):  # a view of y.data shares its storage and its counter
    y = x * 2
    out = (y[1:] * y.data[1:]).sum()
    write(lib, y)
    return out


def _times_data_of_view(lib, x, write):
    y = x * 2
    out = (y[:2] * y[:2].data).sum()
    write(lib, y)
    return out


def _exp_times_data(lib, x, write):  # exp's node saved its result, which the write does not change
    y = x * 2
    out = (y.exp() * y.data).sum()
    write(lib, y)
    return out


def _leaf_times_data(lib, x, write):  # a leaf's .data: the leaf is written with no gradient recorded
    out = (x * x.data).sum()
    with lib.no_grad():
        x.mul_(2) if write is _recorded_mul else write(lib, x)
    return out


def _mul_by_own_data(lib, x, write):  # the in-place op's node saved y.data, which its own write changes
    y = x * 2
    y.mul_(y.data)
    write(lib, y)
    return y.sum()


def _divided_by_data(lib, x, write):  # div's node saved its divisor for both gradients
    y = x * 2
    out = (y / y.data).sum()
    write(lib, y)
    return out


def _outer_with_data(lib, x, write):  # matmul's node saved y.data for y's gradient
    y = x * 2
    out = (y.reshape(3, 1) @ y.data.reshape(1, 3)).sum()
    write(lib, y)
    return out


def _softmax_times_data(lib, x, write):  # softmax's node (a composite in flame) saved its result
    y = x * 2
    out = (y.softmax(0) * y.data).sum()
    write(lib, y)
    return out


BODIES = {f.__name__[1:]: f for f in (_times_data, _data_times, _times_view_of_data, _times_data_of_view,
                                      _exp_times_data, _leaf_times_data, _mul_by_own_data, _divided_by_data,
                                      _outer_with_data, _softmax_times_data)}
CASES = [(b, w) for b in BODIES for w in WRITES if not (b == "leaf_times_data" and w == "mul_")]


def _x(lib):
    return lib.tensor([1.0, 2.0, 0.5], dtype=lib.float64, requires_grad=True)


def _torch_grad(body, write):
    x = _x(torch)
    BODIES[body](torch, x, WRITES[write]).backward()
    return x.grad.numpy()


@pytest.mark.parametrize("how", WAYS)
@pytest.mark.parametrize(("body", "write"), CASES, ids=[f"{b}-{w}" for b, w in CASES])
def test_a_data_tensor_reads_the_written_storage_as_torchs(body, write, how):
    want = _torch_grad(body, write)
    run = BODIES[body]
    x = _x(flame)
    if how == "eager":
        run(flame, x, WRITES[write]).backward()
        got = x.grad
    elif how == "backward inside":
        got = flame.compile(lambda x: flame.autograd.grad(run(flame, x, WRITES[write]), [x])[0])(x)
    else:
        flame.compile(lambda x: run(flame, x, WRITES[write]))(x).backward()
        got = x.grad
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)


def _saves_y_and_data(lib, x):  # mul(y, y) saved y itself: the counted write raises, .data or not
    y = x * 2
    out = (y * y * y.data).sum()
    with lib.no_grad():
        y.add_(1)
    return out


@pytest.mark.parametrize("how", WAYS)
def test_a_node_that_saved_the_tensor_itself_still_raises(how):
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        _saves_y_and_data(torch, _x(torch)).backward()
    with pytest.raises(RuntimeError, match="modified by an inplace operation") as got:
        run_backward(flame, _saves_y_and_data, _x(flame), how)
    assert "test_data_writes_aliases.py" in str(got.value)


def _held_data_written(lib, x):  # a write through the .data tensor mul saved counts on its own counter
    y = x * 2
    z = y.data
    out = (y * z).sum()
    z.mul_(2)
    return out


def _held_data_view_written(lib, x):  # a view of it shares that counter
    y = x * 2
    z = y.data
    out = (y * z).sum()
    z[1:].mul_(2)
    return out


def _held_data_set(lib, x):
    y = x * 2
    z = y.data
    out = (y * z).sum()
    z[0] = 5.0
    return out


def _saved_view_of_data_written(lib, x):
    y = x * 2
    z = y.data[1:]
    out = (y[1:] * z).sum()
    y.data[1:].mul_(2)  # another .data tensor: not z's counter
    z.mul_(2)
    return out


def _leaf_data_written(lib, x):
    z = x.data
    out = (x * z).sum()
    z.mul_(2)
    return out


def _another_data_written(lib, x):  # each .data is a tensor of its own
    y = x * 2
    z = y.data
    out = (y * z).sum()
    w = y.data
    w.mul_(2)
    return out


def _held_data_read_again(lib, x):  # z, taken again from y's storage after a write, keeps its own counter
    y = x * 2
    z = y.data
    with lib.no_grad():
        y.add_(1)
    out = (y * z).sum()
    with lib.no_grad():
        y.add_(1)
    return out


def _mse_of_y_and_data(lib, x):  # mse_loss's node saved y, which the write counts for
    y = x * 2
    out = _functional(lib).mse_loss(y, y.data)
    with lib.no_grad():
        y.add_(1)
    return out


def _functional(lib):
    return torch.nn.functional if lib is torch else flame.nn.functional


OWN_COUNTER = {f.__name__[1:]: f for f in (_held_data_written, _held_data_view_written, _held_data_set,
                                           _saved_view_of_data_written, _leaf_data_written, _another_data_written,
                                           _held_data_read_again, _mse_of_y_and_data)}


def _grad_or_none(lib, body, how: str):
    """x's gradient, or None where the backward raises torch's error (its message checked)."""
    return grad_or_none(lib, body, how, _x(lib), "test_data_writes_aliases.py")


@pytest.mark.parametrize("how", WAYS)
@pytest.mark.parametrize("program", list(OWN_COUNTER))
def test_a_data_tensor_counts_the_writes_through_itself_as_torchs(program, how):
    want, got = _grad_or_none(torch, OWN_COUNTER[program], "eager"), _grad_or_none(flame, OWN_COUNTER[program], how)
    same_as_torch(got, want, rtol=1e-12)


def _mse_of_data(lib, x):  # mse_loss's node saved the target y.data, which the write does not count for
    y = x * 2
    out = _functional(lib).mse_loss(x * 3, y.data)
    with lib.no_grad():
        y.add_(1)
    return out


def _leaf_view_data(lib, x):  # a view of a leaf, through .data: mul's node saved it
    out = (x[1:] * x[1:].data).sum()
    with lib.no_grad():
        x.add_(1)
    return out


def _mse_of_leaf_view_data(lib, x):
    out = _functional(lib).mse_loss(x[1:] * 3, x[1:].data)
    with lib.no_grad():
        x.add_(1)
    return out


def _computed_from_data(lib, x):  # the eager backward computes z from y.data as it was, as torch's forward did
    y = x * 2
    z = y + y.data
    y.data.mul_(2)
    return (z * z).sum()


def _computed_from_data_view(lib, x):
    y = x * 2
    z = y[1:] + y.data[1:]
    with lib.no_grad():
        y.add_(1)
    return (z * z).sum()


def _added_own_data(lib, x):
    y = x * 2
    y.add_(y.data)
    return (y * y).sum()


READ_THEN = {f.__name__[1:]: f for f in (_mse_of_data, _leaf_view_data, _mse_of_leaf_view_data, _computed_from_data,
                                         _computed_from_data_view, _added_own_data)}


@pytest.mark.parametrize("how", WAYS)
@pytest.mark.parametrize("program", list(READ_THEN))
def test_what_was_computed_from_a_data_tensor_is_torchs(program, how):
    """The ops computed from a `.data` tensor before a write read it as it was (the eager backward
    computes them again from its tensor's history then); what torch's nodes saved of it (mse_loss's
    target, through torch's formula) is read as the storage holds it at backward."""
    want = _grad_or_none(torch, READ_THEN[program], "eager")
    np.testing.assert_allclose(_grad_or_none(flame, READ_THEN[program], how), want, rtol=1e-12, atol=1e-12)
