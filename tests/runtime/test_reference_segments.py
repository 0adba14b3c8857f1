"""The reference executor runs alike segments of a kernel at once (flame/runtime/segments.py): the same
bits as running them one by one, and far fewer NumPy calls for a multi-tensor optimizer update."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import flame
import flame.nn as nn
import flame.optim as optim
from flame.ir import Builder, Graph, TensorType, f32
from flame.plan.steps import KernelLaunch
from flame.runtime import segments


def small_model(dtype):
    gen = flame.Generator(3)
    model = nn.Sequential(nn.Linear(12, 16, generator=gen), nn.GELU(), nn.LayerNorm(16),
                          nn.Linear(16, 1, generator=gen), nn.Linear(1, 7, generator=gen))
    return model.to(dtype)


def mse_step(model, opt):
    """A compiled training step: the mean square error of the model's f32 output, backward, opt's step."""

    @flame.compile
    def step(x, y):
        loss = ((model(x).float() - y) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    return step


def batch(rng, dtype) -> tuple:
    """x [5, 12] in dtype and y [5, 7] f32, standard normal."""
    return (flame.tensor(rng.standard_normal((5, 12)).astype(np.float32)).to(dtype),
            flame.tensor(rng.standard_normal((5, 7)).astype(np.float32)))


def _train(dtype, opt_name, batched: bool, monkeypatch) -> tuple[list, list]:
    """Four compiled steps of a small model (parameters of shapes [16, 12], [16], [1, 16], [1], [7, 1], ...:
    the update's segments differ in size and some hold one element)."""
    if not batched:
        monkeypatch.setattr(segments, "_batched", segments._one_by_one)
    model = small_model(dtype)
    opt = {"adamw": lambda p: optim.AdamW(p, lr=1e-2, weight_decay=0.1),
           "adam": lambda p: optim.Adam(p, lr=1e-2),
           "sgd": lambda p: optim.SGD(p, lr=1e-2, momentum=0.9, nesterov=True)}[opt_name](model.parameters())
    step = mse_step(model, opt)
    rng = np.random.default_rng(0)
    losses = [step(*batch(rng, dtype)).numpy().copy() for _ in range(4)]
    monkeypatch.undo()
    return losses, [p.float().numpy().copy() for p in model.parameters()]


@pytest.mark.parametrize("opt_name", ["adamw", "adam", "sgd"])
@pytest.mark.parametrize("dtype", [flame.f32, flame.bf16])
def test_batched_segments_give_the_same_bits_as_one_by_one(dtype, opt_name, monkeypatch):
    one_losses, one_params = _train(dtype, opt_name, False, monkeypatch)
    losses, params = _train(dtype, opt_name, True, monkeypatch)
    for a, b in zip(losses + params, one_losses + one_params):
        np.testing.assert_array_equal(a, b)


def test_a_multi_tensor_update_runs_as_a_few_batches(monkeypatch):
    """The AdamW update over many parameters: its kernels' segments fall into a few groups of alike ones."""
    model = nn.Sequential(*[nn.Linear(8, 8, generator=flame.Generator(i)) for i in range(6)])
    opt = optim.AdamW(model.parameters(), lr=1e-2)

    @flame.compile
    def step(x):
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()

    step(flame.ones((3, 8)))
    plan = step._last.plan
    update = max((s for s in plan.steps if isinstance(s, KernelLaunch) and any(op.out.type.shape for op in s.ops)),
                 key=lambda s: len(s.ops))  # (the 0-d bias corrections are a kernel of their own)
    parts = segments._segments(update.ops)
    written = {op.out: plan.buffer_of[op.out] for op in update.ops if plan.buffer_of.get(op.out) in set(update.outputs)}
    signatures = {segments._Segment(p, plan.buffer_of, written).signature for p in parts}
    assert len(parts) >= 10 and None not in signatures and len(signatures) <= 3, (len(parts), len(signatures))
    monkeypatch.setattr(segments, "BATCH_MAX", 32)  # the [8, 8] weights' segments are now too big to batch
    signatures = [segments._Segment(p, plan.buffer_of, written).signature for p in parts]
    assert 0 < signatures.count(None) < len(parts)


def test_outputs_are_written_after_every_segment_read_its_inputs():
    """Two alike segments, each writing its result over the buffer the other reads (outputs taking
    inputs' bytes): each still reads the value from before the kernel, as on the GPU."""
    g = Graph("swap")
    b = Builder(g)
    x, y = g.add_input(TensorType((4,), f32)), g.add_input(TensorType((4,), f32))
    g.outputs = [b.mul(x, 2.0), b.mul(y, 3.0)]
    buffer_of = {x: 0, y: 1, g.outputs[0]: 1, g.outputs[1]: 0}  # each result over the other's input
    buffer_of.update({op.out: 2 + i for i, op in enumerate(g.ops) if op.out not in buffer_of})
    launch = KernelLaunch(name="k", source="", grid=1, block=1, smem=0, args=(0, 1, 1, 0), n_inputs=2,
                          ops=tuple(g.ops), n_outputs=2)
    plan = SimpleNamespace(buffer_of=buffer_of)
    bufs = {0: np.arange(4, dtype=np.float32), 1: np.arange(4, dtype=np.float32) + 10}
    with np.errstate(all="ignore"):
        segments.kernel_function(launch, plan)(bufs)
    np.testing.assert_array_equal(bufs[1], np.arange(4, dtype=np.float32) * 2)
    np.testing.assert_array_equal(bufs[0], (np.arange(4, dtype=np.float32) + 10) * 3)
