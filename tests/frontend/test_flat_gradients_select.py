"""The gradients of the ops that are flat outside a range (hardtanh, relu6, hardsigmoid, hardswish, logit
with eps) select, as torch's backward kernels: where the op is flat the gradient is 0 whatever the
cotangent, so an infinite or NaN cotangent there gives 0, not the NaN of a product with 0 (a var with
no degrees of freedom left, inf, fed to hardtanh and on to fmod: found by the random-program fuzzer).
Against torch, eager and compiled, float64 and float32."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame

X = np.array([-5.0, -3.0, -1.0, 0.0, 0.0005, 0.5, 0.9999, 1.0, 3.0, 5.0])
OPS = {
    "hardtanh": lambda lib, x: lib.nn.functional.hardtanh(x),
    "relu6": lambda lib, x: lib.nn.functional.relu6(x),
    "hardsigmoid": lambda lib, x: lib.nn.functional.hardsigmoid(x),
    "hardswish": lambda lib, x: lib.nn.functional.hardswish(x),
    "logit with eps": lambda lib, x: lib.logit(x, eps=0.01),
    "logit": lambda lib, x: lib.logit(x),
}


@pytest.mark.parametrize("how", ["eager", "compiled"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("cotangent", [np.inf, -np.inf, np.nan, -2.5])
@pytest.mark.parametrize("name", list(OPS))
def test_the_gradient_where_the_op_is_flat_is_torchs(name, cotangent, dtype, how):
    fn = OPS[name]
    x = torch.tensor(X, dtype=getattr(torch, dtype), requires_grad=True)
    (want,) = torch.autograd.grad(fn(torch, x), [x], grad_outputs=torch.full_like(x, cotangent))

    def grad(x, g):
        return flame.autograd.grad(fn(flame, x), [x], grad_outputs=g)[0]

    step = grad if how == "eager" else flame.compile(grad)
    dt = getattr(flame, dtype)
    got = step(flame.tensor(X, dtype=dt, requires_grad=True), flame.tensor(np.full(X.shape, cotangent), dtype=dt))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12 if dtype == "float64" else 1e-6, atol=0)
    assert np.array_equal(np.isnan(got.numpy()), np.isnan(want.numpy()))
