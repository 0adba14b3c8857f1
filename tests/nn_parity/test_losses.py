"""Loss modules against torch: every reduction, their options (beta, delta, pos_weight and weight
broadcasts, log_target, batchmean, margins), gradients of the input and, where torch has them, of the
target; eager and compiled."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.nn_parity.common import Fixed, check, rng

R = rng(0)
A, B = R.standard_normal((4, 3)), R.standard_normal((4, 3))
P = 1 / (1 + np.exp(-A))  # probabilities
T01 = (R.random((4, 3)) > 0.5).astype(np.float64)
SOFT = R.random((4, 3))
LOGP = np.log(np.exp(A) / np.exp(A).sum(1, keepdims=True))
LOGQ = np.log(np.exp(B) / np.exp(B).sum(1, keepdims=True))
Y = np.array([0, 2, 1, 2])
SIGN = np.array([1.0, -1.0, -1.0, 1.0])
V1 = R.standard_normal(4)


def _w(lib, a):
    return lib.tensor(a)


CASES = {
    "MSE": (lambda lib, r: lib.nn.MSELoss(reduction=r), [A, B]),
    "L1": (lambda lib, r: lib.nn.L1Loss(reduction=r), [A, B]),
    "SmoothL1": (lambda lib, r: lib.nn.SmoothL1Loss(reduction=r), [A, B]),
    "SmoothL1_beta": (lambda lib, r: lib.nn.SmoothL1Loss(reduction=r, beta=0.3), [A, B]),
    "SmoothL1_beta0": (lambda lib, r: lib.nn.SmoothL1Loss(reduction=r, beta=0.0), [A, B]),
    "Huber": (lambda lib, r: lib.nn.HuberLoss(reduction=r, delta=0.4), [A, B]),
    "BCE": (lambda lib, r: lib.nn.BCELoss(reduction=r), [P, Fixed(SOFT)]),
    "BCE_weight": (lambda lib, r: lib.nn.BCELoss(weight=_w(lib, V1[:, None] ** 2), reduction=r), [P, Fixed(T01)]),
    "BCEL": (lambda lib, r: lib.nn.BCEWithLogitsLoss(reduction=r), [A, SOFT]),
    "BCEL_pos": (
        lambda lib, r: lib.nn.BCEWithLogitsLoss(reduction=r, pos_weight=_w(lib, np.array([0.5, 2.0, 3.0]))),
        [A, SOFT],
    ),
    "BCEL_pos_bcast": (
        lambda lib, r: lib.nn.BCEWithLogitsLoss(reduction=r, pos_weight=_w(lib, np.array([[2.5]]))),
        [A, SOFT],
    ),
    "BCEL_weight_pos": (
        lambda lib, r: lib.nn.BCEWithLogitsLoss(
            weight=_w(lib, np.array([1.0, 0.5, 2.0])), reduction=r, pos_weight=_w(lib, V1[:, None] ** 2)
        ),
        [A, SOFT],
    ),
    "NLL": (lambda lib, r: lib.nn.NLLLoss(reduction=r), [LOGP, Y]),
    "NLL_weight_ignore": (
        lambda lib, r: lib.nn.NLLLoss(weight=_w(lib, np.array([0.2, 1.0, 3.0])), ignore_index=1, reduction=r),
        [LOGP, Y],
    ),
    "KLDiv": (lambda lib, r: lib.nn.KLDivLoss(reduction=r), [LOGP, np.exp(LOGQ)]),
    "KLDiv_log": (lambda lib, r: lib.nn.KLDivLoss(reduction=r, log_target=True), [LOGP, LOGQ]),
    "CosineEmbedding": (lambda lib, r: lib.nn.CosineEmbeddingLoss(margin=0.2, reduction=r), [A, B, SIGN]),
    "MarginRanking": (lambda lib, r: lib.nn.MarginRankingLoss(margin=0.3, reduction=r), [A[:, 0], B[:, 0], SIGN]),
    "TripletMargin": (lambda lib, r: lib.nn.TripletMarginLoss(margin=0.5, p=1.5, swap=True, reduction=r), [A, B, SOFT]),
    "HingeEmbedding": (lambda lib, r: lib.nn.HingeEmbeddingLoss(margin=0.7, reduction=r), [A, Fixed(T01 * 2 - 1)]),
    "SoftMargin": (lambda lib, r: lib.nn.SoftMarginLoss(reduction=r), [A, Fixed(T01 * 2 - 1)]),
    "MultiLabelSoftMargin": (lambda lib, r: lib.nn.MultiLabelSoftMarginLoss(reduction=r), [A, Fixed(T01)]),
    "MultiMargin": (lambda lib, r: lib.nn.MultiMarginLoss(p=2, margin=0.8, reduction=r), [A, Y]),
    "PoissonNLL": (lambda lib, r: lib.nn.PoissonNLLLoss(full=True, reduction=r), [A, Fixed(SOFT * 3)]),
    "GaussianNLL": (lambda lib, r: lib.nn.GaussianNLLLoss(reduction=r), [A, B, SOFT + 0.1]),
    "CrossEntropy_ls": (lambda lib, r: lib.nn.CrossEntropyLoss(label_smoothing=0.1, reduction=r), [A, Y]),
}


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("name", list(CASES))
def test_loss(name, reduction, compiled):
    build, arrays = CASES[name]
    check(lambda lib: build(lib, reduction).double(), lambda m, *xs: m(*xs), arrays, compiled)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div_batchmean(log_target, compiled):
    target = LOGQ if log_target else np.exp(LOGQ)
    check(
        lambda lib: lib.nn.KLDivLoss(reduction="batchmean", log_target=log_target),
        lambda m, a, b: m(a, b),
        [LOGP, target],
        compiled,
    )


@pytest.mark.parametrize("compiled", [False, True])
def test_bce_with_logits_pos_weight_over_channels(compiled):
    """pos_weight [C] broadcasting over [N, C, H, W]'s last dim, as torch's (not over the channels)."""
    x, t = R.standard_normal((2, 3, 4, 4)), R.random((2, 3, 4, 4))
    pw = np.array([0.5, 1.0, 2.0, 4.0])
    check(lambda lib: lib.nn.BCEWithLogitsLoss(pos_weight=lib.tensor(pw)), lambda m, a, b: m(a, b), [x, t], compiled)


def test_loss_f32_matches():
    """An f32 loss module on f32 data (the common case) within f32 tolerance."""
    x, y = A.astype(np.float32), B.astype(np.float32)
    for name in ("MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss"):
        t = getattr(torch.nn, name)()(torch.tensor(x), torch.tensor(y)).item()
        f = getattr(flame.nn, name)()(flame.tensor(x), flame.tensor(y)).item()
        assert abs(t - f) < 1e-6 * max(1, abs(t)), name


@pytest.mark.parametrize("x,t", [([0.5], [1.5]), ([0.5], [-0.1]), ([0.5], [float("nan")]), ([float("nan")], [1.0]),
                                 ([1.2], [1.0]), ([0.0, 1.0], [0.0, 1.0])])
def test_binary_cross_entropy_checks_input_and_target_range_as_torch(x, t):
    """torch's kernel refuses an input or a target outside [0, 1] (NaN included); flame raises naming which."""
    try:
        want = torch.nn.functional.binary_cross_entropy(torch.tensor(x), torch.tensor(t)).item()
    except RuntimeError as e:
        with pytest.raises(ValueError, match=str(e).split("all elements of ")[1].split(" ")[0]):
            flame.nn.functional.binary_cross_entropy(flame.tensor(x), flame.tensor(t))
    else:
        assert flame.nn.BCELoss()(flame.tensor(x), flame.tensor(t)).item() == want
