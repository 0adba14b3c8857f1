"""Which dtypes nn.functional's pooling, normalisation, resampling, padding, sampling and loss functions
take, against torch's CPU kernels: flame raises where torch raises, and where torch computes, flame gives
its dtype and values, eagerly and inside @flame.compile. Integer max pooling (max_pool1d only with
return_indices), int64 average pooling (its sum divided by the count with C++'s truncation, and so lp_pool
and local_response_norm of int64), the uint8 nearest resampling, bool fold / unfold; refused: integer
adaptive pooling, batch / instance norm, max_unpool, fold / unfold, grid_sample, prelu, embedding_bag
weights, huber and smooth_l1 losses, the other integer nearest resamplings, bool hardtanh / relu6 /
threshold and bool reflect / replicate padding; grid_sample's grid and prelu's weight of another dtype
than the input."""

import numpy as np
import pytest
import torch

import flame

DTYPES = ["int64", "int32", "int16", "int8", "uint8", "bool"]


def _data(dtype: str, shape) -> np.ndarray:
    a = np.random.default_rng(0).integers(-9, 10, size=shape)
    if dtype == "bool":
        return a > 0
    if dtype == "uint8":
        return np.abs(a).astype(np.uint8)
    a = a.astype(dtype)
    a.flat[0] = np.iinfo(dtype).min  # max pooling's padding must never win over the smallest value
    return a


CASES = {
    "max_pool1d": (lambda F, x: F.max_pool1d(x, 3, 2, 1), (2, 3, 9)),
    "max_pool1d indices": (lambda F, x: F.max_pool1d(x, 3, 2, 1, return_indices=True), (2, 3, 9)),
    "max_pool2d": (lambda F, x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True), (2, 3, 7, 8)),
    "max_pool2d dilated indices": (lambda F, x: F.max_pool2d(x, 2, 1, dilation=2, return_indices=True), (2, 3, 7, 8)),
    "max_pool3d": (lambda F, x: F.max_pool3d(x, 2, 2, 1, return_indices=True), (1, 2, 5, 6, 7)),
    "avg_pool1d": (lambda F, x: F.avg_pool1d(x, 3, 2, 1), (2, 3, 9)),
    "avg_pool2d": (lambda F, x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), (2, 3, 7, 8)),
    "avg_pool2d tiles": (lambda F, x: F.avg_pool2d(x, 2), (2, 3, 6, 8)),
    "avg_pool2d divisor_override": (lambda F, x: F.avg_pool2d(x, 3, 1, 1, divisor_override=-4), (2, 3, 5, 5)),
    "avg_pool3d": (lambda F, x: F.avg_pool3d(x, 2, 1, 1), (1, 2, 4, 5, 3)),
    "lp_pool2d": (lambda F, x: F.lp_pool2d(x, 2, 2), (2, 3, 4, 4)),
    "local_response_norm": (lambda F, x: F.local_response_norm(x, 3), (2, 4, 3, 3)),
    "adaptive_avg_pool2d": (lambda F, x: F.adaptive_avg_pool2d(x, 2), (2, 3, 4, 4)),
    "adaptive_max_pool1d": (lambda F, x: F.adaptive_max_pool1d(x, 3), (2, 3, 7)),
    "adaptive_max_pool2d": (lambda F, x: F.adaptive_max_pool2d(x, 2), (2, 3, 4, 4)),
    "adaptive_max_pool3d": (lambda F, x: F.adaptive_max_pool3d(x, 2, return_indices=True), (1, 2, 4, 4, 4)),
    "max_unpool2d": (lambda F, x: F.max_unpool2d(x, F.max_pool2d(x.float(), 2, return_indices=True)[1], 2),
                     (2, 3, 4, 4)),
    "batch_norm": (lambda F, x: F.batch_norm(x, None, None, training=True), (2, 3, 4)),
    "instance_norm": (lambda F, x: F.instance_norm(x), (2, 3, 4)),
    "unfold": (lambda F, x: F.unfold(x, 2, padding=1), (2, 3, 4, 4)),
    "fold": (lambda F, x: F.fold(x, (3, 3), 2), (2, 12, 4)),
    "interpolate nearest 1d": (lambda F, x: F.interpolate(x, scale_factor=2), (2, 3, 5)),
    "interpolate nearest 2d": (lambda F, x: F.interpolate(x, size=(7, 3)), (2, 3, 5, 4)),
    "interpolate nearest-exact 3d": (lambda F, x: F.interpolate(x, scale_factor=2, mode="nearest-exact"),
                                     (1, 2, 3, 2, 2)),
    "pad reflect": (lambda F, x: F.pad(x, (1, 2), mode="reflect"), (2, 3, 5)),
    "pad replicate": (lambda F, x: F.pad(x, (1, 2, 2, 1), mode="replicate"), (2, 3, 5, 4)),
    "pad circular": (lambda F, x: F.pad(x, (1, 2), mode="circular"), (2, 3, 5)),
    "hardtanh": (lambda F, x: F.hardtanh(x, 0.0, 6.0), (2, 5)),
    "relu6": (lambda F, x: F.relu6(x), (2, 5)),
    "threshold": (lambda F, x: F.threshold(x, 1.0, 5.0), (2, 5)),
    "prelu": (lambda F, x: F.prelu(x, x.new_ones(1)), (2, 5)),
    "grid_sample": (lambda F, x: F.grid_sample(x, x.new_zeros(2, 3, 3, 2), align_corners=False), (2, 3, 4, 4)),
    "embedding_bag weight": (lambda F, x: F.embedding_bag(x.new_zeros(2, 2).long(), x), (4, 3)),
    "huber_loss": (lambda F, x: F.huber_loss(x, x.flip(0)), (4, 3)),
    "huber_loss float target": (lambda F, x: F.huber_loss(x, x.flip(0).double()), (4, 3)),
    "smooth_l1_loss": (lambda F, x: F.smooth_l1_loss(x, x.flip(0), reduction="none"), (4, 3)),
    "bilinear": (lambda F, x: F.bilinear(x, x, x.new_ones(2, 3, 3), x.new_ones(2)), (4, 3)),
}


