"""Gradient tools: clip_grad_norm_ / clip_grad_value_ against torch, eagerly and compiled; seeded noise;
grad_stats."""

import math

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn
from flame.nn.utils import add_grad_noise_, clip_grad_norm_, clip_grad_value_, grad_stats


def _params_with_grads(seed=0, scale=1.0):
    r = np.random.default_rng(seed)
    shapes = [(4, 3), (3,), (2, 2)]
    ours, theirs = [], []
    for s in shapes:
        g = (r.standard_normal(s) * scale).astype(np.float32)
        p = nn.Parameter(flame.zeros(*s))
        p.grad = flame.tensor(g)
        t = torch.zeros(s, requires_grad=True)
        t.grad = torch.tensor(g)
        ours.append(p)
        theirs.append(t)
    return ours, theirs


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 100.0])
def test_clip_grad_norm_matches_torch(norm_type, max_norm):
    ours, theirs = _params_with_grads()
    total = clip_grad_norm_(ours, max_norm, norm_type)
    ref = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type)
    assert isinstance(total, flame.Tensor) and total.shape == ()
    np.testing.assert_allclose(total.item(), ref.item(), rtol=1e-6)
    for p, t in zip(ours, theirs):
        np.testing.assert_allclose(p.grad.numpy(), t.grad.numpy(), rtol=1e-6, atol=1e-7)


def test_clip_grad_norm_inside_compile_matches_eager():
    g = flame.Generator(0)
    model = nn.Sequential(nn.Linear(3, 5, generator=g), nn.Tanh(), nn.Linear(5, 2, generator=g))
    x = flame.tensor(np.random.default_rng(1).standard_normal((8, 3)).astype(np.float32) * 5)

    def grads_and_norm():
        model.zero_grad()
        model(x).square().sum().backward()
        return clip_grad_norm_(model.parameters(), 0.1)

    eager_norm = grads_and_norm().item()
    eager = [p.grad.numpy().copy() for p in model.parameters()]
    compiled_norm = flame.compile(grads_and_norm)().item()
    np.testing.assert_allclose(compiled_norm, eager_norm, rtol=1e-6)
    assert eager_norm > 0.1
    for p, e in zip(model.parameters(), eager):
        np.testing.assert_allclose(p.grad.numpy(), e, rtol=1e-5, atol=1e-7)


def test_clip_grad_value_matches_torch():
    ours, theirs = _params_with_grads(scale=2.0)
    clip_grad_value_(ours, 0.7)
    torch.nn.utils.clip_grad_value_(theirs, 0.7)
    for p, t in zip(ours, theirs):
        np.testing.assert_array_equal(p.grad.numpy(), t.grad.numpy())


def test_grad_noise_is_seeded_and_gaussian():
    a, _ = _params_with_grads()
    b, _ = _params_with_grads()
    before = [p.grad.numpy().copy() for p in a]
    add_grad_noise_(a, 0.5, flame.Generator(9))
    add_grad_noise_(b, 0.5, flame.Generator(9))
    for p, q in zip(a, b):
        np.testing.assert_array_equal(p.grad.numpy(), q.grad.numpy())
    big = nn.Parameter(flame.zeros(20000))
    big.grad = flame.zeros(20000)
    add_grad_noise_([big], 0.5, flame.Generator(1))
    noise = big.grad.numpy()
    assert abs(noise.mean()) < 0.02 and abs(noise.std() - 0.5) < 0.02
    assert not np.array_equal(a[0].grad.numpy(), before[0])


def test_grad_stats_counts_nan_and_inf():
    w = nn.Parameter(flame.zeros(4))
    w.grad = flame.tensor([1.0, -3.0, float("nan"), float("inf")])
    b = nn.Parameter(flame.zeros(2))
    b.grad = flame.tensor([3.0, 4.0])
    no_grad = nn.Parameter(flame.zeros(1))
    s = grad_stats([("w", w), ("b", b), ("unused", no_grad)])
    assert set(s) == {"w", "b"}
    assert s["w"]["nan_count"] == 1 and s["w"]["inf_count"] == 1
    assert s["b"] == {"norm": 5.0, "min": 3.0, "max": 4.0, "mean": 3.5, "nan_count": 0, "inf_count": 0}


