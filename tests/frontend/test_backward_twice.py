"""A second backward() through a freed graph raises as PyTorch's does; retain_graph=True allows it
and accumulates (issue 15: flame doubled the gradients silently). Oracle: torch on the CPU."""

import numpy as np
import pytest
import torch

import flame


def _flame(retain: bool):
    w = flame.tensor(np.array([1.0, 2.0, 3.0], np.float32), requires_grad=True)
    loss = (w * w).sum()
    loss.backward(retain_graph=retain)
    return w, loss


def _torch(retain: bool):
    w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    loss = (w * w).sum()
    loss.backward(retain_graph=retain)
    return w, loss


def test_a_second_backward_through_a_freed_graph_raises_like_torch():
    w, loss = _torch(False)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()
    w, loss = _flame(False)
    with pytest.raises(flame.FlameError, match=r"(?s)backward through the graph a second time.*retain_graph=True"):
        loss.backward()
    with pytest.raises(RuntimeError):  # PyTorch users catch RuntimeError
        loss.backward()
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, 4.0, 6.0])  # the first backward only


def test_retain_graph_allows_it_and_gradients_accumulate_like_torch():
    fw, floss = _flame(True)
    tw, tloss = _torch(True)
    floss.backward()
    tloss.backward()
    np.testing.assert_array_equal(fw.grad.numpy(), tw.grad.numpy())
    with pytest.raises(flame.FlameError, match="second time"):
        floss.backward()  # the last one freed it


def test_a_loss_sharing_a_freed_subgraph_raises_but_a_fresh_graph_does_not():
    w = flame.tensor(np.ones(3, np.float32), requires_grad=True)
    h = w * w
    h.sum().backward()
    with pytest.raises(flame.FlameError, match="second time"):
        (h * 2).sum().backward()
    (w * w).sum().backward()  # a new forward: a new graph
    np.testing.assert_array_equal(w.grad.numpy(), [4.0, 4.0, 4.0])


def test_inside_a_compiled_function_too():
    w = flame.tensor(np.ones(3, np.float32), requires_grad=True)

    @flame.compile
    def twice(x, retain):
        loss = (w * x).sum()
        loss.backward(retain_graph=retain)
        loss.backward()
        return loss

    with pytest.raises(flame.FlameError, match=r"(?s)second time.*test_backward_twice.py"):
        twice(flame.ones(3), False)
    twice(flame.ones(3), True)
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, 2.0, 2.0])


@pytest.mark.parametrize("retain", [False, True])
def test_a_loss_reading_a_grad_in_a_compiled_step_differentiates_the_parameter_alone(retain):
    """A .grad has no history (no create_graph): a second loss p * p.grad inside @flame.compile flows to p
    alone, as torch's, neither into the ops that computed the gradient (twice the gradient) nor, without
    retain_graph, into the first backward's freed graph (a spurious error)."""
    x, d = np.array([1.0, -2.0, 0.5]), np.array([0.3, 1.5, -2.0])
    got = {}
    for lib in (torch, flame):
        p = lib.tensor(x.copy(), requires_grad=True)

        def step(data, p=p):
            ((p * data) ** 2).sum().backward(retain_graph=retain)
            g, p.grad = p.grad, None
            (p * g).sum().backward()

        (flame.compile(step) if lib is flame else step)(lib.tensor(d))
        got[lib] = p.grad.numpy()
    np.testing.assert_allclose(got[flame], got[torch], rtol=1e-14)


def test_create_graph_in_a_compiled_step_keeps_the_gradients_history():
    """backward(create_graph=True) inside @flame.compile: the .grad it leaves is differentiable, so a
    gradient penalty on it reaches the parameters as torch's does."""
    x, d = np.array([1.0, -2.0, 0.5]), np.array([0.3, 1.5, -2.0])
    got = {}
    for lib in (torch, flame):
        p = lib.tensor(x.copy(), requires_grad=True)

        def step(data, p=p):
            ((p * p * data).sum() ** 2).backward(create_graph=True)
            g, p.grad = p.grad, None
            (g * g).sum().backward()

        (flame.compile(step) if lib is flame else step)(lib.tensor(d))
        got[lib] = p.grad.detach().numpy()
    np.testing.assert_allclose(got[flame], got[torch], rtol=1e-12)


