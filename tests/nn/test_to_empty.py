"""Module.to_empty against torch's: every parameter and buffer (recurse=False: the module's own) gets new
storage of its shape and dtype, each parameter staying the same object (an optimizer holding it keeps
working) and each buffer replaced, as torch's;
then load_state_dict gives torch's outputs and gradients in f64; device is keyword-only and required;
a device this process does not run on raises as Module.to does."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame


def _build(lib):
    return lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.BatchNorm1d(4), lib.nn.Linear(4, 2)).double()


def test_to_empty_keeps_the_objects_then_loads_as_torch():
    torch.manual_seed(0)
    theirs, mine = _build(torch), _build(flame)
    kept = []
    for m in (theirs, mine):  # torch's: each Parameter stays the same object, each buffer is a new one
        before = m.state_dict(keep_vars=True)
        assert m.to_empty(device="cpu") is m
        kept.append({k: v is before[k] for k, v in m.state_dict(keep_vars=True).items()})
    assert kept[1] == kept[0]
    after = mine.state_dict(keep_vars=True)
    assert {k: (tuple(v.shape), v.dtype.name) for k, v in after.items()} == {
        k: (tuple(v.shape), {"torch.float64": "f64", "torch.int64": "i64"}[str(v.dtype)])
        for k, v in theirs.state_dict().items()}
    sd = {k: v.detach().numpy() + 0.5 for k, v in _build(torch).state_dict().items()}
    theirs.load_state_dict({k: torch.tensor(v) for k, v in sd.items()})
    mine.load_state_dict({k: flame.tensor(v) for k, v in sd.items()})
    x = np.random.default_rng(0).standard_normal((5, 3))
    outs = []
    for lib, m in ((torch, theirs), (flame, mine)):
        t = lib.tensor(x, requires_grad=True)
        y = m(t)
        (y * y).sum().backward()
        outs.append([y.detach().numpy() if lib is torch else y.numpy(), t.grad.numpy(), m[0].weight.grad.numpy()])
    for a, b in zip(*outs):
        np.testing.assert_allclose(b, a, rtol=1e-12)


def test_recurse_false_touches_only_the_modules_own():
    for lib in (torch, flame):
        m = _build(lib)
        kept = m[0].weight.detach().numpy().copy() if lib is torch else m[0].weight.numpy().copy()
        m.to_empty(device="cpu", recurse=False)  # a Sequential has none of its own
        got = m[0].weight.detach().numpy() if lib is torch else m[0].weight.numpy()
        np.testing.assert_array_equal(got, kept)


def test_device_is_keyword_only_and_required():
    for lib in (torch, flame):
        with pytest.raises(TypeError):
            _build(lib).to_empty("cpu")
        with pytest.raises(TypeError):
            _build(lib).to_empty()
