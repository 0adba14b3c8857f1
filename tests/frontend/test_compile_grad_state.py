"""A compiled step sees each call's .grad, not the one that existed when it was traced."""

import numpy as np
import torch

import flame


def _flame_run(zero_between: bool) -> list[float]:
    w = flame.tensor(np.ones(3, np.float32), requires_grad=True)
    x = flame.tensor(np.arange(3, dtype=np.float32))
    (w * x).sum().backward()  # a stale eager gradient exists before the first compiled call

    @flame.compile
    def step(x):
        (w * x * 2.0).sum().backward()
        g = w.grad.sum()
        if zero_between:
            w.grad = None
        return g

    return [step(x).item() for _ in range(3)]


def _torch_run(zero_between: bool) -> list[float]:
    w = torch.ones(3, requires_grad=True)
    x = torch.arange(3, dtype=torch.float32)
    (w * x).sum().backward()
    out = []
    for _ in range(3):
        (w * x * 2.0).sum().backward()
        out.append(w.grad.sum().item())
        if zero_between:
            w.grad = None
    return out


def test_stale_grad_is_read_once_then_reset():
    assert _flame_run(True) == _torch_run(True)


def test_grad_accumulates_across_calls_like_torch():
    assert _flame_run(False) == _torch_run(False)


def test_assigning_grad_inside_the_step_does_not_retrace():
    from flame import debug

    p = flame.nn.Parameter(flame.zeros(64))
    opt = flame.optim.AdamW([p], lr=1e-3)

    @flame.compile
    def step(g):
        p.grad = g
        opt.step()
        p.grad = None

    records = []
    with debug.observe(records.append):
        for _ in range(4):
            step(flame.ones(64))
    assert len(records) == 1
    assert p.grad is None and np.all(p.numpy() < 0)
