"""nn.AdaptiveLogSoftmaxWithLoss against PyTorch's in float64 (its state_dict loaded as it is): output, loss,
log_prob and predict, the gradients of the input and every parameter, eagerly and compiled; the errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn

MODES = ("eager", "compiled")


def _pair(*args, **kw):
    torch.manual_seed(len(args) + len(kw))
    theirs = torch.nn.AdaptiveLogSoftmaxWithLoss(*args, dtype=torch.float64, **kw)
    mine = nn.AdaptiveLogSoftmaxWithLoss(*args, dtype=flame.float64, **kw)
    assert list(mine.state_dict()) == list(theirs.state_dict())
    mine.load_state_dict({k: flame.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    return mine, theirs


def _run(mode, fn, *args):
    return fn(*args) if mode == "eager" else flame.compile(fn)(*args)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("head_bias", [False, True])
@pytest.mark.parametrize("batched", [True, False])
def test_forward_and_gradients_match_pytorch(mode, head_bias, batched):
    mine, theirs = _pair(16, 20, [4, 9, 15], div_value=2.0, head_bias=head_bias)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((7, 16) if batched else (16,))
    t = rng.integers(0, 20, 7) if batched else np.array(17)
    if batched:
        t[:4] = [0, 5, 12, 19]  # every cluster reached
    ct = rng.standard_normal(7 if batched else ())
    tx = torch.tensor(x, requires_grad=True)
    tout, tloss = theirs(tx, torch.tensor(t))
    ((tout * torch.tensor(ct)).sum() + 3 * tloss).backward()

    def body(x, t):
        out, loss = mine(x, t)
        ((out * flame.tensor(ct)).sum() + 3 * loss).backward()
        return out, loss

    fx = flame.tensor(x, requires_grad=True)
    res = _run(mode, body, fx, flame.tensor(t))
    out, loss = res
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(loss.numpy(), tloss.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(fx.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    grads = dict(theirs.named_parameters())
    for name, p in mine.named_parameters():  # a tail no row reaches: PyTorch's grad None, here zeros
        want = grads[name].grad
        want = np.zeros(tuple(p.shape)) if want is None else want.numpy()
        np.testing.assert_allclose(p.grad.numpy(), want, rtol=1e-10, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("mode", MODES)
def test_log_prob_and_predict_match_pytorch(mode):
    mine, theirs = _pair(8, 12, [3, 7], 2.0)
    x = np.random.default_rng(4).standard_normal((9, 8)) * 3
    lp, pred = _run(mode, lambda x: (mine.log_prob(x), mine.predict(x)), flame.tensor(x))
    with torch.no_grad():
        np.testing.assert_allclose(lp.numpy(), theirs.log_prob(torch.tensor(x)).numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(pred.numpy(), theirs.predict(torch.tensor(x)).numpy())


def test_output_is_a_named_tuple_and_repr():
    mine, theirs = _pair(8, 12, [3, 7], 2.0)
    res = mine(flame.tensor(np.zeros((2, 8))), flame.tensor(np.array([0, 11])))
    assert type(res).__name__ == "_ASMoutput" and res._fields == ("output", "loss")
    assert [tuple(p.shape) for p in mine.parameters()] == [tuple(p.shape) for p in theirs.parameters()]
    assert repr(mine).splitlines()[0] == repr(theirs).splitlines()[0]


def test_errors_match_pytorch():
    mine, theirs = _pair(8, 12, [3, 7], 2.0)
    x = np.zeros((3, 8))
    cases = [(x, np.array([0, 1, 12])), (x, np.array([0, -1, 2])), (x, np.array([0, 1])),
             (np.zeros((3, 2, 8)), np.array([0, 1, 2])), (x, np.array(1)), (x, np.zeros((3, 1), np.int64))]
    for xa, ta in cases:
        with pytest.raises(RuntimeError) as theirs_err:
            theirs(torch.tensor(xa), torch.tensor(ta))
        with pytest.raises(RuntimeError) as mine_err:
            mine(flame.tensor(xa), flame.tensor(ta))
        want = str(theirs_err.value).strip().replace("torch.Size(", "").replace("])", "]")
        assert want in str(mine_err.value), (want, str(mine_err.value))
    for kw in ({"cutoffs": []}, {"cutoffs": [3, 3]}, {"cutoffs": [7, 3]}, {"cutoffs": [12]}, {"cutoffs": [0, 3]}):
        with pytest.raises(ValueError) as theirs_err:
            torch.nn.AdaptiveLogSoftmaxWithLoss(8, 12, **kw)
        with pytest.raises(ValueError, match=str(theirs_err.value)[:30]):
            nn.AdaptiveLogSoftmaxWithLoss(8, 12, **kw)
