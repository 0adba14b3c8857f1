"""F.embedding / nn.Embedding with max_norm (norm_type), scale_grad_by_freq and padding_idx against
torch in f64: the output, the weight after the in-place renormalisation and the weight's gradient,
eagerly and inside @flame.compile (where the renormalised weight is an aliased output)."""

import numpy as np
import pytest
import torch

import flame
import flame.nn.functional as F

RNG = np.random.default_rng(0)
WEIGHT = RNG.standard_normal((7, 3)) * 2
INDEX = np.array([[0, 2, 2], [5, 0, 6]])
GRAD = RNG.standard_normal((2, 3, 3))
CASES = {
    "max_norm": dict(max_norm=1.0),
    "max_norm l1 freq": dict(max_norm=1.5, norm_type=1.0, scale_grad_by_freq=True),
    "freq": dict(scale_grad_by_freq=True),
    "max_norm inf": dict(max_norm=0.5, norm_type=float("inf")),
    "padding freq max_norm": dict(padding_idx=2, max_norm=1.0, scale_grad_by_freq=True),
}


def _torch(kw):
    w = torch.tensor(WEIGHT, requires_grad=True)
    y = torch.nn.functional.embedding(torch.tensor(INDEX), w, **kw)
    (y * torch.tensor(GRAD)).sum().backward()
    return y.detach().numpy(), w.detach().numpy(), w.grad.numpy()


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("compiled", [False, True])
def test_functional_matches_torch(case, compiled):
    kw = CASES[case]
    w = flame.nn.Parameter(flame.tensor(WEIGHT))

    def step(i, g):
        y = F.embedding(i, w, **kw)
        (y * g).sum().backward()
        return y

    y = (flame.compile(step) if compiled else step)(flame.tensor(INDEX), flame.tensor(GRAD))
    for got, want in zip((y.numpy(), w.numpy(), w.grad.numpy()), _torch(kw)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("compiled", [False, True])
def test_module_renormalises_its_weight_each_call(compiled):
    """Each call renormalises the rows it looks up (the weight keeps them); a replay does it again."""
    kw = dict(max_norm=1.0, padding_idx=0, scale_grad_by_freq=True)
    torch.manual_seed(0)
    t = torch.nn.Embedding(7, 3, **kw).double()
    m = flame.nn.Embedding(7, 3, dtype=flame.float64, **kw)
    with flame.no_grad():
        m.weight.copy_(flame.tensor(t.weight.detach().numpy() * 3))
    with torch.no_grad():
        t.weight.mul_(3)

    def step(i):
        m.weight.grad = None
        m(i).square().sum().backward()

    run = flame.compile(step) if compiled else step
    for idx in (INDEX, (INDEX[::-1] + 1) % 7):
        t.weight.grad = None
        t(torch.tensor(idx)).square().sum().backward()
        run(flame.tensor(idx))
        np.testing.assert_allclose(m.weight.numpy(), t.weight.detach().numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(m.weight.grad.numpy(), t.weight.grad.numpy(), rtol=1e-12, atol=1e-12)
    assert repr(m) == repr(t)


def test_sparse_and_bad_padding_idx_raise():
    w = flame.tensor(WEIGHT)
    with pytest.raises(NotImplementedError, match="sparse"):
        F.embedding(flame.tensor(INDEX), w, sparse=True)
    with pytest.raises(ValueError, match="padding_idx"):
        F.embedding(flame.tensor(INDEX), w, padding_idx=7)


def test_detach_inside_a_trace_reads_a_written_parameter():
    """w.detach() after w was written in place inside @flame.compile holds the written values."""
    w = flame.nn.Parameter(flame.ones(3, dtype=flame.float64))

    @flame.compile
    def f(x):
        with flame.no_grad():
            w.copy_(w * 2)
        return w.detach() + x

    np.testing.assert_array_equal(f(flame.zeros(3, dtype=flame.float64)).numpy(), [2.0] * 3)
    np.testing.assert_array_equal(f(flame.zeros(3, dtype=flame.float64)).numpy(), [4.0] * 3)
