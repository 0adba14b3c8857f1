"""The 3-D and circular padding modules, UpsamplingNearest2d / UpsamplingBilinear2d, Softmax2d,
ChannelShuffle (and F.channel_shuffle) and LocalResponseNorm (and F.local_response_norm) against torch in
f64: values and gradients, eagerly and inside @flame.compile, and the errors torch raises."""

import numpy as np
import pytest
import torch

import flame
from tests.nn_parity.common import check_weighted

X5 = np.random.default_rng(0).standard_normal((2, 3, 4, 5, 4))
X4 = np.random.default_rng(1).standard_normal((2, 6, 5, 4))
X3 = np.random.default_rng(2).standard_normal((2, 6, 7))

CASES = {
    "ZeroPad3d": (lambda L, x: L.nn.ZeroPad3d(1)(x), X5),
    "ZeroPad3d tuple unbatched": (lambda L, x: L.nn.ZeroPad3d((1, 0, 2, 1, 0, 2))(x[0]), X5),
    "ConstantPad3d": (lambda L, x: L.nn.ConstantPad3d((0, 1, 1, 2, 2, 0), 1.5)(x), X5),
    "ConstantPad3d crop": (lambda L, x: L.nn.ConstantPad3d((-1, 1, 0, -2, 1, 1), -0.5)(x), X5),
    "ReflectionPad3d": (lambda L, x: L.nn.ReflectionPad3d((1, 2, 3, 0, 2, 1))(x), X5),
    "ReflectionPad3d unbatched": (lambda L, x: L.nn.ReflectionPad3d(2)(x[1]), X5),
    "ReplicationPad3d": (lambda L, x: L.nn.ReplicationPad3d((2, 0, 1, 3, 0, 2))(x), X5),
    "CircularPad1d": (lambda L, x: L.nn.CircularPad1d((2, 5))(x), X3),
    "CircularPad1d unbatched": (lambda L, x: L.nn.CircularPad1d(3)(x[0]), X3),
    "CircularPad2d": (lambda L, x: L.nn.CircularPad2d((1, 2, 0, 3))(x), X4),
    "CircularPad2d unbatched": (lambda L, x: L.nn.CircularPad2d(2)(x[0]), X4),
    "CircularPad3d": (lambda L, x: L.nn.CircularPad3d((1, 0, 2, 1, 3, 0))(x), X5),
    "CircularPad3d unbatched": (lambda L, x: L.nn.CircularPad3d(1)(x[0]), X5),
    "UpsamplingNearest2d scale": (lambda L, x: L.nn.UpsamplingNearest2d(scale_factor=2)(x), X4),
    "UpsamplingNearest2d size": (lambda L, x: L.nn.UpsamplingNearest2d((7, 9))(x), X4),
    "UpsamplingNearest2d 1-D input": (lambda L, x: L.nn.UpsamplingNearest2d(scale_factor=3)(x), X3),
    "UpsamplingBilinear2d scale": (lambda L, x: L.nn.UpsamplingBilinear2d(scale_factor=2)(x), X4),
    "UpsamplingBilinear2d size": (lambda L, x: L.nn.UpsamplingBilinear2d(size=(3, 7))(x), X4),
    "UpsamplingBilinear2d scale pair": (lambda L, x: L.nn.UpsamplingBilinear2d(scale_factor=(1.5, 2.5))(x), X4),
    "Softmax2d": (lambda L, x: L.nn.Softmax2d()(x), X4),
    "Softmax2d unbatched": (lambda L, x: L.nn.Softmax2d()(x), X3),
    "channel_shuffle": (lambda L, x: L.nn.functional.channel_shuffle(x, 3), X4),
    "channel_shuffle 3-D": (lambda L, x: L.nn.functional.channel_shuffle(x, 2), X3),
    "channel_shuffle 5-D": (lambda L, x: L.nn.functional.channel_shuffle(x, 3), X5),
    "ChannelShuffle": (lambda L, x: L.nn.ChannelShuffle(2)(x), X4),
    "ChannelShuffle one group": (lambda L, x: L.nn.ChannelShuffle(1)(x), X4),
    "local_response_norm 3-D": (lambda L, x: L.nn.functional.local_response_norm(x, 3), X3),
    "local_response_norm 3-D even": (lambda L, x: L.nn.functional.local_response_norm(x, 4, 0.5, 0.6, 2.0), X3),
    "local_response_norm 4-D": (lambda L, x: L.nn.functional.local_response_norm(x, 2, 0.3, 0.75, 1.5), X4),
    "local_response_norm 5-D": (lambda L, x: L.nn.functional.local_response_norm(x, 3, 0.2, 0.5), X5),
    "local_response_norm wider than C": (lambda L, x: L.nn.functional.local_response_norm(x, 9, 1.0, 1.0, 0.5), X4),
    "LocalResponseNorm": (lambda L, x: L.nn.LocalResponseNorm(5, alpha=0.4, beta=0.9, k=1.2)(x), X4),
    "LocalResponseNorm size 1": (lambda L, x: L.nn.LocalResponseNorm(1, 0.1)(x), X3),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", CASES)
def test_matches_torch(name, compiled):
    fn, x = CASES[name]
    check_weighted(fn, x, compiled, atol=1e-13)


@pytest.mark.parametrize(
    "name, shape",
    [
        ("CircularPad1d", (3,)),
        ("CircularPad1d", (1, 2, 3, 4)),
        ("CircularPad2d", (3, 3)),
        ("CircularPad2d", (1, 1, 1, 3, 3)),
        ("CircularPad3d", (3, 3, 3)),
        ("CircularPad3d", (1, 1, 1, 1, 3, 3)),
    ],
)
def test_circular_pads_want_a_batched_or_unbatched_input(name, shape):
    with pytest.raises(ValueError, match="D input") as torch_err:
        getattr(torch.nn, name)(1)(torch.ones(shape))
    with pytest.raises(flame.ShapeError, match=r"(.|\n)*test_pad_upsample_shuffle_lrn") as err:
        getattr(flame.nn, name)(1)(flame.ones(*shape))
    assert str(torch_err.value) in str(err.value)


@pytest.mark.parametrize(
    "module, shape",
    [
        (lambda L: L.nn.CircularPad1d(4), (1, 3)),
        (lambda L: L.nn.ReflectionPad3d(3), (1, 3, 3, 3)),
        (lambda L: L.nn.ReplicationPad3d(1), (3, 3)),
        (lambda L: L.nn.ZeroPad3d(1), (3, 3)),
    ],
)
def test_pads_torch_refuses_raise(module, shape):
    with pytest.raises(RuntimeError):
        module(torch)(torch.ones(shape))
    with pytest.raises(flame.ShapeError, match="pad"):
        module(flame)(flame.ones(*shape))


def test_pad_modules_repr_and_padding():
    for name, args in [
        ("ZeroPad3d", (1,)),
        ("ReflectionPad3d", ((1, 2, 3, 0, 2, 1),)),
        ("CircularPad1d", (2,)),
        ("CircularPad2d", ((1, 2, 0, 1),)),
        ("ReplicationPad3d", (2,)),
        ("CircularPad3d", (1,)),
    ]:
        want, got = getattr(torch.nn, name)(*args), getattr(flame.nn, name)(*args)
        assert repr(got) == repr(want)
        assert tuple(got.padding) == tuple(want.padding)


@pytest.mark.parametrize("name,padding", [
    ("ZeroPad2d", (1, 2)), ("ConstantPad2d", (1, 2)), ("ReplicationPad3d", (1, 0, 2, 1)),
    ("ConstantPad1d", (1, 0, 1, 2)), ("ZeroPad3d", (1, 1)), ("ZeroPad1d", (1, 2, 0, 1, 2, 0)),
])
def test_pad_module_with_a_shorter_or_longer_tuple_pads_as_f_pad(name, padding):
    """torch's pad modules hand a tuple padding to F.pad as it is: (1, 2) given to a 2d module pads the last
    dim alone, four values given to a 1d module pad the last two dims."""
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5))
    args = (padding, 0.5) if name.startswith("Constant") else (padding,)
    want, got = getattr(torch.nn, name)(*args), getattr(flame.nn, name)(*args)
    np.testing.assert_array_equal(got(flame.tensor(x)).numpy(), want(torch.tensor(x)).numpy())
    assert repr(got) == repr(want) and tuple(got.padding) == tuple(want.padding)


