"""What an optimizer accepts as a parameter group and as hyperparameters, against torch.optim: the
exception type torch raises (flame's message names the argument), or acceptance where torch accepts."""

from __future__ import annotations

import warnings

import pytest
import torch

import flame
import flame.nn as nn


def _outcome(fn):
    """None where fn() returns, else the type of the exception it raises."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn()
    except Exception as e:  # noqa: BLE001 (the oracle's exception type is the point)
        return type(e)
    return None


def _same_outcome(torch_fn, flame_fn, match: str | None = None) -> None:
    expected = _outcome(torch_fn)
    if expected is None:
        flame_fn()
        return
    with pytest.raises(expected, match=match):
        flame_fn()


def _params(lib, n: int = 2):
    make = torch.nn.Parameter if lib is torch else nn.Parameter
    return [make(lib.zeros(k + 2)) for k in range(n)]


def test_a_set_of_parameters_in_a_group_is_refused_as_torch():
    """A set's order (which numbers the parameters in state_dict) changes between runs: torch refuses it
    in a group, naming the set; flame took it, so a checkpoint could load one parameter's state into another."""
    tps, fps = _params(torch), _params(flame)
    _same_outcome(lambda: torch.optim.SGD([{"params": set(tps)}], lr=0.1),
                  lambda: flame.optim.SGD([{"params": set(fps)}], lr=0.1), match="ordered collections.*set")
    topt, fopt = torch.optim.Adam(tps[:1]), flame.optim.Adam(fps[:1])
    _same_outcome(lambda: topt.add_param_group({"params": {tps[1]}}),
                  lambda: fopt.add_param_group({"params": {fps[1]}}), match="Please use a list instead")
    assert len(fopt.param_groups) == 1 and len(fopt.state) == 1
    # a set of the whole parameter list (not of a group's) is taken, as torch takes it
    _same_outcome(lambda: torch.optim.SGD(set(tps), lr=0.1), lambda: flame.optim.SGD(set(fps), lr=0.1))


def test_a_group_that_is_not_a_dict_is_refused_as_torch():
    tps, fps = _params(torch), _params(flame)
    topt, fopt = torch.optim.SGD(tps[:1], lr=0.1), flame.optim.SGD(fps[:1], lr=0.1)
    _same_outcome(lambda: topt.add_param_group([tps[1]]), lambda: fopt.add_param_group([fps[1]]),
                  match="param_group must be a dict, but got <class 'list'>")
    _same_outcome(lambda: torch.optim.SGD([{"params": tps[:1]}, tps[1:]], lr=0.1),
                  lambda: flame.optim.SGD([{"params": fps[:1]}, fps[1:]], lr=0.1), match="param_group must be a dict")


NAN = float("nan")
# each option torch's namesake checks as `not 0.0 <= value` (SGD's as `value < 0.0`, which takes NaN)
NAN_OPTIONS = [
    ("SGD", "lr"), ("SGD", "momentum"), ("SGD", "weight_decay"),
    ("Adam", "lr"), ("Adam", "eps"), ("Adam", "weight_decay"), ("AdamW", "lr"), ("AdamW", "eps"),
    ("Adamax", "eps"), ("Adamax", "weight_decay"), ("NAdam", "eps"), ("NAdam", "weight_decay"),
    ("NAdam", "momentum_decay"), ("RAdam", "eps"), ("RAdam", "weight_decay"),
    ("RMSprop", "lr"), ("RMSprop", "eps"), ("RMSprop", "momentum"), ("RMSprop", "alpha"), ("RMSprop", "weight_decay"),
    ("Adagrad", "lr"), ("Adagrad", "lr_decay"), ("Adagrad", "eps"), ("Adagrad", "weight_decay"),
    ("Adagrad", "initial_accumulator_value"), ("Adadelta", "lr"), ("Adadelta", "eps"), ("Adadelta", "weight_decay"),
    ("ASGD", "lr"), ("ASGD", "weight_decay"), ("Rprop", "lr"), ("Adafactor", "lr"), ("Adafactor", "weight_decay"),
    ("Adafactor", "beta2_decay"), ("Adafactor", "d"), ("LBFGS", "lr"),
]


