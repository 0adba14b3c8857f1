"""flame.autograd.grad(..., is_grads_batched=True) against torch's in float64: values, the batch dimension
first, several outputs and inputs, unused inputs, create_graph (the batched gradients differentiated
again), retain_graph, inside @flame.compile, and torch's errors."""

from __future__ import annotations

import pytest
import torch

import flame
from tests.frontend.test_forward_ad import _close, _rng


def _batched(lib, x0, w0, g0, h0, **kw):
    x = lib.tensor(x0, requires_grad=True)
    w = lib.tensor(w0, requires_grad=True)
    y = (x @ w).tanh()
    z = (x.sin() * 2).sum()
    return lib.autograd.grad([y, z], [x, w], [lib.tensor(g0), lib.tensor(h0)], is_grads_batched=True, **kw)


def test_rows_of_vector_jacobian_products_match_torch():
    args = _rng(0, 3, 4), _rng(1, 4, 2), _rng(2, 5, 3, 2), _rng(3, 5)
    got, want = _batched(flame, *args), _batched(torch, *args)
    assert len(got) == 2
    for m, t in zip(got, want):
        _close(m, t)


def test_a_jacobian_by_batched_identity_rows():
    x0 = _rng(4, 4)
    res = {}
    for lib in (flame, torch):
        x = lib.tensor(x0, requires_grad=True)
        y = x.exp() * x.sum()
        (res[lib],) = lib.autograd.grad(y, x, lib.eye(4, dtype=lib.float64), is_grads_batched=True)
    _close(res[flame], res[torch])


def test_unused_inputs_and_materialize_grads_match_torch():
    x0, u0, g0 = _rng(5, 3), _rng(6, 2), _rng(7, 4, 3)
    for kw in ({"allow_unused": True}, {"materialize_grads": True}):
        res = {}
        for lib in (flame, torch):
            x, u = lib.tensor(x0, requires_grad=True), lib.tensor(u0, requires_grad=True)
            res[lib] = lib.autograd.grad(x.sin(), [x, u], lib.tensor(g0), is_grads_batched=True, **kw)
        _close(res[flame][0], res[torch][0])
        if "allow_unused" in kw:
            assert res[flame][1] is None and res[torch][1] is None
        else:
            _close(res[flame][1], res[torch][1])


def test_create_graph_gives_batched_gradients_with_a_history():
    x0, g0 = _rng(8, 3), _rng(9, 2, 3)
    res = {}
    for lib in (flame, torch):
        x = lib.tensor(x0, requires_grad=True)
        (gx,) = lib.autograd.grad(x.sin() * x, x, lib.tensor(g0), is_grads_batched=True, create_graph=True)
        assert gx.requires_grad
        (gxx,) = lib.autograd.grad(gx.sum(), x)
        res[lib] = (gx, gxx)
    for m, t in zip(res[flame], res[torch]):
        _close(m, t)


def test_the_graph_is_freed_after_the_last_row_unless_retained():
    for lib in (flame, torch):
        x = lib.tensor(_rng(10, 3), requires_grad=True)
        y = x.exp() * x
        lib.autograd.grad(y, x, lib.ones(2, 3, dtype=lib.float64), is_grads_batched=True, retain_graph=True)
        lib.autograd.grad(y, x, lib.ones(2, 3, dtype=lib.float64), is_grads_batched=True)
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            lib.autograd.grad(y, x, lib.ones(2, 3, dtype=lib.float64), is_grads_batched=True)


def test_inside_compile_as_eagerly():
    x0, w0, g0 = _rng(11, 3, 4), _rng(12, 4, 2), _rng(13, 6, 3, 2)

    def step(lib, x, w, g):
        y = (x @ w).sigmoid()
        return lib.autograd.grad(y, [x, w], g, is_grads_batched=True)

    f = flame.compile(lambda x, w, g: step(flame, x, w, g))
    want = step(torch, torch.tensor(x0, requires_grad=True), torch.tensor(w0, requires_grad=True), torch.tensor(g0))
    for _ in range(2):
        got = f(flame.tensor(x0, requires_grad=True), flame.tensor(w0, requires_grad=True), flame.tensor(g0))
        for m, t in zip(got, want):
            _close(m, t)


@pytest.mark.parametrize("case", ["row_shape", "batch_sizes", "no_grad_outputs"])
def test_errors_match_torch(case):
    def call(lib):
        x = lib.tensor(_rng(14, 3), requires_grad=True)
        y = x.sin()
        if case == "row_shape":
            return lib.autograd.grad(y, x, lib.ones(2, 4), is_grads_batched=True)
        if case == "batch_sizes":
            return lib.autograd.grad([y, y.sum()], x, [lib.ones(2, 3), lib.ones(3)], is_grads_batched=True)
        return lib.autograd.grad(y, x, None, is_grads_batched=True)

    kind, text = {"row_shape": (RuntimeError, "mismatch was detected: grad_output\\[0\\] has a shape of"),
                  "batch_sizes": (ValueError, "same size in the mapped dimension, got sizes \\[2, 3\\]"),
                  "no_grad_outputs": (RuntimeError, "grad can be implicitly created only for scalar outputs")}[case]
    for lib in (torch, flame):
        with pytest.raises(kind, match=text):
            call(lib)
