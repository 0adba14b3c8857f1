"""The reference of erf (exact GELU's core) is vectorised and as accurate as math.erf."""

import math

import numpy as np

from flame.ir.ops.elementwise import _erf_ref


def test_erf_reference_matches_math_erf():
    x = np.concatenate([np.linspace(-6, 6, 2001), [0.0, -0.0, 1e-300, np.inf, -np.inf]])
    want = np.array([math.erf(v) for v in x])
    got = _erf_ref(x)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=5e-16, atol=1e-300)  # within 2 ulp of libm
    x32 = x.astype(np.float32)
    f32 = _erf_ref(x32)
    assert f32.dtype == np.float32
    want32 = np.array([math.erf(float(v)) for v in x32]).astype(np.float32)
    np.testing.assert_allclose(f32, want32, rtol=6e-8, atol=0)  # computed in f64, rounded once
    assert np.isnan(_erf_ref(np.array([np.nan])))[0]
