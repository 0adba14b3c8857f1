"""Names of torch's that user code imports beside the public API: torch.nn.init's fan helpers (custom
layers' reset_parameters call them) and the torch.autograd.function module (once_differentiable)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch

import flame


def test_init_fan_helpers_have_torch_names():
    w = np.zeros((4, 3, 2, 5))
    assert flame.nn.init._calculate_fan_in_and_fan_out(flame.tensor(w)) == \
        torch.nn.init._calculate_fan_in_and_fan_out(torch.tensor(w))
    assert flame.nn.init._calculate_correct_fan(flame.tensor(w), "fan_out") == \
        torch.nn.init._calculate_correct_fan(torch.tensor(w), "fan_out")


def test_autograd_function_module():
    from flame.autograd.function import Function, once_differentiable

    class Square(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x * g

    x = flame.tensor([1.0, -3.0], requires_grad=True)
    Square.apply(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, -6.0])


SUBMODULES = ["module", "container", "linear", "conv", "batchnorm", "instancenorm", "normalization", "dropout",
              "pooling", "activation", "loss", "sparse", "rnn", "transformer", "padding", "upsampling", "flatten",
              "pixelshuffle", "channelshuffle", "distance", "fold", "adaptive"]


@pytest.mark.parametrize("sub", SUBMODULES)
def test_nn_modules_submodules_hold_torchs_names(sub):
    """Every class torch.nn.modules.<sub> defines that flame.nn has is there, imported by its dotted name."""
    mine = importlib.import_module(f"flame.nn.modules.{sub}")
    theirs = importlib.import_module(f"torch.nn.modules.{sub}")
    names = [n for n in vars(theirs) if isinstance(getattr(theirs, n), type) and getattr(theirs, n).__module__ ==
             theirs.__name__ and not n.startswith("_") and hasattr(flame.nn, n)]
    assert names
    for n in names:
        assert getattr(mine, n) is getattr(flame.nn, n)
        assert getattr(flame.nn.modules, n) is getattr(flame.nn, n)


BASES = [("batchnorm", "_BatchNorm"), ("batchnorm", "_NormBase"), ("instancenorm", "_InstanceNorm"),
         ("conv", "_ConvNd"), ("conv", "_ConvTransposeNd"), ("pooling", "_MaxPoolNd"), ("pooling", "_AvgPoolNd"),
         ("loss", "_Loss"), ("loss", "_WeightedLoss")]
MODULES = [lambda n: n.BatchNorm2d(3), lambda n: n.SyncBatchNorm(3), lambda n: n.InstanceNorm1d(3),
           lambda n: n.LayerNorm(3), lambda n: n.Conv2d(2, 2, 1), lambda n: n.ConvTranspose1d(2, 2, 1),
           lambda n: n.MaxPool2d(2), lambda n: n.AvgPool1d(2), lambda n: n.MSELoss(), lambda n: n.CrossEntropyLoss(),
           lambda n: n.NLLLoss(), lambda n: n.BCEWithLogitsLoss(), lambda n: n.MultiMarginLoss(), lambda n: n.CTCLoss(),
           lambda n: n.HuberLoss(), lambda n: n.KLDivLoss(), lambda n: n.TripletMarginLoss(), lambda n: n.Linear(2, 2)]


@pytest.mark.parametrize("make", MODULES)
def test_isinstance_of_torchs_private_bases(make):
    """isinstance(m, nn.modules.batchnorm._BatchNorm) (a parameter-group filter's test) and the like answer
    as torch's."""
    for sub, base in BASES:
        mine = getattr(importlib.import_module(f"flame.nn.modules.{sub}"), base)
        theirs = getattr(importlib.import_module(f"torch.nn.modules.{sub}"), base)
        assert isinstance(make(flame.nn), mine) == isinstance(make(torch.nn), theirs), (sub, base)


def test_a_custom_loss_subclasses_loss():
    def make(lib):
        class Focal(lib.nn.modules.loss._Loss):
            def __init__(self, gamma=2.0, reduction="mean"):
                super().__init__(reduction=reduction)
                self.gamma = gamma

            def forward(self, x, y):
                loss = (x - y).abs() ** self.gamma
                return loss.mean() if self.reduction == "mean" else loss

        class Weighted(lib.nn.modules.loss._WeightedLoss):
            def forward(self, x, y):
                return ((x - y) ** 2 * self.weight).sum()

        return Focal(), Focal(reduction="none"), Weighted(lib.tensor([1.0, 2.0]))

    x, y = np.array([1.0, -2.0]), np.array([0.5, 0.5])
    for mine, theirs in zip(make(flame), make(torch)):
        np.testing.assert_allclose(mine(flame.tensor(x), flame.tensor(y)).numpy(),
                                   theirs(torch.tensor(x), torch.tensor(y)).numpy())
        assert list(mine.state_dict()) == list(theirs.state_dict())
        assert repr(mine) == repr(theirs)
