"""The dtypes NumPy and CuPy cannot compute in (ml_dtypes' bfloat16 and float8s) are told apart from
NumPy's by identity, not by `kind` (float8_e5m2's kind is 'f', float8_e4m3fn's 'V'), and every one of
them reaches the device as its bytes."""

import ml_dtypes
import numpy as np
import pytest

from flame.ir.dtypes import is_ml_dtype
from flame.runtime.cuda_steps import cupy_storage

ML = [ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2]
NUMPY = [np.float16, np.float32, np.float64, np.int8, np.uint8, np.int64, np.bool_]


@pytest.mark.parametrize("dt", ML)
def test_ml_dtypes_are_recognised_whatever_their_kind(dt):
    assert is_ml_dtype(dt) and is_ml_dtype(np.dtype(dt))


@pytest.mark.parametrize("dt", NUMPY)
def test_numpys_own_dtypes_are_not(dt):
    assert not is_ml_dtype(dt)


@pytest.mark.parametrize("dt", [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2])
def test_both_float8s_go_to_the_device_as_their_bytes(dt):
    a = np.array([1.5, -2.0, 0.25], dt)
    held = cupy_storage(a)
    assert held.dtype == np.uint8
    np.testing.assert_array_equal(held, a.view(np.uint8))
    for keep in (np.float32, np.int8, np.uint8, ml_dtypes.bfloat16):
        b = np.zeros(2, keep)
        assert cupy_storage(b) is b


def _numpy_finfo_refusing_ml_dtypes(real):
    """np.finfo as NumPy builds that refuse ml_dtypes' types have it (ValueError: not compatible with finfo)."""
    def finfo(dt):
        if is_ml_dtype(np.dtype(dt)):
            raise ValueError(f"data type {np.dtype(dt)!r} not compatible with finfo")
        return real(dt)
    return finfo


@pytest.mark.parametrize("name", ["bfloat16", "float16", "float32", "float64"])
def test_random_draws_and_limits_need_no_numpy_finfo_of_ml_dtypes(monkeypatch, name):
    """Where NumPy's finfo refuses bfloat16, flame's draws and dtype limits still work (they ask
    ml_dtypes.finfo for its types: flame.ir.dtypes.finfo)."""
    import flame
    from flame.distributions.utils import finfo_eps, finfo_min, finfo_tiny
    from flame.ir.dtypes import dtype_of, finfo

    monkeypatch.setattr(np, "finfo", _numpy_finfo_refusing_ml_dtypes(np.finfo))
    dt = getattr(flame, name)
    x = flame.rand(64, dtype=dt)
    assert 0 <= float(x.min()) and float(x.max()) < 1
    y = flame.empty(8, dtype=dt).uniform_(-2, 2)
    assert -2 <= float(y.min()) and float(y.max()) <= 2
    assert flame.randint(0, 100, (16,)).dtype == flame.int64 and flame.nextafter(x, x + 1).dtype == dt
    d = dtype_of(dt)
    assert finfo_eps(d) == float(finfo(d).eps) and finfo_tiny(d) == float(finfo(d).tiny) and finfo_min(d) < 0
