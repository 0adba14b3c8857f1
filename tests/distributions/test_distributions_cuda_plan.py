"""flame.distributions' compiled steps planned for the CUDA target: the losses agree with the eager
ones on the reference executor and every kernel compiles with NVRTC for sm_90; on a GPU (marked gpu)
they match torch's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributions as TD

import flame
import flame.distributions as FD
from tests.ops.test_everyday_ops import check_gpu_step

RNG = np.random.default_rng(0)
X = RNG.normal(size=(6, 3)).astype(np.float32)
ACTIONS = RNG.integers(0, 3, size=(6,))
TRIL = np.array([[1.0, 0.0, 0.0], [0.3, 0.9, 0.0], [-0.2, 0.1, 1.1]], dtype=np.float32)


def _loss(D, lib, w, x, actions, tril):
    """A loss touching every distribution's log_prob, entropy and kl_divergence (MultivariateNormal in its
    three parameterisations: the Cholesky factorisation's steps among the kernels)."""
    scale = (w * 0.5).exp()
    normal = D.Normal(w, scale)
    loss = -normal.log_prob(x).sum() + D.kl_divergence(normal, D.Normal(w * 0, scale * 0 + 1)).sum()
    cat = D.Categorical(logits=w)
    loss = loss - cat.log_prob(actions).sum() - cat.entropy().sum()
    loss = loss - D.Bernoulli(logits=w).log_prob((x > 0).to(x.dtype)).sum()
    loss = loss + D.Laplace(w, scale).log_prob(x).sum() + D.Exponential(scale).log_prob(x.abs()).sum()
    loss = loss + D.kl_divergence(D.Laplace(w, scale), D.Laplace(w * 0, scale * 0 + 2)).sum()
    cov = tril @ tril.mT + 0.1 * lib.eye(3)
    loss = loss - D.MultivariateNormal(w, covariance_matrix=cov * scale[0, 0]).log_prob(x).sum()
    loss = loss - D.MultivariateNormal(w, precision_matrix=cov).entropy().sum()
    mvn = D.MultivariateNormal(w, scale_tril=tril)
    return loss - mvn.log_prob(x).sum() + D.kl_divergence(mvn, D.MultivariateNormal(w * 0, scale_tril=tril)).sum()


def test_distribution_losses_plan_and_compile_for_the_gpu(cuda_target):
    w = flame.tensor(RNG.normal(size=(6, 3)).astype(np.float32) * 0.3, requires_grad=True)

    def body(x, actions, tril):
        loss = _loss(FD, flame, w, x, actions, tril)
        loss.backward()
        return loss

    check_gpu_step(body, w, flame.tensor(X), flame.tensor(ACTIONS), flame.tensor(TRIL), rtol=1e-4, atol=1e-4)


def test_sampling_steps_compile_for_the_gpu(cuda_target):
    from flame.codegen.nvrtc import compile_cubin

    @flame.compile
    def draw(loc, scale, logits):
        z = FD.Normal(loc, scale).rsample((4,)) + FD.Laplace(loc, scale).rsample() + FD.Exponential(scale).rsample()
        return z, FD.Categorical(logits=logits).sample((2,)), FD.Bernoulli(logits=logits).sample()

    z, a, b = draw(flame.zeros(3), flame.ones(3), flame.zeros(3))
    assert z.shape == (4, 3) and a.shape == (2,) and b.shape == (3,)
    sources = {k.source for k in draw._last.plan.kernels()}
    assert sources
    for source in sources:
        assert compile_cubin(source, "sm_90")[:4] == b"\x7fELF"


@pytest.mark.gpu
def test_distribution_losses_on_the_gpu_match_torch():
    w0 = RNG.normal(size=(6, 3)).astype(np.float32) * 0.3
    w = flame.tensor(w0, requires_grad=True)

    @flame.compile
    def step(x, actions, tril):
        loss = _loss(FD, flame, w, x, actions, tril)
        loss.backward()
        return loss

    loss = step(flame.tensor(X), flame.tensor(ACTIONS), flame.tensor(TRIL))
    tw = torch.tensor(w0, requires_grad=True)
    tloss = _loss(TD, torch, tw, torch.tensor(X), torch.tensor(ACTIONS), torch.tensor(TRIL))
    tloss.backward()
    np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-4)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-3, atol=1e-4)
