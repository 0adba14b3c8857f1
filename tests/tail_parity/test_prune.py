"""nn.utils.prune against torch.nn.utils.prune in f64: the masks each method chooses (on weights without
ties; the random methods by the count of pruned entries), iterative pruning through PruningContainer,
global_unstructured over several modules, custom_from_mask, remove, is_pruned, the state_dict keys and
values, the errors, and training through a pruned module (weight_orig gets the masked gradient) eagerly
and inside @flame.compile."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.utils.prune as tprune

import flame
import flame.nn as nn
from flame.nn.utils import prune

_rng = np.random.default_rng(7)
W_LIN = _rng.standard_normal((6, 5))
B_LIN = _rng.standard_normal(6)
W_CONV = _rng.standard_normal((4, 3, 3, 3))
B_CONV = _rng.standard_normal(4)
X = _rng.standard_normal((3, 5))


def _linears():
    mine, theirs = nn.Linear(5, 6).double(), torch.nn.Linear(5, 6).double()
    mine.load_state_dict({"weight": flame.tensor(W_LIN), "bias": flame.tensor(B_LIN)})
    theirs.load_state_dict({"weight": torch.tensor(W_LIN), "bias": torch.tensor(B_LIN)})
    return mine, theirs


def _convs():
    mine, theirs = nn.Conv2d(3, 4, 3).double(), torch.nn.Conv2d(3, 4, 3).double()
    mine.load_state_dict({"weight": flame.tensor(W_CONV), "bias": flame.tensor(B_CONV)})
    theirs.load_state_dict({"weight": torch.tensor(W_CONV), "bias": torch.tensor(B_CONV)})
    return mine, theirs


def _same_state(mine, theirs):
    a, b = mine.state_dict(), theirs.state_dict()
    assert list(a) == list(b)
    for k in a:
        np.testing.assert_allclose(a[k].numpy(), b[k].detach().numpy(), rtol=1e-12, atol=1e-14, err_msg=k)


# (flame call, torch call), each given its library's prune namespace
METHODS = {
    "identity": lambda p, m: p.identity(m, "weight"),
    "l1_fraction": lambda p, m: p.l1_unstructured(m, "weight", amount=0.3),
    "l1_count": lambda p, m: p.l1_unstructured(m, "weight", amount=7),
    "l1_all": lambda p, m: p.l1_unstructured(m, "weight", amount=1.0),
    "l1_none": lambda p, m: p.l1_unstructured(m, "weight", amount=0),
    "ln_2_rows": lambda p, m: p.ln_structured(m, "weight", amount=0.5, n=2, dim=0),
    "ln_1_cols": lambda p, m: p.ln_structured(m, "weight", amount=2, n=1, dim=-1),
    "ln_inf": lambda p, m: p.ln_structured(m, "weight", amount=1, n=float("inf"), dim=1),
    "ln_fro": lambda p, m: p.ln_structured(m, "weight", amount=0.4, n="fro", dim=0),
}


def test_fro_over_more_than_two_dims_raises_as_torchs():
    mine, theirs = _convs()
    with pytest.raises(RuntimeError, match="dim must be a 2-tuple. Got 1 2 3"):
        tprune.ln_structured(theirs, "weight", amount=1, n="fro", dim=0)
    with pytest.raises(RuntimeError, match="dim must be a 2-tuple. Got 1 2 3"):
        prune.ln_structured(mine, "weight", amount=1, n="fro", dim=0)
    assert not prune.is_pruned(mine) and "weight" in dict(mine.named_parameters())


# torch.norm's 'fro' takes at most two dims: test_fro_over_more_than_two_dims_raises_as_torchs
@pytest.mark.parametrize("name,make", [(n, m) for n in METHODS for m in (_linears, _convs)
                                       if not (n == "ln_fro" and m is _convs)])
def test_masks_state_dict_and_gradients_match_torch(name, make):
    mine, theirs = make()
    assert METHODS[name](prune, mine) is mine
    METHODS[name](tprune, theirs)
    _same_state(mine, theirs)
    assert prune.is_pruned(mine) and "weight" not in dict(mine.named_parameters())
    x = _rng.standard_normal((2, 3, 5, 5)) if isinstance(mine, nn.Conv2d) else X
    y, ty = mine(flame.tensor(x)), theirs(torch.tensor(x))
    (y * y).sum().backward()
    (ty * ty).sum().backward()
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(mine.weight_orig.grad.numpy(), theirs.weight_orig.grad.numpy(), rtol=1e-10,
                               atol=1e-12)


def test_iterative_pruning_combines_masks_in_a_container():
    mine, theirs = _convs()
    for lib, m in ((prune, mine), (tprune, theirs)):
        lib.l1_unstructured(m, "weight", amount=0.2)
        lib.ln_structured(m, "weight", amount=1, n=2, dim=0)
        lib.l1_unstructured(m, "weight", amount=10)
        lib.ln_structured(m, "weight", amount=0.5, n=1, dim=1)
        lib.custom_from_mask(m, "bias", mask=(flame if lib is prune else torch).tensor([1.0, 0.0, 1.0, 1.0]))
    _same_state(mine, theirs)
    hook = next(h for h in mine._forward_pre_hooks.values() if h._tensor_name == "weight")
    assert isinstance(hook, prune.PruningContainer) and len(hook) == 4
    assert [type(h).__name__ for h in hook] == ["L1Unstructured", "LnStructured", "L1Unstructured", "LnStructured"]


def test_global_unstructured_over_several_modules_and_importance_scores():
    (a, ta), (b, tb) = _linears(), _convs()
    prune.l1_unstructured(a, "weight", amount=3)
    tprune.l1_unstructured(ta, "weight", amount=3)
    scores = _rng.standard_normal(B_CONV.shape)
    prune.global_unstructured([(a, "weight"), (b, "weight"), (b, "bias")], prune.L1Unstructured, amount=0.4,
                              importance_scores={(b, "bias"): flame.tensor(scores)})
    tprune.global_unstructured([(ta, "weight"), (tb, "weight"), (tb, "bias")], tprune.L1Unstructured, amount=0.4,
                               importance_scores={(tb, "bias"): torch.tensor(scores)})
    _same_state(a, ta)
    _same_state(b, tb)
    with pytest.raises(TypeError, match="Only \"unstructured\" PRUNING_TYPE"):
        prune.global_unstructured([(a, "weight")], prune.LnStructured, amount=1, n=2, dim=0)


def test_l1_with_importance_scores_and_prune_of_a_tensor():
    mine, theirs = _linears()
    scores = _rng.standard_normal(W_LIN.shape)
    prune.l1_unstructured(mine, "weight", 0.5, importance_scores=flame.tensor(scores))
    tprune.l1_unstructured(theirs, "weight", 0.5, importance_scores=torch.tensor(scores))
    _same_state(mine, theirs)
    got = prune.LnStructured(2, n=1, dim=0).prune(flame.tensor(W_LIN)).numpy()
    np.testing.assert_array_equal(got, tprune.LnStructured(2, n=1, dim=0).prune(torch.tensor(W_LIN)).numpy())


def test_random_methods_prune_torchs_counts_with_flames_generator():
    for amount in (0.3, 7):
        mine, theirs = _convs()
        flame.manual_seed(0)
        prune.random_unstructured(mine, "weight", amount)
        tprune.random_unstructured(theirs, "weight", amount)
        assert (mine.weight_mask.numpy() == 0).sum() == (theirs.weight_mask.numpy() == 0).sum()
    flame.manual_seed(0)
    first = prune.random_unstructured(_convs()[0], "weight", 0.5).weight_mask.numpy()
    flame.manual_seed(0)
    np.testing.assert_array_equal(prune.random_unstructured(_convs()[0], "weight", 0.5).weight_mask.numpy(), first)
    counts = set()
    for _ in range(20):
        mine, theirs = _convs()
        prune.random_structured(mine, "weight", amount=2, dim=0)
        tprune.random_structured(theirs, "weight", amount=2, dim=0)
        rows = mine.weight_mask.numpy().reshape(4, -1)
        assert (rows.min(1) == rows.max(1)).all()  # whole channels
        assert (rows[:, 0] == 0).sum() == (theirs.weight_mask.numpy().reshape(4, -1)[:, 0] == 0).sum() == 2
        counts.add(tuple(rows[:, 0]))
    assert len(counts) > 1  # the channels are drawn, not fixed


def test_remove_makes_the_pruning_permanent():
    mine, theirs = _linears()
    orig = mine.weight
    for lib, m in ((prune, mine), (tprune, theirs)):
        lib.l1_unstructured(m, "weight", 0.5)
        lib.remove(m, "weight")
    _same_state(mine, theirs)
    assert mine.weight is orig and isinstance(mine.weight, nn.Parameter)
    assert not prune.is_pruned(mine) and not hasattr(mine, "weight_mask")
    with pytest.raises(ValueError, match="Parameter 'weight' of module .* has to be pruned before pruning can be "
                                         "removed"):
        prune.remove(mine, "weight")


def test_a_pruned_state_dict_loads_into_a_pruned_torch_module_and_back():
    mine, theirs = _linears()
    prune.l1_unstructured(mine, "weight", 0.5)
    tprune.identity(theirs, "weight")
    theirs.load_state_dict({k: torch.tensor(v.numpy()) for k, v in mine.state_dict().items()})
    other = nn.Linear(5, 6).double()
    prune.identity(other, "weight")
    other.load_state_dict({k: flame.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    _same_state(other, theirs)
    np.testing.assert_allclose(other(flame.tensor(X)).numpy(), mine(flame.tensor(X)).numpy(), rtol=1e-12)


@pytest.mark.parametrize("compiled", [False, True])
def test_training_steps_through_a_pruned_module(compiled):
    mine, theirs = _linears()
    prune.l1_unstructured(mine, "weight", 0.4)
    tprune.l1_unstructured(theirs, "weight", 0.4)
    opt, topt = flame.optim.SGD(mine.parameters(), lr=0.1), torch.optim.SGD(theirs.parameters(), lr=0.1)

    def step(x):
        opt.zero_grad()
        loss = (mine(x) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    step = flame.compile(step) if compiled else step
    for _ in range(3):
        x = _rng.standard_normal((4, 5))
        topt.zero_grad()
        tloss = (theirs(torch.tensor(x)) ** 2).mean()
        tloss.backward()
        topt.step()
        np.testing.assert_allclose(step(flame.tensor(x)).item(), tloss.item(), rtol=1e-12)
        np.testing.assert_allclose(mine.weight_orig.grad.numpy(), theirs.weight_orig.grad.numpy(), rtol=1e-10,
                                   atol=1e-14)
        _same_state(mine, theirs)
    assert (mine.weight_orig.grad.numpy()[mine.weight_mask.numpy() == 0] == 0).all()
    np.testing.assert_allclose(mine(flame.tensor(X)).numpy(), theirs(torch.tensor(X)).detach().numpy(), rtol=1e-12)
    prune.remove(mine, "weight")  # the step runs on (a compiled one traces again with) the plain parameter
    tprune.remove(theirs, "weight")
    x = _rng.standard_normal((4, 5))
    topt.zero_grad()
    tloss = (theirs(torch.tensor(x)) ** 2).mean()
    tloss.backward()
    topt.step()
    np.testing.assert_allclose(step(flame.tensor(x)).item(), tloss.item(), rtol=1e-12)
    _same_state(mine, theirs)


def test_errors_as_torchs():
    mine, theirs = _linears()
    cases = [
        (lambda p, m: p.l1_unstructured(m, "weight", amount=-1), ValueError),
        (lambda p, m: p.l1_unstructured(m, "weight", amount=1.5), ValueError),
        (lambda p, m: p.l1_unstructured(m, "weight", amount="a"), TypeError),
        (lambda p, m: p.l1_unstructured(m, "weight", amount=31), ValueError),
        (lambda p, m: p.ln_structured(m, "bias", amount=1, n=2, dim=0), ValueError),
        (lambda p, m: p.ln_structured(m, "weight", amount=1, n=2, dim=2), IndexError),
    ]
    for call, kind in cases:
        with pytest.raises(kind) as theirs_err:
            call(tprune, theirs)
        with pytest.raises(kind) as mine_err:
            call(prune, mine)
        assert str(mine_err.value).replace("torch.Size(", "").replace(")", "") == \
            str(theirs_err.value).replace("torch.Size(", "").replace(")", "")
    # a failed pruning leaves the module as it was
    assert "weight" in dict(mine.named_parameters()) and not prune.is_pruned(mine)
