"""The convolutional functions of flame.nn.functional against PyTorch on the reference executor: values
and gradients (eager backward) over the parameter combinations PyTorch users reach for, odd sizes and
batch 1; bad input raises a ShapeError naming the user's line."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import flame
import flame.nn.functional as F

RTOL, ATOL = 1e-5, 1e-5


def _pair(rng, *shapes):
    """Each shape as (flame tensor requiring grad, torch tensor requiring grad) with the same f32 values."""
    out = []
    for s in shapes:
        a = rng.standard_normal(s).astype(np.float32)
        out.append((flame.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)))
    return out


def _check(fl_fn, th_fn, pairs, rtol=RTOL, atol=ATOL):
    """Forward values, then the gradient of sum(y * c) for a random c, for every input."""
    y = fl_fn(*[p[0] for p in pairs])
    yt = th_fn(*[p[1] for p in pairs])
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=rtol, atol=atol)
    c = np.random.default_rng(7).standard_normal(tuple(yt.shape)).astype(np.float32)
    (y * flame.tensor(c)).sum().backward()
    (yt * torch.tensor(c)).sum().backward()
    for fl, th in pairs:
        np.testing.assert_allclose(fl.grad.numpy(), th.grad.numpy(), rtol=rtol, atol=atol)


CONV2D = [  # x shape, w shape, kwargs
    ((2, 3, 9, 8), (4, 3, 3, 3), {}),
    ((1, 4, 7, 7), (6, 2, 3, 3), {"stride": 2, "padding": 1, "groups": 2}),
    ((2, 3, 8, 9), (5, 3, 4, 2), {"padding": "same", "dilation": (2, 1)}),
    ((2, 3, 6, 6), (2, 3, 3, 3), {"padding": "valid", "stride": (1, 2)}),
    ((1, 6, 5, 7), (6, 1, 3, 3), {"padding": 1, "groups": 6}),  # depthwise
    ((3, 2, 5, 5), (4, 2, 1, 1), {"stride": 2}),
]


@pytest.mark.parametrize("xs,ws,kw", CONV2D)
@pytest.mark.parametrize("bias", [False, True])
def test_conv2d(xs, ws, kw, bias):
    rng = np.random.default_rng(0)
    pairs = _pair(rng, xs, ws, (ws[0],)) if bias else _pair(rng, xs, ws)
    _check(lambda *a: F.conv2d(*a, **kw), lambda *a: TF.conv2d(*a, **kw), pairs)


@pytest.mark.parametrize("d,xs,ws,kw", [
    (1, (2, 3, 11), (4, 3, 3), {"stride": 2, "padding": 2, "dilation": 2}),
    (1, (1, 4, 8), (4, 2, 4), {"padding": "same", "groups": 2}),
    (3, (1, 2, 5, 4, 6), (3, 2, 2, 3, 3), {"stride": (1, 2, 1), "padding": (1, 0, 1)}),
    (3, (2, 2, 4, 4, 4), (2, 1, 3, 3, 3), {"padding": "same", "groups": 2}),
])
def test_conv1d_conv3d(d, xs, ws, kw):
    fl, th = {1: (F.conv1d, TF.conv1d), 3: (F.conv3d, TF.conv3d)}[d]
    pairs = _pair(np.random.default_rng(1), xs, ws, (ws[0],))
    _check(lambda *a: fl(*a, **kw), lambda *a: th(*a, **kw), pairs)


def test_conv2d_unbatched_input():
    pairs = _pair(np.random.default_rng(2), (3, 6, 5), (2, 3, 3, 3))
    _check(lambda x, w: F.conv2d(x, w, padding=1), lambda x, w: TF.conv2d(x, w, padding=1), pairs)


@pytest.mark.parametrize("d,xs,ws,kw", [
    (2, (2, 4, 5, 6), (4, 3, 3, 3), {"stride": 2, "padding": 1, "output_padding": 1}),
    (2, (1, 4, 4, 3), (4, 2, 2, 3), {"stride": (2, 3), "groups": 2, "dilation": (1, 2)}),
    (2, (2, 3, 5, 5), (3, 2, 4, 4), {"stride": 2, "padding": 1}),
    (1, (2, 3, 7), (3, 4, 3), {"stride": 3, "padding": 1, "output_padding": 2}),
    (3, (1, 2, 3, 3, 2), (2, 2, 2, 2, 2), {"stride": 2}),
])
def test_conv_transpose(d, xs, ws, kw):
    fl = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[d]
    th = {1: TF.conv_transpose1d, 2: TF.conv_transpose2d, 3: TF.conv_transpose3d}[d]
    pairs = _pair(np.random.default_rng(3), xs, ws, (ws[1] * kw.get("groups", 1),))
    _check(lambda *a: fl(*a, **kw), lambda *a: th(*a, **kw), pairs)


@pytest.mark.parametrize("xs,kw", [
    ((2, 3, 8, 8), {"kernel_size": 2}),
    ((1, 2, 9, 7), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ((2, 2, 7, 9), {"kernel_size": (3, 2), "stride": (2, 1), "dilation": (1, 2)}),
    ((1, 3, 7, 6), {"kernel_size": 3, "stride": 2, "ceil_mode": True}),
    ((2, 1, 5, 5), {"kernel_size": 2, "stride": 1, "padding": 1}),
])
def test_max_pool2d(xs, kw):
    _check(lambda x: F.max_pool2d(x, **kw), lambda x: TF.max_pool2d(x, **kw), _pair(np.random.default_rng(4), xs))


def test_max_pool2d_gradient_goes_to_the_first_maximum_of_a_tie():
    a = np.zeros((1, 1, 4, 4), np.float32)  # every window is a tie (e.g. after a ReLU)
    a[0, 0, 3, 3] = 1.0
    pairs = [(flame.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True))]
    _check(lambda x: F.max_pool2d(x, 3, 1), lambda x: TF.max_pool2d(x, 3, 1), pairs)


def test_max_pool_1d_3d():
    rng = np.random.default_rng(5)
    _check(lambda x: F.max_pool1d(x, 3, 2, 1), lambda x: TF.max_pool1d(x, 3, 2, 1), _pair(rng, (2, 3, 10)))
    _check(lambda x: F.max_pool3d(x, 2), lambda x: TF.max_pool3d(x, 2), _pair(rng, (1, 2, 4, 6, 4)))


@pytest.mark.parametrize("xs,kw", [
    ((2, 3, 8, 8), {"kernel_size": 2}),
    ((1, 2, 9, 7), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ((1, 2, 9, 7), {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False}),
    ((2, 2, 7, 8), {"kernel_size": (3, 2), "stride": (2, 1), "ceil_mode": True}),
    ((1, 2, 6, 7), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False}),
    ((1, 2, 6, 6), {"kernel_size": 2, "divisor_override": 3}),
])
def test_avg_pool2d(xs, kw):
    _check(lambda x: F.avg_pool2d(x, **kw), lambda x: TF.avg_pool2d(x, **kw), _pair(np.random.default_rng(6), xs))


@pytest.mark.parametrize("xs,out", [((2, 3, 8, 8), 1), ((1, 2, 8, 6), (4, 3)), ((2, 2, 7, 5), (3, 2)),
                                    ((1, 2, 5, 9), (None, 4)), ((1, 1, 10, 10), (7, 10))])
def test_adaptive_avg_pool2d(xs, out):
    _check(lambda x: F.adaptive_avg_pool2d(x, out), lambda x: TF.adaptive_avg_pool2d(x, out),
           _pair(np.random.default_rng(8), xs))


@pytest.mark.parametrize("xs,kw", [
    ((2, 3, 4, 5), {"scale_factor": 2}),
    ((1, 2, 4, 5), {"size": (7, 3)}),
    ((1, 2, 5, 4), {"scale_factor": 1.5}),
    ((2, 3, 4, 5), {"scale_factor": 2, "mode": "bilinear"}),
    ((1, 2, 4, 5), {"size": (7, 3), "mode": "bilinear", "align_corners": True}),
    ((1, 2, 5, 4), {"size": (8, 9), "mode": "bilinear", "align_corners": False}),
    ((1, 2, 6, 6), {"scale_factor": 0.5, "mode": "bilinear"}),
    ((2, 2, 7), {"scale_factor": 3, "mode": "linear", "align_corners": True}),
    ((1, 1, 3, 4, 2), {"scale_factor": 2, "mode": "trilinear"}),
])
def test_interpolate(xs, kw):
    _check(lambda x: F.interpolate(x, **kw), lambda x: TF.interpolate(x, **kw), _pair(np.random.default_rng(9), xs))


@pytest.mark.parametrize("xs,groups", [((2, 6, 5, 4), 3), ((1, 4, 7), 2), ((3, 8, 3, 3), 8), ((2, 4, 2, 3, 2), 1)])
def test_group_norm(xs, groups):
    pairs = _pair(np.random.default_rng(10), xs, (xs[1],), (xs[1],))
    _check(lambda x, w, b: F.group_norm(x, groups, w, b), lambda x, w, b: TF.group_norm(x, groups, w, b, eps=1e-5),
           pairs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_group_norm_of_one_or_no_element_per_group(dtype):
    """One element per group: x - mean is exactly 0, so the output is exactly the bias and the input and
    weight gradients exactly 0 (torch, which folds the mean into the shift as x * scale + (b - mean *
    scale), lands within |x| * eps / sqrt(eps) of that: its float64 answer is off by 1e-12 here, which is
    why the random programs keep clear of such groups). No element per group: an empty output and zero
    gradients (torch gives the bias's, but NaN for the weight's, 0 times the NaN statistics of nothing)."""
    rng, dt = np.random.default_rng(12), getattr(flame, dtype)
    x, w, b = rng.standard_normal((2, 4, 1)) * 10 - 300, rng.standard_normal(4) + 1, rng.standard_normal(4)
    xs = [flame.tensor(a, dtype=dt, requires_grad=True) for a in (x, w, b)]
    ts = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    for args, lib, fn in ((xs, flame, F.group_norm), (ts, torch, TF.group_norm)):
        y = fn(args[0], 4, args[1], args[2])
        (y * y).sum().backward()
        if lib is flame:
            np.testing.assert_array_equal(y.numpy(), np.broadcast_to(b[:, None], (2, 4, 1)).astype(dtype))
            np.testing.assert_array_equal(xs[0].grad.numpy(), 0)
            np.testing.assert_array_equal(xs[1].grad.numpy(), 0)
            np.testing.assert_allclose(xs[2].grad.numpy(), 4 * b, rtol=1e-6)
        else:
            np.testing.assert_allclose(y.detach().numpy(), np.broadcast_to(b[:, None], (2, 4, 1)), atol=1e-10)
    one = flame.tensor(x, dtype=dt, requires_grad=True)  # layer_norm over one element: the bias too
    y = F.layer_norm(one, (1,), xs[1][:1], xs[2][:1])
    (y * y).sum().backward()
    np.testing.assert_array_equal(y.numpy(), np.full((2, 4, 1), b[0], dtype))
    np.testing.assert_array_equal(one.grad.numpy(), 0)
    empty = flame.tensor(np.zeros((2, 4, 0)), dtype=dt, requires_grad=True)
    xs[1].grad = xs[2].grad = None
    y = F.group_norm(empty, 2, xs[1], xs[2])
    y.sum().backward()
    assert y.shape == (2, 4, 0)
    np.testing.assert_array_equal(xs[1].grad.numpy(), 0)
    np.testing.assert_array_equal(xs[2].grad.numpy(), 0)


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("xs", [(4, 3, 5, 5), (6, 4), (3, 2, 7)])
def test_batch_norm_functional(xs, training):
    rng = np.random.default_rng(11)
    pairs = _pair(rng, xs, (xs[1],), (xs[1],))
    stats = [rng.standard_normal(xs[1]).astype(np.float32), rng.uniform(0.5, 2, xs[1]).astype(np.float32)]
    rm, rv = (flame.tensor(s) for s in stats)
    rmt, rvt = (torch.tensor(s) for s in stats)
    _check(lambda x, w, b: F.batch_norm(x, rm, rv, w, b, training, 0.3),
           lambda x, w, b: TF.batch_norm(x, rmt, rvt, w, b, training, 0.3), pairs, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(rm.numpy(), rmt.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rv.numpy(), rvt.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dt,tol", [("f16", 2e-3), ("bf16", 2e-2)])
def test_conv2d_low_precision_accumulates_in_f32(dt, tol):
    rng = np.random.default_rng(12)
    x, w = rng.standard_normal((2, 16, 6, 6)), rng.standard_normal((8, 16, 3, 3)) * 0.1
    y = F.conv2d(flame.tensor(x, dtype=dt), flame.tensor(w, dtype=dt), padding=1)
    xt, wt = (torch.tensor(flame.tensor(a, dtype=dt).float().numpy()) for a in (x, w))  # the rounded inputs
    want = TF.conv2d(xt.double(), wt.double(), padding=1).numpy()
    assert y.dtype.name == dt
    np.testing.assert_allclose(y.float().numpy(), want, rtol=tol, atol=tol * 4)


@pytest.mark.parametrize("call,match", [
    (lambda: F.conv2d(flame.zeros(1, 3, 8, 8), flame.zeros(4, 2, 3, 3)), "3 channels but the weight expects 2"),
    (lambda: F.conv2d(flame.zeros(1, 4, 8, 8), flame.zeros(6, 2, 3, 3), groups=3), "groups=3 must divide"),
    (lambda: F.conv2d(flame.zeros(1, 3, 4, 4), flame.zeros(2, 3, 7, 7), padding=1), "larger than the padded input"),
    (lambda: F.conv2d(flame.zeros(1, 3, 8, 8), flame.zeros(2, 3, 3, 3), stride=2, padding="same"), "strided"),
    (lambda: F.conv2d(flame.zeros(3, 8, 8, 1, 1), flame.zeros(2, 3, 3, 3)), "4-D"),
    (lambda: F.max_pool2d(flame.zeros(1, 1, 3, 3), 5), "larger than the padded input"),
    (lambda: F.group_norm(flame.zeros(2, 6, 3, 3), 4), "must divide"),
    (lambda: F.conv_transpose2d(flame.zeros(1, 3, 4, 4), flame.zeros(4, 2, 3, 3)), "3 channels"),
])
def test_bad_input_names_the_users_line(call, match):
    with pytest.raises(flame.ShapeError, match=match) as e:
        call()
    assert "test_conv_functional.py:" in str(e.value)


def test_bad_input_inside_compile_names_the_users_line():
    w = flame.zeros(4, 5, 3, 3)

    @flame.compile
    def step(x):
        return F.conv2d(x, w)  # the line the error must name

    with pytest.raises(flame.ShapeError, match="3 channels but the weight expects 5") as e:
        step(flame.zeros(1, 3, 8, 8))
    assert "return F.conv2d(x, w)" in str(e.value)


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_low_precision_layers_follow_f32(dt):
    """Every function runs in f16/bf16 (result in that dtype) and stays close to its f32 result."""
    rng = np.random.default_rng(13)
    x = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)
    w = (rng.standard_normal((4, 2, 3, 3)) * 0.3).astype(np.float32)
    fns = [lambda x, w: F.conv2d(x, w, padding=1, groups=2), lambda x, w: F.conv_transpose2d(x, w, stride=2),
           lambda x, w: F.max_pool2d(x, 3, 2, 1), lambda x, w: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
           lambda x, w: F.adaptive_avg_pool2d(x, 4), lambda x, w: F.interpolate(x, scale_factor=2),
           lambda x, w: F.interpolate(x, size=(5, 9), mode="bilinear"), lambda x, w: F.group_norm(x, 2),
           lambda x, w: F.batch_norm(x, None, None, training=True)]
    tol = 2e-2 if dt == "f16" else 1e-1
    for fn in fns:
        want = fn(flame.tensor(x), flame.tensor(w)).numpy()
        got = fn(flame.tensor(x, dtype=dt), flame.tensor(w, dtype=dt))
        assert got.dtype.name == dt
        np.testing.assert_allclose(got.float().numpy(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", ["batch_norm", "instance_norm"])
@pytest.mark.parametrize("shape,perm", [((1, 3, 4, 1), (2, 1, 0, 3)), ((2, 3, 4, 5), (2, 3, 0, 1))])
def test_norm_gradient_through_a_permute(name, shape, perm):
    """The gradient through a permute after the norm. torch 2.13's CPU kernel gets it wrong from a
    gradient laid out channels-last (against finite differences), so torch is asked with it contiguous."""
    rng = np.random.default_rng(13)
    x, c = rng.standard_normal(shape), rng.standard_normal([shape[p] for p in perm])
    call = {"batch_norm": lambda fn, v: fn.batch_norm(v, None, None, training=True),
            "instance_norm": lambda fn, v: fn.instance_norm(v)}[name]
    t = torch.tensor(x, requires_grad=True)
    y = call(TF, t)
    y.register_hook(lambda g: g.contiguous())
    (y.permute(*perm) ** 2 * torch.tensor(c)).sum().backward()
    f = flame.tensor(x, dtype=flame.float64, requires_grad=True)
    (call(F, f).permute(*perm) ** 2 * flame.tensor(c)).sum().backward()
    np.testing.assert_allclose(f.grad.numpy(), t.grad.numpy(), atol=1e-12)
