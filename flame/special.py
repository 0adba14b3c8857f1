"""flame.special: the torch.special functions flame has (re-exports; the code lives in flame.frontend)."""

from flame.frontend.ops import digamma, erf, erfc, erfinv, polygamma
from flame.frontend.ops import lgamma as gammaln

psi = digamma

__all__ = ["digamma", "erf", "erfc", "erfinv", "gammaln", "polygamma", "psi"]
