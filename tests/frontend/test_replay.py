"""The steady-state call of a compiled function (flame.frontend.replay and Compiled._signature): what
it remembers between calls never hides a change the full checks would see."""

import contextlib
import warnings

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn
from tests.frontend.expected_retrace import said_at_info


@contextlib.contextmanager
def _no_retrace():
    with warnings.catch_warnings():
        warnings.simplefilter("error", flame.RecompileWarning)
        yield


def test_the_same_argument_tensor_with_requires_grad_flipped_traces_again():
    x = flame.ones(3)

    @flame.compile
    def f(x):
        return x * 2

    f(x)
    f(x)
    x.requires_grad_(True)
    with pytest.warns(flame.RecompileWarning, match="requires_grad False -> True"):
        f(x)
    assert f.stats().traces == 2


def test_the_same_argument_tensor_given_a_new_dtype_traces_again():
    model = nn.Linear(3, 2)
    p = model.weight

    @flame.compile
    def f(w):
        return w * 2

    f(p)
    f(p)
    model.double()  # replaces p's array (and dtype) in place of the tensor object
    with pytest.warns(flame.RecompileWarning, match="dtype f32 -> f64"):
        out = f(p)
    assert out.dtype == flame.float64
    np.testing.assert_allclose(out.numpy(), p.numpy() * 2)


def test_a_captured_tensor_given_a_new_array_of_the_same_type_is_read_again():
    w = nn.Parameter(flame.ones(3))

    @flame.compile
    def f(x):
        return x * w

    x = flame.ones(3)
    np.testing.assert_allclose(f(x).numpy(), [1, 1, 1])
    w._data = flame.tensor(np.array([2.0, 3.0, 4.0], np.float32))._data  # a new buffer, same type
    with _no_retrace():
        np.testing.assert_allclose(f(x).numpy(), [2, 3, 4])
    w._data = flame.tensor(np.ones((3,), np.float64))._data
    w._dtype = flame.float64
    with pytest.warns(flame.RecompileWarning, match=r"f32\[3\] -> f64\[3\]"):
        f(x)


def test_freezing_a_captured_parameter_between_identical_calls_traces_again():
    w, v = nn.Parameter(flame.ones(3)), nn.Parameter(flame.ones(3))  # (v keeps the loss differentiable)

    @flame.compile
    def f(x):
        loss = (x * w).sum() + (x * v).sum()
        loss.backward()
        return loss

    x = flame.ones(3)
    f(x)
    f(x)
    w.requires_grad_(False)
    with pytest.warns(flame.RecompileWarning, match="requires_grad True -> False"):
        f(x)


def test_results_are_fresh_structures_at_every_call():
    @flame.compile
    def f(x):
        return {"y": x + 1, "pair": [x * 2, (x, 3)]}, None

    x = flame.ones(2)
    a, none = f(x)
    assert none is None
    a["pair"].append("mine")
    b, _ = f(x)
    assert list(b) == ["y", "pair"] and len(b["pair"]) == 2 and b["pair"][1][1] == 3
    np.testing.assert_allclose(b["pair"][0].numpy(), [2, 2])
    assert b["pair"][1][0] is x  # an argument returned as is comes back itself, as torch's


def test_a_module_mode_and_a_global_change_between_identical_calls_trace_again(caplog):
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))

    @flame.compile
    def f(x):
        return model(x) * SCALE

    x = flame.ones(2, 4)
    f(x)
    f(x)
    model.eval()
    with said_at_info(caplog, "training: True -> False"):
        f(x)
    globals()["SCALE"] = 3.0
    with pytest.warns(flame.RecompileWarning, match="global 'SCALE': 2.0 -> 3.0"):
        f(x)


SCALE = 2.0


def test_in_place_updates_bump_versions_and_grads_are_handed_over_at_every_replay():
    """A compiled step's in-place update gives a new version to each tensor an eager graph recorded,
    so that graph's backward() raises as PyTorch's does; a graph recorded after the updates is fine."""
    w = nn.Parameter(flame.ones(3))
    opt = flame.optim.SGD([w], lr=0.5)

    @flame.compile
    def step(x):
        opt.zero_grad()
        loss = (x * w).sum()
        loss.backward()
        opt.step()
        return loss

    x = flame.ones(3)
    before = (w * w).sum()  # mul's node saves w, at its version then (w * 2.0's would save none of w)
    versions = []
    for _ in range(3):
        step(x)
        versions.append(w._version)
        np.testing.assert_allclose(w.grad.numpy(), [1, 1, 1])
    assert versions[0] < versions[1] < versions[2]
    np.testing.assert_allclose(w.numpy(), [-0.5, -0.5, -0.5])
    with pytest.raises(flame.FlameError, match="modified in place after it was used by mul"):
        before.backward()
    after = (w * 2.0).sum()
    after.backward()
    np.testing.assert_allclose(w.grad.numpy(), [3, 3, 3])  # the step's [1, 1, 1] plus 2


