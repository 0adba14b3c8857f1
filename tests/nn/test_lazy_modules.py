"""LazyLinear, LazyConv1d/2d/3d, LazyConvTranspose1d/2d/3d, LazyBatchNorm1d/2d/3d and LazyInstanceNorm1d/2d/3d
against torch.nn's in f64: the shapes they materialise from the first input, the class they become, their
values and gradients with torch's parameters loaded; their initialisation equals the eager layer's from the
same generator state; load_state_dict materialises them; the first call inside @flame.compile; an optimizer
built before the first call is refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn

CASES = [
    ("LazyLinear", (3,), {}, (4, 5)),
    ("LazyLinear", (2,), dict(bias=False), (2, 3, 6)),
    ("LazyConv1d", (4, 3), dict(stride=2, padding=1), (2, 3, 9)),
    ("LazyConv2d", (4, 3), dict(groups=2, padding_mode="reflect", padding=1), (2, 6, 5, 5)),
    ("LazyConv2d", (4, 3), {}, (3, 6, 6)),  # unbatched: in_channels from dim 0
    ("LazyConv3d", (2, 2), dict(bias=False), (1, 3, 4, 4, 4)),
    ("LazyConvTranspose1d", (4, 3), dict(stride=2, output_padding=1), (2, 3, 5)),
    ("LazyConvTranspose2d", (4, 3), dict(groups=2), (2, 6, 4, 4)),
    ("LazyConvTranspose3d", (2, 2), {}, (1, 3, 3, 3, 3)),
    ("LazyBatchNorm1d", (), {}, (4, 3)),
    ("LazyBatchNorm1d", (), dict(momentum=None), (4, 3, 5)),
    ("LazyBatchNorm2d", (), dict(affine=False), (2, 3, 4, 4)),
    ("LazyBatchNorm3d", (), dict(track_running_stats=False), (2, 3, 2, 3, 4)),
    ("LazyInstanceNorm1d", (), dict(affine=True), (2, 3, 5)),
    ("LazyInstanceNorm2d", (), dict(affine=True, track_running_stats=True, bias=False), (2, 3, 4, 4)),
    ("LazyInstanceNorm3d", (), dict(track_running_stats=True, momentum=None), (2, 3, 2, 3, 4)),
]


@pytest.mark.parametrize("name,args,kw,shape", CASES)
def test_materialises_as_torch(name, args, kw, shape):
    m = getattr(nn, name)(*args, dtype=flame.f64, **kw)
    tm = getattr(torch.nn, name)(*args, dtype=torch.float64, **kw)
    assert m.has_uninitialized_params() and isinstance(m.weight if m.weight is not None else m.running_mean,
                                                       (nn.UninitializedParameter, nn.UninitializedBuffer))
    x = np.random.default_rng(0).standard_normal(shape)
    fx, tx = flame.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    tm(tx)  # materialise torch's, then give flame's torch's values at its own first call
    m.register_forward_pre_hook(lambda mod, args: (mod.load_state_dict(tm.state_dict()), None)[1])
    y, ty = m(fx), tm(tx)
    assert type(m).__name__ == type(tm).__name__
    assert not any(isinstance(t, (nn.UninitializedParameter, nn.UninitializedBuffer))
                   for t in (*m.parameters(), *m.buffers()))
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    w = np.random.default_rng(1).standard_normal(ty.shape)
    (y * flame.tensor(w)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(fx.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    for (n, p), (tn, tp) in zip(m.named_parameters(), tm.named_parameters()):
        assert n == tn and p.shape == tuple(tp.shape)
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-10, atol=1e-12)
    for (n, b), (tn, tb) in zip(m.named_buffers(), tm.named_buffers()):
        assert n == tn
        np.testing.assert_allclose(b.numpy(), tb.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("lazy,eager,args,shape", [
    ("LazyLinear", "Linear", (3,), (2, 5)),
    ("LazyConv2d", "Conv2d", (4, 3), (2, 3, 6, 6)),
    ("LazyConvTranspose1d", "ConvTranspose1d", (4, 3), (2, 3, 6)),
    ("LazyBatchNorm2d", "BatchNorm2d", (), (2, 3, 4, 4)),
])
def test_initialised_as_the_eager_layer(lazy, eager, args, shape):
    """The first call draws the parameters as the eager layer's constructor does (same generator state)."""
    x = flame.zeros(*shape)
    flame.manual_seed(7)
    m = getattr(nn, lazy)(*args)
    m(x)
    flame.manual_seed(7)
    ref = getattr(nn, eager)(*([shape[1 if len(shape) > 2 else -1]] if eager == "BatchNorm2d" else
                               [shape[-1] if eager == "Linear" else shape[1], *args]))
    for (n, p), (rn, rp) in zip(m.state_dict().items(), ref.state_dict().items()):
        assert n == rn and p.shape == rp.shape
        if n != "running_mean" and n != "running_var" and n != "num_batches_tracked":
            np.testing.assert_array_equal(p.numpy(), rp.numpy())


