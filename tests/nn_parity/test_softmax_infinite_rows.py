"""softmax, log_softmax and cross_entropy of lines holding +inf, -inf and NaN against torch: a line whose
max is +inf, or that is all -inf, is NaN throughout (torch's (x - max) - log(sum(exp(x - max)))), not -inf
beside the infinity; a line with a -inf among finite values keeps its -inf. Values and gradients, every
float dtype, eagerly and inside @flame.compile."""

import numpy as np
import pytest
import torch

import flame
from tests.tensor_parity.common import FLAME_TO_TORCH

INF = np.inf
X = np.array([[1.0, INF, 2.0], [INF, INF, 0.0], [-INF, -INF, -INF], [-INF, 0.0, 1.0], [1, 2, 3], [INF, -INF, 1.0],
              [np.nan, 1, 2]])
LABELS = np.array([0, 1, 2, 0, 1, 2, 0])
W = np.arange(1.0, 22.0).reshape(7, 3) / 7
DTYPES = ["f64", "f32", "f16", "bf16"]


def _weights(shape):
    return W.reshape(-1)[: int(np.prod(shape))].reshape(shape)


def _run(L, fn, dtype, compiled=False):
    def body(x):
        return fn(L, x)

    if L is flame:
        def step(x):
            g = flame.grad(lambda a: (body(a) * flame.tensor(_weights(body(a).shape)).to(a.dtype)).sum())(x)
            return body(x), g
        x = flame.tensor(X).to(flame.ir.dtypes.dtype_of(dtype))
        y, g = (flame.compile(step) if compiled else step)(x)
        return y.float().numpy(), g.float().numpy()
    x = torch.tensor(X).to(FLAME_TO_TORCH[dtype]).requires_grad_()
    y = body(x)
    (y * torch.tensor(_weights(tuple(y.shape))).to(y.dtype)).sum().backward()
    return y.detach().float().numpy(), x.grad.float().numpy()


CASES = {
    "softmax": lambda L, x: L.softmax(x, 1),
    "log_softmax": lambda L, x: L.log_softmax(x, 1),
    "log_softmax dim 0": lambda L, x: x.log_softmax(0),
    "cross_entropy": lambda L, x: L.nn.functional.cross_entropy(x, L.tensor(LABELS), reduction="none"),
    "cross_entropy smoothed": lambda L, x: L.nn.functional.cross_entropy(x, L.tensor(LABELS), reduction="none",
                                                                         label_smoothing=0.1),
    "cross_entropy weighted": lambda L, x: L.nn.functional.cross_entropy(
        x, L.tensor(LABELS), weight=L.tensor([1.0, 2.0, 3.0]).to(x.dtype), reduction="none"),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_infinite_lines_match_torch(case, dtype, compiled):
    want, want_grad = _run(torch, CASES[case], dtype)
    got, got_grad = _run(flame, CASES[case], dtype, compiled)
    tol = {"f64": 1e-12, "f32": 1e-6, "f16": 2e-3, "bf16": 1e-2}[dtype]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol, equal_nan=True)
    np.testing.assert_allclose(got_grad, want_grad, rtol=tol, atol=tol, equal_nan=True)
