"""Elementwise losses warn on implicit broadcasting as PyTorch's do (issue 15: mse_loss of [8, 1]
against [8] broadcast to [8, 8] silently). Oracle: torch on the CPU, for the warning and the value."""

import warnings

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn
import flame.nn.functional as F


def test_mse_loss_of_mismatched_shapes_warns_like_torch_and_computes_the_same():
    r = np.random.default_rng(0)
    pred, target = r.standard_normal((8, 1)).astype(np.float32), r.standard_normal(8).astype(np.float32)
    with pytest.warns(UserWarning, match="target size") as seen_torch:
        want = torch.nn.functional.mse_loss(torch.from_numpy(pred), torch.from_numpy(target))
    with pytest.warns(UserWarning, match=r"target size \[8\] that is different to the input size \[8, 1\]") as seen:
        got = F.mse_loss(flame.tensor(pred), flame.tensor(target))
    assert "broadcasting" in str(seen_torch[0].message) and "broadcasting" in str(seen[0].message)
    assert seen[0].filename == __file__
    assert got.item() == pytest.approx(want.item(), rel=1e-6)
    with pytest.warns(UserWarning, match="mse_loss"):
        nn.MSELoss()(flame.tensor(pred), flame.tensor(target))


def test_same_shapes_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        F.mse_loss(flame.ones(8, 1), flame.zeros(8, 1))


def test_a_compiled_step_warns_once_when_traced():
    @flame.compile
    def loss(p, t):
        return F.mse_loss(p, t)

    with pytest.warns(UserWarning, match="target size"):
        loss(flame.ones(4, 1), flame.zeros(4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loss(flame.ones(4, 1), flame.zeros(4))  # a replay runs no Python
