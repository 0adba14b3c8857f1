"""A write torch's version counter counts, with no gradient recorded (through detach(), which shares the
counter, or under no_grad), into a tensor whose old value a node saved: torch's backward raises its
RuntimeError; where no node saved it, the gradient is torch's. A write through `.data` is not counted
(tests/frontend/test_leaf_writes.py, frontend/data_writes.py). Eager, against torch in float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame


def _no_grad(lib, write):
    with lib.no_grad():
        write()


def _set(t, k, v):
    t[k] = v


# (forward: x -> (y, the tensor written), write into it, loss of y)
CASES = {
    "exp, detach().mul_": (lambda x: x.exp(), lambda lib, y: y.detach().mul_(2)),
    "exp, no_grad add_": (lambda x: x.exp(), lambda lib, y: _no_grad(lib, lambda: y.add_(1))),
    "exp, no_grad y[0] = 5": (lambda x: x.exp(), lambda lib, y: _no_grad(lib, lambda: _set(y, 0, 5.0))),
    "exp, no_grad view mul_": (lambda x: x.exp(), lambda lib, y: _no_grad(lib, lambda: y[1:].mul_(2))),
    "exp, detach() view zero_": (lambda x: x.exp(), lambda lib, y: y.detach()[0:2].zero_()),
    "exp, no_grad detach().add_": (lambda x: x.exp(),
                                   lambda lib, y: _no_grad(lib, lambda: y.detach().add_(1))),
    "tanh, detach().copy_": (lambda x: x.tanh(), lambda lib, y: y.detach().copy_(lib.zeros(3, dtype=lib.float64))),
    "sigmoid, detach().sub_": (lambda x: x.sigmoid(), lambda lib, y: y.detach().sub_(0.1)),
    "x + 1, detach().mul_": (lambda x: x + 1, lambda lib, y: y.detach().mul_(2)),
    "x * 2, no_grad add_": (lambda x: x * 2, lambda lib, y: _no_grad(lib, lambda: y.add_(1))),
    "x.exp() + 1, no_grad add_": (lambda x: x.exp() + 1, lambda lib, y: _no_grad(lib, lambda: y.add_(1))),
    "exp, .data.mul_": (lambda x: x.exp(), lambda lib, y: y.data.mul_(2)),
}


def _run(lib, forward, write, loss):
    x = lib.tensor([1.0, 2.0, 0.5], dtype=lib.float64, requires_grad=True)
    y = forward(x)
    out = loss(lib, x, y)
    write(lib, y)
    try:
        out.sum().backward()
    except RuntimeError as e:
        assert "modified by an inplace operation" in str(e)
        return None
    return np.asarray(x.grad.tolist())


LOSSES = {
    "y": lambda lib, x, y: y,
    "y.sin()": lambda lib, x, y: y.sin(),  # sin saves y
    "y * w": lambda lib, x, y: y * lib.tensor([3.0, 4.0, 5.0], dtype=lib.float64, requires_grad=True),
    "y * 3": lambda lib, x, y: y * 3,  # mul by a number saves nothing of y
    "y * y.detach()": lambda lib, x, y: y * y.detach(),  # mul saves the detached tensor, which shares y's counter
}


@pytest.mark.parametrize("loss", list(LOSSES))
@pytest.mark.parametrize("case", list(CASES))
def test_counted_write_after_forward(case, loss):
    forward, write = CASES[case]
    want = _run(torch, forward, write, LOSSES[loss])
    got = _run(flame, forward, write, LOSSES[loss])
    if want is None:
        assert got is None, f"torch raises; flame gave {got}"
    else:
        assert got is not None, "flame raises where torch does not"
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_a_write_into_a_mul_input_raises_where_the_other_input_needs_it():
    """mul saves a for w's gradient: a counted write into a raises at backward, as torch's."""
    for lib in (torch, flame):
        x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        w = lib.tensor([4.0, 5.0, 6.0], requires_grad=True)
        a = x * 1
        z = a * w
        a.detach().add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            z.sum().backward()


@pytest.mark.parametrize("make", ["exp", "x * 2"])
def test_ops_recorded_after_the_write_read_the_new_values(make):
    """y * y recorded after the write saves y's new value; exp's saved result is the old one (torch raises)."""
    got = []
    for lib in (torch, flame):
        x = lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64, requires_grad=True)
        y = x.exp() if make == "exp" else x * 2
        y.detach().mul_(2)
        try:
            (y * y).sum().backward()
            got.append(np.asarray(x.grad.tolist()))
        except RuntimeError as e:
            assert "modified by an inplace operation" in str(e)
            got.append(None)
    assert (got[0] is None) == (got[1] is None) == (make == "exp")
    if got[0] is not None:
        np.testing.assert_allclose(got[1], got[0], rtol=1e-12)


def test_a_data_write_into_a_detached_tensor_is_not_counted():
    """d = h.detach() shares h's version counter; a write through d.data (or h.data) bumps none, so mul's
    node, which saved d, reads d's storage as it is at backward, as torch's."""
    grads = []
    for lib in (torch, flame):
        x = lib.tensor([1.0, 2.0, 0.5], dtype=lib.float64, requires_grad=True)
        h = x * 2
        d = h.detach()
        y = h * d
        d.data.mul_(2)
        y.sum().backward()
        grads.append(np.asarray(x.grad.tolist()))
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-12)


def test_a_value_computed_from_a_detached_alias_written_through_data_is_refused_not_recomputed():
    """h.detach() read by mul, h written through .data, and a VJP (out * out's) that reads a value computed
    from the detached tensor: torch reads that value as it was; flame's backward would compute it again
    from the new storage, so it raises a flame error naming the line (eager). The compiled body gives
    torch's gradient; where no VJP reads such a value (a linear loss), eager gives torch's gradient too."""

    def program(lib, nonlinear):
        x = lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64, requires_grad=True)
        y = lib.tensor([0.5, -1.0, 2.0], dtype=lib.float64, requires_grad=True)

        def body(x, y):
            h = y * 1.5
            out = x * h * h.detach()
            loss = out.sum() + (out * out).sum() if nonlinear else out.sum()
            h.data.mul_(2)
            loss.backward()
            return loss

        return x, y, body

    for nonlinear in (False, True):
        x, y, body = program(torch, nonlinear)
        body(x, y)
        want = x.grad.numpy()
        fx, fy, fbody = program(flame, nonlinear)
        flame.compile(fbody)(fx, fy)
        np.testing.assert_allclose(fx.grad.numpy(), want, rtol=1e-12)
        fx, fy, fbody = program(flame, nonlinear)
        if nonlinear:
            with pytest.raises(flame.errors.AutogradError, match=r"through .data, .*\) changed after it was read"):
                fbody(fx, fy)
        else:
            fbody(fx, fy)
            np.testing.assert_allclose(fx.grad.numpy(), want, rtol=1e-12)


def test_in_place_writes_through_views_keep_no_earlier_results():
    """A buffer written through a view step after step (a counter, a queue) keeps none of the earlier steps'
    in-place results alive: only results some node can still reach are noted against its storage."""
    import gc

    from flame.frontend import counted_writes

    buf, w = flame.zeros(4, 3), flame.ones(3, requires_grad=True)
    for _ in range(20):
        buf[0].add_(1.0)
        buf[1].mul_(w.detach())
    gc.collect()
    assert len(counted_writes._results(buf)) == 0
    np.testing.assert_array_equal(buf.numpy()[0], np.full(3, 20.0))
    y = w * 2  # a result a node still holds stays noted: a later counted write into its base is torch's error
    y[0].exp_()
    assert len(counted_writes._results(y)) == 1


@pytest.mark.filterwarnings("ignore::flame.RecompileWarning")
def test_traced_in_place_writes_through_views_go_with_their_trace():
    """The results of in-place ops written into views of a captured buffer while tracing are kept by their
    trace: traces of other sizes, one after another, leave none of theirs noted against the buffer (each
    held its whole trace alive)."""
    import gc

    from flame.frontend import counted_writes

    buf = flame.zeros(4, 3)

    @flame.compile(dynamic=False)
    def step(x):
        buf[0].add_(x.sum())
        return buf * 1

    for n in range(1, 6):
        step(flame.ones(n))
    gc.collect()
    assert len(counted_writes._results(buf)) == 0
    np.testing.assert_array_equal(buf.numpy()[0], np.full(3, 15.0))
