"""Gradients where the real derivative is degenerate (kinks, bounds, poles, outside the domain), against
torch's backward formulas in f64, eagerly and inside @flame.compile.

pow: a zero exponent gives a zero gradient for the base (0 ** 0 too); the exponent's gradient is 0 at a zero
base with an exponent >= 0, -inf or inf at a zero base with a negative one, and NaN at a negative base (no
real logarithm: torch's NaN, never a silent 0); a Python number as base or exponent too. hardtanh and relu6
pass the gradient strictly inside their bounds (clamp's passes at them), hardsigmoid strictly inside (-3, 3),
hardswish is 0 at -3 and 1 at 3; log1p's is inf at -1; logit's ±inf at 0 and 1 and NaN outside [0, 1] (0
outside [eps, 1 - eps] with eps); round, floor, ceil, trunc and sign give zeros, frac 1. logsigmoid's is 1/2
at 0 (so soft_margin_loss's and multilabel_soft_margin_loss's there), prelu's is the slope at 0,
multi_margin_loss's is 0 where the margin is exactly met, binary_cross_entropy's (x - t) / max((1 - x) x,
1e-12) (0, not NaN, at a probability of 0 or 1 equal to its target) and -logit(x) for the target. cdist's
and pdist's with p=inf go whole to every coordinate tied at the maximum (a norm's are split among them)."""

import numpy as np
import pytest

from tests.tensor_parity.common import check_gradients

BASES = np.array([-2.0, -0.5, 0.0, 0.0, 0.0, 1.5, 2.0, 0.0], np.float64)
EXPONENTS = np.array([2.0, 0.5, 2.0, 0.0, -1.0, -0.5, 0.0, 1.0], np.float64)
W = np.linspace(0.5, 2.0, BASES.size)
KINKS = np.array([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 3.0, -3.0, 6.0, 0.5, -0.5, 6.5, -3.5], np.float64)
V = np.linspace(0.5, 1.5, KINKS.size)


PROBS = np.array([0.0, 1e-12, 0.3, 0.5, 1.0 - 1e-12, 1.0, 0.7])
PROBS_TARGET = np.array([0.0, 1.0, 1.0, 0.5, 0.0, 1.0, 0.25])


def _act(name, *args):
    return lambda L, x: (getattr(L.nn.functional, name)(x, *args) * L.tensor(V)).sum()


CASES = {
    "base": (lambda L, x: ((x ** L.tensor(EXPONENTS)) * L.tensor(W)).sum(), BASES),
    "exponent": (lambda L, y: ((L.tensor(BASES) ** y) * L.tensor(W)).sum(), EXPONENTS),
    "number base -2": (lambda L, y: ((-2.0) ** y * L.tensor(W)).sum(), EXPONENTS),
    "number base 0": (lambda L, y: (0.0**y * L.tensor(W)).sum(), EXPONENTS),
    "number base 0.3": (lambda L, y: (0.3**y * L.tensor(W)).sum(), EXPONENTS),
    "exponent 0": (lambda L, x: (x**0.0 * L.tensor(W)).sum(), BASES),
    "exponent -1": (lambda L, x: (x**-1.0 * L.tensor(W)).sum(), BASES),
    "exponent 0.5": (lambda L, x: (x**0.5 * L.tensor(W)).sum(), BASES),
    "hardtanh": (_act("hardtanh", -1.0, 2.0), KINKS),
    "relu6": (_act("relu6"), KINKS),
    "hardsigmoid": (_act("hardsigmoid"), KINKS),
    "hardswish": (_act("hardswish"), KINKS),
    "clamp": (lambda L, x: (x.clamp(-1.0, 2.0) * L.tensor(V)).sum(), KINKS),
    "log1p": (lambda L, x: (x.log1p() * L.tensor(V)).sum(), KINKS),
    "logit": (lambda L, x: (L.logit(x * 0.5 + 0.5) * L.tensor(V)).sum(), KINKS),
    "logit eps": (lambda L, x: (x.logit(eps=0.25) * L.tensor(V)).sum(), KINKS * 0.25 + 0.5),
    "round": (lambda L, x: (x.round() * L.tensor(V)).sum(), KINKS),
    "floor ceil trunc sign": (lambda L, x: (x.floor() + x.ceil() + x.trunc() + x.sign()).sum(), KINKS),
    "frac": (lambda L, x: x.frac().sum(), KINKS),
    "logsigmoid": (_act("logsigmoid"), KINKS),
    "prelu": (lambda L, x: (L.nn.functional.prelu(x, L.tensor(np.array([0.25]))) * L.tensor(V)).sum(), KINKS),
    "prelu's slope": (lambda L, w: (L.nn.functional.prelu(L.tensor(KINKS), w) * L.tensor(V)).sum(), np.array([0.25])),
    "soft_margin_loss": (lambda L, x: L.nn.functional.soft_margin_loss(x, L.tensor(np.sign(V - 1) + (V == 1))), KINKS),
    "multilabel_soft_margin_loss": (
        lambda L, x: L.nn.functional.multilabel_soft_margin_loss(x.reshape(1, -1), L.tensor((V > 1)[None] * 1.0)),
        KINKS,
    ),
    "multi_margin_loss at the margin": (
        lambda L, x: L.nn.functional.multi_margin_loss(x.reshape(3, 3), L.tensor(np.array([2, 0, 1]))),
        np.array([1.0, 2.0, 3.0, 0.0, 0.0, -1.0, 5.0, 5.0, 5.0]),
    ),
    "binary_cross_entropy at 0 and 1": (
        lambda L, x: L.nn.functional.binary_cross_entropy(x, L.tensor(PROBS_TARGET), weight=L.tensor(V[:7])),
        PROBS,
    ),
    "binary_cross_entropy's target": (
        lambda L, t: L.nn.functional.binary_cross_entropy(L.tensor(PROBS[1:-1]), t, reduction="sum"),
        PROBS_TARGET[1:-1],
    ),
    "cdist with p=inf at tied coordinates": (
        lambda L, x: (L.cdist(x, x[:2] + 0.5, p=float("inf")) * L.tensor([[1.0, 2.0]])).sum(),
        np.array([[0.0, 1, 1, 0], [1, 0, 0, 1], [0.0, 1, 1, 0]]),
    ),
    "pdist with p=inf at tied coordinates": (
        lambda L, x: L.nn.functional.pdist(x, float("inf")).sum(),
        np.array([[0.0, 1, 1, 0], [1, 0, 0, 1], [0.0, 1, 1, 0]]),
    ),
}


def test_piecewise_constant_results_require_grad_as_torchs():
    """round, floor, ceil, trunc and sign of a tensor requiring grad require grad (their gradient is
    zeros, as torch's), so a loss through them alone backpropagates zeros instead of raising."""
    import torch

    import flame

    for name in ("round", "floor", "ceil", "trunc", "sign"):
        t = getattr(torch.tensor(KINKS, requires_grad=True), name)()
        f = getattr(flame.tensor(KINKS, requires_grad=True), name)()
        assert f.requires_grad == t.requires_grad, name


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", CASES)
def test_gradient_at_degenerate_points(name, compiled):
    check_gradients(name, *CASES[name], compiled)
