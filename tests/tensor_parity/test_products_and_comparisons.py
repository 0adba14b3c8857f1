"""mv, inner, addr, addbmm (values and gradients, eager and compiled), equal, isclose / allclose as
Tensor methods, moveaxis, msort, byte and char against torch in f64."""

import numpy as np
import pytest
import torch

import flame

R = np.random.default_rng(0)
A, V, B = R.standard_normal((3, 4)), R.standard_normal(4), R.standard_normal((5, 4))
B1, B2, C = R.standard_normal((2, 3, 4)), R.standard_normal((2, 4, 5)), R.standard_normal((3, 5))

CASES = {
    "mv": (lambda L, a, v: L.mv(a, v), A, V),
    "Tensor.mv": (lambda L, a, v: a.mv(v), A, V),
    "inner": (lambda L, a, b: L.inner(a, b), A, B),
    "inner 1-D": (lambda L, a, b: a[0].inner(b[1]), A, B),
    "inner 3-D": (lambda L, a, b: L.inner(a.reshape(3, 2, 2), b.reshape(5, 2, 2)[:, 0]), A, B),
    "inner 0-d": (lambda L, a, b: L.inner(a[0, 0], b), A, B),
    "addr": (lambda L, c, a: L.addr(c[:, :3], a[:, 0], a[0, :3], beta=0.5, alpha=2.0), C, A),
    "Tensor.addr beta 0": (lambda L, c, a: c[:, :3].addr(a[:, 0], a[0, :3], beta=0), C, A),
    "addbmm": (lambda L, c, b1: L.addbmm(c, b1, L.tensor(B2), alpha=0.5), C, B1),
    "Tensor.addbmm": (lambda L, c, b1: c.addbmm(b1, L.tensor(B2), beta=2.0), C, B1),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", CASES)
def test_products_match_torch(name, compiled):
    fn, x, y = CASES[name]
    tx, ty = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
    want = fn(torch, tx, ty)
    (want * torch.linspace(0.5, 1.5, want.numel(), dtype=torch.float64).reshape(want.shape)).sum().backward()
    w = flame.tensor(np.linspace(0.5, 1.5, want.numel()).reshape(tuple(want.shape)))

    def run(a, b):
        out = fn(flame, a, b)
        grads = flame.grad(lambda p, q: (fn(flame, p, q) * w).sum(), (0, 1))(a, b)
        return out, *grads

    got, gx, gy = (flame.compile(run) if compiled else run)(flame.tensor(x), flame.tensor(y))
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gx.numpy(), tx.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gy.numpy(), ty.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_products_refuse_what_torch_refuses():
    for L, error in ((torch, RuntimeError), (flame, flame.ShapeError)):
        with pytest.raises(error):
            L.mv(L.tensor(A), L.tensor(B))
        with pytest.raises(error):
            L.inner(L.tensor(A), L.tensor(np.ones((2, 3))))


def test_comparisons_and_conversions_match_torch():
    x, n = A.copy(), A.copy()
    n[0, 0] = np.nan
    for L in (torch, flame):
        t, tn = L.tensor(x), L.tensor(n)
        got = [L.equal(t, t), t.equal(t * 2), t.equal(t[:2]), tn.equal(tn), t.isclose(t + 1e-9).all().item(),
               tn.isclose(tn, equal_nan=True).all().item(), t.allclose(t + 1e-3), L.allclose(t, t + 1e-9)]
        if L is torch:
            want = got
        else:
            assert got == want
    for L in (torch, flame):
        t = L.tensor(R.standard_normal((2, 3, 4)))
        assert tuple(L.moveaxis(t, 0, -1).shape) == (3, 4, 2) and tuple(t.moveaxis((0, 1), (2, 0)).shape) == (3, 4, 2)
    np.testing.assert_array_equal(flame.tensor(A).msort().numpy(), torch.tensor(A).msort().numpy())
    np.testing.assert_array_equal(flame.tensor(A * 50).byte().numpy(), torch.tensor(A * 50).byte().numpy())
    np.testing.assert_array_equal(flame.tensor(A * 50).char().numpy(), torch.tensor(A * 50).char().numpy())