def test_grad_stats_and_noise_inside_compile():
    w = nn.Parameter(flame.tensor([1.0, -2.0, 3.0]))
    gen = flame.Generator(4)

    @flame.compile
    def step():
        (w * w).sum().backward()
        add_grad_noise_([w], 0.1, gen)
        return grad_stats([("w", w)])

    first = step()
    g1 = w.grad.numpy().copy()
    w.grad = None
    second = step()
    assert isinstance(first["w"]["norm"], flame.Tensor) and first["w"]["nan_count"].item() == 0
    np.testing.assert_allclose(first["w"]["max"].item(), g1.max(), rtol=1e-6)
    assert not np.array_equal(g1, w.grad.numpy())  # each replay draws fresh noise
    np.testing.assert_allclose(g1, [2.0, -4.0, 6.0], atol=0.5)
    assert second["w"]["max"].item() != first["w"]["max"].item()


def test_get_total_norm_refuses_an_undefined_tensor_as_torch():
    message = "Tensors of the first list of nested Tensor lists are supposed to be defined but the 1-th Tensor is not."
    with pytest.raises(RuntimeError, match=f"^{message}$"):
        torch.nn.utils.get_total_norm([torch.ones(2), None])
    with pytest.raises(RuntimeError) as caught:
        flame.nn.utils.get_total_norm([flame.ones(2), None])
    assert str(caught.value).split("\n")[0] == message


@pytest.mark.parametrize("total_norm", [5.0, 5, None])
def test_clip_grads_with_norm_refuses_a_norm_that_is_not_a_tensor_as_torch(total_norm):
    tp, fp = torch.nn.Parameter(torch.ones(2)), nn.Parameter(flame.ones(2))
    tp.grad, fp.grad = torch.ones(2), flame.ones(2)
    with pytest.raises(TypeError):
        torch.nn.utils.clip_grads_with_norm_([tp], 1.0, total_norm)
    with pytest.raises(TypeError, match="total_norm must be a Tensor"):
        nn.utils.clip_grads_with_norm_([fp], 1.0, total_norm)
    np.testing.assert_array_equal(fp.grad.numpy(), [1.0, 1.0])


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("half", ["f16", "bf16"])
@pytest.mark.parametrize("max_norm", [0.37, 1.3, 2.9])
def test_clip_grad_norm_of_mixed_precision_gradients_matches_torch_bit_for_bit(max_norm, half, compiled):
    """torch's coefficient is max_norm * (norm + 1e-6).reciprocal() (Tensor.__rtruediv__, not a
    division), and its mul_ of an f16 / bf16 gradient by the 0-d f32 coefficient computes in f32 and
    rounds once: the clipped gradients, half and f32, have torch's bits."""
    r = np.random.default_rng(0)
    values = [r.standard_normal(64).astype(np.float32), r.standard_normal(16).astype(np.float32)]
    tdt = getattr(torch, {"f16": "float16", "bf16": "bfloat16"}[half])
    theirs = [torch.zeros(64, dtype=tdt, requires_grad=True), torch.zeros(16, requires_grad=True)]
    ours = [nn.Parameter(flame.zeros(64, dtype=getattr(flame, half))), nn.Parameter(flame.zeros(16))]
    for p, t, v in zip(ours, theirs, values):
        t.grad = torch.tensor(v).to(t.dtype)
        p.grad = flame.tensor(v).to(p.dtype)
    clip = lambda: clip_grad_norm_(ours, max_norm)  # noqa: E731
    total = (flame.compile(clip) if compiled else clip)()
    ref = torch.nn.utils.clip_grad_norm_(theirs, max_norm)
    assert total.item() == ref.item()
    for p, t in zip(ours, theirs):
        assert p.grad.to(flame.f32).numpy().tobytes() == t.grad.float().numpy().tobytes()


def test_clip_grad_norm_without_gradients_checks_norm_type_and_returns_zero_as_torch():
    """No parameter has a gradient: torch still converts norm_type (a ValueError for 'fro') and returns a
    0-d zero; flame returned the zero before looking at norm_type."""
    tp, fp = torch.nn.Parameter(torch.ones(2)), nn.Parameter(flame.ones(2))
    want = torch.nn.utils.clip_grad_norm_([tp], 1.0, norm_type=3)
    got = clip_grad_norm_([fp], 1.0, norm_type=3)
    assert got.shape == tuple(want.shape) and got.item() == want.item() and got.dtype == flame.f32
    with pytest.raises(ValueError, match="could not convert string to float: 'fro'"):
        torch.nn.utils.clip_grad_norm_([tp], 1.0, norm_type="fro")
    with pytest.raises(ValueError, match="could not convert string to float: 'fro'"):
        clip_grad_norm_([fp], 1.0, norm_type="fro")
