"""What a conv + BatchNorm + ReLU training step keeps for its backward and when its backward runs:
two activations per layer (BatchNorm's centred input x - mean, which its two-pass variance computes
in place of keeping the convolution's result, and the ReLU output, which the next convolution reads
anyway) and no ReLU mask beside them; a weight gradient that is the last
reader of its layer's input runs before the data gradient; recomputations run right before what
reads them. The gradients are torch's on the reference executor."""

from __future__ import annotations

import numpy as np
import torch

import flame
import flame.nn.functional as F
from flame.ir import Builder, Graph, TensorType
from flame.ir.dtypes import f32
from flame.passes.autodiff import autodiff, is_backward
from flame.passes.fuse import fuse
from flame.passes.remat import RecomputeLoc

N, C, HW, LAYERS = 2, 4, 6, 3


def _params(rng):
    return [(rng.standard_normal((C, C, 3, 3)).astype(np.float32) * 0.3,
             1 + 0.1 * rng.standard_normal(C).astype(np.float32), 0.1 * rng.standard_normal(C).astype(np.float32))
            for _ in range(LAYERS)]


def _loss(fn, x, params, bn):
    for w, g, b in params:
        x = fn.relu(bn(fn.conv2d(x, w, padding=1), g, b))
    return (x * x).mean()


def _flame_step(params):
    def bn(h, g, b):
        return F.batch_norm(h, None, None, g, b, training=True)

    @flame.compile
    def step(x, *flat):
        return flame.grad(lambda *p: _loss(F, x, list(zip(p[::3], p[1::3], p[2::3])), bn),
                          tuple(range(3 * LAYERS)))(*flat)

    return step


def test_conv_bn_relu_saves_two_activations_per_layer_and_matches_torch():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, C, HW, HW)).astype(np.float32)
    params = _params(rng)
    flat = [flame.tensor(a) for p in params for a in p]
    step = _flame_step(params)
    grads = step(flame.tensor(x), *flat)

    tp = [tuple(torch.tensor(a, requires_grad=True) for a in p) for p in params]
    loss = _loss(torch.nn.functional, torch.tensor(x), tp,
                 lambda h, g, b: torch.nn.functional.batch_norm(h, None, None, g, b, training=True))
    loss.backward()
    for got, want in zip(grads, [a.grad for p in tp for a in p]):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-4, atol=2e-5)

    g = step.optimized(flame.tensor(x), *flat)
    size = N * C * HW * HW
    users = g.users()
    saved = [op.name for op in g.ops  # forward values the backward reads (memory_report's "saved")
             if not is_backward(op) and op.out.type.numel == size and any(is_backward(u) for u in users[op.out])]
    # permute: x channels-last; sub: each layer's centred value x - mean, which the kernel of its variance's
    # sum((x - mean)^2) writes and its BatchNorm's backward reads
    assert sorted(saved) == ["permute"] + ["relu"] * LAYERS + ["sub"] * LAYERS
    for grp in g.groups:  # and no kernel of the forward computes a mask for the backward (a per-channel one,
        if not all(is_backward(op) for op in grp.ops):  # BatchNorm's clamp of its variance, is no activation)
            assert not [v for v in grp.outputs
                           if v.dtype.name == "bool" and v.type.numel == size and any(is_backward(u) for u in users[v])]


def test_a_weight_gradient_that_frees_its_input_runs_before_the_data_gradient():
    """h = conv(x, w1), out = conv(h, w2): h's last reader is w2's gradient, which then runs first."""
    g = Graph("two_convs")
    b = Builder(g)
    x = g.add_input(TensorType((2, 4, 8, 8), f32), "data")
    w1 = g.add_input(TensorType((4, 4, 3, 3), f32), "param")
    w2 = g.add_input(TensorType((4, 4, 3, 3), f32), "param")
    attrs = dict(stride=[1, 1], padding=[[1, 1], [1, 1]], dilation=[1, 1], groups=1, channels_last=False)
    h = b.conv(x, w1, **attrs)
    out = b.conv(h, w2, **attrs)
    loss = b.reduce_sum(b.mul(out, out), axes=[0, 1, 2, 3], keepdim=False)
    g.outputs = [loss, *autodiff(g, loss, [w1, w2])]
    order = [grp.ops[0] for grp in fuse(g).groups if grp.kind == "conv"]
    names = [op.name for op in order]
    assert names[:2] == ["conv", "conv"]
    w2_grad = next(op for op in order if op.name == "conv_grad_weight" and op.inputs[0].producer is not None)
    assert order.index(w2_grad) < names.index("conv_grad_input")


def test_recomputations_read_by_different_kernels_are_not_merged_into_one_launch():
    """Two identical recomputations, each read by its own matmul: merged, the second would run (and
    its value live) from before the first matmul on."""
    g = Graph("recompute")
    b = Builder(g)
    x1, x2, w = (g.add_input(TensorType((8, 8), f32), "data") for _ in range(3))
    r1 = b.exp(x1)
    o1 = b.matmul(r1, w)
    r2 = b.exp(x2)
    o2 = b.matmul(r2, o1)
    for r in (r1, r2):
        r.producer.loc = RecomputeLoc("")
    g.outputs = [o2]
    groups = fuse(g).groups
    assert [grp.kind for grp in groups] == ["elementwise", "matmul", "elementwise", "matmul"]
    assert groups[1].ops[0].inputs[0] is groups[0].ops[-1].out  # each recomputation right before its reader
    assert groups[3].ops[0].inputs[0] is groups[2].ops[-1].out
