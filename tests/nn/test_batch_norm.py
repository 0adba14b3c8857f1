"""Training-mode BatchNorm (frontend/norms.py _batch_norm_train: two-pass statistics, centred
scale-and-shift form) against torch on the reference executor: outputs, every gradient and the running statistics
after several steps, for 1-d/2-d/3-d inputs with and without affine parameters, f32 and bf16, odd
sizes, batch 2 and activations whose mean is many standard deviations; and its kernels over
channels-last data: the forward's mean and centred sum of squares, and the backward's two sums carried
together by one kernel."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
import flame.nn.functional as F
from flame.ir.graph import Kind
from flame.ir.indexmap import is_reduction, trailing_reduced

SHAPES = [(2, 3), (5, 7), (2, 3, 5), (2, 5, 3, 7), (3, 4, 2, 3, 5)]


def _torch_step(x, w, b, rm, rv, g, momentum):
    xt = torch.tensor(x, requires_grad=True)
    wt = None if w is None else torch.tensor(w, requires_grad=True)
    bt = None if b is None else torch.tensor(b, requires_grad=True)
    y = torch.nn.functional.batch_norm(xt, rm, rv, wt, bt, training=True, momentum=momentum)
    (y * torch.tensor(g)).sum().backward()
    return y.detach().numpy(), [t.grad.numpy() for t in (xt, wt, bt) if t is not None]


def _flame_step(x, w, b, rm, rv, g, momentum, dtype):
    def cast(a):
        return flame.tensor(a).to(dtype)

    xf, gf = cast(x), cast(g)
    xf.requires_grad_(True)
    params = [None if a is None else cast(a) for a in (w, b)]
    for p in params:
        if p is not None:
            p.requires_grad_(True)
    y = F.batch_norm(xf, rm, rv, params[0], params[1], training=True, momentum=momentum)
    (y.float() * gf.float()).sum().backward()
    grads = [t.grad.float().numpy() for t in (xf, *params) if t is not None]
    return y.float().numpy(), grads


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_batch_norm_training_matches_torch(shape, affine, dtype):
    rng = np.random.default_rng(sum(shape))
    c = shape[1]
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == "f32" else dict(rtol=3e-2, atol=5e-2)
    fd = getattr(flame, dtype)

    def rounded(a):  # torch gets what flame sees: the bf16 inputs
        return np.asarray(flame.tensor(a).to(fd).float().numpy())

    w = rounded(1 + 0.2 * rng.standard_normal(c).astype(np.float32)) if affine else None
    b = rounded(0.2 * rng.standard_normal(c).astype(np.float32)) if affine else None
    rm_t, rv_t = torch.zeros(c), torch.ones(c)
    rm_f, rv_f = flame.zeros(c), flame.ones(c)
    for step in range(3):
        x = rounded(rng.standard_normal(shape).astype(np.float32) * 2 + 0.5 * step)
        g = rounded(rng.standard_normal(shape).astype(np.float32))
        want_y, want_g = _torch_step(x, w, b, rm_t, rv_t, g, 0.3)
        got_y, got_g = _flame_step(x, w, b, rm_f, rv_f, g, 0.3, fd)
        np.testing.assert_allclose(got_y, want_y, **tol)
        for got, want in zip(got_g, want_g):
            np.testing.assert_allclose(got, want, **tol)
    np.testing.assert_allclose(rm_f.numpy(), rm_t.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rv_f.numpy(), rv_t.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("offset", [0.0, 3.0, 30.0])
def test_variance_of_offset_bf16_activations(offset):
    """f32 statistics over bf16 activations whose mean is `offset` standard deviations: the result
    stays within bf16 rounding of torch's normalisation and gradients."""
    rng = np.random.default_rng(1)
    shape, c = (8, 16, 12, 12), 16
    x = rng.standard_normal(shape).astype(np.float32) * (0.5 + rng.random((1, c, 1, 1))) + offset
    x = np.asarray(flame.tensor(x).to(flame.bf16).float().numpy())
    g = np.asarray(flame.tensor(rng.standard_normal(shape).astype(np.float32)).to(flame.bf16).float().numpy())
    want_y, want_g = _torch_step(x, None, None, None, None, g, 0.1)
    got_y, got_g = _flame_step(x, None, None, None, None, g, 0.1, flame.bf16)
    np.testing.assert_allclose(got_y, want_y, rtol=2e-2, atol=3e-2)
    np.testing.assert_allclose(got_g[0], want_g[0], rtol=2e-2, atol=3e-2)


def test_channels_last_statistics_kernels():
    """conv -> BatchNorm -> ReLU -> conv -> loss, trained: the forward's mean is one column sum and its
    centred sum((x - mean)^2) another (it needs the mean: two passes, as PyTorch's); the backward's
    sum(dy), sum(dy * (x - mean)) are column reductions carried two by two by one kernel (they ride
    in one pass over the conv's data gradient and x)."""
    rng = np.random.default_rng(0)
    w = flame.tensor(rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    w2 = flame.tensor(rng.standard_normal((4, 4, 3, 3)).astype(np.float32))
    gamma, beta = flame.ones(4), flame.zeros(4)
    x = None

    def loss(w_, g_, b_):
        h = F.relu(F.batch_norm(F.conv2d(x, w_, padding=1), None, None, g_, b_, training=True))
        return (F.conv2d(h, w2, padding=1) ** 2).mean()

    @flame.compile
    def step(x):
        return flame.grad(loss, (0, 1, 2))(w, gamma, beta)

    x = flame.tensor(rng.standard_normal((2, 3, 5, 7)).astype(np.float32))
    g = step.optimized(x)
    # (a per-channel [1, 1, 1, C] -> [C] sum, the weight's broadcast undone, may stay a kernel)
    alone = [grp for grp in g.groups if grp.kind == Kind.REDUCTION and grp.ops[0].inputs[0].type.numel > 4]
    carried = [[op for op in grp.ops if is_reduction(op) and trailing_reduced(op) is None]
               for grp in g.groups if grp.kind == Kind.ROWS]
    assert sorted([1] * len(alone) + [len(c) for c in carried if c]) == [1, 1, 2]
