"""Convolutions, transposed convolutions, pooling and interpolation modules against torch from the same
f64 weights: padding strings and modes, groups, dilation, output_padding, bias=False, unbatched inputs,
ceil_mode, count_include_pad, divisor_override, interpolation modes and scales; outputs and gradients,
eager and compiled."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.nn_parity.common import check, rng

CONV = [
    dict(padding="same"),
    dict(padding="valid", stride=2),
    dict(padding=1, padding_mode="reflect"),
    dict(padding=2, padding_mode="replicate", dilation=2),
    dict(padding=1, padding_mode="circular", stride=2),
    dict(padding="same", padding_mode="reflect", kernel_size=4),
    dict(groups=2, bias=False, padding=1),
    dict(groups=4, dilation=(2, 1)),
]


def _spatial(d, sizes=(7, 6, 5)):
    return sizes[:d]


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("opts", CONV, ids=[str(i) for i in range(len(CONV))])
def test_conv(d, opts, compiled):
    opts = dict(opts)
    k = opts.pop("kernel_size", 3)
    if d != 2 and isinstance(opts.get("dilation"), tuple):
        opts["dilation"] = opts["dilation"][0]

    def build(lib):
        return getattr(lib.nn, f"Conv{d}d")(4, 4, k, **opts)

    x = rng(0).standard_normal((2, 4, *_spatial(d)))
    check(build, lambda m, x: m(x), [x], compiled)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("d", [1, 2])
def test_conv_unbatched(d, compiled):
    def build(lib):
        return getattr(lib.nn, f"Conv{d}d")(2, 3, 3, padding=1, padding_mode="circular")

    check(build, lambda m, x: m(x), [rng(1).standard_normal((2, *_spatial(d)))], compiled)


TRANSPOSE = [
    dict(stride=2, padding=1, output_padding=1),
    dict(stride=3, output_padding=2, dilation=1, bias=False),
    dict(groups=2, stride=2, dilation=2),
    dict(stride=(2, 1), padding=(1, 0)),
]


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("opts", TRANSPOSE, ids=[str(i) for i in range(len(TRANSPOSE))])
def test_conv_transpose(d, opts, compiled):
    opts = {
        k: (v[:d] * d if d != 2 and isinstance(v, tuple) else v)[:d] if isinstance(v, tuple) else v
        for k, v in opts.items()
    }

    def build(lib):
        return getattr(lib.nn, f"ConvTranspose{d}d")(4, 2, 3, **opts)

    x = rng(2).standard_normal((2, 4, *_spatial(d, (5, 4, 3))))
    check(build, lambda m, x: m(x), [x], compiled)


@pytest.mark.parametrize("compiled", [False, True])
def test_conv_transpose_output_size(compiled):
    def build(lib):
        return lib.nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1)

    x = rng(3).standard_normal((1, 3, 4, 5))
    check(build, lambda m, x: m(x, output_size=[1, 2, 8, 10]), [x], compiled)


POOL = [
    ("MaxPool", dict(kernel_size=3, stride=2, ceil_mode=True)),
    ("MaxPool", dict(kernel_size=2, stride=1, padding=1, dilation=2)),
    ("MaxPool", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    ("AvgPool", dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)),
    ("AvgPool", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    ("AvgPool", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)),
    ("AvgPool", dict(kernel_size=2, divisor_override=3)),
    ("AdaptiveAvgPool", dict(output_size=3)),
    ("AdaptiveAvgPool", dict(output_size=4)),
    ("AdaptiveMaxPool", dict(output_size=3)),
]


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("case", POOL, ids=[str(i) for i in range(len(POOL))])
def test_pool(d, case, compiled):
    kind, opts = case
    if d == 1 and "divisor_override" in opts:
        opts = {k: v for k, v in opts.items() if k != "divisor_override"}  # AvgPool1d has none

    def build(lib):
        return getattr(lib.nn, f"{kind}{d}d")(**opts)

    x = rng(4).standard_normal((2, 2, *_spatial(d)))
    check(build, lambda m, x: m(x), [x], compiled)
    if d == 2:
        check(build, lambda m, x: m(x), [x[0]], compiled)  # unbatched


@pytest.mark.parametrize("compiled", [False, True])
def test_max_pool_indices(compiled):
    def build(lib):
        return lib.nn.MaxPool2d(3, 2, 1, return_indices=True, ceil_mode=True)

    check(build, lambda m, x: m(x), [rng(5).standard_normal((2, 2, 7, 6))], compiled)


INTERP = [
    ("nearest", dict(scale_factor=2)),
    ("nearest", dict(scale_factor=1.5)),
    ("nearest", dict(size=5)),
    ("nearest", dict(scale_factor=0.6)),
    ("nearest", dict(scale_factor=1.7, recompute_scale_factor=True)),
    ("nearest", dict(scale_factor=1.4)),  # no axis keeps its size: torch's CPU kernels copy such an axis
    ("nearest", dict(scale_factor=2.6)),
    ("linear", dict(scale_factor=2)),
    ("linear", dict(scale_factor=2, align_corners=True)),
    ("linear", dict(size=9, align_corners=False)),
    ("linear", dict(scale_factor=1.2)),
    ("linear", dict(scale_factor=1.2, recompute_scale_factor=True)),
    ("linear", dict(scale_factor=0.5)),
    ("linear", dict(size=4, align_corners=True)),
    ("nearest-exact", dict(scale_factor=1.5)),
    ("nearest-exact", dict(size=3)),
    ("nearest-exact", dict(scale_factor=0.7)),
    ("area", dict(size=3)),
    ("area", dict(scale_factor=2)),
]


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("case", INTERP, ids=[str(i) for i in range(len(INTERP))])
def test_upsample(d, case, compiled):
    mode, opts = case
    if mode == "linear":
        mode = ["linear", "bilinear", "trilinear"][d - 1]

    def build(lib):
        return lib.nn.Upsample(mode=mode, **opts)

    x = rng(6).standard_normal((1, 2, *_spatial(d, (5, 4, 3))))
    check(build, lambda m, x: m(x), [x], compiled)


def test_interpolate_modes_not_there_raise_clearly():
    x = flame.tensor(np.zeros((1, 1, 4, 4)))
    for kw in (dict(mode="lanczos"), dict(mode="nearest", antialias=True)):
        with pytest.raises(Exception, match="interpolate") as e:
            flame.nn.functional.interpolate(x, scale_factor=2, **kw)
        assert not isinstance(e.value, TypeError), e.value


def test_conv_transpose_padding_mode_refused_as_torch():
    for lib in (torch, flame):
        with pytest.raises(ValueError):
            lib.nn.ConvTranspose2d(2, 2, 3, padding_mode="reflect")
        with pytest.raises(ValueError):
            lib.nn.Conv2d(2, 2, 3, padding_mode="mirror")


NON_FINITE = [
    ("linear", [np.inf, 1.0, 2.0], dict(size=5)),
    ("linear", [1.0, np.nan, 2.0, 3.0], dict(size=7)),
    ("linear", [1.0, 2.0, -np.inf, 3.0], dict(scale_factor=2, align_corners=True)),
    ("linear", [4.0, 1.0, 2.0, np.inf, 3.0, 5.0], dict(scale_factor=0.5)),
    ("area", [1.0, np.inf, 2.0, 3.0, 4.0], dict(size=3)),
    ("area", [np.nan, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0], dict(size=4)),
]


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("case", NON_FINITE, ids=[str(i) for i in range(len(NON_FINITE))])
def test_linear_interpolation_spreads_a_non_finite_input_only_to_the_outputs_that_read_it(case, compiled):
    """Each output reads its two neighbours (as torch's kernel; area: its adaptive window), so an inf or
    NaN reaches only the outputs beside it, and a NaN gradient only the inputs beside it: torch's values
    bit for bit and its gradients
    (NaN where torch's are; a product by the dense interpolation matrix made NaN of a whole axis)."""
    mode, values, opts = case
    x = np.array([[values]], np.float32)
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.nn.functional.interpolate(tx, mode=mode, **opts)
    g = np.ones(ty.shape, np.float32)
    g.flat[1] = np.nan  # one NaN gradient: torch's reaches only the inputs that output read
    ty.backward(torch.tensor(g))

    def run(x, g):
        y = flame.nn.functional.interpolate(x, mode=mode, **opts)
        y.backward(g)
        return y, x.grad

    fx = flame.tensor(x, requires_grad=True)
    y, gx = (flame.compile(run) if compiled else run)(fx, flame.tensor(g))
    np.testing.assert_array_equal(y.numpy(), ty.detach().numpy())
    np.testing.assert_allclose(gx.numpy(), tx.grad.numpy(), rtol=1e-6)  # NaN where torch's; sums in another order


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_bilinear_upsampling_plans_for_the_gpu_and_its_kernels_compile(dtype, cuda_target):
    """A bilinear upsampling and adaptive average pooling step (gathers per axis, weighted or masked and
    summed; bf16 computed in f32 and rounded once)
    planned for the CUDA target gives the eager loss and gradient, and its kernels compile with NVRTC."""
    from tests.ops.test_everyday_ops import check_gpu_step

    w = flame.tensor(rng(7).standard_normal((1, 3, 5, 4)).astype(np.float32), requires_grad=True)

    def body(x):
        y = flame.nn.functional.interpolate((w * x).to(dtype), scale_factor=(2, 1.5), mode="bilinear")
        y = flame.nn.functional.adaptive_avg_pool2d(y, (3, 4))  # windows of 3 and 4 rows, of 1 and 2 columns
        loss = (y.float() ** 2).mean()
        loss.backward()
        return loss

    check_gpu_step(body, w, flame.tensor(rng(8).standard_normal((1, 3, 5, 4)).astype(np.float32)))
