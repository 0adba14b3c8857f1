"""torch's top-level spellings of flame's functions (torch.conv2d, torch.layer_norm, torch.dropout,
torch.embedding, torch.divide ...) and Tensor's alias methods (x.divide, x.greater_equal_ ...), against
torch: torch's positional parameters, values, dtypes and gradients, eagerly and inside @flame.compile."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.tensor_parity.common import check, gradients, to_lib

rng = np.random.default_rng(0)


def _r(*shape):
    return rng.standard_normal(shape)


X3, W1, B = _r(2, 4, 7), _r(6, 4, 3), _r(6)
X4, W2 = _r(2, 4, 5, 5), _r(6, 4, 3, 3)
X5, W3 = _r(1, 2, 4, 4, 4), _r(3, 2, 2, 2, 2)
WT1, WT2 = _r(4, 3, 3), _r(4, 3, 3, 3)
XN, GW, GB = _r(3, 4, 5), _r(4), _r(4)
RM, RV = _r(4), np.abs(_r(4)) + 0.5
EMB, IDX = _r(10, 3), np.array([[1, 2, 4], [4, 1, 9]])
A, BB = _r(4, 5), _r(4, 5)
T = np.sign(_r(4))
PROB = rng.uniform(0.1, 0.9, (4, 5))
LOGP = np.log(np.abs(_r(4, 5)) + 0.1)
X1 = _r(2, 3, 9)
BILW, LNW = _r(2, 5, 5), _r(5)

# (name, fn(lib, x) where x is the differentiated input, x)
CASES = [
    ("conv1d", lambda L, x: L.conv1d(x, to_lib(L, W1), to_lib(L, B), 2, 1, 1, 1), X3),
    ("conv2d", lambda L, x: L.conv2d(x, to_lib(L, W2), None, 1, 1), X4),
    ("conv3d", lambda L, x: L.conv3d(x, to_lib(L, W3), None, 2), X5),
    ("conv_transpose1d", lambda L, x: L.conv_transpose1d(x, to_lib(L, WT1), None, 2, 1, 1), X3),
    ("conv_transpose2d", lambda L, x: L.conv_transpose2d(x, to_lib(L, WT2), None, 1, 1), X4),
    ("layer_norm", lambda L, x: L.layer_norm(x, (5,), to_lib(L, LNW), None, 1e-5, True), XN),
    ("group_norm", lambda L, x: L.group_norm(x, 2, to_lib(L, GW), to_lib(L, GB), 1e-5, True), XN),
    ("batch_norm eval", lambda L, x: L.batch_norm(x, to_lib(L, GW), to_lib(L, GB), to_lib(L, RM), to_lib(L, RV),
                                                  False, 0.1, 1e-5, False), XN),
    ("batch_norm train", lambda L, x: L.batch_norm(x, to_lib(L, GW), None, None, None, True, 0.1, 1e-5, False), XN),
    ("instance_norm", lambda L, x: L.instance_norm(x, to_lib(L, GW), to_lib(L, GB), None, None, True, 0.1, 1e-5,
                                                   False), XN),
    ("dropout off", lambda L, x: L.dropout(x, 0.5, False), A),
    ("alpha_dropout off", lambda L, x: L.alpha_dropout(x, 0.3, False), A),
    ("feature_alpha_dropout off", lambda L, x: L.feature_alpha_dropout(x, 0.3, False), XN),
    ("embedding", lambda L, x: L.embedding(x, to_lib(L, IDX)), EMB),
    ("embedding padding_idx", lambda L, x: L.embedding(x, to_lib(L, IDX), 1), EMB),
    ("pixel_shuffle", lambda L, x: L.pixel_shuffle(x, 2), X4),
    ("pixel_unshuffle", lambda L, x: L.pixel_unshuffle(x[..., :4, :4], 2), X4),
    ("channel_shuffle", lambda L, x: L.channel_shuffle(x, 2), X4),
    ("cosine_similarity", lambda L, x: L.cosine_similarity(x, to_lib(L, BB), 1, 1e-8), A),
    ("pairwise_distance", lambda L, x: L.pairwise_distance(x, to_lib(L, BB), 3.0, 1e-6, True), A),
    ("prelu", lambda L, x: L.prelu(x, to_lib(L, np.array([0.1, 0.2, 0.3, 0.4]))), XN),
    ("rrelu eval", lambda L, x: L.rrelu(x, 0.1, 0.3, False), A),
    ("selu", lambda L, x: L.selu(x), A),
    ("celu", lambda L, x: L.celu(x, 0.5), A),
    ("threshold", lambda L, x: L.threshold(x, 0.1, 20.0), A),
    ("hardshrink", lambda L, x: L.hardshrink(x, 0.3), A),
    ("bilinear", lambda L, x: L.bilinear(x, to_lib(L, BB), to_lib(L, BILW), None), A),
    ("kl_div default (none)", lambda L, x: L.kl_div(x, to_lib(L, PROB)), LOGP),
    ("kl_div mean", lambda L, x: L.kl_div(x, to_lib(L, PROB), 1), LOGP),
    ("kl_div sum log_target", lambda L, x: L.kl_div(x, to_lib(L, LOGP), 2, log_target=True), LOGP),
    ("margin_ranking_loss", lambda L, x: L.margin_ranking_loss(x[:, 0], to_lib(L, BB[:, 0]), to_lib(L, T), 0.1, 2), A),
    ("triplet_margin_loss", lambda L, x: L.triplet_margin_loss(x, to_lib(L, BB), to_lib(L, A * 0.5), 1.0, 2.0, 1e-6,
                                                               True, 1), A),
    ("cosine_embedding_loss", lambda L, x: L.cosine_embedding_loss(x, to_lib(L, BB), to_lib(L, T), 0.2, 0), A),
    ("hinge_embedding_loss", lambda L, x: L.hinge_embedding_loss(x, to_lib(L, np.sign(BB)), 1.0, 1), A),
    ("poisson_nll_loss", lambda L, x: L.poisson_nll_loss(x, to_lib(L, np.abs(BB)), True, True, 1e-8, 1), A),
    ("binary_cross_entropy_with_logits", lambda L, x: L.binary_cross_entropy_with_logits(
        x, to_lib(L, PROB), to_lib(L, np.abs(BB)), to_lib(L, np.array([1.0, 2.0, 0.5, 1.5, 3.0])), 2), A),
    ("max_pool1d", lambda L, x: L.max_pool1d(x, 3, 2, 1), X1),
    ("max_pool1d default stride", lambda L, x: L.max_pool1d(x, 3), X1),
    ("max_pool2d", lambda L, x: L.max_pool2d(x, 2, 1, 1, 1, True), X4),
    ("max_pool3d", lambda L, x: L.max_pool3d(x, 2), X5),
    ("max_pool1d_with_indices", lambda L, x: L.max_pool1d_with_indices(x, 2)[0], X1),
    ("avg_pool1d", lambda L, x: L.avg_pool1d(x, 3, 2, 1, False, False), X1),
    ("adaptive_avg_pool1d", lambda L, x: L.adaptive_avg_pool1d(x, 4), X1),
    ("adaptive_max_pool1d", lambda L, x: L.adaptive_max_pool1d(x, 4)[0], X1),
    ("rms_norm", lambda L, x: L.rms_norm(x, (5,), None, 1e-6), XN),
    ("constant_pad_nd", lambda L, x: L.constant_pad_nd(x, (1, 2), 3.0), A),
    ("divide", lambda L, x: L.divide(x, to_lib(L, BB), rounding_mode=None), A),
    ("multiply", lambda L, x: L.multiply(x, 3.0), A),
    ("subtract", lambda L, x: L.subtract(x, to_lib(L, BB), alpha=2), A),
    ("concatenate", lambda L, x: L.concatenate([x, to_lib(L, BB)], axis=1), A),
    ("row_stack", lambda L, x: L.row_stack([x, to_lib(L, BB)]), A),
    ("trapz", lambda L, x: L.trapz(x, to_lib(L, BB)), A),
    ("trapz dx", lambda L, x: L.trapz(x, dx=0.5, dim=0), A),
    ("Tensor.divide", lambda L, x: x.divide(to_lib(L, BB) + 3, rounding_mode="floor") + x, A),
    ("Tensor.multiply", lambda L, x: x.multiply(to_lib(L, BB)), A),
    ("Tensor.subtract", lambda L, x: x.subtract(to_lib(L, BB), alpha=0.5), A),
    ("Tensor.prelu", lambda L, x: x.prelu(to_lib(L, np.array([0.25]))), A),
    ("Tensor.hardshrink", lambda L, x: x.hardshrink(0.2), A),
]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name,fn,x", CASES, ids=[c[0] for c in CASES])
def test_values_and_gradients_as_torch(name, fn, x, compiled):
    check(fn, x, compiled=compiled, rtol=1e-10, atol=1e-12)
    w = rng.standard_normal(np.shape(fn(torch, torch.tensor(x))))  # a weighted sum reaches every output
    gf, gt = gradients(lambda L, y: (fn(L, y) * to_lib(L, w)).sum(), x, compiled)
    np.testing.assert_allclose(gf, gt, rtol=1e-9, atol=1e-12)


COMPARISONS = ["greater", "greater_equal", "less", "less_equal", "not_equal"]


@pytest.mark.parametrize("name", COMPARISONS)
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_comparison_aliases(name, compiled):
    a, b = np.array([1.0, 2.0, 3.0]), np.array([2.0, 2.0, 1.0])
    check(lambda L, x, y: getattr(L, name)(x, y), a, b, compiled=compiled)
    check(lambda L, x, y: getattr(x, name)(y), a, b, compiled=compiled)
    check(lambda L, x, y: getattr(x, name)(2), a, b, compiled=compiled)
    check(lambda L, x, y: getattr(x.clone(), name + "_")(y), a, b, compiled=compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_in_place_aliases(compiled):
    a, b = np.array([[1.0, -2.0], [3.0, 4.0]]), np.array([[2.0, 2.0], [-1.0, 0.5]])
    check(lambda L, x, y: x.clone().divide_(y), a, b, compiled=compiled)
    check(lambda L, x, y: x.clone().divide_(y, rounding_mode="trunc"), a, b, compiled=compiled)
    check(lambda L, x, y: x.clone().multiply_(y), a, b, compiled=compiled)
    check(lambda L, x, y: x.clone().subtract_(y, alpha=3), a, b, compiled=compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_fill_detach_and_integer_aliases(compiled):
    a = np.array([[1.0, -2.0], [3.0, 4.0]])
    check(lambda L, x: L.fill(x, 3.5), a, compiled=compiled)
    check(lambda L, x: L.fill(x.long(), 3), a, compiled=compiled)
    check(lambda L, x: L.fill(x, L.tensor(2.0, dtype=L.float64)), a, compiled=compiled)
    check(lambda L, x: L.detach(x) * 2, a, compiled=compiled)
    check(lambda L, x: L.divide(x.long(), 2), a, compiled=compiled)
    check(lambda L, x: L.adaptive_max_pool1d(x.reshape(1, 1, 4), 2), a, compiled=compiled)
    check(lambda L, x: L.max_pool1d_with_indices(x.reshape(1, 1, 4), 2), a, compiled=compiled)


def test_detach_cuts_the_gradient():
    x = flame.tensor([1.0, 2.0], requires_grad=True)
    assert not flame.detach(x).requires_grad


def test_dropout_trains_as_torch():
    x = flame.ones(2000, dtype=flame.float64)
    y = flame.dropout(x, 0.25, True).numpy()
    assert set(np.unique(y)) <= {0.0, 1 / 0.75}
    assert abs((y == 0).mean() - 0.25) < 0.05
    z = flame.ones(2000, dtype=flame.float64)
    assert flame.dropout_(z, 0.25, True) is z and abs((z.numpy() == 0).mean() - 0.25) < 0.05


def test_in_place_activations_write_the_input():
    for name, args in [("relu_", ()), ("selu_", ()), ("celu_", (0.5,)), ("threshold_", (0.0, 7.0))]:
        x = flame.tensor([-1.0, 2.0])
        t = torch.tensor([-1.0, 2.0])
        assert getattr(flame, name)(x, *args) is x
        getattr(torch, name)(t, *args)
        np.testing.assert_allclose(x.numpy(), t.numpy(), rtol=1e-6)


def test_losses_take_torch_int_reduction():
    a, b = flame.tensor([0.5, 1.0]), flame.tensor([1.0, 1.0])
    with pytest.raises(TypeError):
        flame.hinge_embedding_loss(a, b, 1.0, "mean")
    with pytest.raises(TypeError):
        torch.hinge_embedding_loss(torch.tensor([0.5, 1.0]), torch.tensor([1.0, 1.0]), 1.0, "mean")
    assert flame.hinge_embedding_loss(a, b, 1.0, 0).shape == (2,)


def test_positional_order_of_torch_batch_norm_and_embedding():
    # torch.batch_norm takes weight and bias before the running statistics; torch.embedding the weight first
    x = flame.tensor([[1.0, 2.0], [3.0, 5.0]])
    w, b = flame.tensor([2.0, 3.0]), flame.tensor([0.5, -0.5])
    out = flame.batch_norm(x, w, b, None, None, True, 0.1, 1e-5, False)
    ref = torch.batch_norm(torch.tensor(x.numpy()), torch.tensor(w.numpy()), torch.tensor(b.numpy()), None, None,
                           True, 0.1, 1e-5, False)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-6)
    assert flame.embedding(flame.ones(5, 2), flame.tensor([1, 3])).shape == (2, 2)


IN_PLACE_CASES = [("exp_", ()), ("clamp_", (0.0, 1.0)), ("clamp_min_", (0.5,)), ("sigmoid_", ()), ("zero_", ()),
                  ("fill_", (2.5,)), ("nan_to_num_", ()), ("round_", ()), ("square_", ()), ("logit_", (0.1,)),
                  ("xlogy_", (2.0,)), ("abs_", ()), ("detach_", ())]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name,args", IN_PLACE_CASES, ids=[c[0] for c in IN_PLACE_CASES])
def test_top_level_in_place_functions(name, args, compiled):
    a = np.array([[0.25, -2.0], [3.0, 0.75]])
    check(lambda L, x: getattr(L, name)(x.clone(), *args), a, compiled=compiled)
    x = flame.tensor(a)
    assert getattr(flame, name)(x, *args) is x


def test_top_level_in_place_functions_take_the_methods_parameters():
    import inspect

    assert list(inspect.signature(flame.clamp_).parameters) == ["input", "min", "max"]
    x = flame.tensor([1.0, 5.0])
    flame.index_put_(x, (flame.tensor([1]),), flame.tensor([7.0]), accumulate=True)
    assert x.numpy().tolist() == [1.0, 12.0]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_feature_dropout_drops_whole_channels(compiled):
    x = flame.ones(400, 8, 3, 2, dtype=flame.float64)
    y = (flame.compile(lambda t: flame.feature_dropout(t, 0.25, True)) if compiled else
         (lambda t: flame.feature_dropout(t, 0.25, True)))(x).numpy()
    per_channel = y.reshape(400, 8, -1)
    assert np.all(per_channel == per_channel[..., :1]) and set(np.unique(y)) <= {0.0, 1 / 0.75}
    assert abs((per_channel[..., 0] == 0).mean() - 0.25) < 0.03
    check(lambda L, t: L.feature_dropout(t, 0.5, False), A, compiled=compiled)
    w = flame.ones(50, 4, requires_grad=True)
    out = flame.feature_dropout(w, 0.5, True)
    out.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), out.detach().numpy())
    z = flame.ones(6, 2)
    assert flame.feature_dropout_(z, 0.5, True) is z
