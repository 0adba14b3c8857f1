"""torch.log1p/expm1 and the activations, similarities and losses of flame.frontend.activations (and
their flame.nn modules) against torch on the CPU: values and gradients, eagerly and compiled (the check
of test_everyday_ops), accuracy at the edges where the naive formulas lose it, and their errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import flame
import flame.nn as nn
import flame.nn.functional as F
from flame.errors import ShapeError
from tests.ops.test_everyday_ops import MODES, check, randn


def _edges() -> np.ndarray:
    """Tiny, moderate, large and huge magnitudes of both signs, zeros, infinities and NaN."""
    mags = np.logspace(-30, 2, 120)
    edges = [0.0, -0.0, 88.0, 88.7, 100.0, 3e38, np.inf, -np.inf, np.nan]
    return np.concatenate([mags, -mags, edges]).astype(np.float32)


@pytest.mark.parametrize("name", ["log1p", "expm1"])
def test_log1p_expm1_accurate_at_the_edges(name):
    x = _edges()
    if name == "log1p":
        x = x[~(x < -1)]
    got, want = getattr(flame, name)(flame.tensor(x)).numpy(), getattr(torch, name)(torch.tensor(x)).numpy()
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite], want[~finite])
    np.testing.assert_allclose(got[finite], want[finite], rtol=4e-7, atol=0)  # a few ulp where exp(x)-1 loses all
    assert np.array_equal(np.signbit(got[x == 0]), np.signbit(x[x == 0]))


@pytest.mark.parametrize("mode", MODES)
def test_log1p_expm1_gradients(mode):
    x = randn(5, 4) * 0.5
    check(lambda t: t.log1p() + flame.expm1(t), lambda t: t.log1p() + torch.expm1(t), x, mode=mode)


ACTIVATIONS = [
    (lambda t: F.softplus(t), lambda t: TF.softplus(t)),
    (lambda t: F.softplus(t, beta=2.0, threshold=5.0), lambda t: TF.softplus(t, beta=2.0, threshold=5.0)),
    (F.logsigmoid, TF.logsigmoid),
    (lambda t: F.elu(t, 0.7), lambda t: TF.elu(t, 0.7)),
    (F.selu, TF.selu),
    (lambda t: F.celu(t, 0.5), lambda t: TF.celu(t, 0.5)),
    (F.mish, TF.mish),
    (lambda t: F.hardtanh(t, -0.5, 0.8), lambda t: TF.hardtanh(t, -0.5, 0.8)),
    (F.relu6, TF.relu6),
    (F.hardsigmoid, TF.hardsigmoid),
    (F.hardswish, TF.hardswish),
    (F.softsign, TF.softsign),
    (lambda t: F.glu(t, 1), lambda t: TF.glu(t, 1)),
    (lambda t: F.softmin(t, 0), lambda t: TF.softmin(t, 0)),
    (lambda t: F.threshold(t, 0.2, -3.0), lambda t: TF.threshold(t, 0.2, -3.0)),
    (lambda t: F.normalize(t), lambda t: TF.normalize(t)),
    (lambda t: F.normalize(t, p=1.0, dim=0), lambda t: TF.normalize(t, p=1.0, dim=0)),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("k", range(len(ACTIVATIONS)))
def test_activations(k, mode):
    fn, tfn = ACTIVATIONS[k]
    x = randn(6, 8, key=k) * 4  # away from the kinks of the piecewise ones: no sample sits on a corner
    check(fn, tfn, x, mode=mode)


def test_activations_do_not_overflow():
    x = np.float32([-1e4, -100.0, -30.0, 0.0, 30.0, 100.0, 1e4])
    for fn, tfn in ACTIVATIONS[:7]:
        got, want = fn(flame.tensor(x)).numpy(), tfn(torch.tensor(x)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-30)


@pytest.mark.parametrize("mode", MODES)
def test_prelu(mode):
    x = randn(2, 3, 4)
    check(lambda t, w: F.prelu(t, w), lambda t, w: TF.prelu(t, w), x, np.float32([0.1, -0.2, 0.3]), mode=mode)
    check(lambda t, w: F.prelu(t, w), lambda t, w: TF.prelu(t, w), x, np.float32([0.25]), mode=mode)
    with pytest.raises(ShapeError, match="prelu: weight \\[2\\]"):
        F.prelu(flame.tensor(x), flame.ones(2))


@pytest.mark.parametrize("mode", MODES)
def test_similarities(mode):
    a, b = randn(4, 6), randn(4, 6, key=1)
    check(lambda x, y: F.cosine_similarity(x, y), lambda x, y: TF.cosine_similarity(x, y), a, b, mode=mode)
    check(lambda x, y: F.cosine_similarity(x, y[:1], dim=-1), lambda x, y: TF.cosine_similarity(x, y[:1], dim=-1),
          a, b, mode=mode)
    check(lambda x, y: F.pairwise_distance(x, y), lambda x, y: TF.pairwise_distance(x, y), a, b, mode=mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_huber_loss(reduction, mode):
    a, b = randn(5, 3) * 2, randn(5, 3, key=1)
    check(lambda x, y: F.huber_loss(x, y, reduction, delta=0.7), lambda x, y: TF.huber_loss(x, y, reduction, delta=0.7),
          a, b, mode=mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("reduction", ["batchmean", "sum", "none"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div(reduction, log_target, mode):
    logits, other = randn(4, 5), randn(4, 5, key=1)
    x = np.log(np.exp(logits) / np.exp(logits).sum(1, keepdims=True)).astype(np.float32)
    p = (np.exp(other) / np.exp(other).sum(1, keepdims=True)).astype(np.float32)
    t = np.log(p).astype(np.float32) if log_target else p
    fn = lambda a, b: F.kl_div(a, b, reduction=reduction, log_target=log_target)  # noqa: E731
    tfn = lambda a, b: TF.kl_div(a, b, reduction=reduction, log_target=log_target)  # noqa: E731
    check(fn, tfn, x, t, mode=mode)
    if not log_target:  # a zero target contributes 0, not NaN (PyTorch's gradient for that target is NaN)
        p[0, 0] = 0.0
        check(fn, tfn, x, p, mode=mode, wrt=[0])


def test_kl_div_mean_warns_as_pytorch_does():
    x = flame.tensor(randn(2, 3))
    with pytest.warns(UserWarning, match="batchmean"):
        F.kl_div(x, x.exp())


def test_glu_needs_an_even_dim():
    with pytest.raises(ShapeError, match="(?s)glu: halving dimension 1 needs an even size.*test_more_activations"):
        F.glu(flame.ones(2, 3), 1)


def test_modules():
    x = randn(3, 6)
    pairs = [(nn.Softplus(2.0, 5.0), torch.nn.Softplus(2.0, 5.0)), (nn.ELU(0.5), torch.nn.ELU(0.5)),
             (nn.SELU(), torch.nn.SELU()), (nn.CELU(0.5), torch.nn.CELU(0.5)), (nn.Mish(), torch.nn.Mish()),
             (nn.Hardtanh(-2, 2), torch.nn.Hardtanh(-2, 2)), (nn.ReLU6(), torch.nn.ReLU6()),
             (nn.Hardsigmoid(), torch.nn.Hardsigmoid()), (nn.Hardswish(), torch.nn.Hardswish()),
             (nn.LogSigmoid(), torch.nn.LogSigmoid()), (nn.Softsign(), torch.nn.Softsign()), (nn.GLU(), torch.nn.GLU()),
             (nn.Softmin(1), torch.nn.Softmin(1)), (nn.Threshold(0.1, 2.0), torch.nn.Threshold(0.1, 2.0)),
             (nn.PReLU(), torch.nn.PReLU()), (nn.Unflatten(1, (2, 3)), torch.nn.Unflatten(1, (2, 3)))]
    for mine, theirs in pairs:
        np.testing.assert_allclose(mine(flame.tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy(),
                                   rtol=1e-5, atol=1e-6, err_msg=type(mine).__name__)
    y = randn(3, 6, key=1)
    for mine, theirs in [(nn.CosineSimilarity(), torch.nn.CosineSimilarity()),
                         (nn.PairwiseDistance(), torch.nn.PairwiseDistance()),
                         (nn.HuberLoss(delta=0.5), torch.nn.HuberLoss(delta=0.5)),
                         (nn.KLDivLoss(reduction="batchmean", log_target=True),
                          torch.nn.KLDivLoss(reduction="batchmean", log_target=True))]:
        np.testing.assert_allclose(mine(flame.tensor(x), flame.tensor(y)).numpy(),
                                   theirs(torch.tensor(x), torch.tensor(y)).numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=type(mine).__name__)
    prelu = nn.PReLU(6, init=0.1)
    assert [n for n, _ in prelu.named_parameters()] == ["weight"] and prelu.weight.shape == (6,)


def test_prelu_trains_in_a_compiled_step():
    model = nn.Sequential(nn.Linear(4, 4, generator=flame.Generator(0)), nn.PReLU(4))
    opt = flame.optim.SGD(model.parameters(), lr=0.5)
    x, y = flame.tensor(randn(8, 4)), flame.tensor(randn(8, 4, key=1))

    @flame.compile
    def step(x, y):
        loss = F.huber_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    before = model[1].weight.numpy().copy()
    losses = [step(x, y).item() for _ in range(5)]
    assert losses[-1] < losses[0] and not np.array_equal(model[1].weight.numpy(), before)



def test_a_step_of_them_fuses_renders_and_compiles_for_the_gpu(cuda_target):
    """A training step over every new composition, planned for the CUDA target: the fused plan gives the
    eager values on the reference executor, and each of its kernels compiles with NVRTC for sm_90."""
    from flame.codegen.nvrtc import compile_cubin

    def make():
        gen = flame.Generator(3)
        return nn.Parameter(flame.randn(16, 16, generator=gen) * 0.3), nn.Parameter(flame.full((16,), 0.25))

    def body(w, pw, x, y):
        h = x @ w
        h = F.softplus(h) + F.mish(h) + F.elu(h) + F.selu(h) + F.celu(h, 0.5) + F.logsigmoid(h) + F.hardswish(h)
        h = h + F.prelu(h, pw) + F.hardsigmoid(h) + F.softsign(h) + flame.log1p(h.abs()) + flame.expm1(h.clamp(max=3))
        h = h.roll(3, 1) + flame.lerp(h, y, 0.3) + flame.addcmul(h, h, y, value=0.1)
        loss = flame.logsumexp(h, (0, 1)) + F.huber_loss(h, y) + F.cosine_similarity(h, y).sum()
        loss = loss + F.kl_div(F.log_softmax(h, 1), F.softmax(y, 1), reduction="batchmean") + F.glu(h, 1).sum()
        loss = loss + F.normalize(h).sum() + flame.div(h, 3.0, rounding_mode="trunc").sum()
        loss.backward()
        return loss

    x, y = flame.tensor(randn(8, 16)), flame.tensor(randn(8, 16, key=1))
    w, pw = make()
    want = body(w, pw, x, y).item(), w.grad.numpy(), pw.grad.numpy()
    w, pw = make()
    step = flame.compile(lambda x, y: body(w, pw, x, y))
    got = step(x, y).item(), w.grad.numpy(), pw.grad.numpy()
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    for g, e in zip(got[1:], want[1:]):  # f32 sums of terms up to ~|e|.max(): rounding relative to that scale
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-6 * np.abs(e).max())
    kernels = {k.source for k in step._last.plan.kernels()}
    assert len(kernels) > 5
    for source in kernels:
        assert compile_cubin(source, "sm_90")[:4] == b"\x7fELF"


# ---- channel dropout, pixel shuffle, padding, instance norm ------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_pixel_shuffle_round_trip(mode):
    x = randn(2, 8, 3, 5)
    check(lambda t: F.pixel_shuffle(t, 2), lambda t: TF.pixel_shuffle(t, 2), x, mode=mode)
    check(lambda t: F.pixel_unshuffle(t, 2), lambda t: TF.pixel_unshuffle(t, 2), randn(2, 3, 4, 6), mode=mode)
    check(lambda t: nn.PixelUnshuffle(2)(nn.PixelShuffle(2)(t)), lambda t: t * 1, x, mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_instance_norm(mode):
    x = randn(2, 3, 4, 5) * 2 + 1
    check(lambda t: F.instance_norm(t), lambda t: TF.instance_norm(t), x, mode=mode, rtol=1e-4, atol=1e-5)
    check(lambda t, w, b: F.instance_norm(t, weight=w, bias=b), lambda t, w, b: TF.instance_norm(t, weight=w, bias=b),
          x, randn(3, key=1), randn(3, key=2), mode=mode, rtol=1e-4, atol=1e-5)
    mine, theirs = nn.InstanceNorm1d(3, affine=True), torch.nn.InstanceNorm1d(3, affine=True)
    for seq in (x.reshape(2, 3, 20), x[0].reshape(3, 20)):  # batched, and unbatched [C, L]
        np.testing.assert_allclose(mine(flame.tensor(seq)).numpy(), theirs(torch.tensor(seq)).detach().numpy(),
                                   rtol=1e-4, atol=1e-5)



@pytest.mark.parametrize("mode", MODES)
def test_instance_norm_running_stats(mode):
    """track_running_stats: training moves the buffers as PyTorch's (the per-sample statistics averaged
    over the batch, the variance unbiased over the positions), inside @flame.compile too (an aliased
    state output), and eval() normalises with them; PyTorch's state_dict loads as it is."""
    mine, theirs = nn.InstanceNorm2d(3, affine=True, momentum=0.3, track_running_stats=True), \
        torch.nn.InstanceNorm2d(3, affine=True, momentum=0.3, track_running_stats=True)
    assert set(mine.state_dict()) == set(theirs.state_dict())
    step = flame.compile(lambda t: mine(t)) if mode == "compiled" else mine
    for k in range(3):
        x = randn(4, 3, 5, 6, key=k) * (k + 1) + k
        got, want = step(flame.tensor(x)), theirs(torch.tensor(x))
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(mine.running_mean.numpy(), theirs.running_mean.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(mine.running_var.numpy(), theirs.running_var.numpy(), rtol=1e-5, atol=1e-6)
    mine.eval()
    theirs.eval()
    x = randn(2, 3, 5, 6, key=9)
    np.testing.assert_allclose(mine(flame.tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy(),
                               rtol=1e-4, atol=1e-5)
    fresh = nn.InstanceNorm2d(3, affine=True, track_running_stats=True)
    fresh.load_state_dict({k: flame.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    fresh.eval()
    np.testing.assert_allclose(fresh(flame.tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy(),
                               rtol=1e-4, atol=1e-5)
    with pytest.raises(ShapeError, match="give both running_mean and running_var"):
        F.instance_norm(flame.tensor(x), running_mean=flame.zeros(3))


def test_padding_modules():
    x = randn(1, 2, 4, 5)
    for mine, theirs in [(nn.ZeroPad2d(1), torch.nn.ZeroPad2d(1)),
                         (nn.ConstantPad2d((1, 0, 2, 1), 3.5), torch.nn.ConstantPad2d((1, 0, 2, 1), 3.5)),
                         (nn.ReflectionPad2d(2), torch.nn.ReflectionPad2d(2)),
                         (nn.ReplicationPad2d((0, 1, 1, 0)), torch.nn.ReplicationPad2d((0, 1, 1, 0)))]:
        np.testing.assert_array_equal(mine(flame.tensor(x)).numpy(), theirs(torch.tensor(x)).numpy())
    y = randn(2, 3, 6)
    for mine, theirs in [(nn.ZeroPad1d((2, 1)), torch.nn.ZeroPad1d((2, 1))),
                         (nn.ConstantPad1d(1, -1.0), torch.nn.ConstantPad1d(1, -1.0)),
                         (nn.ReflectionPad1d(3), torch.nn.ReflectionPad1d(3)),
                         (nn.ReplicationPad1d(2), torch.nn.ReplicationPad1d(2))]:
        np.testing.assert_array_equal(mine(flame.tensor(y)).numpy(), theirs(torch.tensor(y)).numpy())


@pytest.mark.parametrize("name,shape", [("dropout1d", (4, 16, 5)), ("dropout2d", (4, 16, 3, 3)),
                                        ("dropout3d", (2, 32, 2, 2, 2))])
def test_channel_dropout_drops_whole_channels(name, shape):
    x = flame.ones(*shape)
    out = getattr(F, name)(x, 0.5, True, generator=flame.Generator(0)).numpy()
    per_channel = out.reshape(shape[0], shape[1], -1)
    assert np.all(per_channel.min(-1) == per_channel.max(-1))  # each channel all kept (2.0) or all dropped
    assert set(np.unique(per_channel)) <= {0.0, 2.0} and 0.2 < (per_channel == 0).mean() < 0.8
    np.testing.assert_array_equal(getattr(F, name)(x, 0.5, False).numpy(), x.numpy())
    module = {"dropout1d": nn.Dropout1d, "dropout2d": nn.Dropout2d, "dropout3d": nn.Dropout3d}[name](0.3)
    module.eval()
    np.testing.assert_array_equal(module(x).numpy(), x.numpy())
    if name != "dropout3d":  # torch's dropout3d takes a 1-D input as one unbatched channel (with a warning)
        with pytest.raises(ShapeError, match={"dropout1d": "dropout1d: Expected 2D or 3D input",
                                              "dropout2d": "Feature dropout requires at least 2 dimensions"}[name]):
            getattr(F, name)(flame.ones(3), 0.5)


@pytest.mark.parametrize("mode", MODES)
def test_bilinear(mode):
    check(lambda a, b, w, c: F.bilinear(a, b, w, c), lambda a, b, w, c: TF.bilinear(a, b, w, c),
          randn(2, 3, 4), randn(2, 3, 5, key=1), randn(6, 4, 5, key=2), randn(6, key=3), mode=mode)
    mine, theirs = nn.Bilinear(4, 5, 6), torch.nn.Bilinear(4, 5, 6)
    mine.load_state_dict({k: flame.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    a, b = randn(3, 4), randn(3, 5, key=1)
    np.testing.assert_allclose(mine(flame.tensor(a), flame.tensor(b)).numpy(),
                               theirs(torch.tensor(a), torch.tensor(b)).detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bag_mode", ["sum", "mean"])
def test_embedding_bag_with_offsets(bag_mode, mode):
    entries, offsets = np.array([1, 2, 4, 5, 4, 3, 2, 9]), np.array([0, 4, 4, 6])
    for pad in (None, 4):
        check(lambda w, p=pad: F.embedding_bag(flame.tensor(entries), w, flame.tensor(offsets), mode=bag_mode,
                                               padding_idx=p),
              lambda w, p=pad: TF.embedding_bag(torch.tensor(entries), w, torch.tensor(offsets), mode=bag_mode,
                                                padding_idx=p), randn(10, 4), mode=mode)
    check(lambda w: F.embedding_bag(flame.tensor(entries), w, flame.tensor(np.array([0, 4, 4, 6, 8])), mode=bag_mode,
                                    include_last_offset=True),
          lambda w: TF.embedding_bag(torch.tensor(entries), w, torch.tensor([0, 4, 4, 6, 8]), mode=bag_mode,
                                     include_last_offset=True), randn(10, 4), mode=mode)
    check(lambda w, p: F.embedding_bag(flame.tensor(entries), w, flame.tensor(offsets), mode="sum",
                                       per_sample_weights=p),
          lambda w, p: TF.embedding_bag(torch.tensor(entries), w, torch.tensor(offsets), mode="sum",
                                        per_sample_weights=p), randn(10, 4), randn(8, key=1), mode=mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bag_mode", ["sum", "mean", "max"])
def test_embedding_bag_2d(bag_mode, mode):
    entries = np.array([[1, 2, 4, 5], [4, 3, 2, 9]])
    check(lambda w: F.embedding_bag(flame.tensor(entries), w, mode=bag_mode, padding_idx=4),
          lambda w: TF.embedding_bag(torch.tensor(entries), w, mode=bag_mode, padding_idx=4), randn(10, 4), mode=mode)
    module = nn.EmbeddingBag(10, 4, mode=bag_mode)
    assert module(flame.tensor(entries)).shape == (2, 4) and module.weight.shape == (10, 4)
