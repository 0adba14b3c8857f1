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
