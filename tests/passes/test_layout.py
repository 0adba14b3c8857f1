"""passes/layout.channels_last: convolutions become channels_last, the activations between them stay
[N, *S, C], the permutes left are at the user's NC* tensors, norms keep their row reductions (over a
permuted view), and the function computes the same values (the reference executor) with and without
the pass."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import flame
import flame.nn.functional as F
from flame import compiler
from flame.ir.builder import Builder
from flame.ir.dtypes import f32
from flame.ir.evaluate import evaluate_graph
from flame.ir.graph import Graph
from flame.ir.types import TensorType
from flame.passes.layout import _commute_reshape, channels_last
from flame.target import DEFAULT_TARGET

PAD = {"stride": [1, 1], "padding": [[1, 1], [1, 1]], "dilation": [1, 1]}


def _conv_bn_relu_conv() -> Graph:
    """x -> conv -> per-channel scale and shift -> relu -> conv -> out, NCHW as the frontend traces it."""
    g = Graph("block")
    x = g.add_input(TensorType((2, 4, 5, 5), f32))
    w1, w2 = (g.add_input(TensorType((4, 4, 3, 3), f32), "param") for _ in range(2))
    s = g.add_input(TensorType((4,), f32), "param")
    b = Builder(g)
    y = b.conv(x, w1, **PAD)
    mean = b.reduce_mean(y, axes=[0, 2, 3], keepdim=True)
    h = b.relu(b.mul(b.sub(y, mean), b.reshape(s, shape=(1, 4, 1, 1))))
    g.outputs = [b.conv(h, w2, **PAD)]
    return g


def _values(g: Graph, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    ins = [rng.standard_normal(v.shape).astype(np.float32) for v in g.inputs]
    got = evaluate_graph(g, ins)
    return [got[v] for v in g.outputs]


def test_block_runs_channels_last_with_transposes_only_at_its_edges():
    g = _conv_bn_relu_conv()
    new = channels_last(g)
    convs = [op for op in new.ops if op.name == "conv"]
    assert [op.attrs["channels_last"] for op in convs] == [True, True]
    assert convs[0].out.shape == (2, 5, 5, 4)
    permutes = [op for op in new.ops if op.name == "permute"]
    # the user's x enters, the result leaves: nothing between the two convolutions is transposed
    assert [op.attrs["perm"] for op in permutes] == [(0, 2, 3, 1), (0, 3, 1, 2)]
    assert permutes[0].inputs[0] is new.inputs[0] and new.outputs[0] is permutes[1].out
    stats = next(op for op in new.ops if op.name == "reduce_mean")
    assert stats.attrs["axes"] == (0, 1, 2)  # BatchNorm's statistics: a column reduction over N, H, W
    np.testing.assert_allclose(_values(new)[0], _values(g)[0], rtol=1e-5, atol=1e-5)


def test_target_keeping_nchw_and_graphs_without_convolutions_are_left_alone():
    g = _conv_bn_relu_conv()
    assert channels_last(g, replace(DEFAULT_TARGET, conv_channels_last=False)) is g
    plain = Graph("mlp")
    x = plain.add_input(TensorType((3, 4), f32))
    plain.outputs = [Builder(plain).relu(x)]
    assert channels_last(plain) is plain


def test_group_norm_statistics_stay_row_reductions_over_channels_last_data():
    """GroupNorm reshapes [N, C, H, W] to [N, G, C/G, H, W] and reduces the trailing dims; channels-last,
    that is [N, H, W, G, C/G]: the reduction reads the view [N, G, H, W, C/G] (channels innermost), so
    it stays a row reduction, and nothing between the two convolutions is transposed."""
    g = Graph("gn")
    x = g.add_input(TensorType((2, 8, 4, 4), f32))
    w1, w2 = (g.add_input(TensorType((8, 8, 3, 3), f32), "param") for _ in range(2))
    b = Builder(g)
    y = b.conv(x, w1, **PAD)
    grouped = b.reshape(y, shape=(2, 4, 2, 4, 4))
    centred = b.sub(grouped, b.reduce_mean(grouped, axes=[2, 3, 4], keepdim=True))
    h = b.silu(b.reshape(centred, shape=(2, 8, 4, 4)))
    g.outputs = [b.conv(h, w2, **PAD)]
    new = channels_last(g)
    (mean,) = [op for op in new.ops if op.name == "reduce_mean"]
    assert mean.attrs["axes"] == (2, 3, 4) and mean.inputs[0].shape == (2, 4, 4, 4, 2)
    view = mean.inputs[0].producer
    assert view.name == "permute" and view.inputs[0].shape == (2, 4, 4, 4, 2) and view.attrs["perm"] == (0, 3, 1, 2, 4)
    permutes = [op for op in new.ops if op.name == "permute" and op is not view]
    assert [op.attrs["perm"] for op in permutes] == [(0, 2, 3, 1), (0, 3, 1, 2)]  # x enters, the result leaves
    np.testing.assert_allclose(_values(new)[0], _values(g)[0], rtol=1e-5, atol=1e-5)


def test_global_average_pool_reduces_the_channels_last_value_over_its_middle_dims():
    """mean over H, W of a channels-last activation: a reduction over dims 1, 2 of [N, H, W, C] itself
    (a coalesced column reduction), not a row reduction of a permuted view (one element per channel
    stride: 252 us at 9% of copy in resnet_block_train on an H100)."""
    g = Graph("pool")
    x = g.add_input(TensorType((2, 4, 5, 5), f32))
    w = g.add_input(TensorType((4, 4, 3, 3), f32), "param")
    b = Builder(g)
    g.outputs = [b.reduce_mean(b.relu(b.conv(x, w, **PAD)), axes=[2, 3], keepdim=False)]
    new = channels_last(g)
    (pool,) = [op for op in new.ops if op.name == "reduce_mean"]
    assert pool.attrs["axes"] == (1, 2) and pool.inputs[0].shape == (2, 5, 5, 4) and pool.out.shape == (2, 4)
    assert pool.inputs[0].producer.name == "relu"
    assert [op.attrs["perm"] for op in new.ops if op.name == "permute"] == [(0, 2, 3, 1)]  # x enters only
    np.testing.assert_allclose(_values(new)[0], _values(g)[0], rtol=1e-5, atol=1e-5)


def test_reshape_commutes_with_a_permute_when_the_dims_it_splits_stay_adjacent():
    nhwc_to_nchw = (0, 3, 1, 2)
    # nearest 2x upsampling: [N, C, H, W] -> [N, C, H, 1, W, 1] keeps C last in memory
    shape, q = _commute_reshape((2, 8, 4, 4), (2, 8, 4, 1, 4, 1), nhwc_to_nchw)
    assert shape == (2, 4, 1, 4, 1, 8) and q == (0, 5, 1, 2, 3, 4)
    # ... and [N, C, H, 2, W, 2] -> [N, C, 2H, 2W] merges dims adjacent in that order
    assert _commute_reshape((2, 8, 4, 2, 4, 2), (2, 8, 8, 8), q) == ((2, 8, 8, 8), nhwc_to_nchw)
    # GroupNorm's split of C: [N, H, W, G, C/G] in memory
    assert _commute_reshape((2, 8, 4, 4), (2, 4, 2, 4, 4), nhwc_to_nchw) == ((2, 4, 4, 4, 2), (0, 3, 4, 1, 2))
    # merging C with H is not a reshape of the channels-last data
    assert _commute_reshape((2, 8, 4, 4), (2, 32, 4), nhwc_to_nchw) is None


def test_reshape_of_an_empty_channels_last_value_is_left_alone():
    """A reshape of an empty batch has no element counts to group dims by: it stays after the permute,
    and a compiled step over an empty batch runs (its weight gradient from the other term alone)."""
    assert _commute_reshape((0, 8, 4, 4), (0, 8, 16), (0, 3, 1, 2)) is None
    x = flame.tensor(np.zeros((0, 2, 4, 3), np.float32), requires_grad=True)
    w = flame.tensor(np.ones((3, 2, 3, 3), np.float32), requires_grad=True)

    @flame.compile
    def step(x, w):
        y = F.relu(F.conv2d(x, w, padding=1)).reshape(-1)
        (y.sum() + (w * w).sum()).backward()
        return y

    assert step(x, w).shape == (0,)
    np.testing.assert_array_equal(w.grad.numpy(), 2 * np.ones((3, 2, 3, 3), np.float32))


def _unet_like_step(layout: bool, monkeypatch) -> list[np.ndarray]:
    """Conv, GroupNorm, SiLU, a stride-2 conv, nearest upsampling, a skip concatenation, a residual
    add; the loss's gradients with respect to every weight and the input, compiled."""
    target = compiler.capabilities("reference")
    monkeypatch.setattr(compiler, "_target", lambda *settings: replace(target, conv_channels_last=layout))
    rng = np.random.default_rng(1)
    t = lambda *s: flame.tensor(rng.standard_normal(s).astype(np.float32) * 0.3, requires_grad=True)  # noqa: E731
    x, w_in, w_down, w_up, w_out = t(2, 3, 8, 8), t(8, 3, 3, 3), t(8, 8, 3, 3), t(8, 16, 3, 3), t(3, 8, 1, 1)
    gn_w, gn_b = t(8), t(8)

    @flame.compile
    def step(x):
        h = F.conv2d(x, w_in, padding=1)
        d = F.silu(F.group_norm(F.conv2d(h, w_down, stride=2, padding=1), 4, gn_w, gn_b))
        u = F.interpolate(d, scale_factor=2, mode="nearest")
        y = F.conv2d(F.relu(flame.cat([u, h], 1)), w_up, padding=1) + h
        loss = (F.conv2d(y, w_out) ** 2).mean()
        loss.backward()
        return loss

    loss = step(x)
    convs = [op for op in step.optimized(x).ops if op.name.startswith("conv")]
    assert len(convs) == 12 and all(op.attrs["channels_last"] == layout for op in convs)
    return [np.asarray(loss.numpy())] + [p.grad.numpy() for p in (x, w_in, w_down, w_up, w_out, gn_w, gn_b)]


