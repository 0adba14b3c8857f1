"""ExponentialFamily, as torch.distributions.ExponentialFamily: the base class of distributions of density
p(x; theta) = exp(<t(x), theta> - F(theta) + k(x)), with natural parameters theta, log-normaliser F and
carrier measure k; its entropy (and the KL between two of one family) follows from F's gradient, by
autodiff (Bregman divergences)."""

from __future__ import annotations

from flame.distributions.distribution import Distribution
from flame.frontend.autograd_grad import grad

__all__ = ["ExponentialFamily"]


class ExponentialFamily(Distribution):
    """A distribution of the exponential family: subclasses give _natural_params, _log_normalizer and
    _mean_carrier_measure (E[k(x)])."""

    @property
    def _natural_params(self):
        """The natural parameters theta, a tuple of tensors."""
        raise NotImplementedError

    def _log_normalizer(self, *natural_params):
        """F(theta), the log of the normalising constant, of the natural parameters."""
        raise NotImplementedError

    @property
    def _mean_carrier_measure(self):
        """E[k(x)], the expected carrier measure."""
        raise NotImplementedError

    def entropy(self):
        """F(theta) - <theta, grad F(theta)> - E[k(x)] (the Bregman divergence form), by autodiff."""
        result = -self._mean_carrier_measure
        nparams = [p.detach().requires_grad_() for p in self._natural_params]
        lg_normal = self._log_normalizer(*nparams)
        gradients = grad(lg_normal.sum(), nparams, create_graph=True)
        result = result + lg_normal
        for p, g in zip(nparams, gradients):
            result = result - (p * g).reshape(*self._batch_shape, -1).sum(-1)
        return result
