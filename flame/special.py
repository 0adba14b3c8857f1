"""flame.special: the torch.special functions flame has (re-exports; the code lives in flame.frontend)."""

from flame.frontend.incomplete_gamma import gammainc, gammaincc
from flame.frontend.more_math import exp2, sinc
from flame.frontend.ops import (
    digamma,
    erf,
    erfc,
    erfinv,
    expm1,
    log1p,
    log_softmax,
    logit,
    logsumexp,
    polygamma,
    round,  # noqa: A004
    softmax,
    xlogy,
)
from flame.frontend.ops import lgamma as gammaln
from flame.frontend.ops import sigmoid as expit
from flame.frontend.special_math import entr, erfcx, i0, i0e, i1, i1e, log_ndtr, multigammaln, ndtr, ndtri, xlog1py

psi = digamma
modified_bessel_i0, modified_bessel_i1 = i0, i1  # torch's other names (torch gives them no gradient)

__all__ = ["digamma", "entr", "erf", "erfc", "erfcx", "erfinv", "exp2", "expit", "expm1", "gammainc", "gammaincc",
           "gammaln", "i0", "i0e",
           "i1", "i1e", "log1p", "log_ndtr", "log_softmax", "logit", "logsumexp", "modified_bessel_i0",
           "modified_bessel_i1", "multigammaln", "ndtr", "ndtri", "polygamma", "psi", "round", "sinc", "softmax",
           "xlog1py", "xlogy"]
