"""Tensor.new (torch's legacy constructor) and flame.frombuffer against torch: shapes, dtypes, values,
the memory a writable buffer shares, and torch's errors (ValueError for a buffer that does not fit,
TypeError for new's arguments); Tensor.new eagerly and inside @flame.compile."""

from __future__ import annotations

import array

import numpy as np
import pytest

import flame

torch = pytest.importorskip("torch")


def _same(got, want, values: bool = True):
    assert tuple(got.shape) == tuple(want.shape)
    assert str(got.dtype).split(".")[-1] == {torch.float64: "f64", torch.float32: "f32", torch.int32: "i32",
                                             torch.int16: "i16", torch.uint8: "u8", torch.bfloat16: "bf16"}[want.dtype]
    assert got.requires_grad == want.requires_grad
    if values:
        np.testing.assert_array_equal(np.asarray(got.float().tolist()), np.asarray(want.float().tolist()))


@pytest.mark.parametrize("args,values", [
    ((2, 3), False), ((), True), (([1, 2],), True), (((1, 2),), True), (([[1, 2], [3, 4]],), True),
    (("size", [2, 3]), False), (("size", []), False), (([],), True),
])
def test_new_as_torch(args, values):
    fx, tx = flame.ones(2, dtype=flame.float64, requires_grad=True), torch.ones(2, dtype=torch.float64,
                                                                                 requires_grad=True)
    if args and args[0] == "size":
        fargs, targs = (flame.Size(args[1]),), (torch.Size(args[1]),)
    else:
        fargs = targs = args
    _same(fx.new(*fargs), tx.new(*targs), values)


def test_new_of_a_tensor_is_that_tensor_and_errors_are_torch_s():
    x = flame.ones(3)
    y = x.new(x)
    y.add_(1)
    np.testing.assert_array_equal(x.numpy(), [2, 2, 2])  # torch's alias
    bads = (lambda m, t: t.new(m.tensor([1, 2])), lambda m, t: t.new(2.5), lambda m, t: t.new(2, dtype=m.float32),
            lambda m, t: t.new(2, 2.5))
    for bad in bads:
        with pytest.raises(TypeError):
            bad(torch, torch.ones(2))
        with pytest.raises(TypeError):
            bad(flame, flame.ones(2))
    with pytest.raises(RuntimeError, match="negative dimension"):
        torch.ones(2).new(-1)
    with pytest.raises(RuntimeError, match="negative dimension"):
        flame.ones(2).new(-1)


def test_new_inside_compile():
    @flame.compile
    def f(a):
        return a.new(2, 3).add(1).sum() + a.new([1.0, 2.0]).sum() + a

    np.testing.assert_allclose(f(flame.ones(())).numpy(), 10.0)


def _buffers():
    return [
        (lambda: b"\x01\x02\x03\x04", dict(dtype="uint8")),
        (lambda: bytearray(b"\x00\x00\x80\x3f\x00\x00\x00\x40"), dict(dtype="float32")),
        (lambda: bytearray(8), dict(dtype="float32", count=1, offset=4)),
        (lambda: bytearray(8), dict(dtype="float32", count=-1, offset=4)),
        (lambda: memoryview(bytearray(range(8))), dict(dtype="int32")),
        (lambda: bytearray(8), dict(dtype="float32", requires_grad=True)),
        (lambda: array.array("i", [1, 2, 3]), dict(dtype="int32")),
        (lambda: array.array("d", [1.5, 2]), dict(dtype="float64", offset=8)),
        (lambda: bytearray(range(6)), dict(dtype="int16", offset=2)),
        (lambda: bytearray(b"\x80\x3f\x00\x40"), dict(dtype="bfloat16")),
    ]


@pytest.mark.filterwarnings("ignore:The given buffer is not writable")
@pytest.mark.parametrize("make,kw", _buffers())
def test_frombuffer_as_torch(make, kw):
    fkw = {**kw, "dtype": getattr(flame, kw["dtype"])}
    tkw = {**kw, "dtype": getattr(torch, kw["dtype"])}
    _same(flame.frombuffer(make(), **fkw), torch.frombuffer(make(), **tkw))


@pytest.mark.parametrize("make,kw", [
    (lambda: bytearray(7), dict()), (lambda: bytearray(8), dict(count=3)), (lambda: bytearray(8), dict(offset=8)),
    (lambda: bytearray(8), dict(offset=-1)), (lambda: bytearray(0), dict()), (lambda: [1, 2], dict()),
    (lambda: bytearray(8), dict(count=0)),
])
def test_frombuffer_errors_as_torch(make, kw):
    with pytest.raises(ValueError) as want:
        torch.frombuffer(make(), dtype=torch.float32, **kw)
    with pytest.raises(ValueError) as got:
        flame.frombuffer(make(), dtype=flame.float32, **kw)
    assert str(got.value) == str(want.value)


def test_frombuffer_shares_a_writable_buffer_and_needs_a_dtype():
    b = bytearray(4)
    x = flame.frombuffer(b, dtype=flame.uint8)
    b[0] = 7
    assert x.tolist() == [7, 0, 0, 0]
    with pytest.raises(TypeError):
        flame.frombuffer(bytearray(8))
