"""Frozen parameters (requires_grad=False) get no gradient work: the compiled plan of a training step
has no weight-gradient matmul for a frozen Linear (and autodiff never emits one), they get no .grad,
and an optimizer step leaves their bits unchanged, eagerly and compiled; freezing a parameter after
a step was compiled re-traces it."""

import numpy as np
import pytest

import flame
import flame.nn as nn
import flame.nn.functional as F
from flame import debug
from flame.plan.steps import MatmulCall

IN, HID, MID, OUT, BATCH = 8, 24, 40, 4, 6  # distinct sizes: a matmul's result shape says what it is


def _model(seed=0):
    g = flame.Generator(seed)
    return nn.Sequential(nn.Linear(IN, HID, generator=g), nn.Tanh(), nn.Linear(HID, MID, generator=g), nn.Tanh(),
                         nn.Linear(MID, OUT, generator=g))


def _data(seed=1):
    r = np.random.default_rng(seed)
    return (flame.tensor(r.standard_normal((BATCH, IN)).astype(np.float32)),
            flame.tensor(r.integers(0, OUT, BATCH)))


def _step(model, opt):
    @flame.compile
    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    return step


def _matmul_shapes(step, *args) -> list[tuple[int, ...]]:
    """The result shape of every cuBLASLt call in the compiled plan of step(*args)."""
    records = []
    with debug.observe(records.append):
        step(*args)
    plan = records[-1].plan
    return [plan.buffers[s.out].shape for s in plan.steps if isinstance(s, MatmulCall)]


@pytest.mark.parametrize("freeze", [False, True])
def test_frozen_linear_has_no_weight_gradient_matmul(freeze):
    model = _model()
    if freeze:
        model[2].requires_grad_(False)  # the middle Linear [MID, HID]: its input's gradient is still needed
    opt = flame.optim.SGD(model.parameters(), lr=0.1)
    step = _step(model, opt)
    x, y = _data()
    weight_grad = {(MID, HID), (HID, MID)}  # dW = dY^T X, either orientation
    traced = [op.out.shape for op in step.trace(x, y).ops if op.name == "matmul"]
    shapes = _matmul_shapes(step, x, y)
    # forward 3; backward: dW of every trainable layer, dX of the last two (x is data: no dX for layer 0)
    assert len(shapes) == 3 + (2 if freeze else 3) + 2
    assert (sum(s in weight_grad for s in shapes) == 0) == freeze
    assert (sum(s in weight_grad for s in traced) == 0) == freeze  # autodiff itself emits none
    assert (BATCH, HID) in shapes  # the frozen layer's input gradient is still computed


def test_frozen_parameters_get_no_grad_eagerly():
    model = _model()
    model[0].weight.requires_grad = False
    x, y = _data()
    F.cross_entropy(model(x), y).backward()
    assert model[0].weight.grad is None
    assert all(p.grad is not None for n, p in model.named_parameters() if n != "0.weight")


@pytest.mark.parametrize("compiled", [False, True])
def test_frozen_parameters_keep_their_bits(compiled):
    model = _model()
    frozen = [model[0].weight, model[2].weight, model[2].bias]
    for p in frozen:
        p.requires_grad_(False)
    before = {id(p): p.numpy().tobytes() for p in model.parameters()}
    # weight decay would move a parameter even with a zero gradient: a frozen one must not be touched
    opt = flame.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1)
    x, y = _data()
    step = _step(model, opt) if compiled else None
    for _ in range(3):
        if compiled:
            step(x, y)
        else:
            F.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
    for p in model.parameters():
        same = p.numpy().tobytes() == before[id(p)]
        assert same == any(p is q for q in frozen)


def test_freezing_after_compiling_retraces():
    model = _model()
    opt = flame.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1)
    step = _step(model, opt)
    x, y = _data()
    step(x, y)
    w = model[4].weight
    w.requires_grad = False
    bits = w.numpy().tobytes()
    step(x, y)
    assert w.numpy().tobytes() == bits and w.grad is None
    w.requires_grad = True  # unfreezing re-traces again: it trains
    step(x, y)
    assert w.numpy().tobytes() != bits
