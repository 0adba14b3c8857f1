"""The autograd API against torch's, values in float64, eagerly and inside @flame.compile where it applies:
flame.autograd.grad (inputs as tensors or sequences, grad_outputs, retain_graph, create_graph for a gradient
penalty and a Hessian-vector product, allow_unused, materialize_grads, is_grads_batched), Tensor.backward
(gradient, retain_graph, inputs), .grad accumulation and its non-leaf warning, retain_grad, requires_grad_,
is_leaf, grad_fn, the grad-mode managers as blocks and decorators, detach(), and the reverse-mode forms of a
Jacobian and a Hessian (test_autograd_functional.py: the functional API; test_forward_ad.py: forward_ad)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import flame

RTOL = 1e-12


def _rng(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def _pair(a: np.ndarray, requires_grad: bool = True):
    """The same float64 values as a torch tensor and a flame tensor."""
    return torch.tensor(a, requires_grad=requires_grad), flame.tensor(a, dtype=flame.f64, requires_grad=requires_grad)


def _close(got, want) -> None:
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=RTOL, atol=1e-14)


def _run(body, compiled: bool):
    return flame.compile(body) if compiled else body


# ---- flame.autograd.grad --------------------------------------------------------------------------------


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("form", ["tensor", "list", "tuple"])
def test_grad_takes_tensors_or_sequences_as_torch(compiled, form):
    x0, w0 = _rng(1, 4), _rng(2, 4)
    wrap = {"tensor": lambda *t: t[0], "list": lambda *t: list(t), "tuple": lambda *t: t}[form]
    tx, fx = _pair(x0)
    tw, fw = _pair(w0)
    want = torch.autograd.grad(wrap((tx * tw).sin().sum()), wrap(tx, tw))

    def body(x, w):
        return flame.autograd.grad(wrap((x * w).sin().sum()), wrap(x, w))

    got = _run(body, compiled)(fx, fw)
    assert isinstance(got, tuple) and len(got) == len(want) == (1 if form == "tensor" else 2)
    for g, t in zip(got, want):
        _close(g, t)
    assert fx.grad is None and fw.grad is None


@pytest.mark.parametrize("compiled", [False, True])
def test_grad_outputs_weights_a_non_scalar_output_as_torch(compiled):
    x0, v0 = _rng(3, 2, 3), _rng(4, 2, 3)
    tx, fx = _pair(x0)
    (want,) = torch.autograd.grad(tx.exp() * tx, tx, grad_outputs=torch.tensor(v0))

    def body(x):
        return flame.autograd.grad(x.exp() * x, x, grad_outputs=flame.tensor(v0, dtype=flame.f64))

    _close(_run(body, compiled)(fx)[0], want)


def test_grad_of_a_non_scalar_without_grad_outputs_raises_as_torch():
    tx, fx = _pair(_rng(5, 3))
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        torch.autograd.grad(tx * 2, tx)
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        flame.autograd.grad(fx * 2, fx)


def test_retain_graph_allows_a_second_grad_and_without_it_the_graph_is_freed():
    for lib, x in zip((torch, flame), _pair(_rng(6, 3))):
        loss = (x.tanh() * x).sum()
        first = lib.autograd.grad(loss, x, retain_graph=True)[0]
        second = lib.autograd.grad(loss, x)[0]
        np.testing.assert_array_equal(first.numpy(), second.numpy())
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            lib.autograd.grad(loss, x)


def _critic(lib, x, w):
    return (x @ w).tanh().sum(-1)


@pytest.mark.parametrize("compiled", [False, True])
def test_gradient_penalty_wgan_gp_matches_torch(compiled):
    x0, w0 = _rng(7, 4, 3), _rng(8, 3, 2)
    tx, fx = _pair(x0)
    tw, fw = _pair(w0)
    tg = torch.autograd.grad(_critic(torch, tx, tw).sum(), tx, create_graph=True)[0]
    (tg.pow(2).sum() + _critic(torch, tx, tw).mean()).backward()

    def step(x, w):
        g = flame.autograd.grad(_critic(flame, x, w).sum(), x, create_graph=True)[0]
        (g.pow(2).sum() + _critic(flame, x, w).mean()).backward()
        return g

    _close(_run(step, compiled)(fx, fw), tg)
    _close(fw.grad, tw.grad)
    _close(fx.grad, tx.grad)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("by", ["grad_outputs", "dot"])
def test_hessian_vector_product_matches_torch(by, compiled):
    x0, v0 = _rng(11, 5), _rng(12, 5)
    tx, fx = _pair(x0)
    tv, fv = _pair(v0, requires_grad=False)

    def f(x):
        return (x.sin() * x.pow(3)).sum() + (x[:-1] * x[1:]).exp().sum()

    (tg,) = torch.autograd.grad(f(tx), tx, create_graph=True)
    (want,) = torch.autograd.grad(tg, tx, grad_outputs=tv)

    def hvp(x, v):
        (g,) = flame.autograd.grad(f(x), x, create_graph=True)
        if by == "dot":
            return flame.autograd.grad((g * v).sum(), x)[0]
        return flame.autograd.grad(g, x, grad_outputs=v)[0]

    _close(_run(hvp, compiled)(fx, fv), want)


@pytest.mark.parametrize("compiled", [False, True])
def test_allow_unused_gives_none_else_raises_and_materialize_grads_gives_zeros(compiled):
    x0, u0 = _rng(13, 3), _rng(14, 2)
    tx, fx = _pair(x0)
    tu, fu = _pair(u0)
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        torch.autograd.grad(tx.sum(), [tx, tu])
    want = torch.autograd.grad((tx * tx).sum(), [tx, tu], allow_unused=True)
    zeros = torch.autograd.grad((tx * tx).sum(), [tx, tu], materialize_grads=True)
    assert want[1] is None
    _close(flame.tensor(zeros[1].numpy()), torch.zeros(2, dtype=torch.float64))

    def unused(x, u):
        return flame.autograd.grad(x.sum(), [x, u])

    def body(x, u):
        a = flame.autograd.grad((x * x).sum(), [x, u], allow_unused=True)
        b = flame.autograd.grad((x * x).sum(), [x, u], materialize_grads=True)
        return a[0], a[1] is None, b[1]

    with pytest.raises(flame.errors.AutogradError, match="appears to not have been used in the graph"):
        _run(unused, compiled)(fx, fu)
    g, was_none, z = _run(body, compiled)(fx, fu)
    _close(g, want[0])
    assert was_none is True
    _close(z, zeros[1])


def test_is_grads_batched_gives_the_rows_of_the_jacobian():
    tx, fx = _pair(_rng(15, 3))
    rows = np.eye(3)
    (want,) = torch.autograd.grad(tx.sin(), tx, grad_outputs=torch.tensor(rows), is_grads_batched=True)
    (got,) = flame.autograd.grad(fx.sin(), fx, grad_outputs=flame.tensor(rows, dtype=flame.f64), is_grads_batched=True)
    _close(got, want)


# ---- Tensor.backward ------------------------------------------------------------------------------------


@pytest.mark.parametrize("compiled", [False, True])
def test_backward_with_gradient_and_inputs_accumulates_into_the_inputs_only(compiled):
    x0, w0, v0 = _rng(16, 3), _rng(17, 3), _rng(18, 3)
    (tx, fx), (tw, fw) = _pair(x0), _pair(w0)
    (tx * tw).tanh().backward(gradient=torch.tensor(v0), inputs=[tw])

    def body(x, w):
        (x * w).tanh().backward(gradient=flame.tensor(v0, dtype=flame.f64), inputs=[w])

    _run(body, compiled)(fx, fw)
    assert tx.grad is None and fx.grad is None
    _close(fw.grad, tw.grad)


@pytest.mark.parametrize("compiled", [False, True])
def test_grad_accumulates_across_backward_calls_as_torch(compiled):
    x0, w0 = _rng(19, 3), _rng(20, 3)
    (tx, fx), (tw, fw) = _pair(x0), _pair(w0)
    for _ in range(3):
        (tx * tw).sin().sum().backward()

    def body(x, w):
        (x * w).sin().sum().backward()

    step = _run(body, compiled)
    for _ in range(3):
        step(fx, fw)
    _close(fx.grad, tx.grad)
    _close(fw.grad, tw.grad)


def test_retain_graph_on_backward_then_a_second_backward_raises_as_torch():
    for x in _pair(_rng(21, 3)):
        loss = (x.exp() * x).sum()
        loss.backward(retain_graph=True)
        loss.backward()
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            loss.backward()
    tx, fx = _pair(_rng(21, 3))
    (tx.exp() * tx).sum().backward()
    (tx.exp() * tx).sum().backward()
    loss = (fx.exp() * fx).sum()
    loss.backward(retain_graph=True)
    loss.backward()
    _close(fx.grad, tx.grad)


def test_backward_of_a_non_scalar_or_of_a_tensor_without_history_raises_as_torch():
    for x in _pair(_rng(22, 3)):
        with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
            (x * 2).backward()
    for lib in (torch, flame):
        with pytest.raises(RuntimeError, match="element 0 of tensors does not require grad"):
            lib.ones(3).sum().backward()


def test_non_leaf_grad_is_none_with_torch_s_warning_and_retain_grad_keeps_it():
    got = {}
    for lib, x in zip(("torch", "flame"), _pair(_rng(23, 3))):
        y, z = x * 3, x.sin()
        z.retain_grad()
        (y * z).sum().backward()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert y.grad is None
            assert x.grad is not None and z.grad is not None
        msgs = [str(w.message) for w in caught]
        assert len(msgs) == 1 and "not a leaf Tensor is being accessed" in msgs[0] and "retain_grad()" in msgs[0]
        assert (x.is_leaf, y.is_leaf, z.retains_grad, y.retains_grad) == (True, False, True, False)
        got[lib] = (x.grad, z.grad)
    for g, t in zip(got["flame"], got["torch"]):
        _close(g, t)


def test_requires_grad_propagates_and_is_leaf_as_torch():
    for lib, x in zip((torch, flame), _pair(_rng(24, 3), requires_grad=False)):
        a = x * 2
        assert (a.requires_grad, a.is_leaf) == (False, True)
        assert x.requires_grad_() is x
        b = x * 2
        assert (x.is_leaf, b.requires_grad, b.is_leaf) == (True, True, False)
        with lib.no_grad():
            c = x * 2
        assert (c.requires_grad, c.is_leaf) == (False, True)
        assert b.requires_grad_(True) is b
        with pytest.raises(RuntimeError, match="you can only change requires_grad flags of leaf variables"):
            b.requires_grad_(False)
        with pytest.raises(RuntimeError, match="only Tensors of floating point dtype can require gradients"):
            lib.arange(3).requires_grad_()


def test_grad_fn_is_none_without_history_and_names_the_op_with_it():
    tx, fx = _pair(_rng(25, 3))
    assert tx.grad_fn is None and fx.grad_fn is None
    assert (torch.ones(2) * 2).grad_fn is None and (flame.ones(2) * 2).grad_fn is None
    for lib, x in ((torch, tx), (flame, fx)):
        y = (x * 2).exp().sum()
        assert y.grad_fn is not None and y.grad_fn.name() == "SumBackward0"
        (exp, _), = y.grad_fn.next_functions
        assert exp.name() == "ExpBackward0"
        (mul, _), = exp.next_functions
        assert mul.name() == "MulBackward0"
        leaf = mul.next_functions[0][0]
        assert leaf.variable is x and leaf.name() == "torch::autograd::AccumulateGrad"
        assert (x * lib.ones(3)).grad_fn.next_functions[1][0] is None  # an input that requires no grad
        assert repr(y.grad_fn).startswith("<SumBackward0 object")

    @flame.compile
    def step(x):
        assert (x * 2).grad_fn.name() == "MulBackward0" and x.grad_fn is None
        return (x * 2).sum()

    step(flame.ones(3, requires_grad=True))


# ---- grad modes -----------------------------------------------------------------------------------------


def _modes(lib):
    return {
        "no_grad": lib.no_grad,
        "enable_grad": lib.enable_grad,
        "inference_mode": lib.inference_mode,
        "inference_mode(False)": lambda: lib.inference_mode(False),
        "set_grad_enabled(False)": lambda: lib.set_grad_enabled(False),
        "set_grad_enabled(True)": lambda: lib.set_grad_enabled(True),
    }


def _grad_states(lib, x):
    """(is_grad_enabled, result requires grad) in each mode, nested in no_grad and in enable_grad, as a
    with block, as a called decorator and (no_grad, enable_grad, inference_mode) as a bare decorator."""
    out = []
    for name, make in _modes(lib).items():
        for outer in (lib.no_grad, lib.enable_grad):
            with outer():
                with make():
                    out.append((name, "with", lib.is_grad_enabled(), (x * 2).requires_grad))
                out.append((name, "after", lib.is_grad_enabled()))

                @make()
                def called(v):
                    return lib.is_grad_enabled(), (v * 2).requires_grad

                out.append((name, "@()", *called(x), lib.is_grad_enabled()))
                if "(" not in name:

                    @getattr(lib, name)
                    def bare(v):
                        return lib.is_grad_enabled(), (v * 2).requires_grad

                    out.append((name, "@", *bare(x), lib.is_grad_enabled()))
    return out


def test_grad_modes_as_blocks_and_decorators_nested_as_torch():
    tx, fx = _pair(_rng(26, 2))
    assert _grad_states(flame, fx) == _grad_states(torch, tx)
    assert flame.is_grad_enabled() is True and torch.is_grad_enabled() is True


def test_a_decorated_generator_runs_each_step_in_the_mode_as_torch():
    for lib, x in zip((torch, flame), _pair(_rng(36, 2))):

        @lib.no_grad()
        def steps(v, lib=lib):
            for _ in range(2):
                yield lib.is_grad_enabled(), (v * 2).requires_grad

        assert list(steps(x)) == [(False, False), (False, False)]
        assert lib.is_grad_enabled() is True


def test_set_grad_enabled_called_alone_sets_the_mode_as_torch():
    for lib, x in zip((torch, flame), _pair(_rng(27, 2))):
        try:
            lib.set_grad_enabled(False)
            assert lib.is_grad_enabled() is False and not (x * 2).requires_grad
            lib.set_grad_enabled(True)
            assert lib.is_grad_enabled() is True and (x * 2).requires_grad
        finally:
            lib.set_grad_enabled(True)


def test_grad_modes_inside_compile_as_torch():
    x0, w0 = _rng(28, 3), _rng(29, 3)
    (tx, fx), (tw, fw) = _pair(x0), _pair(w0)
    with torch.no_grad():
        tk = tx * tw
    (tk * tx + (tx * tw).sin()).sum().backward()

    @flame.compile
    def step(x, w):
        with flame.no_grad():
            k = x * w
        with flame.set_grad_enabled(False):
            unused = x.exp()
        (k * x + (x * w).sin()).sum().backward()
        return k, unused.requires_grad

    k, flag = step(fx, fw)
    _close(k, tk)
    assert flag is False
    _close(fx.grad, tx.grad)
    _close(fw.grad, tw.grad)


# ---- torch.autograd.functional ----------------------------------------------------------------------------


def test_the_reverse_mode_forms_of_a_jacobian_and_a_hessian_match_torch():
    x0, v0 = _rng(30, 4), _rng(31, 4)

    def f(x):
        return x.tanh() * x.sum()

    want_j = torch.autograd.functional.jacobian(f, torch.tensor(x0))
    want_h = torch.autograd.functional.hessian(lambda x: f(x).pow(2).sum(), torch.tensor(x0))
    _, want_vjp = torch.autograd.functional.vjp(f, torch.tensor(x0), torch.tensor(v0))
    fx = flame.tensor(x0, dtype=flame.f64, requires_grad=True)
    y = f(fx)
    seeds = np.eye(4)
    rows = [flame.autograd.grad(y, fx, flame.tensor(r, dtype=flame.f64), retain_graph=True)[0] for r in seeds]
    _close(flame.stack(rows), want_j)
    _close(flame.autograd.grad(y, fx, flame.tensor(v0, dtype=flame.f64))[0], want_vjp)

    def hessian(x, eye):
        (g,) = flame.autograd.grad(f(x).pow(2).sum(), x, create_graph=True)
        return flame.stack([flame.autograd.grad(g, x, grad_outputs=eye[i], retain_graph=True)[0] for i in range(4)])

    for body in (hessian, flame.compile(hessian)):
        x = flame.tensor(x0, dtype=flame.f64, requires_grad=True)
        _close(body(x, flame.tensor(seeds, dtype=flame.f64)), want_h)


# ---- detach ---------------------------------------------------------------------------------------------


def test_detach_shares_storage_and_version_counter_as_torch():
    for x in _pair(_rng(32, 3)):
        d = x.detach()
        assert (d.requires_grad, d.is_leaf, d._version, x._version) == (False, True, 0, 0)
        d.mul_(2)
        assert (d._version, x._version) == (1, 1)
        np.testing.assert_array_equal(x.detach().numpy(), _rng(32, 3) * 2)
    tx, fx = _pair(_rng(33, 3))
    ty, fy = tx * tx, fx * fx
    ty.detach().add_(1)
    fy.detach().add_(1)
    np.testing.assert_array_equal(fy.detach().numpy(), ty.detach().numpy())


def test_detach_requires_grad_is_a_new_leaf_as_torch():
    got = []
    for x in _pair(_rng(34, 3)):
        y = x.sin()
        leaf = y.detach().requires_grad_()
        assert (leaf.is_leaf, leaf.requires_grad) == (True, True)
        (leaf * leaf).sum().backward()
        assert x.grad is None
        got.append(leaf.grad)
    _close(got[1], got[0])


def test_assigning_requires_grad_false_to_a_non_leaf_raises_as_torch():
    for x in _pair(_rng(35, 3)):
        y = x * 2
        with pytest.raises(RuntimeError, match="you can only change requires_grad flags of leaf variables"):
            y.requires_grad = False


def _under_no_grad(lib, f):
    with lib.no_grad():
        return f()


_NOT_DIFFERENTIABLE = {  # a loss torch's backward() refuses: no tensor it was computed from requires grad
    "frozen weights": lambda lib, w, x: (x @ w).sum(),
    "computed under no_grad": lambda lib, w, x: _under_no_grad(lib, lambda: (x @ w).sum()),
    "detached": lambda lib, w, x: (x @ w).sum().detach(),
    "of the data alone": lambda lib, w, x: (x * 2).sum(),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("case", _NOT_DIFFERENTIABLE)
def test_backward_of_a_loss_that_requires_no_grad_raises_as_torch(case, compiled):
    """A training step whose loss has no gradient path (the model frozen, its forward under no_grad)
    raises torch's RuntimeError at backward(), inside @flame.compile too, instead of training nothing."""
    for lib in (torch, flame):
        w = lib.tensor(_rng(0, 3, 2), requires_grad=case != "frozen weights")
        x = lib.tensor(_rng(1, 4, 3))

        def step(lib=lib, w=w, x=x):
            loss = _NOT_DIFFERENTIABLE[case](lib, w, x)
            loss.backward()
            return loss

        run = flame.compile(step) if compiled and lib is flame else step
        with pytest.raises(RuntimeError, match="element 0 of tensors does not require grad"):
            run()
        assert w.grad is None


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_backward_of_a_penalty_on_a_create_graph_gradient_needs_no_flag_on_it(compiled):
    """The .grad a backward(create_graph=True) leaves is differentiable (torch's requires_grad is True):
    backward() of a penalty on it runs, inside @flame.compile too."""
    got = {}
    for lib in (torch, flame):
        p = lib.tensor(_rng(2, 3), requires_grad=True)

        def step(p=p):
            ((p * p).sum() ** 2).backward(create_graph=True)
            g, p.grad = p.grad, None
            (g * g).sum().backward()

        (flame.compile(step) if compiled and lib is flame else step)()
        got[lib] = p.grad.detach().numpy() if lib is torch else p.grad.numpy()
    np.testing.assert_allclose(got[flame], got[torch], rtol=RTOL)
