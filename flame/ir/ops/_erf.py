"""erf for f32 and narrower floats on NumPy, evaluated in f64 with whole-array polynomials (the
reference of `erf` and of exact GELU). SciPy's erf is scalar code: about 16 ns an element for the
|x| > 0.5 that GELU's inputs mostly are, on the CPUs flame's CI uses; here every step is one
vectorised NumPy call.

- |x| < 1.25: erf(x) = x P(x^2), P of degree 11 (a least-squares fit to erf(x)/x over x^2 in
  [0, 1.5625]: relative error under 5e-15);
- 1.25 <= |x| < 4: erf(|x|) = 1 - exp(-x^2) Q(z), z = (1/|x| - 0.525) / 0.275 in [-1, 1], Q of degree 12
  (a fit to the scaled complement erfcx = exp(x^2) erfc(x): absolute error of erf under 6e-14);
- |x| >= 4: +-1 (erfc(4) = 1.5e-8 is under half an f32 ulp of 1, so f32 rounds to 1 there).

Errors of 1e-13 are far below half an f32 ulp (6e-8 relative): the results rounded to f32, f16 or
bf16 are SciPy's rounded f64 results, bit for bit, except where the exact value lies within 1e-13 of
a rounding boundary (none in tests/ops/test_erf_reference.py's 3.2 million points). f64 inputs keep
SciPy (full f64 accuracy). The coefficients came from numpy.polynomial.polynomial.polyfit against
scipy.special.erf / erfcx on 40001 / 60001 evenly spaced points (the second weighted by exp(-x^2/2)).
"""

from __future__ import annotations

import numpy as np

_SMALL = (1.1283791670955077, -0.3761263890314536, 0.11283791670014118, -0.026866170544537687,
          0.005223977042659238, -0.0008548306551433858, 0.000120548685949693, -1.4918612356051383e-05,
          1.638991168008225e-06, -1.5867495453492672e-07, 1.2558739660223384e-08, -6.060049963156989e-10)
_LARGE = (0.26595974910269504, 0.11493794790413527, -0.013883627743182978, 0.0005985167048750504,
          0.0003101430872358525, -0.00012310465846602527, 2.599334426999108e-05, -2.2158119228333227e-06,
          -8.960812536803908e-07, 5.560602270306884e-07, -1.7387201911195502e-07, 2.9279898815397496e-08,
          -8.638809531377389e-10)
SPLIT, SATURATE = 1.25, 4.0
_CENTRE, _HALF_WIDTH = 0.525, 0.275  # 1/|x| over [1/4, 1/1.25] mapped onto [-1, 1]


def _horner(coeffs: tuple, z: np.ndarray) -> np.ndarray:
    r = np.full_like(z, coeffs[-1])
    for c in coeffs[-2::-1]:
        np.multiply(r, z, out=r)
        np.add(r, c, out=r)
    return r


def erf_narrow(x: np.ndarray) -> np.ndarray:
    """erf of an f32, f16 or bf16 array, in its dtype (see the module docstring)."""
    with np.errstate(over="ignore", invalid="ignore"):  # +-inf meet the small-|x| polynomial, then are replaced
        return _erf_narrow(x)


def _erf_narrow(x: np.ndarray) -> np.ndarray:
    d = x.astype(np.float64).reshape(-1)
    r = _horner(_SMALL, d * d)
    np.multiply(r, d, out=r)  # NaN stays NaN; +-0 keeps its sign
    a = np.abs(d)
    far = np.flatnonzero(a >= SPLIT)  # +-inf included
    if far.size:
        af = a[far]
        tail = _horner(_LARGE, (1.0 / af - _CENTRE) / _HALF_WIDTH)
        tail *= np.exp(-af * af)
        tail = 1.0 - tail
        tail[af >= SATURATE] = 1.0
        r[far] = np.copysign(tail, d[far])
    return r.reshape(x.shape).astype(x.dtype)