@pytest.mark.parametrize("name,option", NAN_OPTIONS, ids=[f"{n}-{o}" for n, o in NAN_OPTIONS])
def test_a_nan_option_is_refused_where_torch_refuses_it(name, option):
    """A NaN learning rate or option (a schedule's or a config's bug) turns every parameter into NaN at
    the first step; torch's checks refuse it (all but SGD's), naming the option."""
    tp, fp = _params(torch, 1), _params(flame, 1)
    _same_outcome(lambda: getattr(torch.optim, name)(tp, **{option: NAN}),
                  lambda: getattr(flame.optim, name)(fp, **{option: NAN}),
                  match=f"{'learning rate' if option == 'lr' else option}.*nan")


@pytest.mark.parametrize("eps", [(NAN, 1e-3), (None, NAN)])
def test_a_nan_adafactor_eps_is_refused_as_torch(eps):
    _same_outcome(lambda: torch.optim.Adafactor(_params(torch, 1), eps=eps),
                  lambda: flame.optim.Adafactor(_params(flame, 1), eps=eps), match="eps")


# (optimizer, its arguments with "T:<value>" for a tensor of that value), as torch.optim takes or refuses them
TENSOR_OPTIONS = [
    ("SGD", dict(lr="T:[0.1, 0.2]")), ("RMSprop", dict(lr="T:[0.1, 0.2]")), ("Adagrad", dict(lr="T:[[0.1]]")),
    ("NAdam", dict(lr="T:[0.1, 0.2]")), ("Adam", dict(lr="T:[0.1, 0.2]")), ("Adam", dict(lr="T:[0.1]")),
    ("Adam", dict(lr="T:0.1", foreach=True)), ("AdamW", dict(lr="T:0.1", foreach=True)),
    ("Adam", dict(lr="T:0.1", foreach=False)), ("SGD", dict(lr="T:0.1", foreach=True)),
    ("Adam", dict(betas=("T:0.9", 0.99))), ("AdamW", dict(betas=(0.9, "T:0.99"))),
    ("Adam", dict(betas=("T:0.9", "T:0.99"))), ("Adam", dict(betas=("T:[0.9]", "T:0.99"))),
    ("Adam", dict(betas=("T:0.9", "T:[0.9, 0.99]"))), ("Adam", dict(betas=("T:0.9", "T:0.99"), foreach=True)),
    ("Adam", dict(betas=(0, 0.99))), ("Adam", dict(betas=[0.8, 0.9])),
]


def _resolve(lib, value):
    if isinstance(value, str) and value.startswith("T:"):
        return lib.tensor(eval(value[2:]))  # noqa: S307 (the table's literals)
    if isinstance(value, (tuple, list)):
        return type(value)(_resolve(lib, v) for v in value)
    return value


@pytest.mark.parametrize("name,kw", TENSOR_OPTIONS, ids=[f"{n}-{kw}" for n, kw in TENSOR_OPTIONS])
def test_tensor_rates_and_betas_are_checked_as_torch(name, kw):
    """A rate or betas held as tensors: one element each, betas both floats or both tensors, and (Adam,
    AdamW) none with foreach=True, as torch's constructors check."""
    tps, fps = _params(torch, 1), _params(flame, 1)
    _same_outcome(lambda: getattr(torch.optim, name)(tps, **{k: _resolve(torch, v) for k, v in kw.items()}),
                  lambda: getattr(flame.optim, name)(fps, **{k: _resolve(flame, v) for k, v in kw.items()}),
                  match="lr|betas")


@pytest.mark.parametrize("layout", ["groups", "sizes"])
def test_a_state_dict_of_another_group_layout_is_refused_as_torch(layout):
    """torch raises a ValueError (flame's CheckpointError is one too, here), and nothing is loaded."""
    def pair(lib):
        a, b = _params(lib)
        saved = lib.optim.SGD([a, b], lr=0.3, momentum=0.5)
        mine = (lib.optim.SGD([{"params": [a]}, {"params": [b]}], lr=0.1) if layout == "groups"
                else lib.optim.SGD([a], lr=0.1))
        return saved.state_dict(), mine

    (tsd, topt), (fsd, fopt) = pair(torch), pair(flame)
    _same_outcome(lambda: topt.load_state_dict(tsd), lambda: fopt.load_state_dict(fsd), match="saved parameter groups")
    with pytest.raises(flame.errors.CheckpointError):
        fopt.load_state_dict(fsd)
    assert fopt.param_groups[0]["lr"] == 0.1