def test_training_step_is_the_same_with_and_without_channels_last(monkeypatch):
    nchw = _unet_like_step(False, monkeypatch)
    nhwc = _unet_like_step(True, monkeypatch)
    for a, b in zip(nhwc, nchw):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["resnet_block_train", "unet_train"])
def test_bench_cases_keep_their_convolutions_channels_last(name):
    """The conv bench cases (quick sizes): every convolution op of the compiled step is channels_last."""
    from flame.bench.cases_conv import CONV
    from flame.bench.spec import generate, to_flame

    case = next(c for c in CONV if c.name == name)
    s = case.sizes(True)
    inputs = case.inputs(s)
    a = {n: to_flame(v, inputs[n].dtype, copy=True) for n, v in generate(inputs, np, 0).items()}
    step = flame.compile(case.flame(s, a, lambda f: f).call)
    g = step.optimized(*[a[n] for n, i in inputs.items() if not i.state])
    convs = [op for op in g.ops if op.name.startswith("conv")]
    assert convs and all(op.attrs["channels_last"] for op in convs)


def test_group_norm_block_is_one_kernel_forward_and_has_no_interior_transposes(monkeypatch):
    """conv -> GroupNorm -> SiLU -> conv (+ residual), planned for CUDA: each GroupNorm forward (with
    the conv's bias before and the SiLU after it) is one row kernel that reads and writes channels-last;
    its backward's row reductions are one row kernel; no kernel between the convolutions only
    transposes (the transposes left are at the user's NCHW input and the loss)."""
    cuda = compiler.capabilities("cuda")
    monkeypatch.setattr(compiler, "capabilities", lambda name: cuda)
    monkeypatch.setattr(compiler, "_CACHE", type(compiler._CACHE)())
    rng = np.random.default_rng(2)
    t = lambda *s: flame.tensor(rng.standard_normal(s).astype(np.float32) * 0.3, requires_grad=True)  # noqa: E731
    x, w0, w1, w2 = t(2, 8, 8, 8), t(8, 8, 3, 3), t(8, 8, 3, 3), t(8, 8, 3, 3)
    b1, b2, gw, gb = t(8), t(8), t(8), t(8)

    @flame.compile
    def step(x):
        h = F.conv2d(x, w0, padding=1)
        y = F.conv2d(F.silu(F.group_norm(h, 4, gw, gb)), w1, b1, padding=1)
        y = F.conv2d(F.silu(F.group_norm(y, 4, gw, gb)), w2, b2, padding=1) + h
        loss = (y**2).mean()
        loss.backward()
        return loss

    g = step.optimized(x)
    groups = g.groups
    names = [[op.name for op in k.ops] for k in groups]
    stats = [k for k in names if k.count("reduce_mean") == 2]  # a GroupNorm's mean and variance
    assert len(stats) == 2 and all("silu" in k and "rsqrt" in k for k in stats)
    row_grads = [k for k in names if k.count("reduce_sum") >= 2 and "mul" in k]  # each backward's two row sums
    assert len(row_grads) == 2
    transposes = [k for k, n in zip(groups, names) if set(n) <= {"permute", "reshape"} and "permute" in n]
    # x entering channels-last, gradients leaving NCHW: only at the user's tensors
    assert transposes and all(k.ops[0].inputs[0] in g.inputs or set(k.outputs) <= set(g.outputs) for k in transposes)