def test_versions_of_tensors_no_eager_graph_recorded_are_left_alone():
    """An optimizer step over many parameters bumps no version nobody can check (the replay's per-call
    work); a tensor recorded later, between two steps, is bumped from then on."""
    ws = [nn.Parameter(flame.ones(2)) for _ in range(3)]
    opt = flame.optim.SGD(ws, lr=0.5)

    @flame.compile
    def step(*gs):
        for w, g in zip(ws, gs):
            w.grad = g
        opt.step()

    gs = [flame.ones(2) for _ in ws]
    step(*gs)
    step(*gs)
    assert [w._version for w in ws] == [0, 0, 0]
    seen = (ws[1] * ws[1]).sum()  # mul's node saves ws[1] (ws[1] * 1.0's would not: torch's backward runs)
    step(*gs)
    assert [w._version for w in ws] == [0, 1, 0]
    with pytest.raises(flame.FlameError, match="modified in place"):
        seen.backward()


@pytest.mark.parametrize("compiled", [False, True])
def test_a_tensor_the_body_returns_itself_comes_back_itself_as_in_torch(compiled):
    """`return w` (a parameter the step updates), `return x.add_(1)` (an argument updated in place) and
    `return buf.mul_(2)` (a captured buffer) hand back those tensors, as torch does: a later in-place
    change through the result reaches them, and a later step's update shows in the result."""
    results = {}
    for lib in (torch, flame):
        w = lib.nn.Parameter(lib.ones(3))
        buf = lib.ones(2)
        opt = lib.optim.SGD([w], lr=0.5)

        def step(x, w=w, buf=buf, opt=opt, lib=lib):
            (w * x).sum().backward()
            opt.step()
            opt.zero_grad()
            return w, x.add_(1), buf.mul_(2)

        step = flame.compile(step) if compiled and lib is flame else step
        x = lib.ones(3)
        got_w, got_x, got_buf = step(x)
        assert got_w is w and got_x is x and got_buf is buf
        got_x.mul_(10)  # reaches the caller's x
        step(x)
        results[lib] = [t.detach().numpy().copy() for t in (got_w, x, got_buf)]
    for a, b in zip(results[torch], results[flame]):
        np.testing.assert_allclose(b, a, rtol=1e-6)


@pytest.mark.parametrize("compiled", [False, True])
def test_a_view_the_body_returns_of_an_argument_or_a_captured_tensor_shares_its_storage(compiled):
    """`return x.view(2, 3)` and `return buf[1:]` (buf updated in place by the body) are views, as in
    torch: a write through them reaches x and buf, and the next call's update of buf shows in them."""
    results = {}
    for lib in (torch, flame):
        buf = lib.ones(3)

        def f(x, buf=buf):
            buf.mul_(2)
            return x.view(2, 3), buf[1:]

        f = flame.compile(f) if compiled and lib is flame else f
        x = lib.arange(6.0)
        v, tail = f(x)
        v[0, 0] = 100.0
        tail[0] = -1.0
        f(x)
        results[lib] = [t.numpy().copy() for t in (x, v, buf, tail)]
    for a, b in zip(results[torch], results[flame]):
        np.testing.assert_allclose(b, a)


@pytest.mark.parametrize("compiled", [False, True])
def test_results_that_are_one_tensor_or_views_of_another_result_share_it_as_in_torch(compiled):
    """`return y, y.view(-1), {"a": y}, [y]` hands back y itself wherever it is returned, and a view of
    it where a view is: a write through one result reaches the others, at every call, as in torch."""
    results = {}
    for lib in (torch, flame):

        def f(x, lib=lib):
            y = x * 2
            return y, y.view(-1), y[1:], {"a": y}, [y]

        f = flame.compile(f) if compiled and lib is flame else f
        got = []
        for k in range(3):
            a, v, tail, d, lst = f(lib.arange(3.0) + k)
            assert d["a"] is a and lst[0] is a
            v[0] = -1.0
            tail[0] = 100.0
            got.append([t.numpy().copy() for t in (a, v, tail, d["a"], lst[0])])
        results[lib] = got
    for a, b in zip(results[torch], results[flame]):
        for x, y in zip(a, b):
            np.testing.assert_allclose(y, x)


def test_a_result_returned_twice_that_requires_grad_is_one_tensor_and_differentiates():
    """`return y, y` of an input that requires grad: one tensor twice, whose backward reaches x."""
    got = {}
    for lib in (torch, flame):

        def f(x):
            y = x * 3
            return y, y

        f = flame.compile(f) if lib is flame else f
        x = lib.ones(2, requires_grad=True)
        a, b = f(x)
        assert a is b
        (a.sum() + b.sum()).backward()
        got[lib] = x.grad.numpy().copy()
    np.testing.assert_allclose(got[flame], got[torch])
