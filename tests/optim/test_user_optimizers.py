"""Optimizer classes written by the user as torch's documentation and tutorials write them (a `step` that
reads group['lr'] as a Python number and creates its state lazily, a Python step count), run eagerly and
inside @flame.compile against the same class written against torch, with a scheduler changing the rate;
and the optimizer hooks torch.optim has (step pre/post, state_dict and load_state_dict)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

import flame


def _momentum_sgd(lib):
    class MomentumSGD(lib.optim.Optimizer):
        def __init__(self, params, lr=0.1, momentum=0.9):
            super().__init__(params, dict(lr=lr, momentum=momentum))

        @lib.no_grad()
        def step(self, closure=None):
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state[p]
                    if len(state) == 0:  # lazily, as torch.optim's own
                        state["step"] = 0
                        state["buf"] = lib.zeros_like(p)
                    state["step"] += 1
                    state["buf"].mul_(group["momentum"]).add_(p.grad)
                    p.add_(state["buf"], alpha=-group["lr"])

    return MomentumSGD


def _scratch_adam(lib):
    class ScratchAdam(lib.optim.Optimizer):
        def __init__(self, params, lr=0.01, betas=(0.9, 0.99), eps=1e-8):
            super().__init__(params, dict(lr=lr, betas=betas, eps=eps))

        def step(self, closure=None):
            with lib.no_grad():
                for group in self.param_groups:
                    b1, b2 = group["betas"]
                    for p in group["params"]:
                        if p.grad is None:
                            continue
                        state = self.state[p]
                        if not state:
                            state["t"] = lib.zeros((), dtype=p.dtype)
                            state["m"] = lib.zeros_like(p)
                            state["v"] = lib.zeros_like(p)
                        state["t"] += 1
                        state["m"] = b1 * state["m"] + (1 - b1) * p.grad  # rebound, not updated in place
                        state["v"] = b2 * state["v"] + (1 - b2) * p.grad * p.grad
                        m_hat = state["m"] / (1 - b1 ** state["t"])
                        v_hat = state["v"] / (1 - b2 ** state["t"])
                        p.sub_(group["lr"] * m_hat / (v_hat.sqrt() + group["eps"]))

    return ScratchAdam


def _train(lib, make_opt, compiled: bool, steps: int = 6):
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2)).double()
    if lib is torch:
        model = ref
    else:
        model = flame.nn.Sequential(flame.nn.Linear(4, 5), flame.nn.Tanh(), flame.nn.Linear(5, 2)).double()
        model.load_state_dict({k: flame.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    opt = make_opt(lib)(model.parameters())
    sched = lib.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)

    def step(x, y):
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    step = flame.compile(step) if compiled else step
    r = np.random.default_rng(0)
    losses = []
    for _ in range(steps):
        x, y = lib.tensor(r.standard_normal((6, 4))), lib.tensor(r.standard_normal((6, 2)))
        losses.append(float(step(x, y).detach().numpy()))
        sched.step()
    return losses, [p.detach().numpy() for p in model.parameters()], opt


@pytest.mark.parametrize("make_opt", [_momentum_sgd, _scratch_adam], ids=["lazy-int-step", "rebound-state"])
@pytest.mark.parametrize("compiled", [False, True])
def test_a_users_optimizer_trains_as_in_torch(make_opt, compiled):
    want_losses, want, _ = _train(torch, make_opt, False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", flame.RecompileWarning)  # a Python step count re-traces each call
        losses, got, opt = _train(flame, make_opt, compiled)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-10)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-13)
    for st in opt.state.values():  # the state the compiled step made holds values, as torch's
        for v in st.values():
            if isinstance(v, flame.Tensor):
                assert not v.is_traced and np.isfinite(v.numpy()).all()


def test_state_rebound_in_a_compiled_step_is_replayed_without_retracing():
    """A tensor step count and state rebound to new tensors of the same shape: the trace after the one
    that made the state replays (the lr is constant here)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", flame.RecompileWarning)
        m = flame.nn.Linear(3, 1).double()
        opt = _scratch_adam(flame)(m.parameters())

        @flame.compile
        def step(x):
            loss = m(x).pow(2).sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss

        for _ in range(5):
            step(flame.ones(2, 3, dtype=flame.float64))
    assert step.stats().traces == 2  # the step that made the state, then the one that continues it
    assert float(opt.state[m.weight]["t"].numpy()) == 5


