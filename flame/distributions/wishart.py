"""Wishart(df, covariance_matrix= | precision_matrix= | scale_tril=), as torch.distributions.Wishart: the
law of sum_k x_k x_k^T over df normal vectors of covariance Sigma, sampled by Bartlett's decomposition."""

from __future__ import annotations

import math
import warnings
from numbers import Number

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions._known import known_value
from flame.distributions._linalg import cholesky, cholesky_solve, precision_to_scale_tril
from flame.distributions.exp_family import ExponentialFamily
from flame.distributions.gamma import Chi2
from flame.distributions.lkj_cholesky import mvlgamma
from flame.distributions.utils import finfo_eps, lazy_property

__all__ = ["Wishart"]

_LOG_2 = math.log(2)
_CORRECTIONS = 3  # redraws of a sample that is not positive definite (torch's count while tracing)


def _mvdigamma(x, p: int):
    """The multivariate digamma function of order p, sum_j digamma(x - j / 2)."""
    known = known_value(x > (p - 1) / 2)
    if known is not None and not known.all():
        raise AssertionError("Wrong domain for multivariate digamma function.")
    return (x.unsqueeze(-1) - ops.arange(p, dtype=x.dtype) / 2).digamma().sum(-1)


def _logdet_pd(m):
    """log det of a positive-definite matrix: twice the log diagonal of its Cholesky factor, summed."""
    return 2 * cholesky(m, check=False).diagonal(dim1=-2, dim2=-1).log().sum(-1)


def _chi2_df(df, p: int, batch_shape):
    """The degrees of freedom df - i, i = 0 .. p-1, of the Bartlett factor's squared diagonal."""
    return df.unsqueeze(-1) - ops.arange(p, dtype=df.dtype).expand(*batch_shape, p)


