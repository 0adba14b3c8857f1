"""flame.distributions in compiled training steps, against torch in f64: a VAE step (Normal.rsample and
kl_divergence to the prior) and a REINFORCE step (Categorical.sample, log_prob and entropy). Given the
noise and the actions flame drew, torch's step on the same weights gives the same loss and the same
updated weights, step after step."""

from __future__ import annotations

import numpy as np
import torch
import torch.distributions as TD

import flame
import flame.distributions as FD


def _pair(n_in, n_out, seed):
    torch.manual_seed(seed)
    t = torch.nn.Linear(n_in, n_out).double()
    f = flame.nn.Linear(n_in, n_out, dtype=flame.f64)
    f.weight.data = flame.tensor(t.weight.detach().numpy())
    f.bias.data = flame.tensor(t.bias.detach().numpy())
    return f, t


def _assert_same_weights(flame_layers, torch_layers):
    for f, t in zip(flame_layers, torch_layers):
        np.testing.assert_allclose(f.weight.numpy(), t.weight.detach().numpy(), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(f.bias.numpy(), t.bias.detach().numpy(), rtol=1e-10, atol=1e-12)


def test_compiled_vae_step_matches_torch_for_the_same_noise():
    latent = 2
    (fe, te), (fdec, tdec) = _pair(5, 2 * latent, 0), _pair(latent, 5, 1)
    fopt = flame.optim.SGD([*fe.parameters(), *fdec.parameters()], lr=0.05)
    topt = torch.optim.SGD([*te.parameters(), *tdec.parameters()], lr=0.05)

    def vae_loss(D, enc, dec, x, noise=None):
        mu, logvar = enc(x).chunk(2, -1)
        q = D.Normal(mu, (0.5 * logvar).exp())
        z = q.rsample() if noise is None else q.loc + noise * q.scale
        prior = D.Normal(mu * 0, mu * 0 + 1)
        return ((dec(z) - x) ** 2).sum(-1).mean() + D.kl_divergence(q, prior).sum(-1).mean(), z, q

    @flame.compile
    def step(x):
        fopt.zero_grad()
        loss, z, q = vae_loss(FD, fe, fdec, x)
        loss.backward()
        fopt.step()
        return loss, (z - q.loc) / q.scale

    rng = np.random.default_rng(0)
    flame.manual_seed(0)
    for _ in range(3):
        x = rng.normal(size=(8, 5))
        loss, eps = step(flame.tensor(x))
        topt.zero_grad()
        tloss, _, _ = vae_loss(TD, te, tdec, torch.tensor(x), torch.tensor(eps.numpy()))
        tloss.backward()
        topt.step()
        np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-10)
        _assert_same_weights([fe, fdec], [te, tdec])
    assert step.stats().traces == 1  # the later steps replay the trace, drawing fresh noise


def test_compiled_reinforce_step_matches_torch_for_the_same_actions():
    fpol, tpol = _pair(4, 3, 2)
    fopt, topt = flame.optim.SGD(fpol.parameters(), lr=0.1), torch.optim.SGD(tpol.parameters(), lr=0.1)
    target = np.array([2, 0, 1, 1, 0, 2])

    def reinforce_loss(D, policy, obs, actions, goal):
        dist = D.Categorical(logits=policy(obs))
        reward = (actions == goal).to(obs.dtype)
        return -(dist.log_prob(actions) * reward).mean() - 0.01 * dist.entropy().mean()

    @flame.compile
    def step(obs, goal):
        fopt.zero_grad()
        with flame.no_grad():
            actions = FD.Categorical(logits=fpol(obs)).sample()
        loss = reinforce_loss(FD, fpol, obs, actions, goal)
        loss.backward()
        fopt.step()
        return loss, actions

    rng = np.random.default_rng(1)
    flame.manual_seed(1)
    seen = set()
    for _ in range(4):
        obs = rng.normal(size=(6, 4))
        loss, actions = step(flame.tensor(obs), flame.tensor(target))
        a = actions.numpy()
        assert (
            a.dtype == np.int64
        )  # torch's Categorical.sample dtype and a.shape == (6,) and set(a.tolist()) <= {0, 1, 2}
        seen |= set(a.tolist())
        topt.zero_grad()
        tloss = reinforce_loss(TD, tpol, torch.tensor(obs), torch.tensor(a), torch.tensor(target))
        tloss.backward()
        topt.step()
        np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-10)
        _assert_same_weights([fpol], [tpol])
    assert len(seen) > 1  # the actions are drawn, not fixed


def test_log_prob_gradient_at_given_actions_matches_torch_eager_and_compiled():
    rng = np.random.default_rng(4)
    logits, actions, adv = rng.normal(size=(5, 4)), rng.integers(0, 4, size=(3, 5)), rng.normal(size=(3, 5))
    tl = torch.tensor(logits, requires_grad=True)
    (TD.Categorical(logits=tl).log_prob(torch.tensor(actions)) * torch.tensor(adv)).sum().backward()

    def grad_of(lg, a, w):
        return flame.autograd.grad((FD.Categorical(logits=lg).log_prob(a) * w).sum(), [lg])[0]

    for fn in (grad_of, flame.compile(grad_of)):
        g = fn(flame.tensor(logits, requires_grad=True), flame.tensor(actions), flame.tensor(adv))
        np.testing.assert_allclose(g.numpy(), tl.grad.numpy(), rtol=1e-10, atol=1e-12)
