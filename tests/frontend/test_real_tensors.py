"""torch's conj / resolve / is_* queries, Tensor.short, get_device and inference tensors, against torch."""

import numpy as np
import pytest

import flame

torch = pytest.importorskip("torch")

IDENTITIES = ["conj", "conj_physical", "resolve_conj", "resolve_neg"]
QUERIES = ["is_complex", "is_conj", "is_neg", "is_inference"]


@pytest.mark.parametrize("name", IDENTITIES)
@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
def test_identities_return_the_input_itself(name, dtype):
    data = [1, 0, 3]
    x, tx = flame.tensor(data, dtype=getattr(flame, dtype)), torch.tensor(data, dtype=getattr(torch, dtype))
    for fn, tfn in ((getattr(flame, name), getattr(torch, name)), (getattr(flame.Tensor, name),
                                                                  getattr(torch.Tensor, name))):
        assert (fn(x) is x) == (tfn(tx) is tx) is True


@pytest.mark.parametrize("name", IDENTITIES)
def test_a_write_into_the_result_reaches_the_input(name):
    x, tx = flame.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0])
    getattr(x, name)()[0] = 5.0
    getattr(tx, name)()[0] = 5.0
    np.testing.assert_array_equal(x.numpy(), tx.numpy())


def test_conj_physical_in_place_is_the_input():
    x = flame.tensor([1.0, -2.0])
    assert x.conj_physical_() is x and flame.conj_physical_(x) is x


@pytest.mark.parametrize("name", IDENTITIES)
def test_gradient_flows_as_through_the_input(name):
    x, tx = flame.tensor([1.0, 2.0], requires_grad=True), torch.tensor([1.0, 2.0], requires_grad=True)
    (getattr(x, name)() * 3).sum().backward()
    (getattr(tx, name)() * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


def test_compiled():
    @flame.compile
    def f(x):
        return x.conj().resolve_neg().conj_physical() * 2, x.is_conj(), x.is_complex()

    y, c, z = f(flame.tensor([1.0, 2.0]))
    np.testing.assert_array_equal(y.numpy(), [2.0, 4.0])
    assert c is False and z is False


@pytest.mark.parametrize("name", QUERIES)
def test_queries_match_torch(name):
    x, tx = flame.tensor([1.0]), torch.tensor([1.0])
    assert getattr(flame, name)(x) is getattr(torch, name)(tx) is False
    assert getattr(x, name)() is getattr(tx, name)() is False


@pytest.mark.parametrize("name", QUERIES + IDENTITIES)
def test_a_non_tensor_is_torchs_type_error(name):
    with pytest.raises(TypeError) as want:
        getattr(torch, name)(3)
    with pytest.raises(TypeError) as got:
        getattr(flame, name)(3)
    assert str(want.value) in str(got.value)


def test_short():
    data = [1.7, -2.5, 40000.0, -7.0]
    got, want = flame.tensor(data).short(), torch.tensor(data).short()
    assert got.dtype == flame.int16 == flame.short
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    np.testing.assert_array_equal((got * 3).numpy(), (want * 3).numpy())
    compiled = flame.compile(lambda x: x.short() + 1)(flame.tensor(data))
    assert compiled.dtype == flame.int16
    np.testing.assert_array_equal(compiled.numpy(), (want + 1).numpy())


def test_int16_promotion_is_torchs():
    u, i = flame.tensor([200], dtype=flame.uint8), flame.tensor([-3], dtype=flame.int8)
    tu, ti = torch.tensor([200], dtype=torch.uint8), torch.tensor([-3], dtype=torch.int8)
    assert (u + i).dtype == flame.int16 and (tu + ti).dtype == torch.int16
    np.testing.assert_array_equal((u + i).numpy(), (tu + ti).numpy())
    s = flame.tensor([3], dtype=flame.int16)
    assert (s + i).dtype == flame.int16 and (s + flame.tensor([1])).dtype == flame.int64
    assert s.sum().dtype == flame.int64 and (s + 0.5).dtype == flame.float32


def test_get_device():
    x = flame.tensor([1.0])
    assert x.get_device() == (-1 if x.device.type == "cpu" else x.device.index or 0)
    if x.device.type == "cpu":
        assert x.get_device() == torch.tensor([1.0]).get_device() == -1
    assert x.cpu().get_device() == -1


def test_inference_tensors():
    x = flame.ones(2)
    assert not flame.is_inference_mode_enabled()
    with flame.inference_mode():
        assert flame.is_inference_mode_enabled()
        made, view = flame.ones(2), x[:1]
        assert made.is_inference() and (x + 1).is_inference() and not view.is_inference()
        with flame.inference_mode(False):
            assert not flame.is_inference_mode_enabled() and not flame.ones(1).is_inference()
        with flame.no_grad():
            assert flame.is_inference_mode_enabled()
        assert made[:1].is_inference()
    assert not flame.is_inference_mode_enabled() and made.is_inference() and not x.is_inference()

    @flame.inference_mode()
    def inside():
        return flame.is_inference_mode_enabled()

    assert inside() and not flame.is_inference_mode_enabled()


@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_real_is_the_tensor_and_imag_is_torchs_error(dtype):
    """Tensor.real / flame.real of a real tensor are the tensor itself (a write reaches it, gradients
    flow), eager and compiled; Tensor.imag / flame.imag raise torch's RuntimeError."""
    x, tx = flame.tensor([1, 2], dtype=getattr(flame, dtype)), torch.tensor([1, 2], dtype=getattr(torch, dtype))
    assert (x.real is x) == (tx.real is tx) is True and flame.real(x) is x
    x.real[0] = 5
    tx.real[0] = 5
    np.testing.assert_array_equal(x.numpy(), tx.numpy())
    for get in (lambda t: t.imag, lambda t: (flame if isinstance(t, flame.Tensor) else torch).imag(t)):
        with pytest.raises(RuntimeError) as want:
            get(tx)
        with pytest.raises(RuntimeError, match="imag is not implemented for tensors with non-complex dtypes"):
            get(x)
        assert str(want.value).startswith("imag is not implemented")
    w, tw = flame.tensor([1.0, 2.0], requires_grad=True), torch.tensor([1.0, 2.0], requires_grad=True)
    (w.real * 3).sum().backward()
    (tw.real * 3).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), tw.grad.numpy())
    np.testing.assert_array_equal(flame.compile(lambda t: t.real * 2)(flame.tensor([1.0, 2.0])).numpy(), [2.0, 4.0])


def test_layout_queries_and_to_dense_as_torch():
    fx, tx = flame.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
    for name in ("is_sparse", "is_sparse_csr", "is_quantized", "is_meta", "is_nested"):
        assert getattr(fx, name) is getattr(tx, name) is False
    assert fx.to_dense() is fx and tx.to_dense() is tx
    assert fx.to_dense(flame.float64).dtype == flame.float64 and tx.to_dense(torch.float64).dtype == torch.float64
