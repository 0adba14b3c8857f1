"""Eager create_graph=True against torch in float64: the gradients flame.autograd.grad and
backward(create_graph=True) give carry a history and are differentiated again (second and third
derivatives of polynomials, tanh, softmax; a WGAN-GP gradient penalty step through nn layers; .grad
differentiated; gradients as functions of grad_outputs), with torch's retain_graph defaults and errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import flame


def _rng(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def _pair(a: np.ndarray, requires_grad: bool = True):
    return torch.tensor(a, requires_grad=requires_grad), flame.tensor(a, dtype=flame.f64, requires_grad=requires_grad)


def _close(got, want) -> None:
    if got is None or want is None:
        assert got is None and want is None
        return
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-11, atol=1e-13)


def _poly(lib, x):
    return (x.pow(3) * 2 - x * x * 5 + x).sum()


def _tanh(lib, x):
    return (x.tanh() * x.exp()).sum()


def _softmax(lib, x):
    return (lib.softmax(x, dim=-1) * lib.arange(x.shape[-1], dtype=x.dtype)).pow(2).sum()


@pytest.mark.parametrize("f", [_poly, _tanh, _softmax])
def test_second_and_third_derivatives_match_torch(f):
    x0 = _rng(1, 3, 4)
    tx, fx = _pair(x0)
    tg = torch.autograd.grad(f(torch, tx), tx, create_graph=True)[0]
    tgg = torch.autograd.grad(tg.pow(2).sum(), tx, create_graph=True)[0]
    tggg = torch.autograd.grad(tgg.sum(), tx)[0]
    g = flame.autograd.grad(f(flame, fx), fx, create_graph=True)[0]
    assert g.requires_grad and not fx.grad
    gg = flame.autograd.grad(g.pow(2).sum(), fx, create_graph=True)[0]
    ggg = flame.autograd.grad(gg.sum(), fx)[0]
    _close(g, tg)
    _close(gg, tgg)
    _close(ggg, tggg)
    assert not ggg.requires_grad


def _models(seed: int):
    t = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).double()
    f = flame.nn.Sequential(flame.nn.Linear(3, 8), flame.nn.Tanh(), flame.nn.Linear(8, 1))
    for (_, tp), (_, fp) in zip(t.named_parameters(), f.named_parameters()):
        tp.data = torch.tensor(_rng(seed, *tp.shape) * 0.5)
        fp.data = flame.tensor(tp.detach().numpy(), dtype=flame.f64)
        seed += 1
    return t, f


def _wgan_gp_step(lib, d, real, fake, alpha):
    """One critic loss of WGAN-GP: the critic's gap plus 10 * the gradient penalty at interpolates."""
    x = (alpha * real + (1 - alpha) * fake).detach().requires_grad_(True)
    (g,) = lib.autograd.grad(d(x).sum(), x, create_graph=True)
    penalty = ((g.norm(2, dim=1) - 1) ** 2).mean()
    loss = d(fake).mean() - d(real).mean() + 10 * penalty
    loss.backward()
    return loss, penalty


def test_wgan_gp_critic_step_through_nn_layers_matches_torch():
    real, fake, alpha = _rng(2, 6, 3), _rng(3, 6, 3), np.random.default_rng(4).random((6, 1))
    td, fd = _models(10)
    topt = torch.optim.SGD(td.parameters(), lr=0.1)
    fopt = flame.optim.SGD(fd.parameters(), lr=0.1)
    for _ in range(2):
        want = _wgan_gp_step(torch, td, *(torch.tensor(a) for a in (real, fake, alpha)))
        got = _wgan_gp_step(flame, fd, *(flame.tensor(a, dtype=flame.f64) for a in (real, fake, alpha)))
        for g, w in zip(got, want):
            _close(g, w)
        for tp, fp in zip(td.parameters(), fd.parameters()):
            _close(fp.grad, tp.grad)
            assert not fp.grad.requires_grad
        topt.step()
        fopt.step()
        topt.zero_grad()
        fopt.zero_grad()
    for tp, fp in zip(td.parameters(), fd.parameters()):
        _close(fp, tp)


