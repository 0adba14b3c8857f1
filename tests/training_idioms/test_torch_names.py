"""Names of torch that training code written for it uses and flame spells the same: the `required`
default of a custom optimizer's options, clip_grad_norm (the deprecated spelling), torch.autograd's
grad-mode context managers."""

from __future__ import annotations

import pytest
import torch
import torch.optim.optimizer as torch_optimizer

import flame
import flame.optim.optimizer as flame_optimizer


@pytest.mark.parametrize("lib,mod", [(torch, torch_optimizer), (flame, flame_optimizer)])
def test_a_required_option_must_be_given(lib, mod):
    class Plain(mod.Optimizer):
        def __init__(self, params, lr=mod.required, momentum=0.0):
            super().__init__(params, dict(lr=lr, momentum=momentum))

    p = lib.ones(2, requires_grad=True)
    with pytest.raises(ValueError, match="didn't specify a value of required optimization parameter lr"):
        Plain([p])
    assert Plain([{"params": [p], "lr": 0.3}]).param_groups[0]["lr"] == 0.3
    assert repr(mod.required) == "<required parameter>"


@pytest.mark.parametrize("lib", [torch, flame])
def test_clip_grad_norm_without_the_underscore_warns_and_clips(lib):
    p = lib.ones(4, dtype=lib.float64, requires_grad=True)
    p.grad = lib.full((4,), 3.0, dtype=lib.float64)
    with pytest.warns(FutureWarning, match="clip_grad_norm_"):
        total = lib.nn.utils.clip_grad_norm([p], 1.0)
    assert float(total) == pytest.approx(6.0)
    assert p.grad.numpy() == pytest.approx([3.0 / (6.0 + 1e-6)] * 4)


@pytest.mark.parametrize("lib", [torch, flame])
def test_grad_modes_under_autograd(lib):
    x = lib.ones(2, requires_grad=True)
    with lib.autograd.no_grad():
        assert not (x * 2).requires_grad
        with lib.autograd.enable_grad():
            assert (x * 2).requires_grad
    with lib.autograd.set_grad_enabled(False):
        assert not (x * 2).requires_grad
    with lib.autograd.inference_mode():
        assert not (x * 2).requires_grad


_DTYPES = ["float32", "float64", "float16", "bfloat16", "int32", "int64", "int8", "uint8", "bool", "float8_e4m3fn",
           "float8_e5m2"]


@pytest.mark.parametrize("name", _DTYPES)
def test_dtype_facts_under_torchs_names(name):
    """`if v.dtype.is_floating_point:` (a model EMA's update over a state_dict) reads as in torch."""
    theirs, mine = getattr(torch, name), getattr(flame, name)
    for fact in ("is_floating_point", "is_signed", "is_complex"):
        assert getattr(mine, fact) == getattr(theirs, fact), fact