def _run(lib, name: str, dtype: str, compiled: bool):
    f, shape = CASES[name]
    x = lib.tensor(_data(dtype, shape))
    fn = (lambda t: f(lib.nn.functional, t)) if lib is torch or not compiled else flame.compile(
        lambda t: f(flame.nn.functional, t))
    try:
        out = fn(x)
    except Exception as e:  # noqa: BLE001 - torch's refusals are RuntimeError, NotImplementedError, ValueError
        return e
    return out if isinstance(out, tuple) else (out,)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", CASES)
def test_dtype_taken_or_refused_as_torch(name, dtype, compiled):
    want = _run(torch, name, dtype, False)
    got = _run(flame, name, dtype, compiled)
    if isinstance(want, Exception):
        assert isinstance(got, Exception), f"{name} {dtype}: torch raises {want!r}, flame gives {got}"
        assert isinstance(got, (RuntimeError, ValueError, TypeError, NotImplementedError)), repr(got)
        return
    assert not isinstance(got, Exception), f"{name} {dtype}: torch computes, flame raises {got!r}"
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert str(g.dtype) == str(flame.tensor(w.numpy()).dtype), (name, dtype, g.dtype, w.dtype)
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6, atol=0, err_msg=f"{name} {dtype}")


@pytest.mark.parametrize("name,weight", [("grid_sample", "float32"), ("prelu", "float32"), ("prelu", "float64")])
def test_second_operand_of_another_float_dtype_is_refused_as_torch(name, weight):
    """grid_sample's grid and prelu's weight must have the input's dtype: torch raises for f64 with f32."""
    for lib in (torch, flame):
        F = lib.nn.functional
        x = lib.ones(1, 2, 3, 3, dtype=lib.float64 if weight == "float32" else lib.float32)
        other = lib.zeros(1, 2, 2, 2, dtype=getattr(lib, weight)) if name == "grid_sample" else lib.ones(
            1, dtype=getattr(lib, weight))
        with pytest.raises(RuntimeError, match="scalar type|Type promoting"):
            F.grid_sample(x, other, align_corners=False) if name == "grid_sample" else F.prelu(x, other)


def test_affine_grid_refuses_an_integer_theta_as_torch():
    for lib in (torch, flame):
        with pytest.raises(ValueError, match="floating point type"):
            lib.nn.functional.affine_grid(lib.zeros(1, 2, 3, dtype=lib.int64), (1, 1, 2, 2), align_corners=False)


def test_huber_loss_takes_the_input_dtype_as_torch():
    """torch's huber_loss writes the loss in the input's dtype (an f32 input with an f64 target: f32)."""
    a = np.linspace(-3, 3, 12).reshape(4, 3)
    for inp, tgt in (("float32", "float64"), ("float16", "float32")):
        want = torch.nn.functional.huber_loss(torch.tensor(a, dtype=getattr(torch, inp)),
                                              torch.tensor(a[::-1].copy(), dtype=getattr(torch, tgt)))
        got = flame.nn.functional.huber_loss(flame.tensor(a.astype(inp)), flame.tensor(a[::-1].astype(tgt)))
        assert str(got.dtype) == {"float32": "f32", "float16": "f16"}[inp]
        np.testing.assert_allclose(got.numpy().astype(np.float64), want.numpy().astype(np.float64), rtol=1e-3)


@pytest.mark.parametrize("case", ["int32 labels", "empty labels without num_classes", "bool labels"])
def test_one_hot_refuses_as_torch(case):
    """one_hot takes int64 labels only, and cannot infer num_classes from an empty tensor."""
    array = {"int32 labels": np.array([1, 2], np.int32), "empty labels without num_classes": np.zeros(0, np.int64),
             "bool labels": np.array([True, False])}[case]
    for lib in (torch, flame):
        labels = lib.tensor(array)
        with pytest.raises(RuntimeError, match="LongTensor|empty tensor"):
            lib.nn.functional.one_hot(labels)


@pytest.mark.parametrize("kind", ["avg", "max"])
def test_adaptive_pool1d_refuses_a_none_size_as_torch(kind):
    for lib in (torch, flame):
        with pytest.raises(TypeError, match="tuple of ints"):
            getattr(lib.nn.functional, f"adaptive_{kind}_pool1d")(lib.ones(1, 2, 3), (None,))
