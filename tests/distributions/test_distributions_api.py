"""flame.distributions' face: reached as flame.distributions (as torch.distributions), its classes and
functions take torch's parameters in torch's order, and its constraints print as torch's."""

from __future__ import annotations

import inspect

import pytest
import torch.distributions as TD

import flame
import flame.distributions as FD

METHODS = (
    "sample",
    "rsample",
    "log_prob",
    "cdf",
    "icdf",
    "entropy",
    "expand",
    "enumerate_support",
    "log_abs_det_jacobian",
)
NAMES = [n for n in FD.__all__ if n not in ("constraints", "transforms")]


def _params(fn):
    return [(p.name, p.kind) for p in inspect.signature(fn).parameters.values()]


def test_flame_distributions_is_the_package():
    assert flame.distributions is FD
    from flame import distributions

    assert distributions.Normal is FD.Normal and FD.constraints.positive is not None


@pytest.mark.parametrize("name", NAMES)
def test_signatures_are_torchs(name):
    mine, theirs = getattr(FD, name), getattr(TD, name, None) or getattr(TD.transforms, name)
    assert _params(mine) == _params(theirs)
    for method in METHODS:
        if isinstance(mine, type) and hasattr(theirs, method) and hasattr(mine, method):
            assert _params(getattr(mine, method)) == _params(getattr(theirs, method)), method


@pytest.mark.parametrize(
    "name",
    [
        "real",
        "positive",
        "nonnegative",
        "unit_interval",
        "simplex",
        "boolean",
        "one_hot",
        "real_vector",
        "lower_cholesky",
        "nonnegative_integer",
    ],
)
def test_constraints_print_as_torchs(name):
    assert repr(getattr(FD.constraints, name)) == repr(getattr(TD.constraints, name))


@pytest.mark.parametrize(
    "make",
    [
        lambda C: C.interval(0.0, 2.5),
        lambda C: C.greater_than(1.5),
        lambda C: C.integer_interval(0, 4),
        lambda C: C.half_open_interval(-1.0, 1.0),
        lambda C: C.independent(C.real, 2),
        lambda C: C.less_than(3.0),
    ],
)
def test_parameterised_constraints_print_and_check_as_torchs(make):
    import torch

    assert repr(make(FD.constraints)) == repr(make(TD.constraints))
    values = [[-1.0, 0.0, 0.5], [2.5, 3.0, float("nan")]]
    want = make(TD.constraints).check(torch.tensor(values))
    got = make(FD.constraints).check(flame.tensor(values))
    assert got.numpy().tolist() == want.numpy().tolist()
