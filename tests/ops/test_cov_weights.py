"""flame.cov with fweights / aweights and correction against torch.cov in f64: values and the gradients of
the input and of aweights, eagerly and inside @flame.compile; torch's checks of the weights, its 0-d
result for one variable and its normaliser of 0 (with a warning) when the degrees of freedom run out;
weights summing to zero raise, as torch's (eagerly: inside @flame.compile they are not known)."""

import warnings

import numpy as np
import pytest
import torch

import flame

RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 6))
FW = np.array([1, 2, 0, 3, 1, 1])
AW = RNG.uniform(0.1, 2.0, 6)
CASES = {
    "plain": dict(),
    "fweights": dict(fweights=FW),
    "aweights": dict(aweights=AW),
    "both": dict(fweights=FW, aweights=AW),
    "both correction 0": dict(fweights=FW, aweights=AW, correction=0),
    "aweights correction 2": dict(aweights=AW, correction=2),
}


def _torch(x, kw):
    t = torch.tensor(x, requires_grad=True)
    aw = torch.tensor(kw["aweights"], requires_grad=True) if "aweights" in kw else None
    fw = torch.tensor(kw["fweights"]) if "fweights" in kw else None
    y = torch.cov(t, correction=kw.get("correction", 1), fweights=fw, aweights=aw)
    g = torch.tensor(np.cos(np.arange(y.numel())).reshape(y.shape))
    (y * g).sum().backward()
    return y.detach().numpy(), t.grad.numpy(), None if aw is None else aw.grad.numpy()


def _flame(x, kw, compiled):
    def step(t, aw, fw):
        y = flame.cov(t, correction=kw.get("correction", 1), fweights=fw, aweights=aw)
        g = flame.tensor(np.cos(np.arange(y.numel())).reshape(y.shape))
        (y * g).sum().backward()
        return y

    t = flame.tensor(x, requires_grad=True)
    aw = flame.tensor(kw["aweights"], requires_grad=True) if "aweights" in kw else None
    fw = flame.tensor(kw["fweights"]) if "fweights" in kw else None
    y = (flame.compile(step) if compiled else step)(t, aw, fw)
    return y.numpy(), t.grad.numpy(), None if aw is None else aw.grad.numpy()


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("x", [X, X[0]], ids=["2-D", "1-D"])
def test_cov_matches_torch(case, compiled, x):
    for got, want in zip(_flame(x, CASES[case], compiled), _torch(x, CASES[case])):
        if want is None:
            assert got is None
        else:
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_one_variable_is_0_d_and_no_degrees_of_freedom_divide_by_0():
    assert flame.cov(flame.tensor(X[:1])).shape == ()
    for kw in (dict(correction=6), dict(fweights=np.array([1, 0, 0, 0, 0, 0]))):
        tkw = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
        fkw = {k: flame.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            want = torch.cov(torch.tensor(X), **tkw).numpy()
            got = flame.cov(flame.tensor(X), **fkw).numpy()
        assert sum("degrees of freedom" in str(w.message) for w in caught) == 2
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(got[~np.isnan(got)], want[~np.isnan(want)])


@pytest.mark.parametrize("kw, error, match", [
    (dict(fweights=np.array([1.0] * 6)), flame.DTypeError, "integral"),
    (dict(aweights=np.array([1] * 6)), flame.DTypeError, "floating point"),
    (dict(fweights=np.array([[1] * 6])), flame.ShapeError, "one or fewer"),
    (dict(fweights=np.array([1] * 5)), flame.ShapeError, "same numel"),
    (dict(fweights=np.array([1, -1, 1, 1, 1, 1])), flame.ArgumentRangeError, "cannot be negative"),
    (dict(aweights=np.array([1.0, -1, 1, 1, 1, 1])), flame.ArgumentRangeError, "cannot be negative"),
    (dict(fweights=np.zeros(6, np.int64)), flame.ArgumentRangeError, "weights sum to zero"),
    (dict(aweights=np.zeros(6)), flame.ArgumentRangeError, "weights sum to zero"),
    (dict(fweights=np.array([0, 1, 0, 0, 0, 0]), aweights=np.array([1.0, 0, 1, 1, 1, 1])), flame.ArgumentRangeError,
     "weights sum to zero"),
])
def test_bad_weights_raise_as_torch(kw, error, match):
    """Of torch's exception type (a RuntimeError; flame's error subclasses it), with its message."""
    assert issubclass(error, RuntimeError)
    with pytest.raises(RuntimeError, match=match):
        torch.cov(torch.tensor(X), **{k: torch.tensor(v) for k, v in kw.items()})
    with pytest.raises(error, match=match):
        flame.cov(flame.tensor(X), **{k: flame.tensor(v) for k, v in kw.items()})
