"""The normalisations of an input that is not contiguous (a transpose, a slice with a step, torch's
channels_last layout, an expanded view, a permutation of the batch and channel dims) against torch:
values and the gradients of the input, weight and bias in f64, eagerly and inside @flame.compile, and
group_norm of a channels_last bf16 input with f32 parameters."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.nn_parity.common import rng

BASE = rng(21).standard_normal((4, 6, 5, 3))

VIEWS = {  # each a [N, C, ...] view of BASE with C = 6 (or BASE's own layout changed)
    "transposed": lambda lib, t: t.transpose(2, 3),
    "channels last": lambda lib, t: t.contiguous(memory_format=lib.channels_last),
    "channels from last dim": lambda lib, t: t.permute(0, 2, 3, 1)[..., :3].permute(0, 3, 1, 2).repeat(1, 2, 1, 1),
    "stepped slice": lambda lib, t: t[:, :, ::2, 1:],
    "expanded": lambda lib, t: t[:, :, :1].expand(4, 6, 5, 3),
    "batch and channels swapped": lambda lib, t: t.transpose(0, 1).reshape(6, 4, 5, 3).transpose(0, 1),
}

NORMS = {
    "group_norm": lambda lib, x, w, b: lib.nn.functional.group_norm(x, 3, w, b),
    "GroupNorm": lambda lib, x, w, b: w(x),  # w: the module
    "layer_norm": lambda lib, x, w, b: lib.nn.functional.layer_norm(x, x.shape[-1:]),
    "batch_norm": lambda lib, x, w, b: lib.nn.functional.batch_norm(x, None, None, w, b, True),
    "instance_norm": lambda lib, x, w, b: lib.nn.functional.instance_norm(x, weight=w, bias=b),
}


def _run(lib, view, norm, compiled):
    r = rng(5)
    x, w, b = (lib.tensor(a).requires_grad_() for a in (BASE, r.standard_normal(6), r.standard_normal(6)))
    if norm == "GroupNorm":  # made before compiling, its parameters of w's and b's values
        m = lib.nn.GroupNorm(2, 6).double()
        m.weight, m.bias = lib.nn.Parameter(w.detach().clone()), lib.nn.Parameter(b.detach().clone())
        w, b = m, None

    def call(x, w, b):
        y = NORMS[norm](lib, VIEWS[view](lib, x), w, b)
        (y * y.detach().sin()).sum().backward()
        return y

    if compiled:
        call = flame.compile(call)
    y = call(x, w, b)
    grads = (x, w.weight, w.bias) if norm == "GroupNorm" else (x, w, b)
    return [y.detach().numpy()] + [t.grad.numpy() if t.grad is not None else None for t in grads]


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("norm", sorted(NORMS))
@pytest.mark.parametrize("view", sorted(VIEWS))
def test_strided_input_as_torch(view, norm, compiled):
    got, want = _run(flame, view, norm, compiled), _run(torch, view, norm, False)
    for what, g, t in zip(("output", "input grad", "weight grad", "bias grad"), got, want):
        if t is None:  # a parameter the module replaced, or layer_norm's none
            continue
        np.testing.assert_allclose(g, t, rtol=1e-10, atol=1e-12, err_msg=what)


@pytest.mark.parametrize("compiled", [False, True])
def test_group_norm_of_channels_last_bf16(compiled):
    r = rng(8)
    x0, w0, b0 = r.standard_normal((2, 3, 4, 8)), 1 + r.standard_normal(8) * 0.3, r.standard_normal(8) * 0.3

    def run(lib, compiled):
        x = lib.tensor(x0).to(lib.bfloat16).requires_grad_()
        w, b = (lib.tensor(a).float().requires_grad_() for a in (w0, b0))

        def call(x, w, b):
            y = lib.nn.functional.group_norm(x.permute(0, 3, 1, 2), 4, w, b)
            y.float().square().sum().backward()
            return y

        y = (flame.compile(call) if compiled else call)(x, w, b)
        return y.dtype, [t.detach().float().numpy() for t in (y, x.grad, w.grad, b.grad)]

    (dt, got), (tdt, want) = run(flame, compiled), run(torch, False)
    assert str(dt) == "bf16" and tdt == torch.bfloat16
    for what, g, t in zip(("output", "input grad", "weight grad", "bias grad"), got, want):
        np.testing.assert_allclose(g, t, rtol=2e-2, atol=2e-2 * np.abs(t).max(), err_msg=what)
