"""The closed-form KL divergences torch registers between LowRankMultivariateNormal and
MultivariateNormal distributions, registered into kl_divergence's table."""

from __future__ import annotations

from flame.distributions import _frontend as ops
from flame.distributions.kl import register_kl
from flame.distributions.lowrank_multivariate_normal import (
    LowRankMultivariateNormal,
    lowrank_logdet,
    lowrank_mahalanobis,
    solve_lower_matrix,
    trace_xxt,
)
from flame.distributions.multivariate_normal import MultivariateNormal, batch_mahalanobis


def _check_events(p, q, what: str) -> None:
    if p.event_shape != q.event_shape:
        raise ValueError(
            f"KL-divergence between two {what} with                          different event shapes cannot be computed"
        )


def _logdet(d):
    return lowrank_logdet(d._unbroadcasted_cov_factor, d._unbroadcasted_cov_diag, d._capacitance_tril)


def _q_mahalanobis(p, q):
    return lowrank_mahalanobis(
        q._unbroadcasted_cov_factor, q._unbroadcasted_cov_diag, q.loc - p.loc, q._capacitance_tril
    )


def _woodbury_a(q):
    """A with inv(q's covariance) = inv(D) - A^T A."""
    wt_dinv = q._unbroadcasted_cov_factor.mT / q._unbroadcasted_cov_diag.unsqueeze(-2)
    return solve_lower_matrix(q._capacitance_tril, wt_dinv)


@register_kl(LowRankMultivariateNormal, LowRankMultivariateNormal)
def _kl_lowrank_lowrank(p, q):
    _check_events(p, q, "Low Rank Multivariate Normals")
    term1 = _logdet(q) - _logdet(p)
    A = _woodbury_a(q)
    term21 = (p._unbroadcasted_cov_diag / q._unbroadcasted_cov_diag).sum(-1)
    term22 = trace_xxt(p._unbroadcasted_cov_factor * q._unbroadcasted_cov_diag.rsqrt().unsqueeze(-1))
    term23 = trace_xxt(A * p._unbroadcasted_cov_diag.sqrt().unsqueeze(-2))
    term24 = trace_xxt(A @ p._unbroadcasted_cov_factor)
    term2 = term21 + term22 - term23 - term24
    return 0.5 * (term1 + term2 + _q_mahalanobis(p, q) - p.event_shape[0])


@register_kl(MultivariateNormal, LowRankMultivariateNormal)
def _kl_multivariatenormal_lowrank(p, q):
    _check_events(p, q, "(Low Rank) Multivariate Normals")
    lp = p._unbroadcasted_scale_tril
    term1 = _logdet(q) - 2 * lp.diagonal(dim1=-2, dim2=-1).log().sum(-1)
    A = _woodbury_a(q)
    term2 = trace_xxt(lp * q._unbroadcasted_cov_diag.rsqrt().unsqueeze(-1)) - trace_xxt(A @ lp)
    return 0.5 * (term1 + term2 + _q_mahalanobis(p, q) - p.event_shape[0])


@register_kl(LowRankMultivariateNormal, MultivariateNormal)
def _kl_lowrank_multivariatenormal(p, q):
    _check_events(p, q, "(Low Rank) Multivariate Normals")
    lq = q._unbroadcasted_scale_tril
    term1 = 2 * lq.diagonal(dim1=-2, dim2=-1).log().sum(-1) - _logdet(p)
    term3 = batch_mahalanobis(lq, q.loc - p.loc)
    n = p.event_shape[0]
    batch = ops.broadcast_shapes(tuple(lq.shape[:-2]), tuple(p._unbroadcasted_cov_factor.shape[:-2]))
    lq_b = lq.expand(*batch, n, n)
    w = p._unbroadcasted_cov_factor.expand(*batch, n, p.cov_factor.shape[-1])
    d = p._unbroadcasted_cov_diag.sqrt().diag_embed().expand(*batch, n, n)
    term2 = trace_xxt(solve_lower_matrix(lq_b, w)) + trace_xxt(solve_lower_matrix(lq_b, d))
    return 0.5 * (term1 + term2 + term3 - n)
