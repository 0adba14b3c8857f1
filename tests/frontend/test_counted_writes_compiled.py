"""The programs of tests/frontend/test_counted_writes.py inside @flame.compile: a write torch's version
counter counts, with no gradient recorded (through detach() or under no_grad), into a tensor whose old
value a node saved makes the backward raise torch's RuntimeError, whether it runs inside the compiled
function or outside it on a compiled forward's result; where no node saved it, the gradient is torch's.
Against torch in float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.frontend.test_counted_writes import CASES, LOSSES
from tests.frontend.test_counted_writes import _run as _run_eager

MODIFIED = "modified by an inplace operation"


def _run_compiled(forward, write, loss, inside: bool):
    """x.grad, or the error's message where the backward raises: the forward, the write and (inside)
    the backward traced by @flame.compile, or (not inside) the backward run on the compiled result."""
    x = flame.tensor([1.0, 2.0, 0.5], dtype=flame.float64, requires_grad=True)

    def body(x):
        y = forward(x)
        out = loss(flame, x, y).sum()
        write(flame, y)
        if inside:
            out.backward()
        return out

    try:
        out = flame.compile(body)(x)
        if not inside:
            out.backward()
    except RuntimeError as e:
        return str(e)
    return np.asarray(x.grad.tolist())


def _eager_message(forward, write, loss) -> str:
    x = flame.tensor([1.0, 2.0, 0.5], dtype=flame.float64, requires_grad=True)
    y = forward(x)
    out = loss(flame, x, y).sum()
    write(flame, y)
    with pytest.raises(RuntimeError) as e:
        out.backward()
    return str(e.value)


@pytest.mark.parametrize("inside", [True, False], ids=["backward inside", "backward outside"])
@pytest.mark.parametrize(("case", "loss"), [(c, k) for c in CASES for k in LOSSES])
def test_counted_write_compiled(case, loss, inside):
    forward, write = CASES[case]
    want = _run_eager(torch, forward, write, LOSSES[loss])
    got = _run_compiled(forward, write, LOSSES[loss], inside)
    if want is None:
        assert isinstance(got, str), f"torch raises; flame compiled gave {got}"
        assert MODIFIED in got
        # the eager backward's error: the op that saved the value, at the user's line that recorded it
        assert got == _eager_message(forward, write, LOSSES[loss])
        assert "test_counted_writes.py:" in got
    else:
        assert not isinstance(got, str), f"flame compiled raises where torch does not: {got}"
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def _leaf_mul(lib, x, w):  # mul saves x for w's gradient
    z = x * w
    with lib.no_grad():
        x.mul_(2)
    return z.sum()


def _leaf_detach_mul(lib, x, w):
    z = x * w
    x.detach().add_(1)
    return z.sum()


def _leaf_exp(lib, x, w):  # exp saves its result, not x
    z = x.exp() * w
    with lib.no_grad():
        x.mul_(2)
    return z.sum()


def _mul_input(lib, x, w):  # mul saves a for w's gradient
    a = x * 1
    z = a * w
    a.detach().add_(1)
    return z.sum()


def _read_after_write(lib, x, w):  # y * y recorded after the write saves y's new value
    y = x * 2
    y.detach().mul_(2)
    return (y * y * w).sum()


def _saver_off_the_backward_path(lib, x, w):  # the mul that saved y is not run by the backward
    y = x * 2
    _ = y * w
    with lib.no_grad():
        y.add_(1)
    return (y * x + w).sum()


BODIES = {f.__name__.strip("_"): f for f in (_leaf_mul, _leaf_detach_mul, _leaf_exp, _mul_input, _read_after_write,
                                              _saver_off_the_backward_path)}


def _grads_or_none(lib, body, form: str):
    x = lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64, requires_grad=True)
    w = lib.tensor([4.0, -5.0, 0.5], dtype=lib.float64, requires_grad=True)
    try:
        if form == "eager":
            body(lib, x, w).backward()
        elif form == "backward inside":
            def step(x, w):
                loss = body(flame, x, w)
                loss.backward()
                return loss

            flame.compile(step)(x, w)
        else:
            flame.compile(lambda x, w: body(flame, x, w))(x, w).backward()
    except RuntimeError as e:
        assert MODIFIED in str(e)
        return None
    return [np.asarray(t.grad.tolist()) for t in (x, w)]


@pytest.mark.parametrize("form", ["backward inside", "backward outside"])
@pytest.mark.parametrize("body", list(BODIES))
def test_counted_writes_into_leaves_and_inputs_compiled(body, form):
    want = _grads_or_none(torch, BODIES[body], "eager")
    assert (want is None) == (body in ("leaf_mul", "leaf_detach_mul", "mul_input"))
    got = _grads_or_none(flame, BODIES[body], form)
    if want is None:
        assert got is None, f"torch raises; flame compiled gave {got}"
    else:
        assert got is not None, "flame compiled raises where torch does not"
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-12)


def test_autograd_grad_and_flame_grad_inside_compile_raise():
    """torch.autograd.grad and torch.func.grad check the saved tensors as backward() does."""

    def f(lib, x):
        y = x.exp()
        y.detach().mul_(2)
        return y.sum()

    x = torch.tensor([1.0, 2.0], dtype=torch.float64)
    with pytest.raises(RuntimeError, match=MODIFIED):
        torch.func.grad(lambda x: f(torch, x))(x)
    with pytest.raises(RuntimeError, match=MODIFIED):
        torch.autograd.grad(f(torch, x.requires_grad_()), [x])
    fx = flame.tensor([1.0, 2.0], dtype=flame.float64)
    with pytest.raises(RuntimeError, match=MODIFIED):
        flame.grad(lambda x: f(flame, x))(fx)
    fx.requires_grad_()
    with pytest.raises(RuntimeError, match=MODIFIED):
        flame.compile(lambda x: flame.autograd.grad(f(flame, x), [x])[0])(fx)


def test_a_backward_outside_raises_only_from_a_result_whose_history_saved_the_value():
    """Of a compiled forward's two results, the one made through exp (whose saved result a write through
    detach() changed) refuses its backward; the other, made from x alone, gives torch's gradient."""

    def body(lib, x):
        y = x.exp()
        y.detach().mul_(2)
        return y * 1, x * 3

    for lib in (torch, flame):
        x = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)
        a, b = body(lib, x) if lib is torch else flame.compile(lambda x: body(flame, x))(x)
        b.sum().backward()
        np.testing.assert_allclose(np.asarray(x.grad.tolist()), [3.0, 3.0], rtol=1e-12)
        with pytest.raises(RuntimeError, match=MODIFIED):
            a.sum().backward()