@pytest.mark.parametrize("name", ["UpsamplingNearest2d", "UpsamplingBilinear2d"])
def test_upsampling_modules_are_upsample(name):
    want, got = getattr(torch.nn, name)(size=(3, 4)), getattr(flame.nn, name)(size=(3, 4))
    assert isinstance(got, flame.nn.Upsample)
    assert (got.mode, got.align_corners) == (want.mode, want.align_corners)
    assert repr(got) == repr(want)


def test_upsampling_bilinear_wants_a_4d_input():
    with pytest.raises((ValueError, NotImplementedError)):
        torch.nn.UpsamplingBilinear2d(scale_factor=2)(torch.ones(2, 3, 4))
    with pytest.raises(flame.ShapeError):
        flame.nn.UpsamplingBilinear2d(scale_factor=2)(flame.ones(2, 3, 4))


@pytest.mark.parametrize("shape", [(6,), (2, 3), (1, 2, 3, 4, 5)])
def test_softmax2d_wants_3d_or_4d(shape):
    with pytest.raises(ValueError) as torch_err:
        torch.nn.Softmax2d()(torch.ones(shape))
    with pytest.raises(flame.ShapeError, match=r"(.|\n)*test_pad_upsample_shuffle_lrn") as err:
        flame.nn.Softmax2d()(flame.ones(*shape))
    assert str(torch_err.value) in str(err.value)
    assert repr(flame.nn.Softmax2d()) == repr(torch.nn.Softmax2d())


