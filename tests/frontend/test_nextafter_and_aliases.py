"""torch.nextafter (values, signed zeros, subnormals, infinities, NaN, gradients; eager and compiled),
narrow_copy, torch.vmap and the default device, against torch."""

import numpy as np
import pytest

import flame

torch = pytest.importorskip("torch")

EDGES = [1.0, 0.0, -0.0, np.inf, -np.inf, np.nan, 2.0, -2.0, 0.5, 3.0, 65504.0, 1e-45, -1e-45, 1e-40, 5e-324,
         1.7976931348623157e308, 1e-8, -3.5, 6e-8, 1.0 - 2**-24, 2.0**-126]
DTYPES = [("float64", "float64"), ("float32", "float32"), ("float16", "float16"), ("bfloat16", "bfloat16")]


def _pairs(dtype):
    rng = np.random.default_rng(0)
    a, b = np.meshgrid(np.array(EDGES), np.array(EDGES))
    a, b = a.ravel(), b.ravel()
    r = rng.standard_normal((2, 200)) * 10.0 ** rng.integers(-30, 30, (2, 200))
    a, b = np.concatenate([a, r[0]]), np.concatenate([b, r[1]])
    ta, tb = torch.tensor(a).to(getattr(torch, dtype)), torch.tensor(b).to(getattr(torch, dtype))
    return ta, tb


def _same(got, want):
    g, w = got.to(flame.float64).numpy(), want.double().numpy()
    np.testing.assert_array_equal(g, w)
    number = ~np.isnan(w)  # (a NaN's sign bit is no part of the result)
    np.testing.assert_array_equal(np.signbit(g[number]), np.signbit(w[number]))


@pytest.mark.parametrize("fdt,tdt", DTYPES)
def test_values_eager_and_compiled(fdt, tdt):
    ta, tb = _pairs(tdt)
    a = flame.tensor(ta.double().numpy()).to(getattr(flame, fdt))
    b = flame.tensor(tb.double().numpy()).to(getattr(flame, fdt))
    want = torch.nextafter(ta, tb)
    _same(flame.nextafter(a, b), want)
    _same(a.nextafter(b), want)
    _same(flame.compile(lambda x, y: flame.nextafter(x, y))(a, b), want)


def test_promotion_broadcast_and_in_place():
    a, b = flame.tensor([[1.0], [2.0]]), flame.tensor([0.0, 3.0], dtype=flame.float64)
    ta, tb = torch.tensor([[1.0], [2.0]]), torch.tensor([0.0, 3.0], dtype=torch.float64)
    out = flame.nextafter(a, b)
    assert out.dtype == flame.float64 and out.shape == tuple(torch.nextafter(ta, tb).shape)
    _same(out, torch.nextafter(ta, tb))
    x, tx = flame.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0])
    assert x.nextafter_(flame.tensor(3.0)) is x
    _same(x, tx.nextafter_(torch.tensor(3.0)))


def test_errors():
    with pytest.raises(RuntimeError, match="not implemented for 'Long'"):
        flame.nextafter(flame.tensor([1]), flame.tensor([2]))
    with pytest.raises(TypeError, match="argument 'other' \\(position 2\\) must be Tensor, not float"):
        flame.nextafter(flame.tensor([1.0]), 2.0)


def test_gradient_is_torchs():
    x, y = flame.tensor([1.0, 3.0], dtype=flame.float64, requires_grad=True), flame.tensor(
        [2.0, 0.0], dtype=flame.float64, requires_grad=True)
    tx, ty = torch.tensor([1.0, 3.0], dtype=torch.float64, requires_grad=True), torch.tensor(
        [2.0, 0.0], dtype=torch.float64, requires_grad=True)
    (flame.nextafter(x, y) * flame.tensor([2.0, 5.0], dtype=flame.float64)).sum().backward()
    (torch.nextafter(tx, ty) * torch.tensor([2.0, 5.0], dtype=torch.float64)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
    assert y.grad is None or not y.grad.numpy().any()

    @flame.compile
    def f(x, y):
        return flame.nextafter(x, y).sum()

    x2 = flame.tensor([1.0, 3.0], requires_grad=True)
    f(x2, flame.tensor([2.0, 0.0])).backward()
    np.testing.assert_array_equal(x2.grad.numpy(), [1.0, 1.0])


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("grads", [(True, True), (True, False), (False, True)])
def test_gradient_is_zero_where_input_equals_other(compiled, grads):
    """torch's input gradient is the cotangent where input != other (NaN included) and 0 where they are
    equal (infinities, signed zeros, a broadcast other); other's is zeros, and a result of an other that
    alone requires grad requires grad."""
    xs = np.array([[1.0, 3.0, np.inf, np.nan, 0.0, 2.0], [2.0, -0.0, 5.0, 1.0, 1.0, 7.0]])
    ys = np.array([2.0, 3.0, np.inf, 1.0, -0.0, np.nan])
    w = np.arange(1.0, 13.0).reshape(2, 6)

    def run(lib, fn):
        x = lib.tensor(xs, dtype=lib.float64, requires_grad=grads[0])
        y = lib.tensor(ys, dtype=lib.float64, requires_grad=grads[1])
        fn(x, y, lib.tensor(w, dtype=lib.float64)).backward()
        return [None if t.grad is None else t.grad.numpy() for t in (x, y)]

    def loss(x, y, w):
        return (x.nextafter(y) * w).sum()

    got = run(flame, flame.compile(loss) if compiled else loss)
    want = run(torch, loss)
    for g, t in zip(got, want):
        assert (g is None) == (t is None)
        if t is not None:
            np.testing.assert_array_equal(g, t)


def test_narrow_copy():
    x, tx = flame.arange(12.0).reshape(3, 4), torch.arange(12.0).reshape(3, 4)
    for args in ((0, 1, 2), (1, -2, 2), (1, 0, 4)):
        got = flame.narrow_copy(x, *args)
        np.testing.assert_array_equal(got.numpy(), torch.narrow_copy(tx, *args).numpy())
        np.testing.assert_array_equal(x.narrow_copy(*args).numpy(), tx.narrow_copy(*args).numpy())
        got[...] = -1.0
    np.testing.assert_array_equal(x.numpy(), tx.numpy())  # a copy: writes into it stay there
    with pytest.raises(RuntimeError):
        x.narrow_copy(1, 2, 3)
    w = flame.ones(3, 4, requires_grad=True)
    (w.narrow_copy(1, 1, 2) * 3).sum().backward()
    tw = torch.ones(3, 4, requires_grad=True)
    (tw.narrow_copy(1, 1, 2) * 3).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), tw.grad.numpy())


def test_vmap_is_func_vmap():
    assert flame.vmap is flame.func.vmap and "vmap" in flame.__all__
    out = flame.vmap(lambda r: r.sum())(flame.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(out.numpy(), torch.vmap(lambda r: r.sum())(torch.arange(6.0).reshape(2, 3)))


def test_default_device():
    dev = flame.get_default_device()
    assert dev == flame.ones(1).device
    flame.set_default_device(dev)
    assert flame.get_default_device() == dev
    with pytest.raises(flame.FlameError, match="one GPU per process"):
        flame.set_default_device("cuda:1")
