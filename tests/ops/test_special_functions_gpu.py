"""lgamma, digamma, polygamma and erfinv on the CUDA executor against torch (CPU): values and gradients in
f32 and f64, eagerly and compiled, and torch's answers at the poles and the ends of erfinv's domain."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.ops.test_everyday_ops import check
from tests.ops.test_special_functions import ENDS, POLES, TORCH_TRIGAMMA, _negative, _positive, _unit

pytestmark = pytest.mark.gpu
MODES = ("eager", "compiled")
TOL = {np.float64: (1e-9, 1e-11), np.float32: (1e-4, 1e-5)}  # device libm and float series: a few ulp


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("mode", MODES)
def test_special_functions_on_gpu(mode, dtype):
    rtol, atol = TOL[dtype]
    rt = max(rtol, TORCH_TRIGAMMA)
    for x in (_positive(dtype, 5, 40), _negative(dtype, 3, 7)):
        check(lambda t: t.lgamma(), lambda t: t.lgamma(), x, mode=mode, rtol=rt, atol=atol)
        check(lambda t: t.digamma(), lambda t: t.digamma(), x, mode=mode, rtol=rt, atol=atol)
        for n in (1, 2, 4):
            check(
                lambda t, n=n: flame.polygamma(n, t),
                lambda t, n=n: torch.polygamma(n, t),
                x,
                mode=mode,
                rtol=rt,
                atol=atol,
            )
    check(lambda t: t.erfinv(), lambda t: t.erfinv(), _unit(dtype, 6, 50), mode=mode, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_poles_and_domain_ends_on_gpu(dtype):
    rtol, atol = TOL[dtype]
    for name, data in (("lgamma", POLES), ("digamma", POLES), ("erfinv", ENDS)):
        x = data.astype(dtype)
        want = getattr(torch, name)(torch.tensor(x)).numpy()
        for got in (
            getattr(flame, name)(flame.tensor(x)),
            flame.compile(lambda t, n=name: getattr(t, n)())(flame.tensor(x)),
        ):
            got = got.numpy()
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=name)
            np.testing.assert_array_equal(got[np.isinf(want)], want[np.isinf(want)], err_msg=name)
            finite = np.isfinite(want)
            np.testing.assert_allclose(got[finite], want[finite], rtol=rtol, atol=atol, err_msg=name)
