"""nn.utils.parametrizations.orthogonal against torch's in f64: the three maps ("matrix_exp", "cayley",
"householder") on square, tall, wide and batched weights, the weight and the original's gradient at a
moved original, eagerly and inside @flame.compile; registration keeps an orthogonal weight and
orthogonalises one that is not (as torch's right_inverse); compiled SGD keeps the weight orthogonal;
use_trivialization=False with householder; torch's errors."""

import numpy as np
import pytest
import torch
from torch.nn.utils import parametrizations as TP

import flame
from flame import nn
from flame.nn.utils import parametrizations as FP

RNG = np.random.default_rng(0)
SHAPES = [(5, 5), (6, 3), (3, 6), (2, 4, 4), (2, 5, 3)]


class _Batched(torch.nn.Module):
    def __init__(self, shape):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.tensor(RNG.standard_normal(shape)))


def _pair(shape, orthogonal_map, **kw):
    """A torch module and a flame one holding the same weight, both parametrized; flame's base is set to
    torch's (a rectangular weight's base is completed with random columns)."""
    t = _Batched(shape)
    f = nn.Module()
    f.weight = nn.Parameter(flame.tensor(t.weight.detach().numpy()))
    TP.orthogonal(t, orthogonal_map=orthogonal_map, **kw)
    FP.orthogonal(f, orthogonal_map=orthogonal_map, **kw)
    if kw.get("use_trivialization", True):
        base = t.parametrizations.weight[0].base.numpy()
        mine = f.parametrizations.weight[0].base.numpy()
        if shape[-1] == shape[-2]:
            np.testing.assert_allclose(mine, base, atol=1e-12)
        with flame.no_grad():
            f.parametrizations.weight[0].base.copy_(flame.tensor(base))
    return t, f


def _moved_original(shape, orthogonal_map):
    x = RNG.standard_normal(shape) * 0.4
    if orthogonal_map == "householder":  # its diagonal holds the signs (+-1)
        idx = np.arange(min(shape[-2:]))
        x[..., idx, idx] = np.sign(RNG.standard_normal((*shape[:-2], idx.size)))
    return x


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("orthogonal_map", ["matrix_exp", "cayley", "householder"])
@pytest.mark.parametrize("compiled", [False, True])
def test_weight_and_gradient_match_torch(shape, orthogonal_map, compiled):
    t, f = _pair(shape, orthogonal_map)
    np.testing.assert_allclose(f.weight.numpy(), t.weight.detach().numpy(), atol=1e-12)
    x, g = _moved_original(shape, orthogonal_map), RNG.standard_normal(shape)
    with torch.no_grad():
        t.parametrizations.weight.original.copy_(torch.tensor(x))
    with flame.no_grad():
        f.parametrizations.weight.original.copy_(flame.tensor(x))
    (t.weight * torch.tensor(g)).sum().backward()

    def step(g):
        w = f.weight
        (w * g).sum().backward()
        return w

    w = (flame.compile(step) if compiled else step)(flame.tensor(g))
    np.testing.assert_allclose(w.numpy(), t.weight.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(f.parametrizations.weight.original.grad.numpy(),
                               t.parametrizations.weight.original.grad.numpy(), atol=1e-11)


def _orthonormal(w):
    w = w if w.shape[-2] >= w.shape[-1] else np.swapaxes(w, -1, -2)
    return np.abs(np.swapaxes(w, -1, -2) @ w - np.eye(w.shape[-1])).max()


@pytest.mark.parametrize("shape", [(8, 8), (10, 4), (4, 10)], ids=str)
def test_default_map_trains_compiled_and_stays_orthogonal(shape):
    """The default map (matrix_exp square, householder otherwise) keeps the weight orthogonal while SGD
    moves it, and moves it towards a target; the replayed step gives what eager steps give."""
    m = FP.orthogonal(nn.Linear(shape[1], shape[0], bias=False, dtype=flame.float64))
    assert m.parametrizations.weight[0].orthogonal_map == ("matrix_exp" if shape[0] == shape[1] else "householder")
    twin = FP.orthogonal(nn.Linear(shape[1], shape[0], bias=False, dtype=flame.float64))
    twin.load_state_dict(m.state_dict())
    x = flame.randn(32, shape[1], dtype=flame.float64)
    target = flame.randn(32, shape[0], dtype=flame.float64)
    opts = [flame.optim.SGD(mod.parameters(), lr=0.05) for mod in (m, twin)]

    def step(mod, opt):
        opt.zero_grad()
        loss = (mod(x) - target).square().mean()
        loss.backward()
        opt.step()
        return loss

    compiled = flame.compile(lambda: step(m, opts[0]))
    losses = [float(compiled()) for _ in range(20)]
    eager = [float(step(twin, opts[1])) for _ in range(20)]
    np.testing.assert_allclose(losses, eager, rtol=1e-10)
    assert losses[-1] < losses[0]
    assert _orthonormal(m.weight.numpy()) < 1e-12


def test_registration_orthogonalises_and_assigning_sets_base():
    """A weight that is not orthogonal becomes the Q of its QR (positive diagonal of R), as torch's;
    assigning an orthogonal matrix to the weight makes it the weight."""
    t, f = _pair((4, 4), "matrix_exp")
    np.testing.assert_allclose(f.weight.numpy(), t.weight.detach().numpy(), atol=1e-12)
    q = np.linalg.qr(RNG.standard_normal((4, 4)))[0]
    f.weight = flame.tensor(q)
    np.testing.assert_allclose(f.weight.numpy(), q, atol=1e-12)
    assert sorted(f.state_dict()) == sorted(t.state_dict()) == ["parametrizations.weight.0.base",
                                                                "parametrizations.weight.original"]


@pytest.mark.parametrize("shape", [(5, 5), (6, 3), (3, 6)], ids=str)
def test_householder_without_trivialization(shape):
    t, f = _pair(shape, "householder", use_trivialization=False)
    np.testing.assert_allclose(f.parametrizations.weight.original.numpy(),
                               t.parametrizations.weight.original.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(f.weight.numpy(), t.weight.detach().numpy(), atol=1e-12)
    assert _orthonormal(f.weight.numpy()) < 1e-12


def test_errors_as_torch():
    with pytest.raises(ValueError, match="Expected a matrix"):
        FP.orthogonal(nn.LayerNorm(3))
    with pytest.raises(ValueError, match="orthogonal_map has to be one of"):
        FP.orthogonal(nn.Linear(3, 3), orthogonal_map="qr")
    with pytest.raises(ValueError, match="has no parameter or buffer"):
        FP.orthogonal(nn.Linear(3, 3), name="w")
    m = FP.orthogonal(nn.Linear(3, 3), orthogonal_map="cayley", use_trivialization=False)  # registers, as torch's
    with pytest.raises(NotImplementedError, match="use_trivialization=False"):
        m.weight = flame.eye(3)  # assigning needs the inverse of the Cayley map
