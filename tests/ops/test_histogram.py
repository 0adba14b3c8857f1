"""flame.histogram / Tensor.histogram against torch.histogram: a number of bins over the data's range or a
given one, a tensor of edges, weights, density, f32 and f64; its errors; inside @flame.compile a
TraceError (the data's range and the edges are values)."""

import numpy as np
import pytest
import torch

import flame

RNG = np.random.default_rng(0)
X = RNG.standard_normal((40, 25))
W = RNG.uniform(size=X.shape)
CASES = {
    "bins": (10, {}),
    "one bin": (1, {}),
    "range": (7, dict(range=(-1.0, 1.5))),
    "equal range": (4, dict(range=(0.5, 0.5))),
    "weight density": (5, dict(weight=True, density=True)),
    "edges": (np.array([-1.0, 0.0, 0.3, 2.0]), {}),
    "edges weight density": (np.array([-3.0, -0.5, 0.25, 0.5, 1.0]), dict(weight=True, density=True)),
}


def _call(lib, x, bins, kw, dt):
    kw = dict(kw)
    if kw.pop("weight", False):
        kw["weight"] = lib.tensor(W.astype(dt))
    if isinstance(bins, np.ndarray):
        bins = lib.tensor(bins.astype(dt))
    h, e = lib.histogram(lib.tensor(x.astype(dt)), bins, **kw)
    return h.numpy(), e.numpy()


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_histogram_matches_torch(case, dt):
    bins, kw = CASES[case]
    (h, e), (th, te) = _call(flame, X, bins, kw, dt), _call(torch, X, bins, kw, dt)
    assert h.dtype == th.dtype and e.dtype == te.dtype
    tol = 1e-12 if dt == np.float64 else 1e-5
    np.testing.assert_allclose(e, te, rtol=tol, atol=tol)  # flame.linspace's edges: within an ulp of torch's
    np.testing.assert_allclose(h, th, rtol=tol, atol=tol)


def test_method_empty_input_and_names():
    out = flame.tensor(X).histogram(3, range=(0.0, 1.0))
    want = torch.tensor(X).histogram(3, range=(0.0, 1.0))
    np.testing.assert_array_equal(out.hist.numpy(), want.hist.numpy())
    h, e = flame.histogram(flame.zeros(0, dtype=flame.float64), 4)
    th, te = torch.histogram(torch.zeros(0, dtype=torch.float64), 4)
    np.testing.assert_array_equal(h.numpy(), th.numpy())
    np.testing.assert_allclose(e.numpy(), te.numpy(), rtol=1e-15)


@pytest.mark.parametrize("args, kw, error, match", [
    ((0,), {}, flame.ArgumentError, "bins must be > 0"),
    ((3,), dict(range=(2.0, 1.0)), flame.ArgumentError, "min should not exceed max"),
    ((3,), dict(range=(0.0, float("inf"))), flame.ArgumentError, "not finite"),
    (("f32 edges",), {}, flame.DTypeError, "same dtype"),
])
def test_errors(args, kw, error, match):
    x = flame.tensor(X)
    if args == ("f32 edges",):
        args = (flame.tensor(np.array([0.0, 1.0], dtype=np.float32)),)
    with pytest.raises(error, match=match):
        flame.histogram(x, *args, **kw)
    with pytest.raises(flame.DTypeError, match="floating-point"):
        flame.histogram(flame.tensor(np.arange(3)), 3)


def test_inside_compile_raises_a_trace_error():
    @flame.compile
    def f(x):
        return flame.histogram(x, 4, range=(0.0, 1.0)).hist

    with pytest.raises(flame.TraceError, match="histogram"):
        f(flame.tensor(X))