def test_backward_create_graph_gives_grad_a_history_and_accumulates_out_of_place():
    x0 = _rng(5, 4)
    tx, fx = _pair(x0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # (torch's warns once a process)
        _tanh(torch, tx).backward(create_graph=True)
    with pytest.warns(UserWarning, match="create_graph=True will create a reference cycle"):
        _tanh(flame, fx).backward(create_graph=True)
    assert fx.grad.requires_grad
    first = fx.grad
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        _poly(torch, tx).backward(create_graph=True)
        _poly(flame, fx).backward(create_graph=True)
    assert fx.grad is not first  # a new tensor with a history, as torch's
    _close(fx.grad, tx.grad)
    (tgg,) = torch.autograd.grad(tx.grad.pow(2).sum(), tx)
    (gg,) = flame.autograd.grad(fx.grad.pow(2).sum(), fx)
    _close(gg, tgg)


def test_backward_create_graph_with_inputs_and_retain_grad_match_torch():
    x0, w0 = _rng(6, 4), _rng(7, 4)
    res = []
    for lib, (x, w) in ((torch, (torch.tensor(x0, requires_grad=True), torch.tensor(w0, requires_grad=True))),
                        (flame, (flame.tensor(a, dtype=flame.f64, requires_grad=True) for a in (x0, w0)))):
        h = (x * w).tanh()
        h.retain_grad()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            (h.pow(3).sum() + (h * x).sum()).backward(create_graph=True)
        hx = h.grad
        gw = lib.autograd.grad((w.grad * x.grad).sum() + hx.sum(), w)[0]
        res.append((x.grad, w.grad, hx, gw))
        x.grad = w.grad = None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            (x * w).tanh().pow(2).sum().backward(inputs=[w], create_graph=True)
        res[-1] += (w.grad, lib.autograd.grad(w.grad.sum(), x)[0])
        assert x.grad is None
    for got, want in zip(res[1], res[0]):
        _close(got, want)


def test_gradient_is_differentiable_in_grad_outputs_that_require_grad():
    x0, v0, u0 = _rng(8, 5), _rng(9, 5), _rng(10, 5)
    tx, fx = _pair(x0)
    tv, fv = _pair(v0)
    (tg,) = torch.autograd.grad(tx.sin() * tx, tx, grad_outputs=tv, create_graph=True)
    (g,) = flame.autograd.grad(fx.sin() * fx, fx, grad_outputs=fv, create_graph=True)
    _close(g, tg)
    tu = torch.tensor(u0)
    want = torch.autograd.grad(tg, [tx, tv], grad_outputs=tu)
    got = flame.autograd.grad(g, [fx, fv], grad_outputs=flame.tensor(u0, dtype=flame.f64))
    for a, b in zip(got, want):
        _close(a, b)


def test_create_graph_retains_the_graph_by_default_and_frees_it_when_asked():
    tx, fx = _pair(_rng(11, 4))
    for lib, x in ((torch, tx), (flame, fx)):
        loss = x.tanh().sum()
        (g,) = lib.autograd.grad(loss, x, create_graph=True)  # retain_graph defaults to create_graph
        lib.autograd.grad(loss, x)  # frees it
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            lib.autograd.grad(loss, x)
        loss = x.tanh().sum()
        (g,) = lib.autograd.grad(loss, x, create_graph=True, retain_graph=False)
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            lib.autograd.grad(g.sum(), x)  # the gradient reads tanh's result, whose node is freed


def test_errors_as_torch():
    tx, fx = _pair(_rng(12, 4))
    for lib, x in ((torch, tx), (flame, fx)):
        (g,) = lib.autograd.grad((x * 2).sum(), x, create_graph=True)  # constant in x: no history
        assert not g.requires_grad
        with pytest.raises(RuntimeError, match="element 0 of tensors does not require grad"):
            lib.autograd.grad(g.sum(), x)
        (g,) = lib.autograd.grad((x * x).sum(), x, create_graph=True)
        other = lib.tensor([1.0, 2.0], requires_grad=True)
        with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
            lib.autograd.grad(g.sum(), [x, other], retain_graph=True)
        assert lib.autograd.grad(g.sum(), [x, other], allow_unused=True)[1] is None


def test_penalty_through_a_compiled_module_matches_torch():
    x0 = _rng(13, 5, 3)
    td, fd = _models(20)
    tx, fx = _pair(x0)
    for lib, d, x in ((torch, td, tx), (flame, flame.compile(fd), fx)):
        (g,) = lib.autograd.grad(d(x).sum(), x, create_graph=True)
        ((g.norm(2, dim=1) - 1) ** 2).mean().backward()
    _close(fx.grad, tx.grad)
    for tp, fp in zip(td.parameters(), fd.parameters()):
        _close(fp.grad, tp.grad)


def test_backward_create_graph_through_a_hooked_tensor_matches_torch():
    tx, fx = _pair(_rng(14, 4))
    for x in (tx, fx):
        h = x.sin() * x
        h.register_hook(lambda g, h=h: g * h)  # the hook's own ops are recorded too
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            h.pow(2).sum().backward(create_graph=True)
        gx = x.grad
        x.grad = None
        gx.sum().backward()
        x.grad = x.grad + gx
    _close(fx.grad, tx.grad)


@pytest.mark.parametrize("compiled", [False, True])
def test_jacobian_vector_product_by_double_backward_matches_torch(compiled):
    x0, v0 = _rng(15, 5), _rng(16, 5)
    tx = torch.tensor(x0, requires_grad=True)
    tu = torch.zeros(5, dtype=torch.float64, requires_grad=True)
    (tg,) = torch.autograd.grad(tx.sin() * tx, tx, grad_outputs=tu, create_graph=True)
    (want,) = torch.autograd.grad(tg, tu, grad_outputs=torch.tensor(v0))

    def jvp(x, v):
        u = flame.zeros_like(x).requires_grad_(True)
        (g,) = flame.autograd.grad(x.sin() * x, x, grad_outputs=u, create_graph=True)
        return flame.autograd.grad(g, u, grad_outputs=v)[0]

    fx = flame.tensor(x0, dtype=flame.f64, requires_grad=True)
    _close((flame.compile(jvp) if compiled else jvp)(fx, flame.tensor(v0, dtype=flame.f64)), want)


@pytest.mark.parametrize("create_graph", [False, True])
def test_grad_runs_the_hooks_of_the_tensors_passed_and_of_the_inputs_as_torch(create_graph):
    x0 = _rng(17, 4)
    res = []
    for lib in (torch, flame):
        x, w = (lib.tensor(a, dtype=lib.float64, requires_grad=True) for a in (x0, x0[::-1].copy()))
        x.register_hook(lambda g: g * 10)
        h = x.sin() * w
        h.register_hook(lambda g, h=h: g * h if create_graph else g * 3)
        h.retain_grad()
        other = lib.tensor([1.0], dtype=lib.float64, requires_grad=True)
        loss = h.pow(3).sum()
        gx, go = lib.autograd.grad(loss, [x, other], create_graph=create_graph, allow_unused=True, retain_graph=True)
        assert go is None and w.grad is None and x.grad is None
        (gh,) = lib.autograd.grad(loss, h, create_graph=create_graph)
        got = [gx, gh, h.grad]
        if create_graph:
            got.append(lib.autograd.grad(gx.sum() + gh.sum(), w)[0])
        res.append(got)
    for got, want in zip(res[1], res[0]):
        _close(got, want)


def _written(lib, x, inplace: bool):
    """sin of a tensor read before an in-place write into it, the write through a view, a product."""
    d = x.clone()
    y = d[:2].sin()
    if inplace:
        d[:2].mul_(2.0)
        d.mul_(d.exp())
    else:
        d = lib.cat([d[:2] * 2.0, d[2:]])
        d = d * d.exp()
    return y.sum() + (d * d).sum()


def test_create_graph_through_tensors_written_in_place_raises_as_torch():
    # sin saved d[:2], which the writes change: torch refuses the backward, and so does flame; the same
    # function out of place differentiates twice as torch's
    x0 = _rng(40, 4)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        tx = torch.tensor(x0, requires_grad=True)
        torch.autograd.grad(_written(torch, tx, True), tx, create_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        fx = flame.tensor(x0, dtype=flame.f64, requires_grad=True)
        flame.autograd.grad(_written(flame, fx, True), fx, create_graph=True)
    tx = torch.tensor(x0, requires_grad=True)
    (tg,) = torch.autograd.grad(_written(torch, tx, False), tx, create_graph=True)
    (th,) = torch.autograd.grad(tg.pow(2).sum(), tx)
    fx = flame.tensor(x0, dtype=flame.f64, requires_grad=True)
    (fg,) = flame.autograd.grad(_written(flame, fx, False), fx, create_graph=True)
    _close(fg, tg)
    (fh,) = flame.autograd.grad(fg.pow(2).sum(), fx)
    _close(fh, th)
