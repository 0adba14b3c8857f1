"""Convolutions, pooling and resizing at their edges against PyTorch: empty batches (values and every
gradient, eagerly, inside @flame.compile and planned for the GPU), pooling windows that do not tile
the input, and the arguments PyTorch refuses (a weight with no output channels, pooling over an empty
channel dim), which flame refuses too with its own error naming the user's line."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import flame
import flame.nn as nn
import flame.nn.functional as F
from flame.codegen.nvrtc import compile_cubin
from flame.errors import ShapeError

MODES = ("eager", "compiled")


def compare(fn, tfn, *arrays, mode="eager", rtol=1e-5, atol=1e-5):
    """fn (flame) and tfn (torch) on the same f32 arrays: the output's shape and values, and the gradient
    of sum(y * c) for a random c with respect to every input, eagerly or inside @flame.compile."""
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    want = tfn(*ts)
    c = np.random.default_rng(3).standard_normal(tuple(want.shape)).astype(np.float32)
    (want * torch.tensor(c)).sum().backward()
    fs = [flame.tensor(a, requires_grad=True) for a in arrays]
    ct = flame.tensor(c)

    def body(*xs):
        y = fn(*xs)
        (y * ct).sum().backward()
        return y

    got = body(*fs) if mode == "eager" else flame.compile(body)(*fs)
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=rtol, atol=atol)
    for i, (f, t) in enumerate(zip(fs, ts)):
        assert f.grad is not None and tuple(f.grad.shape) == tuple(t.grad.shape), f"gradient of input {i}"
        np.testing.assert_allclose(f.grad.numpy(), t.grad.numpy(), rtol=rtol, atol=atol, err_msg=f"input {i}")


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ---- empty batches ------------------------------------------------------------------------------------

EMPTY_BATCH = [  # flame function, torch function, input shapes (the first: the batch-0 input)
    (F.conv1d, TF.conv1d, [(0, 3, 9), (4, 3, 3), (4,)], {"stride": 2, "padding": 1}),
    (F.conv2d, TF.conv2d, [(0, 3, 5, 6), (4, 3, 3, 3), (4,)], {}),
    (F.conv2d, TF.conv2d, [(0, 4, 7, 7), (6, 2, 3, 3)], {"groups": 2, "dilation": 2}),
    (F.conv3d, TF.conv3d, [(0, 2, 4, 5, 3), (3, 2, 2, 2, 2), (3,)], {"padding": 1}),
    (F.conv_transpose2d, TF.conv_transpose2d, [(0, 3, 5, 5), (3, 2, 3, 3), (2,)], {"stride": 2}),
    (F.avg_pool2d, TF.avg_pool2d, [(0, 3, 7, 7)], {"kernel_size": 3, "stride": 2, "padding": 1}),
    (F.max_pool2d, TF.max_pool2d, [(0, 3, 7, 7)], {"kernel_size": 3}),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fn,tfn,shapes,kw", EMPTY_BATCH)
def test_empty_batch_matches_torch(fn, tfn, shapes, kw, mode):
    arrays = [randn(*s, seed=i) for i, s in enumerate(shapes)]
    compare(lambda *a: fn(*a, **kw), lambda *a: tfn(*a, **kw), *arrays, mode=mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "fn,tfn,shapes,kw",
    [
        (F.conv_transpose2d, TF.conv_transpose2d, [(0, 4, 1, 4), (4, 2, 2, 2), (2,)], {"padding": 1}),
        (F.conv_transpose2d, TF.conv_transpose2d, [(0, 2, 2, 1), (2, 3, 2, 2)], {"padding": 1}),
        (F.conv_transpose1d, TF.conv_transpose1d, [(0, 4, 0), (4, 2, 3)], {}),
    ],
)
def test_conv_transpose_of_an_empty_batch_with_an_empty_output(fn, tfn, shapes, kw, mode):
    """An empty batch's output may have a spatial size of 0 (or come from an empty input), as in torch; a
    batch of one with that output size is refused, as torch does."""
    arrays = [randn(*s, seed=i) for i, s in enumerate(shapes)]
    want = tfn(*[torch.tensor(a) for a in arrays], **kw)
    call = lambda *a: fn(*a, **kw) * 2  # noqa: E731
    got = (call if mode == "eager" else flame.compile(call))(*[flame.tensor(a) for a in arrays])
    assert tuple(got.shape) == tuple(want.shape) and not got.numel()
    params = [flame.tensor(a, requires_grad=True) for a in arrays[1:]]  # in their graph: zero gradients
    fn(flame.tensor(arrays[0]), *params, **kw).sum().backward()
    assert all(np.array_equal(p.grad.numpy(), np.zeros(p.shape)) for p in params)
    one = randn(1, *shapes[0][1:])
    with pytest.raises(RuntimeError):
        tfn(torch.tensor(one), *[torch.tensor(a) for a in arrays[1:]], **kw)
    with pytest.raises(ShapeError, match="conv_transpose"):
        fn(flame.tensor(one), *[flame.tensor(a) for a in arrays[1:]], **kw)


def test_compiled_conv_module_with_an_empty_batch():
    """nn.Conv2d under @flame.compile on a batch of 0: torch's [0, C_out, H, W] output and zero
    weight and bias gradients."""
    torch.manual_seed(0)
    tm = torch.nn.Conv2d(3, 4, 3, padding=1)
    fm = nn.Conv2d(3, 4, 3, padding=1)
    fm.load_state_dict(tm.state_dict())
    x = np.zeros((0, 3, 6, 5), np.float32)
    tm(torch.tensor(x)).sum().backward()

    @flame.compile
    def step(x_):
        y = fm(x_)
        y.sum().backward()
        return y

    y = step(flame.tensor(x))
    assert tuple(y.shape) == (0, 4, 6, 5)
    np.testing.assert_array_equal(fm.weight.grad.numpy(), tm.weight.grad.numpy())
    np.testing.assert_array_equal(fm.bias.grad.numpy(), tm.bias.grad.numpy())


@pytest.mark.parametrize("mode", MODES)
def test_batch_norm_of_an_empty_batch(mode):
    """Training mode on a batch of 0: an empty output, zero affine gradients and untouched running
    statistics, as PyTorch's."""
    rm, rv = flame.tensor(randn(3, seed=1)), flame.ones(3)
    trm, trv = torch.tensor(rm.numpy()), torch.ones(3)
    arrays = [np.zeros((0, 3, 4), np.float32), randn(3, seed=2), randn(3, seed=3)]
    compare(
        lambda x, w, b: F.batch_norm(x, rm, rv, w, b, training=True),
        lambda x, w, b: TF.batch_norm(x, trm, trv, w, b, training=True),
        *arrays,
        mode=mode,
    )
    np.testing.assert_array_equal(rm.numpy(), trm.numpy())
    np.testing.assert_array_equal(rv.numpy(), trv.numpy())


