"""Autograd corners against torch in float64: values, gradients and errors of hooks, gradient modes and
torch.autograd's functions where flame once differed from torch."""

import numpy as np
import pytest
import torch

import flame

X = np.array([[1.0, 2.0, 3.0], [4.0, -5.0, 6.0]])


def _arr(t):
    return None if t is None else np.array(t.tolist())


def _unused_output_hook(lib):
    """A full backward hook on a module with two outputs, only the first reaching the loss."""

    class TwoOut(lib.nn.Module):
        def forward(self, a):
            return a * 2, a.exp()

    log = []

    def hook(m, gin, gout):
        log.append(([_arr(g) for g in gin], [_arr(g) for g in gout]))
        return (gin[0] * 5,)

    m = TwoOut()
    m.register_full_backward_hook(hook)
    a = lib.tensor(X, requires_grad=True)
    u, _ = m(a)
    (u * 3).sum().backward()
    return log, _arr(a.grad)


def test_full_backward_hook_gets_none_for_an_output_the_loss_does_not_use():
    (flog, fgrad), (tlog, tgrad) = _unused_output_hook(flame), _unused_output_hook(torch)
    assert len(flog) == len(tlog) == 1
    (fin, fout), (tin, tout) = flog[0], tlog[0]
    np.testing.assert_allclose(fin[0], tin[0])
    np.testing.assert_allclose(fout[0], tout[0])
    assert fout[1] is None and tout[1] is None
    np.testing.assert_allclose(fgrad, tgrad)