@pytest.mark.parametrize("lib", [torch, flame])
def test_optimizer_hooks_run_as_torchs(lib):
    p = (torch.nn.Parameter if lib is torch else flame.nn.Parameter)(lib.ones(2, dtype=lib.float64))
    opt = lib.optim.SGD([p], lr=0.5)
    log = []

    def pre(o, args, kwargs):
        log.append(("pre", o is opt, len(args)))

    h = opt.register_step_pre_hook(pre)
    opt.register_step_post_hook(lambda o, args, kwargs: log.append(("post",)))
    opt.register_state_dict_pre_hook(lambda o: log.append(("sd-pre",)))
    opt.register_state_dict_post_hook(lambda o, sd: {**sd, "note": 1})
    opt.register_load_state_dict_pre_hook(lambda o, sd: {k: v for k, v in sd.items() if k != "note"})
    opt.register_load_state_dict_post_hook(lambda o: log.append(("load-post",)))
    p.grad = lib.ones(2, dtype=lib.float64)
    opt.step()
    h.remove()
    opt.step()
    sd = opt.state_dict()
    assert sd["note"] == 1
    opt.load_state_dict(sd)
    assert log == [("pre", True, 1), ("post",), ("post",), ("sd-pre",), ("load-post",)]
    assert math.isclose(float(p.detach().numpy()[0]), 0.0)


def test_global_step_hooks_and_a_pre_hook_that_changes_the_arguments():
    import torch.optim.optimizer as tmod

    import flame.optim.optimizer as fmod
    seen = {}
    for lib, mod in ((torch, tmod), (flame, fmod)):
        calls = []
        p = (torch.nn.Parameter if lib is torch else flame.nn.Parameter)(lib.ones(2, dtype=lib.float64))
        opt = lib.optim.SGD([p], lr=0.5)
        p.grad = lib.ones(2, dtype=lib.float64)
        pre = mod.register_optimizer_step_pre_hook(lambda o, a, k, calls=calls: calls.append("global-pre"))
        post = mod.register_optimizer_step_post_hook(lambda o, a, k, calls=calls: calls.append("global-post"))
        opt.register_step_pre_hook(lambda o, a, k, c=calls: (a, {"closure": lambda: c.append("closure") or 7.0}))
        try:
            out = opt.step()
        finally:
            pre.remove()
            post.remove()
        opt.step()
        seen[lib.__name__] = (calls, out)
    assert seen["flame"] == seen["torch"] == (["global-pre", "closure", "global-post", "closure"], 7.0)


def _lookahead(lib):
    class Lookahead(lib.optim.Optimizer):
        """A wrapper optimizer as written for torch: it shares its inner optimizer's groups, keeps a Python
        counter and slow weights it makes lazily, and skips Optimizer.__init__."""

        def __init__(self, base, alpha=0.5, k=3):
            self.base, self.alpha, self.k, self.counter = base, alpha, k, 0
            self.param_groups, self.defaults, self.state = base.param_groups, base.defaults, {}

        def step(self, closure=None):
            loss = self.base.step(closure)
            self.counter += 1
            if self.counter % self.k == 0:
                with lib.no_grad():
                    for group in self.param_groups:
                        for p in group["params"]:
                            st = self.state.setdefault(p, {})
                            if "slow" not in st:
                                st["slow"] = p.detach().clone()
                            st["slow"].add_(p - st["slow"], alpha=self.alpha)
                            p.copy_(st["slow"])
            return loss

        def zero_grad(self, set_to_none=True):
            self.base.zero_grad(set_to_none)

    return lambda params: Lookahead(lib.optim.Adam(params, lr=0.05))


@pytest.mark.parametrize("compiled", [False, True])
def test_a_lookahead_wrapper_with_a_python_counter_trains_as_in_torch(compiled):
    want_losses, want, _ = _train(torch, _lookahead, False, steps=8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", flame.RecompileWarning)  # the counter re-traces each call
        losses, got, _ = _train(flame, _lookahead, compiled, steps=8)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-10)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-13)
