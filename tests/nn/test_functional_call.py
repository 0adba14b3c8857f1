"""flame.func.functional_call (and flame.nn.utils.stateless.functional_call) against torch.func's in
f64: outputs and the gradients that reach the given tensors, eagerly and inside @flame.compile; the
module's own tensors put back afterwards (also when the call raises); buffers replaced (BatchNorm's
running statistics updated in the given tensors); several dicts; tied weights; strict; the errors
torch raises too."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn
from flame.func import functional_call

RTOL = 1e-12


def _models():
    torch.manual_seed(0)
    tm = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    tm = tm.double()
    fm = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Tanh(), nn.Linear(4, 2)).double()
    fm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    return fm, tm


def _values(tm, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(tuple(v.shape)) for k, v in tm.named_parameters()}


X = np.random.default_rng(9).standard_normal((5, 3))


def test_values_and_gradients_eager():
    fm, tm = _models()
    vals = _values(tm)
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in vals.items()}
    fp = {k: flame.tensor(v, requires_grad=True) for k, v in vals.items()}
    before = {k: v.numpy().copy() for k, v in fm.state_dict().items()}
    to = torch.func.functional_call(tm, tp, (torch.tensor(X),))
    fo = functional_call(fm, fp, (flame.tensor(X),))
    np.testing.assert_allclose(fo.numpy(), to.detach().numpy(), rtol=RTOL)
    to.pow(2).sum().backward()
    fo.pow(2).sum().backward()
    for k in tp:
        np.testing.assert_allclose(fp[k].grad.numpy(), tp[k].grad.numpy(), rtol=RTOL, atol=1e-14, err_msg=k)
    # the module's own parameters are back and got no gradient; its buffers took the batch's statistics
    assert all(p.grad is None for p in fm.parameters())
    for k, v in fm.state_dict().items():
        if "running" in k or "num_batches" in k:
            np.testing.assert_allclose(v.numpy(), tm.state_dict()[k].numpy(), rtol=RTOL, err_msg=k)
        else:
            np.testing.assert_array_equal(v.numpy(), before[k], err_msg=k)


def test_values_and_gradients_compiled():
    fm, tm = _models()
    vals = _values(tm, 1)
    names = list(vals)

    @flame.compile
    def step(x, *ps):
        out = functional_call(fm, dict(zip(names, ps)), x)
        loss = out.pow(2).sum()
        return (loss, *flame.autograd.grad(loss, list(ps)))

    fm.eval()
    tm.eval()
    for seed in (1, 2):  # a second call replays with other tensors
        vals = _values(tm, seed)
        tp = {k: torch.tensor(v, requires_grad=True) for k, v in vals.items()}
        tl = torch.func.functional_call(tm, tp, torch.tensor(X)).pow(2).sum()
        tgs = torch.autograd.grad(tl, list(tp.values()))
        fl, *fgs = step(flame.tensor(X), *(flame.tensor(v, requires_grad=True) for v in vals.values()))
        np.testing.assert_allclose(fl.item(), tl.item(), rtol=RTOL)
        for name, fg, tg in zip(names, fgs, tgs):
            np.testing.assert_allclose(fg.numpy(), tg.numpy(), rtol=RTOL, atol=1e-14, err_msg=name)


def test_buffers_and_several_dicts():
    """Given buffers are used and updated in place (BatchNorm in training mode), as torch's; a sequence
    of dicts with distinct keys is one map."""
    fm, tm = _models()
    vals = _values(tm, 3)
    bufs = {"1.running_mean": np.full(4, 0.5), "1.running_var": np.full(4, 2.0)}
    fb = {k: flame.tensor(v) for k, v in bufs.items()}
    tb = {k: torch.tensor(v) for k, v in bufs.items()}
    fo = functional_call(fm, ({k: flame.tensor(v) for k, v in vals.items()}, fb), flame.tensor(X))
    to = torch.func.functional_call(tm, ({k: torch.tensor(v) for k, v in vals.items()}, tb), torch.tensor(X))
    np.testing.assert_allclose(fo.numpy(), to.detach().numpy(), rtol=RTOL)
    for k in bufs:
        np.testing.assert_allclose(fb[k].numpy(), tb[k].numpy(), rtol=RTOL, err_msg=k)
    np.testing.assert_array_equal(fm[1].running_mean.numpy(), np.zeros(4))  # the module's own: untouched
    fm.eval()
    tm.eval()
    fo = functional_call(fm, fb, flame.tensor(X))
    to = torch.func.functional_call(tm, tb, torch.tensor(X))
    np.testing.assert_allclose(fo.numpy(), to.detach().numpy(), rtol=RTOL)


class _Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.foo = nn.Parameter(flame.ones((), dtype=flame.float64))
        self.foo_tied = self.foo

    def forward(self, x):
        return x + self.foo + self.foo_tied


def test_tied_weights():
    m = _Tied()
    zero = flame.zeros((), dtype=flame.float64)
    assert functional_call(m, {"foo": zero}, zero).item() == 0.0
    assert functional_call(m, {"foo": zero}, zero, tie_weights=False).item() == 1.0
    assert functional_call(m, {"foo": zero, "foo_tied": zero}, kwargs={"x": zero}).item() == 0.0
    with pytest.raises(ValueError, match=r"functional_call got multiple values for keys \['foo', 'foo_tied'\]"):
        functional_call(m, {"foo": zero, "foo_tied": flame.zeros((), dtype=flame.float64)}, zero)
    assert m.foo is m.foo_tied and m.foo.item() == 1.0


def test_strict_and_errors_as_torch():
    fm, tm = _models()
    for call, m, lib in ((functional_call, fm, flame), (torch.func.functional_call, tm, torch)):
        x = lib.tensor(X)
        with pytest.raises(RuntimeError, match=r"Error\(s\) in reparametrizing for Sequential:\n\tUnexpected key"
                                               r"\(s\): 'nope'.\n\tMissing key\(s\): '0.bias', "):
            call(m, {"0.weight": lib.zeros(4, 3, dtype=lib.float64), "nope": lib.zeros(1)}, x, strict=True)
        with pytest.raises(ValueError, match=r"\['0.weight'\] appeared in multiple dictionaries"):
            call(m, ({"0.weight": lib.zeros(4, 3)}, {"0.weight": lib.zeros(4, 3)}), x)
        with pytest.raises(ValueError, match="Expected parameter_and_buffer_dicts to be a dict"):
            call(m, 3, x)
    # the module's tensors are put back when the call raises
    w = fm[0].weight
    with pytest.raises(flame.errors.ShapeError):
        functional_call(fm, {"0.weight": flame.zeros(4, 5, dtype=flame.float64)}, flame.tensor(X))
    assert fm[0].weight is w


def test_nn_utils_stateless_warns_as_torch():
    fm, _ = _models()
    with pytest.warns(FutureWarning, match="torch.func.functional_call"):
        out = nn.utils.stateless.functional_call(fm, {}, flame.tensor(X))
    fm.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(functional_call(fm, {}, (flame.tensor(X),)).numpy(), fm(flame.tensor(X)).numpy())
    assert out.shape == (5, 2)


@pytest.mark.parametrize("name", ["foo.bar", "0.foo.x", "0.weight.x"])
def test_a_name_through_no_submodule_raises_as_torch(name):
    """A dotted name whose path leaves the modules: torch's AttributeError for a missing attribute, its
    TypeError for one that is not a module."""
    tm, fm = torch.nn.Sequential(torch.nn.Linear(2, 2)), nn.Sequential(nn.Linear(2, 2))
    with pytest.raises((AttributeError, TypeError)) as expected:
        torch.func.functional_call(tm, {name: torch.ones(1)}, (torch.ones(1, 2),))
    with pytest.raises(expected.type) as got:
        functional_call(fm, {name: flame.ones(1)}, (flame.ones(1, 2),))
    if expected.type is AttributeError:
        assert str(got.value) == str(expected.value)
    else:  # the message shows the parameter's repr, which differs between the libraries
        assert str(got.value).startswith("submodule `0.weight`: ")
        assert str(got.value).endswith(" is not an instance of flame.nn.Module")
