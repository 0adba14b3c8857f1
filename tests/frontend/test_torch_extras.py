"""torch's small functions flame composes from its ops (isin isneginf isposinf gcd lcm frexp ldexp
diagflat combinations vander unravel_index hsplit vsplit dsplit is_nonzero is_same_size is_signed
chain_matmul scalar_tensor range, the windows, the thread settings) against torch: values, dtypes,
gradients and errors, eagerly and inside @flame.compile."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.tensor_parity.common import check, gradients

COMPILED = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
F = np.array([0.0, -0.0, 1.0, 8.0, 0.3, np.inf, -np.inf, np.nan, -5.0, 1e-310, 3e300, -2.5e-5])
INTS = np.array([0, -4, 6, 0, 12, 7, -9, 2**40, 13])
INTS2 = np.array([0, 6, -4, 5, 18, 0, -6, 2**20 * 3, 89])


@COMPILED
def test_gcd_lcm(compiled):
    check(lambda L, a, b: L.gcd(a, b), INTS, INTS2, compiled=compiled)
    check(lambda L, a, b: L.lcm(a[:7], b[:7]), INTS, INTS2, compiled=compiled)
    check(lambda L, a, b: a.gcd(b[0:1]), INTS, INTS2, compiled=compiled)
    check(lambda L, a, b: a.int().lcm(b.int()), INTS[:7], INTS2[:7], compiled=compiled)
    check(lambda L, a, b: a.clone().gcd_(b), INTS, INTS2, compiled=compiled)
    check(lambda L, a, b: L.gcd(a.double(), b.double()), INTS, INTS2, compiled=compiled)  # floats raise


def test_gcd_of_fibonacci_neighbours_runs_every_step():
    a, b = np.array([7540113804746346429]), np.array([4660046610375530309])  # F92, F91: Euclid's worst case
    check(lambda L, x, y: L.gcd(x, y), a, b, compiled=False)
    check(lambda L, x, y: L.gcd(x, y), a, b, compiled=True)


@COMPILED
def test_frexp_ldexp(compiled):
    check(lambda L, x: L.frexp(x), F, compiled=compiled)
    check(lambda L, x: x.float().frexp(), F[:9], compiled=compiled)
    check(lambda L, x: L.frexp(x.half()), np.array([6e-8, 1.0, 3.0, 65504.0, -0.1]), compiled=compiled)
    check(lambda L, x: L.frexp(x.long()), F[:2], compiled=compiled)
    check(lambda L, x, e: L.ldexp(x, e), F, np.arange(12) - 6, compiled=compiled)
    check(lambda L, x, e: L.ldexp(x.long(), e), np.array([1.0, 2.0]), np.array([2, 3]), compiled=compiled)
    check(lambda L, x, e: x.float().ldexp(e), np.array([1.0, 2.0]), np.array([2, -3]), compiled=compiled)
    check(lambda L, x, e: x.clone().ldexp_(e), np.array([1.0, 2.0]), np.array([2, -3]), compiled=compiled)
    # in the operands' result type: a half-precision input with integer exponents stays half precision
    for dt in ("bfloat16", "float16"):
        check(lambda L, x, e, dt=dt: L.ldexp(x.to(getattr(L, dt)), e), np.array([1.5, -3.0, 7.0, 0.1]),
              np.array([3, -20, -30, 9]), compiled=compiled)
        check(lambda L, x, e, dt=dt: L.ldexp(x.bool(), e.to(getattr(L, dt))), np.array([1.0, 0.0]),
              np.array([2.0, 3.5]), compiled=compiled)
    check(lambda L, x, e: L.ldexp(x.bfloat16(), e.half()), np.array([1.5, 2.0]), np.array([2.0, -3.0]),
          compiled=compiled)
    check(lambda L, x, e: L.ldexp(x, e.bool()), np.array([1.5, 2.0]), np.array([1, 0]), compiled=compiled)


@COMPILED
def test_frexp_ldexp_gradients(compiled):
    x = np.array([0.3, 5.0, -7.25, 1e-3])
    for f in (lambda L, y: L.frexp(y)[0].sum(), lambda L, y: (L.ldexp(y, L.tensor([1, 2, 0, 4])) ** 2).sum()):
        got, want = gradients(f, x, compiled)
        np.testing.assert_allclose(got, want, rtol=1e-12)
    # a negative exponent: 2**other (torch's formula evaluates pow(2, other) in integers, giving 0)
    got = flame.grad(lambda y: flame.ldexp(y, flame.tensor([-3, -1, 0, 2])).sum())(flame.tensor(x))
    np.testing.assert_array_equal(got.numpy(), [0.125, 0.5, 1.0, 4.0])


@COMPILED
def test_isin_isneginf_isposinf(compiled):
    check(lambda L, a, b: L.isin(a, b), np.array([[1, 2], [3, 4]]), np.array([2.0, 3.5, 4.0]), compiled=compiled)
    check(lambda L, a, b: L.isin(a, b, invert=True), np.array([1, 2, 3]), np.array([2, 3]), compiled=compiled)
    check(lambda L, a: L.isin(a, 2), np.array([1, 2, 3]), compiled=compiled)
    check(lambda L, a: L.isin(2, a), np.array([1, 2, 3]), compiled=compiled)
    check(lambda L, a: L.isin(a, a[:0]), np.array([1, 2, 3]), compiled=compiled)
    check(lambda L, x: (L.isneginf(x), L.isposinf(x), x.isneginf(), x.isposinf()), F, compiled=compiled)
    check(lambda L, x: (L.isneginf(x.long()), L.isposinf(x.int())), F[:4], compiled=compiled)


@COMPILED
def test_diagflat_combinations_vander(compiled):
    m = np.array([[1.0, 2.0], [3.0, 4.0]])
    check(lambda L, x: (L.diagflat(x), x.diagflat(-1), L.diagflat(x.long(), 2)), m, compiled=compiled)
    v = np.array([1.5, -2.0, 3.0, 0.5])
    for r in (0, 1, 2, 3, 5):
        check(lambda L, x, r=r: L.combinations(x, r), v, compiled=compiled)
        check(lambda L, x, r=r: L.combinations(x.long(), r, True), v, compiled=compiled)
    check(lambda L, x: L.combinations(x), m, compiled=compiled)  # not 1-D: raises
    check(lambda L, x: L.vander(x), v, compiled=compiled)
    check(lambda L, x: L.vander(x, 3, True), v, compiled=compiled)
    check(lambda L, x: (L.vander(x, 0), L.vander(x, 1)), v, compiled=compiled)
    check(lambda L, x: L.vander(x.long(), 3), v, compiled=compiled)
    check(lambda L, x: L.vander(x.int() > 0, 3), v, compiled=compiled)
    check(lambda L, x: L.vander(x), m, compiled=compiled)


@COMPILED
def test_diagflat_combinations_vander_gradients(compiled):
    v = np.array([1.5, -2.0, 3.0, 0.5])
    w = np.random.default_rng(1).standard_normal((16,))
    for f in (lambda L, x: (L.diagflat(x) * L.tensor(w).reshape(4, 4)).sum(),
              lambda L, x: (L.combinations(x, 2) ** 2 * L.tensor(w[:12]).reshape(6, 2)).sum(),
              lambda L, x: (L.combinations(x, 2, with_replacement=True).prod(1)).sum(),
              ):
        got, want = gradients(f, v, compiled)
        np.testing.assert_allclose(got, want, rtol=1e-12)
    # torch's vander backward fails ("modified by an inplace operation"): d/dx sum_k w_k x^k, by hand
    k, wm = np.arange(4)[::-1], w.reshape(4, 4)
    step = flame.compile(flame.grad(lambda x: (flame.vander(x) * flame.tensor(wm)).sum())) if compiled else \
        flame.grad(lambda x: (flame.vander(x) * flame.tensor(wm)).sum())
    want = (wm * k * np.where(k > 0, v[:, None] ** np.maximum(k - 1, 0), 0)).sum(1)
    np.testing.assert_allclose(step(flame.tensor(v)).numpy(), want, rtol=1e-12)


@COMPILED
def test_unravel_index(compiled):
    idx = np.array([[0, 7, 11], [-1, 5, 3]])
    check(lambda L, i: L.unravel_index(i, (3, 4)), idx, compiled=compiled)
    check(lambda L, i: L.unravel_index(i, 12), idx, compiled=compiled)
    check(lambda L, i: L.unravel_index(i.int(), (2, 2, 3)), idx, compiled=compiled)
    check(lambda L, i: L.unravel_index(i.double(), (3, 4)), idx, compiled=compiled)


@COMPILED
def test_hsplit_vsplit_dsplit(compiled):
    x = np.arange(2 * 6 * 4.0).reshape(2, 6, 4)
    check(lambda L, t: (L.hsplit(t, 3), L.hsplit(t, [1, 4]), t.hsplit(2)), x, compiled=compiled)
    check(lambda L, t: (L.vsplit(t, 2), t.vsplit([1]), L.dsplit(t, 2), t.dsplit([1, 3])), x, compiled=compiled)
    check(lambda L, t: L.hsplit(t.flatten(), 4), x, compiled=compiled)
    check(lambda L, t: L.hsplit(t, 4), x, compiled=compiled)  # 6 not divisible by 4
    check(lambda L, t: L.vsplit(t.flatten(), 2), x, compiled=compiled)
    check(lambda L, t: L.dsplit(t[0], 2), x, compiled=compiled)
    got, want = gradients(lambda L, t: (L.hsplit(t, 3)[1] ** 2).sum(), x, compiled)
    np.testing.assert_allclose(got, want)


def test_predicates():
    for lib in (torch, flame):
        assert lib.is_nonzero(lib.tensor([2.0])) and not lib.is_nonzero(lib.tensor(0))
        assert lib.tensor([[True]]).is_nonzero()
        assert lib.is_same_size(lib.ones(2, 3), lib.zeros(2, 3)) and not lib.ones(2).is_same_size(lib.ones(3))
        assert lib.is_signed(lib.ones(1)) and lib.ones(1, dtype=lib.int8).is_signed()
        assert not lib.is_signed(lib.ones(1, dtype=lib.uint8)) and not lib.ones(1, dtype=lib.bool).is_signed()
        for bad, message in ((lib.ones(2), "more than one value"), (lib.ones(0), "no values")):
            with pytest.raises(RuntimeError, match=message):
                lib.is_nonzero(bad)


@COMPILED
def test_chain_matmul(compiled):
    a, b, c = np.ones((2, 3)) * 0.5, np.arange(12.0).reshape(3, 4), np.arange(8.0).reshape(4, 2)
    check(lambda L, x, y, z: L.chain_matmul(x, y, z), a, b, c, compiled=compiled)
    check(lambda L, x, y, z: L.chain_matmul(x), a, b, c, compiled=compiled)
    check(lambda L, x, y, z: L.chain_matmul(x[0], y), a, b, c, compiled=compiled)
    got, want = gradients(lambda L, x: L.chain_matmul(x, L.tensor(b), L.tensor(c)).sum(), a, compiled)
    np.testing.assert_allclose(got, want)
    with pytest.warns(UserWarning, match="deprecated"):
        flame.chain_matmul(flame.ones(2, 2), flame.ones(2, 2))


def test_scalar_tensor_and_range():
    for args, kw in [((3,), {}), ((True,), {}), ((2.5,), {"dtype": "f64"}), ((7,), {"dtype": "i64"})]:
        tkw = {"dtype": {"f64": torch.float64, "i64": torch.int64}[kw["dtype"]]} if kw else {}
        check(lambda L, _, a=args, k=(tkw, kw): L.scalar_tensor(*a, **k[L is not torch]), 0, compiled=False)
    assert flame.scalar_tensor(2.0, requires_grad=True).requires_grad
    for args, kw in [((1, 4), {}), ((0, 1, 0.3), {}), ((5, 1, -1.5), {}), ((2, 8, 3), {"dtype": "i64"}),
                     ((0.5, 0.5), {}), ((1, 0), {}), ((0, 1, 0), {})]:
        tkw = {"dtype": torch.int64} if kw else {}
        check(lambda L, _, a=args, k=(tkw, kw): L.range(*a, **k[L is not torch]), 0, compiled=False)
    with pytest.warns(UserWarning, match="deprecated"):
        flame.range(0, 3)


@pytest.mark.parametrize("name", ["hann_window", "hamming_window", "blackman_window", "bartlett_window",
                                  "kaiser_window"])
def test_windows(name):
    for n in (0, 1, 2, 5, 8):
        for periodic in (True, False):
            check(lambda L, _, n=n, p=periodic: getattr(L, name)(n, p), 0, compiled=False, rtol=1e-6, atol=1e-7)
            check(lambda L, _, n=n, p=periodic: getattr(L, name)(n, p, dtype=L.float64), 0, compiled=False, rtol=1e-12,
                  atol=1e-14)
    check(lambda L, _: getattr(L, name)(6), 0, compiled=False, rtol=1e-6, atol=1e-7)
    check(lambda L, _: getattr(L, name)(4, dtype=L.int64), 0, compiled=False)
    check(lambda L, _: getattr(L, name)(-1), 0, compiled=False)


def test_window_parameters():
    check(lambda L, _: L.hamming_window(7, False, 0.6, 0.3, dtype=L.float64), 0, compiled=False, rtol=1e-12)
    check(lambda L, _: L.kaiser_window(7, True, 5.0, dtype=L.float64), 0, compiled=False, rtol=1e-12)


def test_thread_settings_are_accepted():
    before = flame.get_num_threads()
    flame.set_num_threads(3)
    assert flame.get_num_threads() == 3
    flame.set_num_threads(before)
    flame.set_num_interop_threads(flame.get_num_interop_threads())
    for lib in (torch, flame):
        with pytest.raises(RuntimeError, match="positive"):
            lib.set_num_threads(0)


GRAD_CASES = [
    ("default", lambda L, x: L.gradient(x)),
    ("dim", lambda L, x: L.gradient(x, dim=1)),
    ("spacing", lambda L, x: L.gradient(x, spacing=2.0, dim=(0,))),
    ("spacings", lambda L, x: L.gradient(x, spacing=[0.5, 3.0])),
    ("edge 2", lambda L, x: L.gradient(x, edge_order=2)),
    ("coordinates", lambda L, x: L.gradient(x, spacing=(L.tensor([0.0, 1.0, 3.0]), L.tensor([0.0, 0.5, 2.0, 2.5])))),
    ("coordinates edge 2", lambda L, x: L.gradient(x, spacing=(L.tensor([0.0, 1.0, 1.5, 4.0]),), dim=1,
                                                     edge_order=2)),
    ("integers", lambda L, x: L.gradient((x * 4).long(), dim=-1)),
]


@COMPILED
@pytest.mark.parametrize("name,fn", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_gradient(name, fn, compiled):
    x = np.array([[1.0, 4.0, 9.0, 16.0], [2.0, -3.0, 0.5, 7.0], [0.0, 1.0, 5.0, 2.0]])
    check(fn, x, compiled=compiled, rtol=1e-12, atol=1e-12)
    if name != "integers":
        got, want = gradients(lambda L, y: sum((g ** 2).sum() for g in fn(L, y)), x, compiled)
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_gradient_errors_as_torch():
    for call in (lambda L: L.gradient(L.ones(2), edge_order=2), lambda L: L.gradient(L.ones(3, 3), spacing=[1.0]),
                 lambda L: L.gradient(L.ones(3), edge_order=3)):
        with pytest.raises(Exception) as theirs:
            call(torch)
        with pytest.raises((type(theirs.value), flame.FlameError)):
            call(flame)


def test_torch_constants():
    """torch.pi / e / inf / nan / newaxis under the same names (Python floats, and None for a new axis)."""
    for name in ("pi", "e", "inf"):
        assert getattr(flame, name) == getattr(torch, name) and type(getattr(flame, name)) is float
    assert np.isnan(flame.nan) and flame.newaxis is None is torch.newaxis
    x = np.arange(6.0).reshape(2, 3)
    check(lambda L, t: t[:, L.newaxis].masked_fill(t[:, L.newaxis] > 2, -L.inf) * L.pi, x, compiled=False)
    check(lambda L, t: t[:, L.newaxis].masked_fill(t[:, L.newaxis] > 2, -L.inf) * L.pi, x, compiled=True)
