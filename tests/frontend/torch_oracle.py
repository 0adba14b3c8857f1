"""One check the in-place write tests share: a body run by torch in float64 and by flame (eager or
compiled) gives the same loss and gradients, or both refuse it (torch's RuntimeError, flame's
AutogradError, each saying `refusal`)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import flame
from flame.errors import AutogradError


def agrees_with_torch(body, arrays, how: str, refusal: str) -> None:
    """body(lib) -> run(*tensors) -> loss: torch's loss and gradients by every tensor (float64 leaves of
    `arrays`; an unused one None, flame's None or zero), or its refusal, against flame's `how` ("eager" or
    "compiled")."""
    xs = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]
    try:
        loss = body(torch)(*xs)
        want = torch.autograd.grad(loss, xs, allow_unused=True)
    except RuntimeError as e:
        assert refusal in str(e)
        want = None
    run = body(flame)

    def grads(*ts):
        out = run(*ts)
        return out, flame.autograd.grad(out, list(ts), allow_unused=True)

    step = grads if how == "eager" else flame.compile(grads)
    args = [flame.tensor(a, dtype=flame.float64, requires_grad=True) for a in arrays]
    if want is None:
        with pytest.raises(AutogradError, match=re.escape(refusal)):
            step(*args)
        return
    got_loss, got = step(*args)
    np.testing.assert_allclose(float(got_loss), loss.item(), rtol=1e-12)
    for g, ref in zip(got, want):
        if ref is None:
            assert g is None or not np.any(g.numpy())
        else:
            np.testing.assert_allclose(g.numpy(), ref.numpy(), rtol=1e-12, atol=1e-12)
