"""The errors of weight_norm / spectral_norm / orthogonal (hook and parametrization forms) against
torch.nn.utils's: the same exception type and message for a dim outside the weight, a missing tensor,
and a missing hook to remove."""

from __future__ import annotations

import warnings

import pytest
import torch

import flame

_CASES = {
    "old weight_norm dim out of range": lambda lib, u: u.weight_norm(lib.nn.Linear(2, 2), dim=5),
    "old weight_norm dim below range": lambda lib, u: u.weight_norm(lib.nn.Conv1d(2, 2, 3), dim=-4),
    "weight_norm dim out of range": lambda lib, u: u.parametrizations.weight_norm(lib.nn.Linear(2, 2), dim=2),
    "old weight_norm no such parameter": lambda lib, u: u.weight_norm(lib.nn.Linear(2, 2), name="foo"),
    "old spectral_norm no such parameter": lambda lib, u: u.spectral_norm(lib.nn.Linear(2, 2), name="foo"),
    "old remove_weight_norm without one": lambda lib, u: u.remove_weight_norm(lib.nn.Linear(2, 2)),
    "old remove_spectral_norm without one": lambda lib, u: u.remove_spectral_norm(lib.nn.Linear(2, 2)),
    "spectral_norm no such tensor": lambda lib, u: u.parametrizations.spectral_norm(lib.nn.Linear(2, 2), name="foo"),
    "orthogonal no such tensor": lambda lib, u: u.parametrizations.orthogonal(lib.nn.Linear(2, 2), name="foo"),
}


def _raised(lib, build):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        with pytest.raises(Exception) as caught:
            build(lib, lib.nn.utils)
    return caught.value


@pytest.mark.parametrize("build", _CASES.values(), ids=_CASES.keys())
def test_norm_utils_errors_as_torch(build):
    expected, got = _raised(torch, build), _raised(flame, build)
    assert isinstance(got, type(expected)), (type(got), type(expected))
    assert str(got) == str(expected)