def _after_freed(lib, hooked: bool, first: str):
    """x -> y = x * x -> loss of y; the graph is freed by a first backward or grad, then differentiated
    with respect to the intermediate y (which runs nothing before y), then backward() through y's node."""
    x = lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64, requires_grad=True)
    y = x * x
    log = []
    if hooked:
        y.register_hook(lambda g: (log.append(g.tolist()), g * 2)[1])
    if first == "backward":
        y.exp().sum().backward()
    got = lib.autograd.grad((y * y.exp()).sum(), y)[0].tolist()
    y.sum().backward() if first != "backward" else None
    return got, x.grad.tolist(), log


@pytest.mark.parametrize("hooked", [False, True], ids=["plain", "hooked"])
@pytest.mark.parametrize("first", ["backward", "grad"])
def test_grad_with_respect_to_an_intermediate_neither_needs_nor_frees_the_graph_before_it(hooked, first):
    want = _after_freed(torch, hooked, first)
    got = _after_freed(flame, hooked, first)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
    assert len(got[2]) == len(want[2])
    for g, w in zip(got[2], want[2]):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    if not hooked and first == "grad":  # backward(inputs=[y]) does run y's own node (torch's engine)
        _non_leaf_input_runs_its_node()


def _non_leaf_input_runs_its_node():
    """torch's backward(inputs=[y]) runs y's own grad_fn: it frees it, and a freed one is an error."""
    grads = []
    for lib, error in ((torch, RuntimeError), (flame, flame.FlameError)):
        x = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)
        y = x * x
        (y * y).sum().backward(inputs=[y])
        grads.append(y.grad.tolist())
        with pytest.raises(error, match="a second time"):
            y.sum().backward()
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-12)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("retain", [None, True], ids=["freed", "retain_graph"])
@pytest.mark.parametrize("second", ["grad", "backward"])
def test_autograd_grad_frees_the_graph_like_torch(compiled, retain, second):
    """autograd.grad without retain_graph frees what it went through, as torch's: a second grad() or
    backward() through it raises; with retain_graph=True both give torch's gradients."""

    def body(lib, x):
        y = (x * x.sin()).sum()
        (g,) = lib.autograd.grad(y, x, retain_graph=retain)
        if second == "grad":
            return g + lib.autograd.grad(y, x)[0]
        y.backward()
        return g + x.grad

    tx = torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64, requires_grad=True)
    fx = flame.tensor([1.0, 2.0, 0.5], dtype=flame.float64, requires_grad=True)
    run = flame.compile(lambda x: body(flame, x)) if compiled else (lambda x: body(flame, x))
    try:
        want = body(torch, tx)
    except RuntimeError as e:
        assert "second time" in str(e)
        with pytest.raises(RuntimeError, match="second time") as got:
            run(fx)
        assert "test_backward_twice.py" in str(got.value)
        return
    np.testing.assert_allclose(run(fx).numpy(), want.detach().numpy(), rtol=1e-12)


@pytest.mark.parametrize("retain", [None, True], ids=["freed", "retain_graph"])
def test_a_backward_outside_after_autograd_grad_inside_is_torchs(retain):
    """A compiled body's autograd.grad without retain_graph frees what it went through: a backward
    outside it, on a result whose history runs through those ops, raises as torch's (naming the body's
    line); with retain_graph=True it gives torch's gradient."""

    def body(lib, x):
        y = (x * x.sin()).sum()
        lib.autograd.grad(y, x, retain_graph=retain)
        return y

    tx = torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64, requires_grad=True)
    fx = flame.tensor([1.0, 2.0, 0.5], dtype=flame.float64, requires_grad=True)
    y = flame.compile(lambda x: body(flame, x))(fx)
    if retain is None:
        with pytest.raises(RuntimeError, match="second time"):
            body(torch, tx).backward()
        with pytest.raises(RuntimeError, match="second time") as got:
            y.backward()
        assert "test_backward_twice.py" in str(got.value)
        return
    body(torch, tx).backward()
    y.backward()
    np.testing.assert_allclose(fx.grad.numpy(), tx.grad.numpy(), rtol=1e-12)
