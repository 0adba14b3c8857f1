"""The calls whose arguments used to land in the wrong parameter, made positionally as torch code makes
them, against torch (values and gradients, eager and compiled)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import flame
import flame.nn as nn
import flame.nn.functional as F
from tests.ops.test_everyday_ops import MODES, check, randn

rng = np.random.default_rng(0)
X, Y = randn(4, 5), randn(4, 5, key=1)
P = (1 / (1 + np.exp(-X))).astype(np.float32)
T01 = (rng.random((4, 5)) > 0.5).astype(np.float32)
SIGN = np.where(rng.random(4) > 0.5, 1.0, -1.0).astype(np.float32)
CLS = np.array([0, 3, 1, 4])
W5 = np.abs(randn(5, key=2)).astype(np.float32) + 0.1

# (name, call with the module F or TF, arrays): every argument positional, torch's order
LOSSES = [
    ("mse_loss", lambda M, a, b: M.mse_loss(a, b, None, None, "sum"), (X, Y)),
    ("l1_loss", lambda M, a, b: M.l1_loss(a, b, None, None, "sum"), (X, Y)),
    ("smooth_l1_loss", lambda M, a, b: M.smooth_l1_loss(a, b, None, None, "sum", 0.5), (X, Y)),
    ("kl_div", lambda M, a, b: M.kl_div(a, b, None, None, "batchmean", True), (X, Y)),
    ("nll_loss", lambda M, a, t, w: M.nll_loss(a, t, w, None, 1, None, "sum"), (X, CLS, W5)),
    ("binary_cross_entropy", lambda M, p, t, w: M.binary_cross_entropy(p, t, w, None, None, "sum"), (P, T01, W5)),
    ("binary_cross_entropy_with_logits",
     lambda M, a, t, w, pw: M.binary_cross_entropy_with_logits(a, t, w, None, None, "sum", pw), (X, T01, W5, W5)),
    ("margin_ranking_loss", lambda M, a, b, s: M.margin_ranking_loss(a, b, s, 0.3, None, None, "sum"),
     (X[:, 0], Y[:, 0], SIGN)),
    ("hinge_embedding_loss", lambda M, a, s: M.hinge_embedding_loss(a, s, 0.5, None, None, "sum"), (X[:, 0], SIGN)),
    ("soft_margin_loss", lambda M, a, s: M.soft_margin_loss(a, s, None, None, "sum"), (X[:, 0], SIGN)),
    ("multilabel_soft_margin_loss", lambda M, a, t, w: M.multilabel_soft_margin_loss(a, t, w, None, None, "sum"),
     (X, T01, W5)),
    ("cosine_embedding_loss", lambda M, a, b, s: M.cosine_embedding_loss(a, b, s, 0.1, None, None, "sum"),
     (X, Y, SIGN)),
    ("triplet_margin_loss", lambda M, a, b, c: M.triplet_margin_loss(a, b, c, 0.5, 2, 1e-6, True, None, None, "sum"),
     (X, Y, randn(4, 5, key=3))),
    ("multi_margin_loss", lambda M, a, t, w: M.multi_margin_loss(a, t, 2, 0.7, w, None, None, "sum"), (X, CLS, W5)),
    ("poisson_nll_loss", lambda M, a, t: M.poisson_nll_loss(a, t, False, True, None, 1e-4, None, "sum"),
     (np.abs(X) + 0.1, np.abs(Y) * 3)),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name, call, arrays", LOSSES, ids=[n for n, *_ in LOSSES])
def test_losses_take_every_argument_at_torchs_place(name, call, arrays, mode):
    check(lambda *a: call(F, *a), lambda *a: call(TF, *a), *arrays, wrt=[0], mode=mode, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", [n for n, *_ in LOSSES])
def test_a_reduction_in_size_averages_place_raises(name):
    """torch reads F.<loss>(x, y, 'sum') as the deprecated size_average (and answers with the mean):
    flame refuses it instead of summing."""
    fn = getattr(F, name)
    required = [p for p in inspect.signature(fn).parameters.values() if p.default is p.empty]
    args = [flame.tensor(a) for a in dict((n, a) for n, _, a in LOSSES)[name]][:len(required)]
    with pytest.raises(ValueError, match="size_average and reduce"):
        fn(*args, size_average="sum")


@pytest.mark.parametrize("mode", MODES)
def test_loss_modules_take_torchs_positions(mode):
    for make in (lambda m: m.SmoothL1Loss(None, None, "sum", 0.5), lambda m: m.KLDivLoss(None, None, "sum", True),
                 lambda m: m.MSELoss(None, None, "none"), lambda m: m.PoissonNLLLoss(False, True, None, 1e-4, None,
                                                                                     "sum")):
        ours, theirs = make(nn), make(torch.nn)
        check(ours, theirs, np.abs(X) + 0.1, np.abs(Y), mode=mode)
    with pytest.raises(ValueError, match="MSELoss: size_average and reduce"):
        nn.MSELoss("sum")  # torch's size_average: a mean, with a deprecation warning


def test_constructors_take_device_before_dtype():
    for make in (lambda m, dt: m.Linear(3, 4, True, "cpu", dt),
                 lambda m, dt: m.Conv2d(2, 3, 3, 1, 0, 1, 1, True, "zeros", "cpu", dt),
                 lambda m, dt: m.BatchNorm1d(4, 1e-5, 0.1, True, True, "cpu", dt),
                 lambda m, dt: m.LayerNorm(4, 1e-5, True, True, "cpu", dt),
                 lambda m, dt: m.GroupNorm(2, 4, 1e-5, True, "cpu", dt),
                 lambda m, dt: m.Embedding(5, 3, None, None, 2.0, False, False, None, False, "cpu", dt)):
        ours, theirs = make(nn, flame.f64), make(torch.nn, torch.float64)
        assert [p.dtype.name for p in ours.parameters()] == ["f64"] * len(list(theirs.parameters()))
    with pytest.raises(TypeError, match="device must name a device"):
        nn.Linear(3, 4, True, flame.f64)  # a dtype in device's place: torch refuses it too
    with pytest.raises(TypeError):
        torch.nn.Linear(3, 4, True, torch.float64)


@pytest.mark.parametrize("mode", MODES)
def test_embedding_takes_torchs_weight(mode):
    w = randn(5, 3, key=4)
    idx = np.array([[0, 4], [2, 2]])
    ours = nn.Embedding(5, 3, 0, None, 2.0, False, False, flame.tensor(w))
    theirs = torch.nn.Embedding(5, 3, 0, None, 2.0, False, False, torch.tensor(w))
    check(lambda i: ours(i), lambda i: theirs(i), idx, mode=mode)
    frozen = nn.Embedding(5, 3, None, None, 2.0, False, False, flame.tensor(w), True)
    assert not frozen.weight.requires_grad
    bag, tbag = nn.EmbeddingBag(5, 3, _weight=flame.tensor(w)), torch.nn.EmbeddingBag(5, 3, _weight=torch.tensor(w))
    check(lambda i: bag(i), lambda i: tbag(i), idx, mode=mode)
    with pytest.raises(ValueError, match=r"_weight must have the shape \[5, 3\]"):
        nn.Embedding(5, 3, _weight=flame.zeros(4, 3))


def test_dropout_takes_inplace_where_torch_has_it():
    for drop in (nn.Dropout(0.5, True), lambda t: F.dropout(t, 0.5, True, True)):
        x = flame.ones(1000)  # each call writes into its input: a fresh one for each
        kept = drop(x).numpy()
        assert set(np.unique(kept)) <= {0.0, 2.0} and 300 < (kept == 2.0).sum() < 700
    x = flame.ones(1000)
    assert nn.Dropout(0.5, True).eval()(x) is x


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", [(3,), (4, 5), (2, 3, 4), (2, 3, 2, 2)])
def test_softmax_without_dim_is_torchs_implicit_dim(shape, mode):
    x = randn(*shape, key=5)
    for name in ("softmax", "log_softmax", "softmin"):
        with pytest.warns(UserWarning, match="Implicit dimension choice"):
            check(getattr(F, name), getattr(TF, name), x, mode=mode)
    with pytest.warns(UserWarning, match="Implicit dimension choice"):
        check(lambda a: nn.Softmax()(a), lambda a: torch.nn.Softmax()(a), x, mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_softmax_dtype_in_torchs_place(mode):
    check(lambda a: F.log_softmax(a, 1, 3, flame.f64), lambda a: TF.log_softmax(a, 1, 3, torch.float64), X,
          mode=mode)


def test_gumbel_softmax_dim_after_eps():
    hard = F.gumbel_softmax(flame.tensor(X), 1.0, True, 1e-10, 0).numpy()
    np.testing.assert_array_equal(hard.sum(0), np.ones(5))  # one-hot along dim 0, as torch's
    with pytest.warns(UserWarning, match="eps"):
        F.gumbel_softmax(flame.tensor(X), 1.0, False, 1e-5)


def test_autograd_grad_takes_only_inputs_at_torchs_place():
    def run(lib):
        x, unused = lib.ones(3, requires_grad=True), lib.ones(2, requires_grad=True)
        # only_inputs, then allow_unused: positions 6 and 7
        return lib.autograd.grad((x * x).sum(), (x, unused), None, False, False, True, True)

    got, want = run(flame), run(torch)
    np.testing.assert_array_equal(got[0].numpy(), want[0].numpy())
    assert got[1] is None and want[1] is None
    x = flame.ones(2, requires_grad=True)
    with pytest.warns(FutureWarning, match="grad_variables"):
        flame.autograd.backward([(x * 3).sum()], None, None, False, [flame.tensor(2.0)])
    np.testing.assert_array_equal(x.grad.numpy(), [6.0, 6.0])


@pytest.mark.parametrize("mode", MODES)
def test_max_and_min_of_a_tensor_are_elementwise(mode):
    check(lambda a, b: (a.max(b), a.min(b)), lambda a, b: (a.max(b), a.min(b)), X, Y, mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_torchs_keyword_names(mode):
    def both(lib, a, b):
        return (lib.where(condition=a > 0, input=a, other=b), lib.full(size=(2,), fill_value=3.0) * a[0, :2],
                lib.split(tensor=a, split_size_or_sections=2)[1], a.split(split_size=3, dim=1)[0],
                lib.maximum(input=a, other=b), lib.pow(input=a.abs() + 1, exponent=b), lib.matmul(input=a, other=b.T),
                lib.tensordot(a=a, b=b, dims=2), lib.dot(input=a[0], tensor=b[0]), lib.swapdims(a, dim0=0, dim1=1),
                lib.zeros_like(input=a) + a, lib.arange(end=5) * 1.0)

    check(lambda a, b: both(flame, a, b), lambda a, b: both(torch, a, b), X, Y, mode=mode)


def test_copy_and_requires_grad_keywords():
    a, t = flame.zeros(3), torch.zeros(3)
    a.copy_(other=flame.ones(3), non_blocking=True)
    t.copy_(other=torch.ones(3), non_blocking=True)
    np.testing.assert_array_equal(a.numpy(), t.numpy())
    assert a.requires_grad_(requires_grad=True).requires_grad


@pytest.mark.parametrize("cls", ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam",
                                 "RAdam", "ASGD", "Rprop"])
def test_optimizers_refuse_unknown_keywords(cls):
    p = nn.Parameter(flame.ones(2))
    getattr(flame.optim, cls)([p], lr=0.1, maximize=True, foreach=None)
    with pytest.raises(TypeError, match="unexpected keyword argument 'not_a_flag'"):
        getattr(flame.optim, cls)([p], lr=0.1, not_a_flag=True)


def test_randint_takes_torchs_forms():
    assert flame.randint(10, (3,)).shape == torch.randint(10, (3,)).shape
    assert flame.randint(2, 10, (2, 2)).shape == torch.randint(2, 10, (2, 2)).shape
    got = flame.randint(2, 10, (500,)).numpy()
    assert got.min() >= 2 and got.max() < 10
