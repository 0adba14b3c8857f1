"""The convolutional training cases (flame/bench/cases_conv.py) agree with PyTorch tightly when run in f32
at the --quick sizes (bf16 only shows rounding; the quick suite checks bf16): the step's loss and what one
step changed in the checked weights and in BatchNorm's running statistics. JAX's peer is checked the same
way on the ResNet case. One step each, not the whole harness (a U-Net step graph takes a while to compile)."""

import dataclasses
import importlib.util

import numpy as np
import pytest

from flame.bench.cases_conv import CONV
from flame.bench.spec import generate
from flame.bench.suite import Context, _check, _errors, _setup

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (the oracle)")


def _f32(case):
    quick = case.sizes(True)
    return dataclasses.replace(case, sizes=lambda q: {**quick, "dtype": "f32"})


def _one_step(case, framework: str, mode: str, ctx: Context):
    factory = {"flame": case.flame, "torch": case.torch, "jax": case.jax}[framework]
    sizes = case.sizes(True)
    sets = [generate(case.inputs(sizes), np, seed=0)]
    bound, data = _setup(framework, factory, mode, case, sizes, sets, ctx)
    return _check(bound, data[0], ctx)


@pytest.mark.parametrize("case", CONV, ids=lambda c: c.name)
def test_conv_case_in_f32_matches_torch(case):
    case, ctx = _f32(case), Context("reference", True, 1, 0, ["torch"])
    want = _one_step(case, "torch", "eager", ctx)
    got = _one_step(case, "flame", "compiled", ctx)
    assert len(got[1]) == len(want[1]) > 0  # the checked weights (and running statistics) changed in both
    err, state_err = _errors(got, want, ctx)
    assert err < 1e-5 and state_err < 1e-3, (err, state_err)


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="needs jax")
def test_jax_resnet_peer_in_f32_matches_torch():
    case, ctx = _f32(CONV[0]), Context("reference", True, 1, 0, ["torch", "jax"])
    err, state_err = _errors(_one_step(case, "jax", "compiled", ctx), _one_step(case, "torch", "eager", ctx), ctx)
    assert err < 1e-5 and state_err < 1e-3, (err, state_err)


def test_running_statistics_are_part_of_the_checked_state():
    """BatchNorm's running mean and variance move by momentum * (batch statistic - initial) in one step:
    the ResNet case's state lists them after the weights, and they change."""
    case, ctx = _f32(CONV[0]), Context("reference", True, 1, 0, ["torch"])
    _, deltas = _one_step(case, "flame", "compiled", ctx)
    blocks = case.sizes(True)["blocks"]
    stats = deltas[-4 * blocks:]  # mean and var of two BatchNorms per block
    assert len(deltas) == 3 + 4 * blocks and all(float(np.abs(d).max()) > 0 for d in stats)
