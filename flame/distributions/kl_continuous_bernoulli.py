"""The KL divergences torch registers with a ContinuousBernoulli on either side, among flame's
distributions (infinite where p's support leaves q's), and the Bregman divergence of two distributions of
one exponential family, registered into kl_divergence's table."""

from __future__ import annotations

import math

from flame.distributions import _frontend as ops
from flame.distributions.continuous_bernoulli import ContinuousBernoulli
from flame.distributions.dirichlet import Beta
from flame.distributions.exp_family import ExponentialFamily
from flame.distributions.exponential import Exponential
from flame.distributions.gamma import Gamma
from flame.distributions.gumbel import Gumbel
from flame.distributions.kl import (
    _kl_exponential_infinity,
    _kl_gamma_infinity,
    _kl_pareto_infinity,
    _kl_unbounded_infinity,
    register_kl,
)
from flame.distributions.laplace import Laplace
from flame.distributions.normal import Normal
from flame.distributions.pareto import Pareto
from flame.distributions.uniform import Uniform
from flame.distributions.utils import sum_rightmost
from flame.frontend.autograd_grad import grad


@register_kl(ExponentialFamily, ExponentialFamily)
def _kl_expfamily_expfamily(p, q):
    if type(p) is not type(q):
        raise NotImplementedError(
            "The cross KL-divergence between different exponential families cannot                             be "
            "computed using Bregman divergences"
        )
    p_nparams = [n.detach().requires_grad_() for n in p._natural_params]
    q_nparams = q._natural_params
    lg_normal = p._log_normalizer(*p_nparams)
    gradients = grad(lg_normal.sum(), p_nparams, create_graph=True)
    result = q._log_normalizer(*q_nparams) - lg_normal
    for pnp, qnp, g in zip(p_nparams, q_nparams, gradients):
        result = result - sum_rightmost((qnp - pnp) * g, len(q.event_shape))
    return result


@register_kl(ContinuousBernoulli, ContinuousBernoulli)
def _kl_continuous_bernoulli_continuous_bernoulli(p, q):
    t1 = p.mean * (p.logits - q.logits)
    t2 = p._cont_bern_log_norm() + (-p.probs).log1p()
    t3 = -q._cont_bern_log_norm() - (-q.probs).log1p()
    return t1 + t2 + t3


@register_kl(Beta, ContinuousBernoulli)
def _kl_beta_continuous_bernoulli(p, q):
    return -p.entropy() - p.mean * q.logits - (-q.probs).log1p() - q._cont_bern_log_norm()


@register_kl(ContinuousBernoulli, Exponential)
def _kl_continuous_bernoulli_exponential(p, q):
    return -p.entropy() - q.rate.log() + q.rate * p.mean


@register_kl(ContinuousBernoulli, Normal)
def _kl_continuous_bernoulli_normal(p, q):
    t1 = -p.entropy()
    t2 = 0.5 * (math.log(2.0 * math.pi) + (q.loc / q.scale).square()) + q.scale.log()
    t3 = (p.variance + p.mean.square() - 2.0 * q.loc * p.mean) / (2.0 * q.scale.square())
    return t1 + t2 + t3


@register_kl(ContinuousBernoulli, Uniform)
def _kl_continuous_bernoulli_uniform(p, q):
    result = -p.entropy() + (q.high - q.low).log()
    outside = (q.low >= p.support.lower_bound) | (q.high <= p.support.upper_bound)
    return ops.where(outside, math.inf, result)


@register_kl(Uniform, ContinuousBernoulli)
def _kl_uniform_continuous_bernoulli(p, q):
    result = -p.entropy() - p.mean * q.logits - (-q.probs).log1p() - q._cont_bern_log_norm()
    outside = (p.high >= q.support.upper_bound) | (p.low <= q.support.lower_bound)
    return ops.where(outside, math.inf, result)


@register_kl(ContinuousBernoulli, Pareto)
def _kl_continuous_bernoulli_infinity(p, q):
    return ops.full_like(p.probs, math.inf)


register_kl(Exponential, ContinuousBernoulli)(_kl_exponential_infinity)
register_kl(Gamma, ContinuousBernoulli)(_kl_gamma_infinity)
for _p in (Normal, Laplace, Gumbel):
    register_kl(_p, ContinuousBernoulli)(_kl_unbounded_infinity)
register_kl(Pareto, ContinuousBernoulli)(_kl_pareto_infinity)
