"""F.interpolate(mode="bicubic") and nn.Upsample(mode="bicubic") against torch: align_corners True and
False, size and scale_factor (up, down, non-integer, recompute_scale_factor), one-pixel outputs; values
and gradients in f64, eagerly and inside @flame.compile; f32 and half values; an inf reaching its
neighbours as NaN; torch's errors."""

import numpy as np
import pytest
import torch

import flame

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3, 5, 7))
RESIZES = [
    {"size": (9, 12)},
    {"size": (3, 4)},
    {"size": (1, 1)},
    {"size": (5, 7)},
    {"scale_factor": 2},
    {"scale_factor": (1.7, 0.6)},
    {"scale_factor": 1.5, "recompute_scale_factor": True},
]


def _run(L, x, kw, align_corners, compiled=False):
    def body(a):
        return L.nn.functional.interpolate(a, mode="bicubic", align_corners=align_corners, **kw)

    if L is flame:
        def step(a):
            y = body(a)
            w = flame.tensor(np.cos(np.arange(y.numel())).reshape(y.shape))
            return y, flame.grad(lambda b: (body(b) * w).sum())(a)
        y, g = (flame.compile(step) if compiled else step)(flame.tensor(x))
        return y.numpy(), g.numpy()
    a = torch.tensor(x, requires_grad=True)
    y = body(a)
    (y * torch.tensor(np.cos(np.arange(y.numel())).reshape(y.shape))).sum().backward()
    return y.detach().numpy(), a.grad.numpy()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("align_corners", [False, True, None])
@pytest.mark.parametrize("kw", RESIZES, ids=str)
def test_values_and_gradients_match_torch(kw, align_corners, compiled):
    want, want_grad = _run(torch, X, kw, align_corners)
    got, got_grad = _run(flame, X, kw, align_corners, compiled)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_grad, want_grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_narrow_dtypes_and_upsample(dtype):
    tol = {"float32": 1e-6, "float16": 1e-3, "bfloat16": 8e-3}[dtype]
    t = torch.nn.Upsample(scale_factor=1.5, mode="bicubic")(torch.tensor(X).to(getattr(torch, dtype)))
    f = flame.nn.Upsample(scale_factor=1.5, mode="bicubic")(flame.tensor(X).to(getattr(flame, dtype)))
    assert str(f.dtype) == {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}[dtype]
    np.testing.assert_allclose(f.float().numpy(), t.float().numpy(), rtol=tol, atol=tol)


def test_an_infinity_reaches_its_neighbours_as_nan():
    x = np.arange(16.0).reshape(1, 1, 4, 4)
    x[0, 0, 1, 1] = np.inf
    for size in ((4, 4), (6, 5)):
        t = torch.nn.functional.interpolate(torch.tensor(x), size=size, mode="bicubic")
        f = flame.nn.functional.interpolate(flame.tensor(x), size=size, mode="bicubic")
        np.testing.assert_allclose(f.numpy(), t.numpy(), rtol=1e-12, equal_nan=True)


@pytest.mark.parametrize("shape", [(1, 2, 5), (1, 1, 2, 3, 4)])
def test_bicubic_wants_a_4d_input(shape):
    with pytest.raises(NotImplementedError):
        torch.nn.functional.interpolate(torch.zeros(shape), scale_factor=2, mode="bicubic")
    with pytest.raises(flame.FlameError):
        flame.nn.functional.interpolate(flame.zeros(*shape), scale_factor=2, mode="bicubic")
