"""A compiled function that runs no backward() itself, called eagerly (`model = flame.compile(model)`):
a backward() outside differentiates through the call by recomputing its forward, as torch.compile's
module trains. Compared with torch in f64: values, gradients and parameters over AdamW steps of an MLP
and a transformer block; gradients of arguments, tuple results with one unused, retain_graph, hooks,
no_grad, eval mode, dropout's masks (the recomputation draws the forward's), and compiled training
steps unchanged."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.training_idioms.common import assert_same_params, numpy_of, twin


def _pair():
    return twin(lambda lib: lib.nn.Linear(3, 2))


def _mlp(lib):
    nn = lib.nn
    return nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.LayerNorm(8), nn.Linear(8, 3))


def _block(lib):
    nn = lib.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(8), nn.LayerNorm(8)
            self.qkv, self.proj = nn.Linear(8, 24), nn.Linear(8, 8)
            self.mlp = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
            q, k, v = (z.view(b, t, 2, c // 2).transpose(1, 2) for z in (q, k, v))
            y = lib.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, c))
            return x + self.mlp(self.ln2(x))

    return Block()


def _assert_same_grads(mine, theirs, rtol=1e-10):
    for (name, p), q in zip(mine.named_parameters(), theirs.parameters()):
        np.testing.assert_allclose(numpy_of(p.grad), numpy_of(q.grad), rtol=rtol, atol=1e-13, err_msg=name)


@pytest.mark.parametrize("build, shape", [(_mlp, (5, 4)), (_block, (2, 4, 8))], ids=["mlp", "block"])
def test_a_compiled_module_trains_with_eager_backward_and_adamw_as_torch(build, shape):
    theirs, mine = twin(build)
    model = flame.compile(mine)
    opt = flame.optim.AdamW(mine.parameters(), lr=1e-2, weight_decay=0.1)
    topt = torch.optim.AdamW(theirs.parameters(), lr=1e-2, weight_decay=0.1)
    r = np.random.default_rng(0)
    for _ in range(3):
        x, target = r.standard_normal(shape), r.standard_normal((*shape[:-1], 3 if build is _mlp else 8))
        out = model(flame.tensor(x))
        loss = ((out - flame.tensor(target)) ** 2).mean()
        want = ((theirs(torch.tensor(x)) - torch.tensor(target)) ** 2).mean()
        assert out.requires_grad
        np.testing.assert_allclose(loss.item(), want.item(), rtol=1e-12)
        loss.backward()
        want.backward()
        _assert_same_grads(mine, theirs)
        opt.step()
        topt.step()
        opt.zero_grad()
        topt.zero_grad()
        assert_same_params(mine, theirs, rtol=1e-7, atol=1e-10)  # Adam scales noise-level gradients (a key bias) up
    assert model.stats().traces == 1


@pytest.mark.filterwarnings("ignore::flame.errors.RecompileWarning")  # w: requires_grad False -> True
def test_the_gradient_reaches_an_argument_and_its_eager_history():
    @flame.compile
    def f(x, w):
        return (x.sin() * w).tanh()

    x0 = np.linspace(-1, 1, 6).reshape(2, 3)
    w0 = np.array([0.5, -1.0, 2.0])
    x, w = flame.tensor(x0, requires_grad=True), flame.tensor(w0)
    tx, tw = torch.tensor(x0, requires_grad=True), torch.tensor(w0)
    got = f(x * 2, w)  # x * 2: an eager op before the call; the gradient flows on through it to x
    want = (torch.sin(tx * 2) * tw).tanh()
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-12)
    (got * got).sum().backward()
    (want * want).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)
    assert w.grad is None
    # leaves passed directly, through flame.autograd.grad as torch.autograd.grad
    w, tw = w.requires_grad_(), tw.requires_grad_()
    got = flame.autograd.grad((f(x, w) ** 2).sum(), [x, w])
    want = torch.autograd.grad(((torch.sin(tx) * tw).tanh() ** 2).sum(), [tx, tw])
    for g, t in zip(got, want):
        np.testing.assert_allclose(g.numpy(), t.numpy(), rtol=1e-12)


def test_tuple_results_with_one_unused_and_non_tensor_results():
    theirs, mine = _pair()

    def f(lib, model, x):
        h = model(x)
        return h.exp(), h * float("inf"), 3, h.detach()  # the unused result is infinite: a zero cotangent gives NaN

    model = flame.compile(lambda x: f(flame, mine, x))
    x0 = np.arange(6.0).reshape(2, 3) / 10
    a, b, n, d = model(flame.tensor(x0))
    ta, tb, _, _ = f(torch, theirs, torch.tensor(x0))
    assert n == 3 and a.requires_grad and b.requires_grad and not d.requires_grad
    a.sum().backward()
    ta.sum().backward()
    _assert_same_grads(mine, theirs, rtol=1e-12)
    mine.zero_grad()
    theirs.zero_grad()
    a, b, _, _ = model(flame.tensor(x0))  # both used: one recomputation gives both results' gradients
    ta, tb, _, _ = f(torch, theirs, torch.tensor(x0))
    ((a * 2).sum() + (b * 0 + 1).sum()).backward()
    ((ta * 2).sum() + (tb * 0 + 1).sum()).backward()
    assert torch.isnan(theirs.weight.grad).all()
    _assert_same_grads(mine, theirs, rtol=1e-12)  # NaN where torch's is


def test_batchnorm_running_statistics_are_updated_once_per_call():
    """The call updates the running statistics in place; the recomputation reads them as the call did
    and leaves them alone."""
    theirs, mine = twin(lambda lib: lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.BatchNorm1d(4), lib.nn.Tanh()))
    model = flame.compile(mine)
    r = np.random.default_rng(2)
    for _ in range(2):
        x0 = r.standard_normal((6, 3))
        (model(flame.tensor(x0)) ** 2).sum().backward()
        (theirs(torch.tensor(x0)) ** 2).sum().backward()
        _assert_same_grads(mine, theirs, rtol=1e-10)
        assert_same_params(mine, theirs, rtol=1e-12, atol=1e-14)  # running_mean, running_var, num_batches_tracked


def test_retain_graph_and_a_second_backward_without_it_raise_as_torch():
    theirs, mine = _pair()
    model = flame.compile(mine)
    x0 = np.ones((2, 3))
    loss = (model(flame.tensor(x0)) ** 2).sum()
    tloss = (theirs(torch.tensor(x0)) ** 2).sum()
    loss.backward(retain_graph=True)
    loss.backward()
    tloss.backward(retain_graph=True)
    tloss.backward()
    _assert_same_grads(mine, theirs, rtol=1e-12)
    with pytest.raises(flame.errors.AutogradError, match="backward through the graph a second time"):
        loss.backward()


def test_hooks_on_parameters_and_on_the_result_run():
    theirs, mine = _pair()
    model = flame.compile(mine)
    seen = []
    mine.weight.register_hook(lambda g: seen.append("weight") or g * 3)
    theirs.weight.register_hook(lambda g: g * 3)
    x0 = np.full((2, 3), 0.5)
    out = model(flame.tensor(x0))
    tout = theirs(torch.tensor(x0))
    out.register_hook(lambda g: g + 1)
    tout.register_hook(lambda g: g + 1)
    (out**2).sum().backward()
    (tout**2).sum().backward()
    assert seen == ["weight"]
    _assert_same_grads(mine, theirs, rtol=1e-12)


@pytest.mark.filterwarnings("ignore::flame.errors.RecompileWarning")  # requires_grad True -> False
def test_a_compiled_forward_under_no_grad_or_of_frozen_weights_is_plain():
    _, mine = _pair()
    model = flame.compile(mine)
    x = flame.tensor(np.ones((2, 3)))
    with flame.no_grad():
        assert not model(x).requires_grad
    mine.requires_grad_(False)
    out = model(x)
    assert not out.requires_grad
    with pytest.raises(flame.errors.AutogradError, match="does not require grad"):
        out.sum().backward()


def test_eval_mode_and_dropout_in_training_mode():
    """In training mode the recomputed forward draws the forward's dropout mask (the call's RNG seed and
    offset); in eval mode dropout is the identity and the gradients are torch's."""
    theirs, mine = twin(lambda lib: lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.Dropout(0.5)))
    model = flame.compile(mine)
    x0 = np.ones((64, 3))
    flame.manual_seed(3)
    out = model(flame.tensor(x0))
    mask = out.numpy() != 0
    assert 0.3 < mask.mean() < 0.7
    out.sum().backward()
    # d sum(dropout(x W^T + b)) / d b = 2 * (how many rows kept each column)
    np.testing.assert_allclose(mine[0].bias.grad.numpy(), 2.0 * mask.sum(0), rtol=1e-12)
    again = model(flame.tensor(x0)).numpy() != 0  # the offset moved on once per call, not per recomputation
    assert (again != mask).any()
    mine.zero_grad()
    assert [id(p) for p in model.parameters()] == [id(p) for p in mine.parameters()]
    model.eval()  # the compiled module's eval() is the module's, as torch.compile's
    theirs.eval()
    assert not mine.training and not model.training
    out = model(flame.tensor(x0))
    assert model.stats().traces == 2 and "training" in model.stats().recompile_reasons[0]
    tout = theirs(torch.tensor(x0))
    (out**2).sum().backward()
    (tout**2).sum().backward()
    _assert_same_grads(mine, theirs, rtol=1e-12)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_compiled_training_step_returns_its_loss_as_before(compiled):
    theirs, mine = _pair()
    opt = flame.optim.SGD(mine.parameters(), lr=0.1)
    topt = torch.optim.SGD(theirs.parameters(), lr=0.1)

    def step(lib, model, o, x):
        loss = (model(x) ** 2).sum()
        loss.backward()
        o.step()
        o.zero_grad()
        return loss

    fstep = flame.compile(lambda x: step(flame, mine, opt, x)) if compiled else (lambda x: step(flame, mine, opt, x))
    for i in range(3):
        x = np.full((2, 3), 0.5 + i)
        got = fstep(flame.tensor(x))
        want = step(torch, theirs, topt, torch.tensor(x))
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-12)
    np.testing.assert_allclose(mine.weight.numpy(), theirs.weight.detach().numpy(), rtol=1e-12)


@pytest.mark.filterwarnings("ignore::flame.errors.RecompileWarning")  # a second batch size: dim 0 becomes dynamic
def test_batch_sizes_instantiated_from_a_dynamic_template_differentiate_too():
    theirs, mine = twin(_mlp)
    model = flame.compile(mine)
    r = np.random.default_rng(1)
    for n in (4, 6, 5, 7):  # 5 and 7 are sizes of the template: their traced graph is made for the backward
        x0 = r.standard_normal((n, 4))
        (model(flame.tensor(x0)) ** 2).mean().backward()
        (theirs(torch.tensor(x0)) ** 2).mean().backward()
        _assert_same_grads(mine, theirs)
    assert model.stats().instantiations == 2


@pytest.mark.gpu
def test_a_compiled_module_trains_with_eager_backward_on_the_gpu():
    """The same on the CUDA executor: the copies of what the call updates in place are device arrays."""
    test_a_compiled_module_trains_with_eager_backward_and_adamw_as_torch(_block, (2, 4, 8))
    test_eval_mode_and_dropout_in_training_mode()