def test_load_state_dict_materialises():
    tm = torch.nn.Sequential(torch.nn.LazyLinear(3), torch.nn.LazyBatchNorm1d()).double()
    tm(torch.ones(2, 4, dtype=torch.float64))
    m = nn.Sequential(nn.LazyLinear(3, dtype=flame.f64), nn.LazyBatchNorm1d(dtype=flame.f64))
    m.load_state_dict(tm.state_dict())
    assert m[0].weight.shape == (3, 4) and m[1].running_mean.shape == (3,)
    x = np.random.default_rng(0).standard_normal((5, 4))
    tm.eval()
    m.eval()
    np.testing.assert_allclose(m(flame.tensor(x)).numpy(), tm(torch.tensor(x)).detach().numpy(), rtol=1e-12)
    assert type(m[0]) is nn.Linear and type(m[1]) is nn.BatchNorm1d


def test_first_call_inside_compile():
    """The trace's first call materialises the parameters (concrete, outside the trace); the step then
    trains them, and an optimizer built after that call updates them."""
    flame.manual_seed(0)
    model = nn.Sequential(nn.LazyConv1d(4, 3, dtype=flame.f64), nn.Flatten(), nn.LazyLinear(2, dtype=flame.f64))
    x, y = flame.randn(3, 2, 8, dtype=flame.f64), flame.randn(3, 2, dtype=flame.f64)

    @flame.compile
    def loss_of(x, y):
        return ((model(x) - y) ** 2).mean()

    first = loss_of(x, y)
    assert type(model[0]) is nn.Conv1d and model[2].weight.shape == (2, 24)
    np.testing.assert_allclose(first.item(), ((model(x) - y) ** 2).mean().item(), rtol=1e-12)
    opt = flame.optim.SGD(model.parameters(), lr=0.1)

    @flame.compile
    def step(x, y):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    losses = [step(x, y).item() for _ in range(3)]
    assert losses[2] < losses[0]


def test_an_optimizer_before_the_first_call_is_refused():
    m = nn.LazyLinear(3)
    with pytest.raises(flame.FlameError, match="UninitializedParameter .* run one batch through the model"):
        flame.optim.Adam(m.parameters())
    m(flame.ones(1, 2))
    flame.optim.Adam(m.parameters())


def test_uninitialized_parameter_materialize():
    p = nn.UninitializedParameter()
    assert repr(p) == "<UninitializedParameter>" and p.requires_grad
    p.materialize((2, 3))
    assert type(p) is nn.Parameter and p.shape == (2, 3) and p.requires_grad
    b = nn.UninitializedBuffer(dtype=flame.f64)
    b.materialize(4)
    assert type(b) is flame.Tensor and b.shape == (4,) and b.dtype == flame.f64


def test_lazy_conv_checks_the_input_rank():
    with pytest.raises(flame.ShapeError, match="Expected 3D \\(unbatched\\) or 4D \\(batched\\) input"):
        nn.LazyConv2d(4, 3)(flame.ones(2, 3))
