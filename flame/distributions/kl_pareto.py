"""The closed-form KL divergences torch registers with a Pareto on either side, among flame's
distributions, registered into kl_divergence's table (infinite where p's support leaves q's)."""

from __future__ import annotations

import math

from flame.distributions import _frontend as ops
from flame.distributions.dirichlet import Beta
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
from flame.distributions.kl_families import _x_log_x
from flame.distributions.laplace import Laplace
from flame.distributions.normal import Normal
from flame.distributions.pareto import Pareto
from flame.distributions.uniform import Uniform


@register_kl(Pareto, Pareto)
def _kl_pareto_pareto(p, q):
    scale_ratio = p.scale / q.scale
    alpha_ratio = q.alpha / p.alpha
    result = q.alpha * scale_ratio.log() - alpha_ratio.log() + alpha_ratio - 1
    return ops.where(p.support.lower_bound < q.support.lower_bound, math.inf, result)


@register_kl(Pareto, Exponential)
def _kl_pareto_exponential(p, q):
    scale_rate_prod = p.scale * q.rate
    t1 = (p.alpha / scale_rate_prod).log()
    t3 = p.alpha * scale_rate_prod / (p.alpha - 1)
    return ops.where(p.alpha <= 1, math.inf, t1 - p.alpha.reciprocal() + t3 - 1)


@register_kl(Pareto, Gamma)
def _kl_pareto_gamma(p, q):
    common_term = p.scale.log() + p.alpha.reciprocal()
    t1 = p.alpha.log() - common_term
    t2 = q.concentration.lgamma() - q.concentration * q.rate.log()
    t3 = (1 - q.concentration) * common_term
    t4 = q.rate * p.alpha * p.scale / (p.alpha - 1)
    return ops.where(p.alpha <= 1, math.inf, t1 + t2 + t3 + t4 - 1)


@register_kl(Pareto, Normal)
def _kl_pareto_normal(p, q):
    var_normal = 2 * q.scale.pow(2)
    common_term = p.scale / (p.alpha - 1)
    t1 = (math.sqrt(2 * math.pi) * q.scale * p.alpha / p.scale).log()
    t3 = p.alpha * common_term.pow(2) / (p.alpha - 2)
    t4 = (p.alpha * common_term - q.loc).pow(2)
    result = t1 - p.alpha.reciprocal() + (t3 + t4) / var_normal - 1
    return ops.where(p.alpha <= 2, math.inf, result)


@register_kl(Uniform, Pareto)
def _kl_uniform_pareto(p, q):
    support_uniform = p.high - p.low
    t1 = (q.alpha * q.scale.pow(q.alpha) * support_uniform).log()
    t2 = (_x_log_x(p.high) - _x_log_x(p.low) - support_uniform) / support_uniform
    return ops.where(p.low < q.support.lower_bound, math.inf, t2 * (q.alpha + 1) - t1)


register_kl(Pareto, Uniform)(_kl_pareto_infinity)
register_kl(Pareto, Beta)(_kl_pareto_infinity)


@register_kl(Beta, Pareto)
def _kl_beta_infinity(p, q):
    return ops.full_like(p.concentration1, math.inf)


register_kl(Exponential, Pareto)(_kl_exponential_infinity)
register_kl(Gamma, Pareto)(_kl_gamma_infinity)
for _p in (Normal, Laplace, Gumbel):
    register_kl(_p, Pareto)(_kl_unbounded_infinity)
