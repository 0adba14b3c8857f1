"""A catalogue of bad and edge inputs (shapes, dtypes, axes, 0-d, zero-size, NaN/Inf, huge shapes),
each checked eagerly and under @flame.compile (issue 14 deliverable 2): bad ones raise flame's own
errors (which are also the built-in class PyTorch raises), edge values agree with torch."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import flame
import flame.nn.functional as F
from flame.nn import Linear

M = np.arange(6, dtype=np.float32).reshape(2, 3)
S = np.float32(2.0)

BAD = {  # name: (function, inputs, the built-in class PyTorch raises)
    "matmul shapes": (lambda a: a @ a, [M], ValueError),
    "add shapes": (lambda a, b: a + b, [M, np.ones(4, np.float32)], ValueError),
    "reshape count": (lambda a: a.reshape(4, 2), [M], ValueError),
    "two -1 in reshape": (lambda a: a.reshape(-1, -1), [M], ValueError),
    "dim out of range": (lambda a: a.sum(2), [M], IndexError),
    "negative dim out of range": (lambda a: a.softmax(-3), [M], IndexError),
    "0-d transpose dim 1": (lambda a: a.transpose(0, 1), [S], IndexError),
    "cat of 0-d": (lambda a: flame.cat([a, a]), [S], ValueError),
    "permute not a permutation": (lambda a: a.permute(0, 0), [M], ValueError),
    "expand to fewer dims": (lambda a: a.expand(3), [M], ValueError),
    "float labels": (lambda a, t: F.cross_entropy(a, t), [M, np.zeros(2, np.float32)], ValueError),
    "labels of the wrong length": (lambda a, t: F.cross_entropy(a, t), [M, np.zeros(3, np.int64)], ValueError),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", BAD)
def test_bad_input_raises_flames_error(name, compiled):
    f, inputs, builtin = BAD[name]
    with pytest.raises(flame.FlameError) as info:
        (flame.compile(f) if compiled else f)(*[flame.tensor(x) for x in inputs])
    assert isinstance(info.value, builtin)


EDGE = {  # name: (flame function, torch function, inputs)
    "zero-size sum": (lambda a: a.sum(0), lambda a: a.sum(0), [np.zeros((0, 3), np.float32)]),
    "zero-size matmul": (
        lambda a, b: a @ b,
        lambda a, b: a @ b,
        [np.zeros((2, 0), np.float32), np.zeros((0, 3), np.float32)],
    ),
    "zero-size amax of rows": (lambda a: a.amax(1), lambda a: a.amax(1), [np.zeros((0, 3), np.float32)]),
    "NaN through relu and max": (
        lambda a: a.relu().amax(0),
        lambda a: a.relu().amax(0),
        [np.array([[np.nan, 1.0], [0.0, -np.inf]], np.float32)],
    ),
    "inf softmax": (lambda a: a.softmax(-1), lambda a: a.softmax(-1), [np.array([[np.inf, 1.0]], np.float32)]),
    "-inf logsumexp": (
        lambda a: F.logsumexp(a, -1),
        lambda a: a.logsumexp(-1),
        [np.array([[-np.inf, -np.inf], [np.inf, 1.0]], np.float32)],
    ),
    "0-d ops": (
        lambda a: (a.exp() * a).flip(0).transpose(0, -1),
        lambda a: (a.exp() * a).flip(0).transpose(0, -1),
        [np.array(S)],
    ),
    "int32 sum": (lambda a: a.sum(), lambda a: a.sum(), [np.array([2**31 - 1, 1], np.int32)]),
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", EDGE)
def test_edge_values_agree_with_torch(name, compiled):
    f, g, inputs = EDGE[name]
    got = (flame.compile(f) if compiled else f)(*[flame.tensor(x) for x in inputs])
    want = g(*[torch.from_numpy(np.array(x)) for x in inputs])
    assert got.shape == tuple(want.shape)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, equal_nan=True)


def test_huge_shape_is_refused_before_allocating():
    with pytest.raises((flame.FlameError, MemoryError, ValueError)):
        flame.zeros(2**40, 2**40)


# ---- the newer surfaces: convolution, pooling, interpolation, norms, attention, indexing, autocast,
# checkpoints, compile options. Each row: the call (on flame's module `lib`, flame.nn.functional `F`),
# the error class expected and a fragment of its message naming the argument. Op errors must be flame's
# own (flame.FlameError); a bad keyword of flame.compile, autocast or load_state_dict may be the plain
# built-in class. Torch 2.13 raises on every row (RuntimeError for most of the op rows).

X4 = np.random.default_rng(0).standard_normal((1, 2, 4, 4)).astype(np.float32)
Q = np.random.default_rng(1).standard_normal((1, 2, 3, 4)).astype(np.float32)
KV = np.random.default_rng(2).standard_normal((1, 2, 5, 4)).astype(np.float32)


def _t(a):
    return flame.tensor(a)


def _w(*shape):
    return flame.tensor(np.ones(shape, np.float32))


def _budget(b):
    return lambda: flame.compile(lambda x: (x * 2).sum(), memory_budget=b)(_t(X4))


def _sdpa(q=Q, k=KV, v=KV, **kw):
    return lambda: F.scaled_dot_product_attention(_t(q), _t(k), _t(v), **kw)


OP, ARG = flame.FlameError, None  # ARG: any exception of the given class
BAD_CALLS = {  # name: (call, expected class, must it be a FlameError, message fragment)
    "memory_budget=1.5": (_budget(1.5), ValueError, ARG, "memory_budget"),
    "memory_budget=inf": (_budget(math.inf), ValueError, ARG, "memory_budget"),
    "memory_budget=nan": (_budget(math.nan), ValueError, ARG, "memory_budget"),
    "memory_budget=-1": (_budget(-1), ValueError, ARG, "memory_budget"),
    "memory_budget='x'": (_budget("x"), TypeError, ARG, "memory_budget"),
    "compile dynamic='yes'": (lambda: flame.compile(lambda x: x, dynamic="yes"), ValueError, ARG, "dynamic"),
    "load_state_dict(a path)": (
        lambda: Linear(2, 2).load_state_dict("model.safetensors"),
        TypeError,
        ARG,
        "state_dict",
    ),
    "flame.load of a file that is not safetensors": (
        lambda: flame.checkpoint.load(__file__),
        flame.CheckpointError,
        OP,
        "safetensors",
    ),
    "avg_pool2d divisor_override=0": (
        lambda: F.avg_pool2d(_t(X4), 2, divisor_override=0),
        ValueError,
        OP,
        "divisor_override",
    ),
    "avg_pool2d kernel larger than the input": (lambda: F.avg_pool2d(_t(X4), 5), ValueError, OP, "kernel"),
    "max_pool2d padding above half the kernel": (lambda: F.max_pool2d(_t(X4), 2, padding=2), ValueError, OP, "padding"),
    "max_pool2d stride=0": (lambda: F.max_pool2d(_t(X4), 2, stride=0), ValueError, OP, "stride"),
    "max_pool2d kernel_size=0": (lambda: F.max_pool2d(_t(X4), 0), ValueError, OP, "kernel_size"),
    "interpolate size=(0, 3)": (lambda: F.interpolate(_t(X4), size=(0, 3)), ValueError, OP, "size"),
    "interpolate scale_factor=nan": (
        lambda: F.interpolate(_t(X4), scale_factor=math.nan),
        ValueError,
        OP,
        "scale_factor",
    ),
    "interpolate scale_factor=inf": (
        lambda: F.interpolate(_t(X4), scale_factor=math.inf),
        ValueError,
        OP,
        "scale_factor",
    ),
    "interpolate scale_factor=-1": (lambda: F.interpolate(_t(X4), scale_factor=-1.0), ValueError, OP, "size"),
    "interpolate size and scale_factor": (
        lambda: F.interpolate(_t(X4), size=2, scale_factor=2.0),
        ValueError,
        OP,
        "scale_factor",
    ),
    "interpolate mode 'cubic'": (lambda: F.interpolate(_t(X4), size=2, mode="cubic"), ValueError, OP, "mode"),
    "interpolate align_corners with nearest": (
        lambda: F.interpolate(_t(X4), size=2, align_corners=True),
        ValueError,
        OP,
        "align_corners",
    ),
    "interpolate size of 3 dims on 2": (lambda: F.interpolate(_t(X4), size=(2, 2, 2)), ValueError, OP, "size"),
    "conv2d weight with 0 out channels": (lambda: F.conv2d(_t(X4), _w(0, 2, 3, 3)), ValueError, OP, "weight"),
    "conv2d stride=0": (lambda: F.conv2d(_t(X4), _w(3, 2, 3, 3), stride=0), ValueError, OP, "stride"),
    "conv2d padding=-1": (lambda: F.conv2d(_t(X4), _w(3, 2, 3, 3), padding=-1), ValueError, OP, "padding"),
    "conv2d padding='same' with stride 2": (
        lambda: F.conv2d(_t(X4), _w(3, 2, 3, 3), padding="same", stride=2),
        ValueError,
        OP,
        "same",
    ),
    "conv2d padding='full'": (lambda: F.conv2d(_t(X4), _w(3, 2, 3, 3), padding="full"), ValueError, OP, "padding"),
    "conv2d groups not dividing": (lambda: F.conv2d(_t(X4), _w(3, 1, 3, 3), groups=2), ValueError, OP, "groups"),
    "conv2d input channels": (lambda: F.conv2d(_t(X4), _w(3, 3, 3, 3)), ValueError, OP, "channels"),
    "conv2d kernel larger than the input": (lambda: F.conv2d(_t(X4), _w(3, 2, 5, 5)), ValueError, OP, "kernel"),
    "conv2d of a 5-D input": (lambda: F.conv2d(_w(2, 4, 4, 4, 4), _w(3, 2, 3, 3)), ValueError, OP, "input"),
    "conv_transpose2d output_padding >= stride and dilation": (
        lambda: F.conv_transpose2d(_t(X4), _w(2, 3, 3, 3), stride=2, output_padding=2),
        ValueError,
        OP,
        "output_padding",
    ),
    "gather with a negative index": (
        lambda: _w(3, 4).gather(1, flame.tensor([[-1], [0], [0]])),
        IndexError,
        OP,
        "index",
    ),
    "gather with an index past the end": (
        lambda: _w(3, 4).gather(1, flame.tensor([[4], [0], [0]])),
        IndexError,
        OP,
        "index",
    ),
    "gather with a float index": (lambda: _w(3, 4).gather(1, _w(3, 1)), TypeError, OP, "index"),
    "index_select with a negative index": (
        lambda: _w(3, 4).index_select(0, flame.tensor([-1])),
        IndexError,
        OP,
        "index",
    ),
    "scatter_add past the end": (lambda: _w(3).scatter_add(0, flame.tensor([3]), _w(1)), IndexError, OP, "index"),
    "cumsum dim out of range": (lambda: _w(2, 3).cumsum(2), IndexError, OP, "dim"),
    "sdpa head sizes differ": (_sdpa(k=KV[..., :3]), ValueError, OP, "k f32[1,2,5,3]"),
    "sdpa mask does not broadcast": (_sdpa(attn_mask=_w(4, 5)), ValueError, OP, "mask"),
    "sdpa integer mask": (_sdpa(attn_mask=flame.ones(3, 5, dtype=flame.int64)), TypeError, OP, "mask"),
    "sdpa fewer kv heads without enable_gqa": (_sdpa(q=np.concatenate([Q, Q], 1)), ValueError, OP, "head"),
    "sdpa kv heads not dividing": (_sdpa(q=np.concatenate([Q, Q[:, :1]], 1), enable_gqa=True), ValueError, OP, "heads"),
    "batch_norm running_mean of the wrong size": (
        lambda: F.batch_norm(_t(X4), _w(3), _w(3)),
        ValueError,
        OP,
        "running_mean",
    ),
    "batch_norm one value per channel in training": (
        lambda: F.batch_norm(_w(1, 2), None, None, training=True),
        ValueError,
        OP,
        "per channel",
    ),
    "batch_norm in eval without running stats": (
        lambda: F.batch_norm(_t(X4), None, None, training=False),
        ValueError,
        OP,
        "running_mean",
    ),
    "group_norm groups not dividing": (lambda: F.group_norm(_w(2, 3, 4), 2), ValueError, OP, "num_groups"),
    "layer_norm normalized_shape": (lambda: F.layer_norm(_w(2, 3), (4,)), ValueError, OP, "normalized_shape"),
    "layer_norm weight shape": (lambda: F.layer_norm(_w(2, 3), (3,), _w(4)), ValueError, OP, "weight"),
    "rms_norm normalized_shape": (lambda: F.rms_norm(_w(2, 3), (4,)), ValueError, OP, "normalized_shape"),
    "rms_norm weight shape": (lambda: F.rms_norm(_w(2, 3), (3,), _w(4)), ValueError, OP, "weight"),
    "autocast dtype=int32": (lambda: flame.autocast(dtype=flame.int32), TypeError, OP, "dtype"),
    "autocast device_type 'tpu'": (lambda: flame.autocast("tpu"), ValueError, ARG, "device_type"),
    "checkpoint of a non-callable": (lambda: flame.utils.checkpoint(3, _w(2)), TypeError, ARG, "callable"),
    "cosine_similarity of two integer tensors": (
        lambda: F.cosine_similarity(flame.tensor([[1, 2]]), flame.tensor([[1, 0]])), RuntimeError, OP, "floating"),
}


@pytest.mark.parametrize("name", BAD_CALLS)
def test_bad_call_names_its_argument(name):
    call, cls, flame_error, fragment = BAD_CALLS[name]
    with pytest.raises(cls) as info:
        call()
    if flame_error is not None:
        assert isinstance(info.value, flame_error), f"{type(info.value).__name__} is not one of flame's errors"
    assert fragment.lower() in str(info.value).lower(), f"{fragment!r} not in: {info.value}"


@pytest.mark.parametrize(
    "name",
    [
        "interpolate size=(0, 3)",
        "conv2d weight with 0 out channels",
        "sdpa integer mask",
        "conv_transpose2d output_padding >= stride and dilation",
    ],
)
def test_bad_call_raises_inside_compile_too(name):
    call, cls, flame_error, fragment = BAD_CALLS[name]
    with pytest.raises(cls) as info:
        flame.compile(lambda x: call() * x)(flame.tensor(1.0))
    assert isinstance(info.value, flame.FlameError) and fragment.lower() in str(info.value).lower()


# ---- edge calls torch answers: flame's values and gradients must equal torch's (float64), eager and compiled


def _both(f):
    """f(lib, functional, *tensors) as (flame function, torch function)."""
    return lambda *xs: f(flame, F, *xs), lambda *xs: f(torch, TF, *xs)


R = np.random.default_rng(3)
VALID = {  # name: (f(lib, functional, *tensors), inputs)
    # a bool operand of a pointwise loss is read as 0 / 1 in the promoted dtype (the subtraction of a
    # bool raised), and cosine_similarity reads an integer operand in the float one's dtype
    "mse_loss with a bool target": (lambda lib, f, x, t: f.mse_loss(x, t > 0),
                                    [R.standard_normal((3, 4)), R.standard_normal((3, 4))]),
    "smooth_l1_loss with a bool target": (lambda lib, f, x, t: f.smooth_l1_loss(x, t > 0, beta=0.5),
                                          [R.standard_normal((3, 4)), R.standard_normal((3, 4))]),
    "cosine_similarity of an integer and a float tensor": (
        lambda lib, f, a, b: f.cosine_similarity((a * 3).round().long(), b),
        [R.standard_normal((3, 4)), R.standard_normal((3, 4))]),
    "conv_transpose2d stride=1 dilation=2 output_padding=1": (
        lambda lib, f, x, w: f.conv_transpose2d(x, w, stride=1, dilation=2, output_padding=1),
        [R.standard_normal((1, 2, 4, 4)), R.standard_normal((2, 3, 3, 3))],
    ),
    "conv_transpose1d stride=2 dilation=3 output_padding=2": (
        lambda lib, f, x, w: f.conv_transpose1d(x, w, stride=2, dilation=3, output_padding=2),
        [R.standard_normal((2, 2, 5)), R.standard_normal((2, 1, 2))],
    ),
    "sdpa with no keys (S=0)": (
        lambda lib, f, q, k, v: f.scaled_dot_product_attention(q, k, v),
        [R.standard_normal((1, 2, 3, 4)), np.zeros((1, 2, 0, 4)), np.zeros((1, 2, 0, 4))],
    ),
    "sdpa with no queries (L=0)": (
        lambda lib, f, q, k, v: f.scaled_dot_product_attention(q, k, v),
        [np.zeros((1, 2, 0, 4)), R.standard_normal((1, 2, 3, 4)), R.standard_normal((1, 2, 3, 4))],
    ),
    "sdpa with no queries and no keys, a learned mask": (
        lambda lib, f, q, k, v, m: f.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.5),
        [np.zeros((1, 1, 0, 4)), np.zeros((1, 1, 0, 4)), np.zeros((1, 1, 0, 4)), np.zeros((1, 0, 0))],
    ),
    "sdpa with a fully masked row": (
        lambda lib, f, q, k, v: f.scaled_dot_product_attention(
            q, k, v, attn_mask=lib.tensor([[True, True], [False, False], [True, False]])
        ),
        [R.standard_normal((1, 3, 4)), R.standard_normal((1, 2, 4)), R.standard_normal((1, 2, 4))],
    ),
    "sdpa is_causal with more queries than keys": (
        lambda lib, f, q, k, v: f.scaled_dot_product_attention(q, k, v, is_causal=True),
        [R.standard_normal((1, 5, 4)), R.standard_normal((1, 3, 4)), R.standard_normal((1, 3, 4))],
    ),
    "sdpa learned float mask": (
        lambda lib, f, q, k, v, m: f.scaled_dot_product_attention(q, k, v, attn_mask=m),
        [
            R.standard_normal((1, 3, 4)),
            R.standard_normal((1, 2, 4)),
            R.standard_normal((1, 2, 4)),
            R.standard_normal((3, 2)),
        ],
    ),
    "conv2d of an empty batch": (
        lambda lib, f, x, w: f.conv2d(x, w, padding=1),
        [np.zeros((0, 2, 4, 4)), R.standard_normal((3, 2, 3, 3))],
    ),
    "max_pool2d of an empty batch": (lambda lib, f, x: f.max_pool2d(x, 2), [np.zeros((0, 2, 4, 4))]),
    "max_pool1d ceil_mode with the kernel past the input": (
        lambda lib, f, x: f.max_pool1d(x, 3, ceil_mode=True),
        [R.standard_normal((1, 3, 1))],
    ),
    "adaptive_avg_pool2d to (0, 2)": (
        lambda lib, f, x: f.adaptive_avg_pool2d(x, (0, 2)),
        [R.standard_normal((1, 2, 4, 4))],
    ),
    "batch_norm of an empty batch": (lambda lib, f, x: f.batch_norm(x, None, None, training=True), [np.zeros((0, 2))]),
    "batch_norm of values near 1000 spread by 0.1": (
        lambda lib, f, x: f.batch_norm(x, None, None, training=True),
        [(1000 + 0.1 * R.standard_normal((8, 3))).astype(np.float32)],
    ),
    "var of values near 1000 spread by 0.1": (
        lambda lib, f, x: x.var(0),
        [(1000 + 0.1 * R.standard_normal((8, 3))).astype(np.float32)],
    ),
    "gather with duplicate indices": (
        lambda lib, f, x: x.gather(1, lib.tensor([[0, 0, 2], [1, 1, 1]])),
        [R.standard_normal((2, 3))],
    ),
    "x[i] = v with duplicate and negative indices": (
        lambda lib, f, x, v: _set(x, lib.tensor([1, -2, 0, 1]), v),
        [R.standard_normal((3, 2)), R.standard_normal((1, 2))],
    ),
    "gather with an index smaller than the input on another dim": (
        lambda lib, f, x: x.gather(1, lib.tensor([[1, 1], [3, 0]])),
        [R.standard_normal((3, 4))],
    ),
    "scatter_add with an index smaller than the input on another dim": (
        lambda lib, f, x, s: x.scatter_add(0, lib.tensor([[2, 2], [0, 2]]), s),
        [R.standard_normal((3, 4)), R.standard_normal((2, 2))],
    ),
    "softmax over an empty dim": (lambda lib, f, x: f.softmax(x, -1) + f.log_softmax(x, -1), [np.zeros((2, 0))]),
    "logsumexp over an empty dim": (lambda lib, f, x: lib.logsumexp(x, 1) + 0 * x.sum(), [np.zeros((2, 0))]),
    "take_along_dim with an empty index": (
        lambda lib, f, x: x.take_along_dim(lib.tensor(np.zeros((1, 0, 1), np.int64)), 1),
        [R.standard_normal((1, 3, 2))],
    ),
    "take_along_dim of an empty input, reading no element": (  # torch checks no index then
        lambda lib, f, x: x.take_along_dim(lib.tensor([[[0], [0], [0], [0]]]), 1) + 0 * x.sum(),
        [np.zeros((2, 0, 0))],
    ),
    "index_add with duplicate indices": (
        lambda lib, f, x, s: x.index_add(0, lib.tensor([1, 1, 0]), s),
        [R.standard_normal((3, 2)), R.standard_normal((3, 2))],
    ),
    "rms_norm with the default eps (float32's)": (
        lambda lib, f, x: (
            f.rms_norm(x, (3,)) if lib is flame else f.rms_norm(x, (3,), eps=torch.finfo(torch.float32).eps)
        ),
        [1e-4 * R.standard_normal((2, 3))],
    ),
}


def _set(x, i, v):
    y = x * 1
    y[i] = v
    return y


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", VALID)
def test_edge_call_agrees_with_torch(name, compiled):
    """Values and gradients within 1e-4 of torch float64's, or within M times torch's own float32 error
    where float32 cannot do better (values near 1000 spread by 0.1 lose four digits in any float32
    arithmetic: rounding the mean alone moves (x - mean) / std by |mean| * eps / 2 / std)."""
    f, inputs = VALID[name]
    mine, theirs = _both(f)
    want, grads = _torch(theirs, inputs, torch.float64)
    want32, grads32 = _torch(theirs, inputs, torch.float32)
    xs = [flame.tensor(np.asarray(x, np.float32), requires_grad=True) for x in inputs]

    def step(*xs):
        out = mine(*xs)
        if out.numel():
            out.sum().backward()
        return out

    got = (flame.compile(step) if compiled else step)(*xs)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=_atol(want, want32))
    for x, g, g32 in zip(xs, grads, grads32):
        mine_g = np.zeros(tuple(x.shape)) if x.grad is None else x.grad.numpy()
        np.testing.assert_allclose(mine_g, g, rtol=1e-4, atol=_atol(g, g32))


M = 8  # how many times torch's own float32 error flame's float32 may show (as in test_random_programs.py)


def _torch(fn, inputs, dtype):
    """torch's result and input gradients (zeros where none) as float64 arrays, computed in dtype."""
    ts = [torch.tensor(np.asarray(x, np.float64), dtype=dtype, requires_grad=True) for x in inputs]
    out = fn(*ts)
    out.sum().backward() if out.numel() else None
    grads = [np.zeros(tuple(t.shape)) if t.grad is None else t.grad.double().numpy() for t in ts]
    return out.detach().double().numpy(), grads


