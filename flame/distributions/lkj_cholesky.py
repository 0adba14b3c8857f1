"""LKJCholesky(dim, concentration), as torch.distributions.LKJCholesky: the LKJ distribution over
correlation matrices, as a law of their lower Cholesky factors (Lewandowski, Kurowicka and Joe, 2009),
sampled by torch's vectorised onion method."""

from __future__ import annotations

import math

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions.dirichlet import Beta
from flame.distributions.distribution import Distribution
from flame.distributions.utils import broadcast_all, finfo_tiny

__all__ = ["LKJCholesky"]


def mvlgamma(a, p: int):
    """The multivariate log-gamma function of order p (torch.mvlgamma)."""
    total = p * (p - 1) / 4 * math.log(math.pi)
    for j in range(p):
        total = total + (a - j / 2).lgamma()
    return total


class LKJCholesky(Distribution):
    """Lower Cholesky factors L of dim x dim correlation matrices, with density proportional to
    det(L L^T) ** (concentration - 1) over the correlation matrices."""

    arg_constraints = {"concentration": constraints.positive}
    support = constraints.corr_cholesky

    def __init__(self, dim: int, concentration=1.0, validate_args: bool | None = None) -> None:
        if dim < 2:
            raise ValueError(f"Expected dim to be an integer greater than or equal to 2. Found dim={dim}.")
        self.dim = dim
        (self.concentration,) = broadcast_all(concentration)
        # the Beta draws of the onion method (torch's vectorised form of its Sec. 3.2)
        marginal_conc = self.concentration + 0.5 * (self.dim - 2)
        offset = ops.arange(self.dim - 1, dtype=self.concentration.dtype)
        offset = ops.cat([ops.zeros_like(offset[:1]), offset])
        self._beta = Beta(offset + 0.5, marginal_conc.unsqueeze(-1) - 0.5 * offset)
        super().__init__(tuple(self.concentration.shape), (dim, dim), validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its concentration expanded to batch_shape."""
        new = self._get_checked_instance(LKJCholesky, _instance)
        batch_shape = tuple(batch_shape)
        new.dim = self.dim
        new.concentration = self.concentration.expand(*batch_shape)
        new._beta = self._beta.expand(batch_shape + (self.dim,))
        super(LKJCholesky, new).__init__(batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def sample(self, sample_shape=()):
        """The onion method: row i is sqrt(y_i) times a uniform direction in its first i entries, its
        diagonal entry what makes the row a unit vector (no gradients)."""
        with ops.no_grad():
            y = self._beta.sample(sample_shape).unsqueeze(-1)
            u_normal = ops.randn(self._extended_shape(sample_shape), dtype=y.dtype).tril(-1)
            norm = u_normal.pow(2).sum(-1, keepdim=True).sqrt()
            u_hypersphere = ops.where(norm > 0, u_normal / ops.where(norm > 0, norm, 1.0), 0.0)  # row 0: zeros
            w = y.sqrt() * u_hypersphere
            diag_elems = (1 - (w**2).sum(-1)).clamp(min=finfo_tiny(w.dtype)).sqrt()
            return w + diag_elems.diag_embed()

    def log_prob(self, value):
        """sum over i >= 1 of (2 (concentration - 1) + dim - i - 1) log L_ii, less the normaliser (Stan's
        form)."""
        if self._validate_args:
            self._validate_sample(value)
        diag_elems = value.diagonal(dim1=-1, dim2=-2)[..., 1:]
        order = ops.arange(2, self.dim + 1, dtype=self.concentration.dtype)
        order = 2 * (self.concentration - 1).unsqueeze(-1) + self.dim - order
        unnormalized_log_pdf = (order * diag_elems.log()).sum(-1)
        dm1 = self.dim - 1
        alpha = self.concentration + 0.5 * dm1
        denominator = alpha.lgamma() * dm1
        numerator = mvlgamma(alpha - 0.5, dm1)
        pi_constant = 0.5 * dm1 * math.log(math.pi)
        return unnormalized_log_pdf - (pi_constant + numerator - denominator)
