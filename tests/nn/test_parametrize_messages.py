"""flame.nn.utils.parametrize's ValueErrors carry torch.nn.utils.parametrize's messages (first line)."""

from __future__ import annotations

import pytest
import torch

import flame
import flame.nn as nn


def _classes(lib):
    class Crop(lib.nn.Module):
        def forward(self, x):
            return x[:2]

    class Double(lib.nn.Module):
        def forward(self, x):
            return 2 * x

    class BadInverse(lib.nn.Module):
        def forward(self, x):
            return x

        def right_inverse(self, x):
            return x[:2]

    return Crop, Double, BadInverse


def _first(lib, tz, build):
    with pytest.raises(ValueError) as caught:
        build(lib, tz, lib.nn.Linear(3, 3), *_classes(lib))
    return str(caught.value).split("\n")[0]


@pytest.mark.parametrize("build", [
    lambda lib, tz, m, crop, double, bad: tz.register_parametrization(m, "weight", crop()),
    lambda lib, tz, m, crop, double, bad: tz.register_parametrization(
        tz.register_parametrization(m, "weight", double()), "weight", crop()),
    lambda lib, tz, m, crop, double, bad: tz.register_parametrization(
        tz.register_parametrization(m, "weight", double()), "weight", bad()),
    lambda lib, tz, m, crop, double, bad: tz.register_parametrization(m, "foo", double()),
    lambda lib, tz, m, crop, double, bad: tz.remove_parametrizations(m, "weight"),
    lambda lib, tz, m, crop, double, bad: tz.remove_parametrizations(
        tz.register_parametrization(m, "bias", double()), "weight"),
], ids=["shape", "chained shape", "chained right_inverse shape", "no such tensor", "not parametrized",
        "other tensor parametrized"])
def test_parametrize_errors_as_torch(build):
    assert _first(flame, nn.utils.parametrize, build) == _first(torch, torch.nn.utils.parametrize, build)
