"""The reference of erf (exact GELU's core) is vectorised and as accurate as math.erf; f32 and
narrower inputs give SciPy's f64 results rounded to their dtype, bit for bit."""

import math

import ml_dtypes
import numpy as np
import pytest
from scipy import special

from flame.ir.ops._erf import SATURATE, SPLIT, erf_narrow
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


def _points() -> np.ndarray:
    rng = np.random.default_rng(1)
    tiny = 10.0 ** rng.uniform(-40, 1, 200_000)
    edges = [SPLIT, SATURATE, 3.92, 3.93, 1e-45, np.finfo(np.float32).max, np.inf, 0.0, np.nan]
    edges.append(float(np.nextafter(np.float32(SPLIT), np.float32(0))))
    x = np.concatenate([rng.uniform(-5, 5, 2_000_000), rng.standard_normal(1_000_000), tiny, -tiny, edges,
                        -np.array(edges)])
    return x.astype(np.float32)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16], ids=["f32", "f16", "bf16"])
def test_narrow_erf_is_scipy_rounded_bit_for_bit(dtype):
    with np.errstate(over="ignore"):  # f32's largest finite value is inf in f16
        x = _points().astype(dtype)
    got = erf_narrow(x)
    want = special.erf(x.astype(np.float64)).astype(dtype)
    assert got.dtype == want.dtype and got.shape == x.shape
    same_bits = got.view(f"u{got.dtype.itemsize}") == want.view(f"u{want.dtype.itemsize}")
    assert (same_bits | (np.isnan(got.astype(np.float32)) & np.isnan(want.astype(np.float32)))).all()


def test_narrow_erf_keeps_shape_and_signed_zero():
    x = np.array([[-0.0, 0.0], [-np.inf, 2.0]], np.float32)
    got = erf_narrow(x)
    assert got.shape == (2, 2) and np.signbit(got[0, 0]) and not np.signbit(got[0, 1])
    assert got[1, 0] == -1.0