def _atol(want: np.ndarray, want32: np.ndarray) -> float:
    """1e-4 of the result's magnitude (at least 1e-4), or M times torch float32's largest error."""
    finite = np.isfinite(want) & np.isfinite(want32)
    err = float(np.abs(want32 - want)[finite].max(initial=0.0))
    return max(1e-4 * max(1.0, float(np.abs(want).max(initial=0.0))), M * err)


@pytest.mark.parametrize("name", ["cat", "concat", "concatenate", "stack", "hstack", "vstack", "dstack",
                                  "column_stack", "row_stack"])
@pytest.mark.parametrize("bad", ["a tensor", "an int element", "a generator"])
def test_joining_takes_a_sequence_of_tensors(name, bad):
    """torch.cat(x) and the other joining functions take a list or tuple of tensors. A tensor in its
    place was iterated by row: cat(x) flattened x and stack(x) returned it, silently. Both now raise
    torch's TypeError, as do a non-tensor element and an iterator."""
    def args(lib):
        x = lib.ones(2, 3)
        return {"a tensor": x, "an int element": [x, 1], "a generator": (t for t in [x, x])}[bad]

    with pytest.raises(TypeError) as want:
        getattr(torch, name)(args(torch))
    with pytest.raises(TypeError) as got:
        getattr(flame, name)(args(flame))
    assert isinstance(got.value, flame.FlameError)
    fragment = "Tensor" if bad == "a tensor" else "int" if bad == "an int element" else "generator"
    assert fragment in str(want.value) and fragment in str(got.value)
    with pytest.raises(TypeError):
        flame.compile(lambda x: getattr(flame, name)(x if bad == "a tensor" else [x, 1]))(flame.ones(2, 3))


