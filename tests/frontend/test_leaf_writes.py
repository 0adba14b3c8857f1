"""A write into a leaf's buffer with no gradient recorded (through .data, through detach(), under
no_grad), between the forward and the backward: the backward uses the values the forward computed, as
torch's; a saved leaf is read as it is now (a .data write) or raises (a write that bumped its version),
as torch's (frontend/leaf_writes.py). Against torch in float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame


def _no_grad(lib, write):
    with lib.no_grad():
        write()


FORWARDS = {
    "a + 1": lambda a: a + 1,
    "exp": lambda a: a.exp(),
    "a * a": lambda a: a * a,
    "sin": lambda a: a.sin(),
    "(a + 1) * 2 + exp": lambda a: (a + 1) * 2 + a.exp(),
}

# writes that leave the leaf's version as it is (torch's .data has a version counter of its own)
DATA_WRITES = {
    ".data.add_": lambda lib, a, d: a.data.add_(5),
    ".data taken before, mul_": lambda lib, a, d: d.mul_(3),
    ".data[1:].add_": lambda lib, a, d: a.data[1:].add_(2),
}

# writes that bump it: torch raises where a node saved the leaf
VERSION_WRITES = {
    "detach().add_": lambda lib, a, d: a.detach().add_(5),
    "no_grad add_": lambda lib, a, d: _no_grad(lib, lambda: a.add_(5)),
    "no_grad [1:].mul_": lambda lib, a, d: _no_grad(lib, lambda: a[1:].mul_(3)),
}


def _lib(name):
    return torch if name == "torch" else flame


def _run(lib, forward, write):
    a = lib.tensor([1.0, 2.0, 0.5], dtype=lib.float64, requires_grad=True)
    d = a.data
    y = forward(a)
    write(lib, a, d)
    try:
        (y * y).sum().backward()
    except RuntimeError as e:  # torch's error type and words, flame's too
        assert "modified by an inplace operation" in str(e)
        return None
    return np.asarray(a.grad.tolist())


@pytest.mark.parametrize("write", list(DATA_WRITES))
@pytest.mark.parametrize("forward", list(FORWARDS))
def test_data_write_after_forward(forward, write):
    """torch: intermediates as computed at forward time; a saved leaf read as it is now."""
    want = _run(torch, FORWARDS[forward], DATA_WRITES[write])
    got = _run(flame, FORWARDS[forward], DATA_WRITES[write])
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("write", list(VERSION_WRITES))
def test_version_bumping_write_after_forward(write):
    """torch's value where no node saved the leaf, its error where one did."""
    for forward in FORWARDS.values():
        want = _run(torch, forward, VERSION_WRITES[write])
        got = _run(flame, forward, VERSION_WRITES[write])
        if want is None:
            assert got is None
        else:
            np.testing.assert_allclose(got, want, rtol=1e-12)


def _twice(lib):
    a = lib.tensor([1.0, -2.0], dtype=lib.float64, requires_grad=True)
    y1 = a + 1
    a.data.add_(5)
    y2 = (a * 2).exp()  # recorded after the write: reads the new values
    a.data.mul_(0.5)
    loss = (y1 * y2).sum() + (y1 * y1).sum()
    loss.backward(retain_graph=True)
    with lib.no_grad():
        a.sub_(1)
    loss.backward()
    return np.asarray(a.grad.tolist())


def test_nodes_read_the_values_of_their_own_time():
    np.testing.assert_allclose(_twice(flame), _twice(torch), rtol=1e-12)


def _second_order(lib):
    a = lib.tensor([0.3, 1.2], dtype=lib.float64, requires_grad=True)
    w = lib.tensor([2.0, -1.0], dtype=lib.float64)
    z = (a.sin() + w) ** 2
    a.data.add_(1)
    w.data.mul_(3)
    (g,) = lib.autograd.grad(z.sum(), a, create_graph=True)
    g.sum().backward()
    return np.asarray(g.tolist()), np.asarray(a.grad.tolist())


def test_create_graph_after_a_data_write():
    for got, want in zip(_second_order(flame), _second_order(torch)):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def _sgd(lib):
    w = lib.tensor([[0.5, -0.2], [0.1, 0.3]], dtype=lib.float64, requires_grad=True)
    x = lib.tensor([[1.0, 2.0], [3.0, -1.0]], dtype=lib.float64)
    grads = []
    for _ in range(3):
        loss = ((x @ w).tanh() ** 2).sum()
        h = (x @ w).exp()  # a graph alive across the update
        loss.backward()
        w.data.add_(-0.1 * w.grad.data)
        grads.append(np.asarray(w.grad.tolist()))
        w.grad = None
        h.sum().backward()  # recorded before the update: the weights it was computed from
        grads.append(np.asarray(w.grad.tolist()))
        w.grad = None
    return grads


def test_manual_sgd_through_data():
    for got, want in zip(_sgd(flame), _sgd(torch)):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def _constant_view(lib):
    a = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)
    x = lib.tensor([[3.0, 4.0], [5.0, 6.0]], dtype=lib.float64)
    v = x[0]
    y = a * v + v.exp()  # mul saves v: torch reads it as it is now, the exp's result as it was
    x.data.mul_(2)
    (y * y).sum().backward()
    return np.asarray(a.grad.tolist())


def test_a_saved_constant_written_through_data():
    np.testing.assert_allclose(_constant_view(flame), _constant_view(torch), rtol=1e-12)


def test_a_write_after_the_backward_keeps_no_old_values(monkeypatch):
    """An ordinary eager loop writes its parameters after the backward, its graph still bound: the
    nodes that backward ran (a bias add, which saves nothing and is not freed) keep no copies."""
    from flame.frontend import leaf_writes

    copies = []
    made = leaf_writes.stand_in
    monkeypatch.setattr(leaf_writes, "stand_in", lambda x, values=None: copies.append(x) or made(x, values))
    w = flame.tensor(np.array([[1.0, 2.0], [3.0, 4.0]]), requires_grad=True)
    b = flame.tensor(np.array([0.5, -0.5]), requires_grad=True)
    opt = flame.optim.SGD([w, b], lr=0.1)
    x = flame.tensor(np.array([[1.0, -1.0]]))
    for _ in range(3):
        loss = ((x @ w.t() + b) ** 2).sum()
        loss.backward()
        opt.step()  # `loss` and its graph are still bound here
        opt.zero_grad()
    assert copies == []
    tw = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64, requires_grad=True)
    tb = torch.tensor([0.5, -0.5], dtype=torch.float64, requires_grad=True)
    topt = torch.optim.SGD([tw, tb], lr=0.1)
    for _ in range(3):
        tloss = ((torch.tensor([[1.0, -1.0]], dtype=torch.float64) @ tw.t() + tb) ** 2).sum()
        tloss.backward()
        topt.step()
        topt.zero_grad()
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(b.numpy(), tb.detach().numpy(), rtol=1e-12)