@pytest.mark.parametrize(
    "shape, groups, match",
    [
        ((6,), 2, "> 2 dims"),
        ((2, 6), 2, "> 2 dims"),
        ((2, 6, 3), 4, "divisible by groups"),
        ((2, 6, 3), 0, "positive"),
        ((2, 6, 3), -2, "positive"),
    ],
)
def test_channel_shuffle_errors(shape, groups, match):
    with pytest.raises(RuntimeError, match=match) as torch_err:
        torch.nn.functional.channel_shuffle(torch.ones(shape), groups)
    with pytest.raises(flame.FlameError, match=r"(.|\n)*test_pad_upsample_shuffle_lrn") as err:
        flame.nn.ChannelShuffle(groups)(flame.ones(*shape))
    assert isinstance(err.value, ValueError) and str(torch_err.value) in str(err.value)


def test_local_response_norm_errors():
    with pytest.raises(ValueError, match="Expected 3D or higher dimensionality"):
        torch.nn.functional.local_response_norm(torch.ones(2, 3), 2)
    with pytest.raises(flame.ShapeError, match=r"Expected 3D or higher dimensionality(.|\n)*test_pad_upsample"):
        flame.nn.functional.local_response_norm(flame.ones(2, 3), 2)
    with pytest.raises(RuntimeError, match="kernel size should be greater than zero"):
        torch.nn.LocalResponseNorm(0)(torch.ones(2, 3, 4))
    with pytest.raises(flame.ArgumentError, match="size must be positive"):
        flame.nn.LocalResponseNorm(0)(flame.ones(2, 3, 4))


def test_local_response_norm_of_an_empty_input():
    want = torch.nn.functional.local_response_norm(torch.ones(0, 3, 4), 2)
    assert tuple(flame.nn.functional.local_response_norm(flame.ones(0, 3, 4), 2).shape) == tuple(want.shape)


def test_shuffle_and_lrn_modules_repr_and_attributes():
    for name, args in [
        ("ChannelShuffle", (3,)),
        ("LocalResponseNorm", (3,)),
        ("LocalResponseNorm", (2, 0.5, 0.6, 2.0)),
    ]:
        want, got = getattr(torch.nn, name)(*args), getattr(flame.nn, name)(*args)
        assert repr(got) == repr(want)
        for attr in ("groups", "size", "alpha", "beta", "k"):
            assert getattr(got, attr, None) == getattr(want, attr, None)


def test_signature_check_reaches_the_new_names():
    """tests/frontend/test_signatures.py compares these with torch's (each is found in its namespace and
    takes torch's positional parameters)."""
    from tests.frontend import torch_signatures as ts

    found = {}
    for label, fmod, tmod, stubs in ts.namespaces():
        if label in ("flame.nn", "flame.nn.functional"):
            found.update(
                {(label, name): (fsig, tsigs) for _, name, fsig, tsigs in ts.namespace_pairs(fmod, tmod, label, stubs)}
            )
    modules = [
        "ZeroPad3d",
        "ConstantPad3d",
        "ReflectionPad3d",
        "ReplicationPad3d",
        "CircularPad1d",
        "CircularPad2d",
        "CircularPad3d",
        "UpsamplingNearest2d",
        "UpsamplingBilinear2d",
        "Softmax2d",
        "ChannelShuffle",
        "LocalResponseNorm",
    ]
    names = [("flame.nn", m) for m in modules] + [
        ("flame.nn.functional", f) for f in ("channel_shuffle", "local_response_norm")
    ]
    for key in names:
        assert key in found, key
        label, name = key
        bad = [f for f in ts.compare(label, name, *found[key]) if f.kind in ("order", "varargs", "swallowed")]
        assert not bad, bad


def test_a_step_of_them_plans_and_compiles_for_the_gpu(cuda_target):
    """A step through every new module planned for the CUDA target: the reference executor's loss and
    gradient match eager, and each kernel of the plan compiles with NVRTC for sm_90."""
    from tests.ops.test_everyday_ops import check_gpu_step

    w = flame.nn.Parameter(flame.tensor(np.random.default_rng(3).standard_normal((1, 6, 1, 1)).astype(np.float32)))
    nn = flame.nn
    layers = [nn.ZeroPad3d(1), nn.CircularPad3d(1), nn.ReflectionPad3d(1), nn.ReplicationPad3d((1, 0, 0, 1, 1, 0))]

    def body(x):
        y = nn.LocalResponseNorm(3, 0.5)(nn.ChannelShuffle(3)(x * w))
        y = nn.Softmax2d()(nn.UpsamplingBilinear2d(scale_factor=2)(y)) + nn.UpsamplingNearest2d((10, 8))(y)
        loss = sum(layer(y.unsqueeze(0)).square().sum() for layer in layers) + nn.CircularPad2d(2)(y).sum()
        loss.backward()
        return loss

    check_gpu_step(body, w, flame.tensor(X4.astype(np.float32)))