class Wishart(ExponentialFamily):
    """The Wishart distribution of df degrees of freedom and scale matrix given by exactly one of
    covariance_matrix, precision_matrix (its inverse) or scale_tril (its lower Cholesky factor)."""

    support = constraints.positive_definite
    has_rsample = True
    _mean_carrier_measure = 0

    @property
    def arg_constraints(self):
        """The constraints of the matrix parameters and of df (above the dimension less one)."""
        return {
            "covariance_matrix": constraints.positive_definite,
            "precision_matrix": constraints.positive_definite,
            "scale_tril": constraints.lower_cholesky,
            "df": constraints.greater_than(self.event_shape[-1] - 1),
        }

    def __init__(
        self, df, covariance_matrix=None, precision_matrix=None, scale_tril=None, validate_args: bool | None = None
    ) -> None:
        given = (covariance_matrix, precision_matrix, scale_tril)
        if sum(m is not None for m in given) != 1:
            raise AssertionError("Exactly one of covariance_matrix or precision_matrix or scale_tril may be specified.")
        param = next(m for m in given if m is not None)
        if param.dim() < 2:
            raise ValueError("scale_tril must be at least two-dimensional, with optional leading batch dimensions")
        if isinstance(df, Number):
            batch_shape = tuple(param.shape[:-2])
            self.df = ops.tensor(float(df), dtype=param.dtype)
        else:
            batch_shape = ops.broadcast_shapes(tuple(param.shape[:-2]), tuple(df.shape))
            self.df = df.expand(*batch_shape)
        event_shape = tuple(param.shape[-2:])
        p = event_shape[-1]
        known = known_value(self.df)
        if known is not None and (known <= p - 1).any():
            raise ValueError(f"Value of df={df} expected to be greater than ndim - 1 = {p - 1}.")
        if scale_tril is not None:
            self.scale_tril = param.expand(*batch_shape, -1, -1)
        elif covariance_matrix is not None:
            self.covariance_matrix = param.expand(*batch_shape, -1, -1)
        else:
            self.precision_matrix = param.expand(*batch_shape, -1, -1)
        if known is not None and (known < p).any():
            warnings.warn(
                "Low df values detected. Singular samples are highly likely to occur for ndim - 1 < df < ndim.",
                stacklevel=2,
            )
        super().__init__(batch_shape, event_shape, validate_args=validate_args)
        if scale_tril is not None:
            self._unbroadcasted_scale_tril = scale_tril
        elif covariance_matrix is not None:
            self._unbroadcasted_scale_tril = cholesky(covariance_matrix)
        else:
            self._unbroadcasted_scale_tril = precision_to_scale_tril(precision_matrix)
        self._dist_chi2 = Chi2(df=_chi2_df(self.df, p, batch_shape))

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameters expanded to batch_shape."""
        new = self._get_checked_instance(Wishart, _instance)
        batch_shape = tuple(batch_shape)
        cov_shape = batch_shape + self.event_shape
        new._unbroadcasted_scale_tril = self._unbroadcasted_scale_tril.expand(*cov_shape)
        new.df = self.df.expand(*batch_shape)
        for name in ("covariance_matrix", "scale_tril", "precision_matrix"):
            if name in self.__dict__:
                setattr(new, name, getattr(self, name).expand(*cov_shape))
        new._dist_chi2 = Chi2(df=_chi2_df(new.df, self.event_shape[-1], batch_shape))
        super(Wishart, new).__init__(batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _matrix(self, m):
        return m.expand(*self._batch_shape, *self._event_shape)

    @lazy_property
    def scale_tril(self):
        """The scale matrix's lower Cholesky factor."""
        return self._matrix(self._unbroadcasted_scale_tril)

    @lazy_property
    def covariance_matrix(self):
        """The scale matrix L L^T."""
        L = self._unbroadcasted_scale_tril
        return self._matrix(L @ L.mT)

    @lazy_property
    def precision_matrix(self):
        """The scale matrix's inverse, L^-T L^-1 (torch's cholesky_solve of the identity, gradient too)."""
        L = self._unbroadcasted_scale_tril
        return self._matrix(cholesky_solve(ops.eye(L.shape[-1], dtype=L.dtype), L))

    def _df_matrix(self):
        return self.df.reshape(*self._batch_shape, 1, 1)

    @property
    def mean(self):
        """df times the scale matrix."""
        return self._df_matrix() * self.covariance_matrix

    @property
    def mode(self):
        """(df - p - 1) times the scale matrix; NaN where df <= p + 1."""
        factor = self.df - self.covariance_matrix.shape[-1] - 1
        factor = ops.where(factor <= 0, math.nan, factor)
        return factor.reshape(*self._batch_shape, 1, 1) * self.covariance_matrix

    @property
    def variance(self):
        """df (V_ij^2 + V_ii V_jj) of the scale matrix V."""
        V = self.covariance_matrix
        diag_V = V.diagonal(dim1=-2, dim2=-1)
        return self._df_matrix() * (V.pow(2) + diag_V.unsqueeze(-1) * diag_V.unsqueeze(-2))

    def _bartlett_sampling(self, sample_shape):
        """L A A^T L^T with A lower triangular: sqrt(chi2(df - i)) on the diagonal, normal draws below."""
        p = self._event_shape[-1]
        chi = self._dist_chi2.rsample(sample_shape).sqrt()
        noise = chi.clamp(min=finfo_eps(chi.dtype)).diag_embed()
        below = ops.randn((*sample_shape, *self._batch_shape, p, p), dtype=noise.dtype).tril(-1)
        chol = self._unbroadcasted_scale_tril @ (noise + below)
        return chol @ chol.mT

    def rsample(self, sample_shape=(), max_try_correction=None):
        """Bartlett draws; a draw that is not positive definite is drawn again, up to max_try_correction
        times (3 by default: a fixed count, so that it traces)."""
        sample_shape = tuple(sample_shape)
        tries = _CORRECTIONS if max_try_correction is None else max_try_correction
        sample = self._bartlett_sampling(sample_shape)
        for _ in range(tries):
            bad = ~self.support.check(sample)
            sample = ops.where(bad.unsqueeze(-1).unsqueeze(-1), self._bartlett_sampling(sample_shape), sample)
        return sample

    def _half_log_det_scale(self, p: int):
        return p * _LOG_2 / 2 + self._unbroadcasted_scale_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)

    def log_prob(self, value):
        """The Wishart density's log at the positive-definite value, as torch writes it."""
        if self._validate_args:
            self._validate_sample(value)
        nu, p = self.df, self._event_shape[-1]
        trace = cholesky_solve(value, self._unbroadcasted_scale_tril).diagonal(dim1=-2, dim2=-1).sum(-1)
        return (
            -nu * self._half_log_det_scale(p) - mvlgamma(nu / 2, p) + (nu - p - 1) / 2 * _logdet_pd(value) - trace / 2
        )

    def entropy(self):
        """The Wishart entropy, as torch writes it."""
        nu, p = self.df, self._event_shape[-1]
        return (
            (p + 1) * self._half_log_det_scale(p)
            + mvlgamma(nu / 2, p)
            - (nu - p - 1) / 2 * _mvdigamma(nu / 2, p)
            + nu * p / 2
        )

    @property
    def _natural_params(self):
        nu, p = self.df, self._event_shape[-1]
        return -self.precision_matrix / 2, (nu - p - 1) / 2

    def _log_normalizer(self, x, y):
        p = self._event_shape[-1]
        return (y + (p + 1) / 2) * (-_logdet_pd(-2 * x) + _LOG_2 * p) + mvlgamma(y + (p + 1) / 2, p)
