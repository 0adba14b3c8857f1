"""Error messages speak the user's language: they name the op, show the types that came, say what was
expected, and point at the user's file and line (STYLE.md), eagerly and while tracing."""

from __future__ import annotations

import numpy as np
import pytest

import flame

X = np.ones((32, 64), np.float32)
W = np.ones((32, 10), np.float32)


def _check_matmul_message(msg: str) -> None:
    assert "matmul" in msg
    assert "f32[32,64]" in msg and "f32[32,10]" in msg
    assert "inner dimensions differ (64 vs 32)" in msg
    assert "test_errors.py:" in msg


def test_matmul_inner_dimensions_eager() -> None:
    x, w = flame.tensor(X), flame.tensor(W)
    with pytest.raises(flame.ShapeError) as info:
        x @ w
    _check_matmul_message(str(info.value))
    assert "x @ w" in str(info.value)


def test_matmul_inner_dimensions_while_tracing() -> None:
    w = flame.tensor(W)

    def forward(x):
        return x @ w

    with pytest.raises(flame.ShapeError) as info:
        flame.compile(forward)(flame.tensor(X))
    _check_matmul_message(str(info.value))
    assert "return x @ w" in str(info.value)


def test_broadcast_error_names_both_types() -> None:
    with pytest.raises(flame.ShapeError) as info:
        flame.tensor(np.ones((3, 4), np.float32)) + flame.tensor(np.ones((5,), np.float32))
    msg = str(info.value)
    assert "add f32[3,4], f32[5]" in msg and "do not broadcast" in msg and "test_errors.py:" in msg


@pytest.mark.parametrize("read", [
    lambda x: x.item(), lambda x: bool(x.sum() > 0), lambda x: x.numpy(), lambda x: float(x.sum()),
])
def test_reading_values_while_tracing_is_a_trace_error(read) -> None:
    with pytest.raises(flame.TraceError) as info:
        flame.compile(read)(flame.tensor(X))
    msg = str(info.value)
    assert "test_errors.py:" in msg and "while tracing" in msg


def test_data_dependent_if_names_the_line() -> None:
    def f(x):
        if x.sum() > 0:
            return x
        return -x

    with pytest.raises(flame.TraceError) as info:
        flame.compile(f)(flame.tensor(X))
    assert "if x.sum() > 0:" in str(info.value)


def test_tensor_escaping_its_trace() -> None:
    leaked = []

    @flame.compile
    def f(x):
        leaked.append(x * 2)
        return x

    f(flame.tensor(X))
    with pytest.raises(flame.TraceError, match="after its trace ended"):
        leaked[0] + 1


@pytest.mark.parametrize("make", [
    lambda: flame.tensor(np.ones(3, np.complex64)),
    lambda: flame.tensor(np.ones(3, np.uint32)),  # uint8 is supported (u8); wider unsigned ints are not
    lambda: flame.tensor([1.0], dtype="float128"),
    lambda: flame.zeros(2, dtype=np.uint16),
    lambda: flame.tensor([1.0]).to("q8"),
])
def test_unsupported_dtype(make) -> None:
    with pytest.raises(flame.DTypeError) as info:
        make()
    assert "dtype" in str(info.value)


def test_op_on_wrong_dtype_is_a_dtype_error() -> None:
    with pytest.raises(flame.DTypeError) as info:
        flame.tensor([1, 2]).gather(0, flame.tensor([0.5]))
    assert "gather" in str(info.value) and "integer" in str(info.value) and "test_errors.py:" in str(info.value)
    with pytest.raises(flame.DTypeError, match="bitwise_not"):
        ~flame.tensor([1.0])


def test_reshape_and_reduction_errors() -> None:
    t = flame.tensor(np.ones((2, 3), np.float32))
    with pytest.raises(flame.ShapeError, match=r"reshape f32\[2,3\] -> \[4, 2\]: element counts differ \(6 vs 8\)"):
        t.reshape(4, 2)
    with pytest.raises(flame.ShapeError, match="cannot infer the -1"):
        t.reshape(4, -1)
    with pytest.raises(flame.ShapeError, match="axis 2 is out of range for a rank-2"):
        t.sum(2)
    with pytest.raises(flame.ShapeError, match="zero-size"):
        flame.tensor(np.ones((0, 3), np.float32)).amax(0)


def test_backward_errors() -> None:
    with pytest.raises(flame.FlameError, match="does not require grad"):
        flame.tensor([1.0]).sum().backward()
    x = flame.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(flame.FlameError, match="non-scalar"):
        (x * 2).backward()


def test_errors_are_flame_errors_and_builtin_kinds() -> None:
    assert issubclass(flame.ShapeError, ValueError) and issubclass(flame.ShapeError, flame.FlameError)
    assert issubclass(flame.DTypeError, TypeError) and issubclass(flame.TraceError, flame.FlameError)