def test_a_no_grad_update_after_the_backward_is_no_error():
    """A training step's update under no_grad, after its backward: nothing the backward ran is written."""

    def step(lib, x, w):
        loss = (x * w).exp().sum()
        loss.backward()
        with lib.no_grad():
            w.sub_(0.1 * w.grad)
        return loss

    got = []
    for lib in (torch, flame):
        x = lib.tensor([1.0, 2.0], dtype=lib.float64)
        w = lib.tensor([0.5, -0.25], dtype=lib.float64, requires_grad=True)
        if lib is torch:
            step(torch, x, w)
        else:
            flame.compile(lambda x, w: step(flame, x, w))(x, w)
        got.append(np.asarray(w.detach().tolist()))
    np.testing.assert_allclose(got[1], got[0], rtol=1e-12)



def _copied_then_target_written(lib, x, z):
    s = x.sin()  # saves x
    y = x * 2
    y.copy_(x)
    y.copy_(z)
    return s.sum() + (y * y).sum()


def _copied_then_source_written(lib, x, z):
    h = x * 3
    y = x * 2
    y.copy_(h)
    s = y.sin()  # saves y
    h.copy_(z)
    return s.sum() + (h * h).sum()


@pytest.mark.parametrize("body", [_copied_then_target_written, _copied_then_source_written])
def test_a_tensor_copied_onto_is_not_its_source(body):
    """y.copy_(h) gives y h's values, not h itself: a later write into y is none into the h a node saved,
    and one into h none into y, inside @flame.compile as eagerly and in torch: the gradients, no error."""
    grads = []
    for lib in (torch, flame):
        xs = [lib.tensor([0.7, 0.1], dtype=lib.float64, requires_grad=True),
              lib.tensor([-0.2, 0.3], dtype=lib.float64, requires_grad=True)]

        def step(*xs, lib=lib):
            body(lib, *xs).backward()

        (flame.compile(step) if lib is flame else step)(*xs)
        grads.append([np.asarray(x.grad.tolist()) for x in xs])
    for g, w in zip(grads[1], grads[0]):
        np.testing.assert_allclose(g, w, rtol=1e-12)
