"""Independent(base_distribution, reinterpreted_batch_ndims), as torch.distributions.Independent:
some of a distribution's batch dims taken as event dims (log_prob and entropy summed over them)."""

from __future__ import annotations

from flame.distributions import constraints
from flame.distributions.distribution import Distribution
from flame.distributions.utils import sum_rightmost

__all__ = ["Independent"]


class Independent(Distribution):
    """base_distribution with its reinterpreted_batch_ndims rightmost batch dims made event dims."""

    arg_constraints: dict = {}

    def __init__(
        self, base_distribution: Distribution, reinterpreted_batch_ndims: int, validate_args: bool | None = None
    ) -> None:
        if reinterpreted_batch_ndims > len(base_distribution.batch_shape):
            raise ValueError(
                f"Expected reinterpreted_batch_ndims <= len(base_distribution.batch_shape), actual "
                f"{reinterpreted_batch_ndims} vs {len(base_distribution.batch_shape)}"
            )
        shape = base_distribution.batch_shape + base_distribution.event_shape
        event_dim = reinterpreted_batch_ndims + len(base_distribution.event_shape)
        self.base_dist = base_distribution
        self.reinterpreted_batch_ndims = reinterpreted_batch_ndims
        super().__init__(shape[: len(shape) - event_dim], shape[len(shape) - event_dim :], validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its batch dims expanded to batch_shape."""
        new = self._get_checked_instance(Independent, _instance)
        batch_shape = tuple(batch_shape)
        new.base_dist = self.base_dist.expand(batch_shape + self.event_shape[: self.reinterpreted_batch_ndims])
        new.reinterpreted_batch_ndims = self.reinterpreted_batch_ndims
        super(Independent, new).__init__(batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def has_rsample(self) -> bool:
        """Whether rsample is available (the base distribution's)."""
        return self.base_dist.has_rsample

    @property
    def has_enumerate_support(self) -> bool:
        """Whether enumerate_support is available."""
        return False if self.reinterpreted_batch_ndims > 0 else self.base_dist.has_enumerate_support

    @constraints.dependent_property
    def support(self):
        """The constraint the values satisfy."""
        result = self.base_dist.support
        if self.reinterpreted_batch_ndims:
            result = constraints.independent(result, self.reinterpreted_batch_ndims)
        return result

    @property
    def mean(self):
        """The mean."""
        return self.base_dist.mean

    @property
    def mode(self):
        """The mode (the most likely value)."""
        return self.base_dist.mode

    @property
    def variance(self):
        """The variance."""
        return self.base_dist.variance

    def sample(self, sample_shape=()):
        """The base distribution's sample."""
        return self.base_dist.sample(sample_shape)

    def rsample(self, sample_shape=()):
        """The base distribution's reparameterised sample."""
        return self.base_dist.rsample(sample_shape)

    def log_prob(self, value):
        """The base log_prob summed over the reinterpreted dims."""
        return sum_rightmost(self.base_dist.log_prob(value), self.reinterpreted_batch_ndims)

    def entropy(self):
        """The base entropy summed over the reinterpreted dims."""
        return sum_rightmost(self.base_dist.entropy(), self.reinterpreted_batch_ndims)

    def enumerate_support(self, expand: bool = True):
        """The base distribution's support, when no dims were reinterpreted."""
        if self.reinterpreted_batch_ndims > 0:
            raise NotImplementedError("Enumeration over cartesian product is not implemented")
        return self.base_dist.enumerate_support(expand=expand)

    def __repr__(self) -> str:
        return self.__class__.__name__ + f"({self.base_dist}, {self.reinterpreted_batch_ndims})"
