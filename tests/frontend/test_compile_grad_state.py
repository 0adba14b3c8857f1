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


def test_every_plan_of_a_compiled_function_gets_its_one_arena(monkeypatch):
    """The executor compiles each trace and each batch size of a compiled function with the same arena
    (executor().arena(), asked once per function: runtime.cuda.Arena shares it on the GPU), and two
    compiled functions with different ones."""
    from flame.runtime.reference import ReferenceExecutor

    made, given = [], []
    real_compile = ReferenceExecutor.compile

    def arena(self):
        made.append(object())
        return made[-1]

    def compile(self, plan, arena=None):
        if plan.name == "body":  # not an eager op's
            given.append(arena)
        return real_compile(self, plan, arena)

    monkeypatch.setattr(ReferenceExecutor, "arena", arena)
    monkeypatch.setattr(ReferenceExecutor, "compile", compile)
    w = flame.tensor(np.ones(3, np.float32), requires_grad=True)

    def body(x):
        (w * x).sum().backward()
        return w.grad.sum()

    step, other = flame.compile(body), flame.compile(body, dynamic=True)
    for n in (4, 4, 6, 8):  # a trace without .grad, one with it, then other batch sizes
        step(flame.tensor(np.ones((n, 3), np.float32)))
    assert len(made) == 1 and len(given) >= 3 and all(a is made[0] for a in given)
    given.clear()
    for n in (4, 6, 8, 10):
        other(flame.tensor(np.ones((n, 3), np.float32)))
    assert len(made) == 2 and given and all(a is made[1] for a in given)
