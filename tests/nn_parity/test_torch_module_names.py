"""Names of torch's that user code imports beside the public API: torch.nn.init's fan helpers (custom
layers' reset_parameters call them) and the torch.autograd.function module (once_differentiable)."""

from __future__ import annotations

import numpy as np
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