def test_empty_batch_convolution_planned_for_the_gpu(cuda_target):
    """A batch-0 convolution and its gradients planned for the CUDA target (cuDNN takes no empty tensor:
    the convolutions become primitive ops): torch's results on the reference executor, and every kernel
    of the plan compiles with NVRTC."""
    x, w, b = np.zeros((0, 3, 6, 6), np.float32), randn(4, 3, 3, 3), randn(4, seed=1)
    kw = {"stride": 2, "padding": 1}
    compare(lambda *a: F.relu(F.conv2d(*a, **kw)), lambda *a: TF.relu(TF.conv2d(*a, **kw)), x, w, b, mode="compiled")
    xs = [flame.tensor(a, requires_grad=True) for a in (x, w, b)]

    @flame.compile
    def step(x_, w_, b_):
        F.relu(F.conv2d(x_, w_, b_, **kw)).sum().backward()

    step(*xs)
    sources = {k.source for k in step._last.plan.kernels()}
    assert sources
    for source in sources:
        assert compile_cubin(source, "sm_90")[:4] == b"\x7fELF"


# ---- pooling windows that do not tile the input -------------------------------------------------------

UNTILED = [  # input shape, avg_pool2d arguments: the windows leave a remainder or overlap
    ((2, 3, 7, 7), {"kernel_size": 3}),
    ((2, 3, 7, 8), {"kernel_size": (3, 2), "stride": (2, 3)}),
    ((1, 2, 7, 6), {"kernel_size": 4, "stride": 3, "padding": 1, "ceil_mode": True}),
    ((1, 2, 7, 6), {"kernel_size": 4, "stride": 3, "padding": 2, "ceil_mode": True, "count_include_pad": False}),
    ((2, 2, 5, 9), {"kernel_size": 2, "divisor_override": 3}),
    ((0, 2, 7, 6), {"kernel_size": 4, "stride": 3, "ceil_mode": True}),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape,kw", UNTILED)
def test_avg_pool2d_whose_kernel_does_not_tile_the_input(shape, kw, mode):
    compare(lambda x: F.avg_pool2d(x, **kw), lambda x: TF.avg_pool2d(x, **kw), randn(*shape), mode=mode)


# ---- ceil_mode windows that reach past the input and its padding; adaptive pooling to an empty size -----

PAST_THE_INPUT = [  # function name, input shape, arguments: ceil_mode keeps a last window that starts
    # inside the input but ends past it and its padding (even a kernel larger than the padded input)
    ("max_pool1d", (1, 3, 1), {"kernel_size": 3, "ceil_mode": True}),
    ("max_pool2d", (2, 1, 2, 2), {"kernel_size": (3, 1), "ceil_mode": True}),
    ("max_pool3d", (1, 1, 1, 2, 3), {"kernel_size": (2, 3, 2), "stride": 2, "ceil_mode": True}),
    ("avg_pool1d", (1, 2, 2), {"kernel_size": 3, "stride": 2, "ceil_mode": True}),
    ("avg_pool1d", (1, 2, 3), {"kernel_size": 4, "stride": 2, "padding": 1, "ceil_mode": True}),
    ("avg_pool2d", (1, 2, 1, 6), {"kernel_size": 2, "ceil_mode": True, "count_include_pad": False}),
    ("avg_pool2d", (1, 1, 2, 1), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
    ("avg_pool2d", (2, 1, 1, 3), {"kernel_size": (2, 3), "ceil_mode": True, "divisor_override": 2}),
    ("avg_pool3d", (1, 1, 3, 3, 4), {"kernel_size": 2, "stride": (2, 2, 3), "ceil_mode": True}),
    ("avg_pool3d", (1, 2, 3, 3, 3), {"kernel_size": 2, "ceil_mode": True, "count_include_pad": False}),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,shape,kw", PAST_THE_INPUT)
def test_ceil_mode_window_past_the_input(name, shape, kw, mode):
    fn, tfn = getattr(F, name), getattr(TF, name)
    compare(lambda x: fn(x, **kw), lambda x: tfn(x, **kw), randn(*shape), mode=mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "name,shape,out",
    [
        ("adaptive_avg_pool2d", (1, 2, 4, 4), (0, 2)),
        ("adaptive_max_pool2d", (2, 4, 4), 0),
        ("adaptive_avg_pool1d", (1, 2, 4), 0),
        ("adaptive_max_pool1d", (1, 2, 4), 0),
        ("adaptive_avg_pool3d", (1, 2, 4, 3, 3), (2, 0, None)),
        ("adaptive_max_pool3d", (1, 2, 4, 3, 3), (2, 0, 1)),
    ],
)
def test_adaptive_pooling_to_an_empty_size(name, shape, out, mode):
    """torch's answer is an empty tensor (its backward refuses one: there is no gradient to compare)."""
    want = getattr(TF, name)(torch.zeros(shape), out)
    fn = lambda x: getattr(F, name)(x, out) * 2  # noqa: E731
    got = (fn if mode == "eager" else flame.compile(fn))(flame.tensor(randn(*shape)))
    assert tuple(got.shape) == tuple(want.shape) and not got.numel()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "name,shape",
    [
        ("adaptive_avg_pool1d", (0, 1, 0)),
        ("adaptive_avg_pool1d", (1, 2, 0)),
        ("adaptive_avg_pool2d", (0, 1, 0, 2)),
        ("adaptive_avg_pool2d", (2, 3, 3)),
        ("adaptive_avg_pool3d", (0, 1, 0, 2, 2)),
    ],
)
def test_adaptive_avg_pooling_to_one_is_the_mean(name, shape, mode):
    """torch answers output_size 1 with the mean, of an empty dim too (NaN), where it refuses an empty
    dim for any other size."""
    compare(lambda x: getattr(F, name)(x, 1), lambda x: getattr(TF, name)(x, 1), randn(*shape), mode=mode)


# ---- what PyTorch refuses -----------------------------------------------------------------------------

NO_OUTPUT_CHANNELS = [  # name, input shape, weight shape, kwargs: PyTorch raises for each
    ("conv1d", (2, 3, 5), (0, 3, 3), {}),
    ("conv2d", (2, 3, 5, 5), (0, 3, 3, 3), {}),
    ("conv2d", (0, 3, 5, 5), (0, 3, 3, 3), {}),
    ("conv2d", (2, 4, 5, 5), (0, 2, 3, 3), {"groups": 2}),
    ("conv3d", (2, 3, 5, 5, 5), (0, 3, 3, 3, 3), {}),
    ("conv_transpose2d", (2, 3, 5, 5), (3, 0, 3, 3), {}),
    ("conv_transpose2d", (2, 0, 5, 5), (0, 2, 3, 3), {}),
]


@pytest.mark.parametrize("name,xs,ws,kw", NO_OUTPUT_CHANNELS)
def test_weight_without_output_channels_is_refused(name, xs, ws, kw):
    with pytest.raises(RuntimeError):
        getattr(TF, name)(torch.zeros(xs), torch.zeros(ws), **kw)
    with pytest.raises(ShapeError, match=r"(?s)output channel.*test_conv_edge_cases.py"):
        getattr(F, name)(flame.zeros(*xs), flame.zeros(*ws), **kw)


@pytest.mark.parametrize(
    "name,shape",
    [("avg_pool2d", (1, 0, 7, 7)), ("max_pool2d", (2, 0, 6, 6)), ("avg_pool1d", (3, 0, 7)), ("avg_pool2d", (0, 7, 7))],
)
def test_pooling_an_empty_channel_dim_is_refused(name, shape):
    with pytest.raises(RuntimeError):
        getattr(TF, name)(torch.zeros(shape), 3)
    with pytest.raises(ShapeError, match=r"(?s)non-empty.*test_conv_edge_cases.py"):
        getattr(F, name)(flame.zeros(*shape), 3)


# ---- transposed convolutions whose output_padding reaches the stride ------------------------------------

DILATED_TRANSPOSE = [  # d, input shape, weight shape, kwargs: output_padding >= stride, < dilation
    (1, (2, 3, 6), (3, 2, 3), {"stride": 1, "dilation": 2, "output_padding": 1}),
    (1, (1, 2, 5), (2, 4, 2), {"stride": 1, "dilation": 3, "output_padding": 2, "padding": 1}),
    (2, (2, 2, 4, 5), (2, 3, 3, 3), {"stride": 1, "dilation": 2, "output_padding": 1}),
    (2, (1, 4, 4, 3), (4, 1, 3, 2), {"stride": 2, "dilation": 3, "output_padding": 2, "padding": 3, "groups": 2}),
    (
        2,
        (2, 2, 4, 5),
        (2, 3, 3, 3),
        {"stride": (1, 2), "dilation": (2, 3), "output_padding": (1, 2), "padding": (0, 1)},
    ),
    (3, (1, 2, 3, 4, 3), (2, 2, 2, 3, 2), {"stride": 1, "dilation": 2, "output_padding": (1, 0, 1), "padding": 1}),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("d,xs,ws,kw", DILATED_TRANSPOSE)
def test_conv_transpose_with_output_padding_below_the_dilation(d, xs, ws, kw, bias, mode):
    """PyTorch accepts output_padding smaller than either the stride or the dilation; the extra
    positions receive what the padding's windows reach (zeros past every window)."""
    name = f"conv_transpose{d}d"
    arrays = [randn(*xs), randn(*ws, seed=1)] + ([randn(ws[1] * kw.get("groups", 1), seed=2)] if bias else [])
    compare(
        lambda *a: getattr(F, name)(*a, **kw),
        lambda *a: getattr(TF, name)(*a, **kw),
        *arrays,
        mode=mode,
        rtol=1e-4,
        atol=1e-5,
    )


def test_conv_transpose_with_output_padding_below_the_dilation_planned_for_the_gpu(cuda_target):
    """The same, planned for the CUDA target (the asymmetric padding of the data gradient, the zeros after
    it): torch's values and gradients on the reference executor, every kernel compiles with NVRTC."""
    kw = {"stride": 1, "dilation": 2, "output_padding": 1}
    x, w = randn(2, 4, 6, 6), randn(4, 3, 3, 3, seed=1)
    compare(
        lambda *a: F.conv_transpose2d(*a, **kw),
        lambda *a: TF.conv_transpose2d(*a, **kw),
        x,
        w,
        mode="compiled",
        rtol=1e-4,
    )
    xs = [flame.tensor(a, requires_grad=True) for a in (x, w)]

    @flame.compile
    def step(x_, w_):
        F.conv_transpose2d(x_, w_, **kw).sum().backward()

    step(*xs)
    sources = {k.source for k in step._last.plan.kernels()}
    assert sources
    for source in sources:
        assert compile_cubin(source, "sm_90")[:4] == b"\x7fELF"


# ---- arguments PyTorch refuses: refused by name ---------------------------------------------------------

REFUSED = [  # flame/torch function name, input shape, kwargs, what flame's message says
    ("avg_pool2d", (1, 3, 6, 6), {"kernel_size": 2, "divisor_override": 0}, "divisor must be not zero"),
    ("avg_pool3d", (1, 2, 4, 4, 4), {"kernel_size": 2, "divisor_override": 0}, "divisor must be not zero"),
    (
        "avg_pool3d",
        (1, 1, 2, 4, 4),
        {"kernel_size": 3, "padding": 1},
        r"the input \[2, 4, 4\] is smaller than the kernel",
    ),
    ("max_pool1d", (1, 3, 1), {"kernel_size": 3}, r"the kernel \[3\] .* is larger than the padded input"),
    (
        "max_pool1d",
        (1, 3, 1),
        {"kernel_size": 3, "stride": 1, "ceil_mode": True},
        r"the kernel \[3\] .* is larger than the padded input",
    ),
    ("adaptive_avg_pool2d", (1, 2, 4, 4), {"output_size": (-1, 2)}, r"output_size \[-1, 2\] must be >= 0"),
    ("adaptive_max_pool2d", (1, 2, 0, 4), {"output_size": 2}, r"expected an input whose dims other than the batch"),
    ("interpolate", (1, 3, 4, 4), {"size": (0, 3)}, r"the output size \[0, 3\] must be positive"),
    ("interpolate", (1, 3, 4, 4), {"size": (0, 3), "mode": "bilinear"}, r"the output size \[0, 3\] must be positive"),
    ("interpolate", (1, 3, 4), {"size": -2}, r"the output size \[-2\] must be positive"),
    ("interpolate", (1, 3, 4, 4), {"scale_factor": 0.1}, r"the output size \[0, 0\] must be positive"),
    ("interpolate", (1, 3, 4, 4), {"scale_factor": float("nan")}, "scale_factor must be finite"),
    ("interpolate", (1, 3, 4, 4), {"scale_factor": float("inf")}, "scale_factor must be finite"),
    (
        "interpolate",
        (1, 3, 4, 4),
        {"scale_factor": (2.0, float("nan")), "mode": "bilinear"},
        "scale_factor must be finite",
    ),
    (
        "interpolate",
        (1, 3, 4, 4, 4),
        {"scale_factor": -float("inf"), "mode": "trilinear"},
        "scale_factor must be finite",
    ),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,shape,kw,match", REFUSED)
def test_refused_arguments_name_the_argument_and_the_users_line(name, shape, kw, match, mode):
    with pytest.raises(RuntimeError):
        getattr(TF, name)(torch.zeros(shape), **kw)
    fn = (
        (lambda x: getattr(F, name)(x, **kw)) if mode == "eager" else flame.compile(lambda x: getattr(F, name)(x, **kw))
    )
    with pytest.raises(ShapeError, match=rf"(?s){name}: {match}.*test_conv_edge_cases.py"):
        fn(flame.zeros(*shape))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("divisor", [-2, 5])
def test_avg_pool2d_with_a_nonzero_divisor_override(divisor, mode):
    kw = {"kernel_size": 3, "stride": 2, "padding": 1, "divisor_override": divisor}
    compare(lambda x: F.avg_pool2d(x, **kw), lambda x: TF.avg_pool2d(x, **kw), randn(2, 3, 7, 6), mode=mode)