def test_huber_loss_of_a_bool_target_agrees_with_torch():
    """huber_loss reads a bool target as 0 / 1 in the input's dtype, as torch's forward does (torch's
    backward of it raises, so the values alone are compared; flame's gradient is mse_loss's kind)."""
    x, t = R.standard_normal((3, 4)), R.standard_normal((3, 4)) > 0
    want = TF.huber_loss(torch.tensor(x, dtype=torch.float32), torch.tensor(t), delta=0.5)
    for fn in (F.huber_loss, flame.compile(F.huber_loss)):
        got = fn(flame.tensor(x.astype(np.float32)), flame.tensor(t), delta=0.5)
        assert got.dtype == flame.float32
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_iterating_a_0d_tensor_raises_as_torch():
    """iter() of a 0-d tensor raises torch's TypeError at once (not at the first element)."""
    for lib in (torch, flame):
        with pytest.raises(TypeError, match="iteration over a 0-d tensor"):
            iter(lib.tensor(1.0))
    assert [t.item() for t in flame.tensor([1.0, 2.0])] == [1.0, 2.0]


@pytest.mark.parametrize("data, dtype", [([2**63, 1], None), ([2**63], None), ([[1, 2], [3, -(2**63) - 1]], None),
                                         ([2**64], None), ([True, 2**63], None), ([2**63, 1], "int64"),
                                         ([2**63, 1], "float32"), ([1.5, 2**63], None), ([-(2**63), 2**63 - 1], None)])
def test_python_ints_beyond_int64_as_torch(data, dtype):
    """A Python int beyond int64 bound for an integer tensor raises torch's ValueError. NumPy held
    [2**63, 1] as float64 and the cast to i64 wrapped it to -2**63, silently; for a float dtype, or
    beside a float, it is a float, as in torch."""
    try:
        want = torch.tensor(data, dtype=getattr(torch, dtype) if dtype else None)
    except ValueError as e:
        with pytest.raises(ValueError, match="Overflow when unpacking long long") as got:
            flame.tensor(data, dtype=getattr(flame, dtype) if dtype else None)
        assert "Overflow when unpacking long long" in str(e) and isinstance(got.value, flame.FlameError)
        return
    got = flame.tensor(data, dtype=getattr(flame, dtype) if dtype else None)
    assert got.numpy().dtype == want.numpy().dtype and got.tolist() == want.tolist()
