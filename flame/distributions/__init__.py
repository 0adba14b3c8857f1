"""flame.distributions: torch.distributions' probability distributions, written with flame ops (so they
run eagerly and inside @flame.compile, with gradients), sampling from flame's generator. What is here
and what is not: docs/coming_from_pytorch.md."""

from flame.distributions import constraints, transforms
from flame.distributions import kl_continuous_bernoulli as _kl_continuous_bernoulli  # noqa: F401  (registers its KL pairs)
from flame.distributions import kl_families as _kl_families  # noqa: F401  (registers its KL pairs)
from flame.distributions import kl_lowrank as _kl_lowrank  # noqa: F401  (registers its KL pairs)
from flame.distributions import kl_pareto as _kl_pareto  # noqa: F401  (registers its KL pairs)
from flame.distributions.bernoulli import Bernoulli
from flame.distributions.binomial import Binomial, NegativeBinomial
from flame.distributions.categorical import Categorical, OneHotCategorical, OneHotCategoricalStraightThrough
from flame.distributions.cauchy import Cauchy, StudentT
from flame.distributions.continuous_bernoulli import ContinuousBernoulli
from flame.distributions.dirichlet import Beta, Dirichlet
from flame.distributions.distribution import Distribution
from flame.distributions.exp_family import ExponentialFamily
from flame.distributions.exponential import Exponential
from flame.distributions.fishersnedecor import FisherSnedecor
from flame.distributions.gamma import Chi2, Gamma
from flame.distributions.gumbel import Gumbel
from flame.distributions.half import HalfCauchy, HalfNormal
from flame.distributions.independent import Independent
from flame.distributions.inverse_gamma import InverseGamma
from flame.distributions.kl import kl_divergence, register_kl
from flame.distributions.kumaraswamy import Kumaraswamy
from flame.distributions.laplace import Laplace
from flame.distributions.lkj_cholesky import LKJCholesky
from flame.distributions.log_normal import LogNormal
from flame.distributions.logistic_normal import LogisticNormal
from flame.distributions.lowrank_multivariate_normal import LowRankMultivariateNormal
from flame.distributions.mixture_same_family import MixtureSameFamily
from flame.distributions.multinomial import Multinomial
from flame.distributions.multivariate_normal import MultivariateNormal
from flame.distributions.normal import Normal
from flame.distributions.pareto import GeneralizedPareto, Pareto
from flame.distributions.poisson import Geometric, Poisson
from flame.distributions.relaxed import RelaxedBernoulli, RelaxedOneHotCategorical
from flame.distributions.transformed_distribution import TransformedDistribution
from flame.distributions.transforms import (
    AbsTransform,
    AffineTransform,
    ComposeTransform,
    ExpTransform,
    SigmoidTransform,
    TanhTransform,
    Transform,
)
from flame.distributions.uniform import Uniform
from flame.distributions.von_mises import VonMises
from flame.distributions.weibull import Weibull
from flame.distributions.wishart import Wishart

__all__ = [
    "AbsTransform",
    "AffineTransform",
    "Bernoulli",
    "Beta",
    "Binomial",
    "Categorical",
    "Cauchy",
    "Chi2",
    "ComposeTransform",
    "ContinuousBernoulli",
    "Dirichlet",
    "Distribution",
    "ExpTransform",
    "Exponential",
    "ExponentialFamily",
    "FisherSnedecor",
    "Gamma",
    "GeneralizedPareto",
    "Geometric",
    "Gumbel",
    "HalfCauchy",
    "HalfNormal",
    "Independent",
    "InverseGamma",
    "Kumaraswamy",
    "LKJCholesky",
    "Laplace",
    "LogNormal",
    "LogisticNormal",
    "LowRankMultivariateNormal",
    "MixtureSameFamily",
    "Multinomial",
    "MultivariateNormal",
    "NegativeBinomial",
    "Normal",
    "OneHotCategorical",
    "OneHotCategoricalStraightThrough",
    "Pareto",
    "Poisson",
    "RelaxedBernoulli",
    "RelaxedOneHotCategorical",
    "SigmoidTransform",
    "StudentT",
    "TanhTransform",
    "Transform",
    "TransformedDistribution",
    "Uniform",
    "VonMises",
    "Weibull",
    "Wishart",
    "constraints",
    "kl_divergence",
    "register_kl",
    "transforms",
]
