"""Creation and dtype inference against torch: flame.tensor from Python numbers, nested lists, NumPy
scalars and arrays; zeros/ones/full/arange/linspace/logspace/eye and the *_like / new_* forms (value,
dtype, shape, and torch's errors), eagerly and inside @flame.compile."""

import numpy as np
import pytest

import flame
from tests.tensor_parity.common import check

DATA = [
    1,
    1.5,
    True,
    -3,
    2**40,
    [1, 2],
    [1.0, 2],
    [True, False],
    [[1, 2], [3, 4]],
    [1, 2.5],
    [True, 2],
    [],
    [[1], [2]],
    np.float64(1.5),
    np.float32(1.5),
    np.int32(3),
    np.int8(-3),
    np.bool_(True),
    np.float16(2),
    [np.float64(1.5), 2.0],
    [np.float32(1), np.float64(2)],
    [np.int32(1), 2],
    [np.int32(1), np.int8(2)],
    [1, np.float32(2.0)],
    np.array(1.5),
    [np.array([1, 2], dtype=np.int32)] * 2,
]


@pytest.mark.parametrize("data", DATA, ids=repr)
def test_tensor_infers_torch_dtype(data):
    check(lambda L: L.tensor(data), compiled=False)


@pytest.mark.parametrize(
    "np_dtype", [np.float64, np.float32, np.float16, np.int64, np.int32, np.int8, np.uint8, np.bool_]
)
@pytest.mark.parametrize("make", ["tensor", "as_tensor", "from_numpy"])
def test_numpy_arrays_keep_their_dtype(np_dtype, make):
    a = (np.arange(6).reshape(2, 3) - 2).astype(np_dtype)
    check(lambda L: getattr(L, make)(a), compiled=False)


EXPLICIT = [
    lambda L: L.tensor(1.5, dtype=L.float64),
    lambda L: L.tensor([1, 2], dtype=L.float32),
    lambda L: L.tensor([1.7, -1.7], dtype=L.int64),
    lambda L: L.tensor([0.0, 0.5, 2.0], dtype=L.bool),
    lambda L: L.tensor([-1, 300], dtype=L.uint8),  # torch: overflow error, not a wrap
    lambda L: L.tensor([1.7, 300.2], dtype=L.int8),
    lambda L: L.tensor([1, 2], requires_grad=True),  # only floating tensors require grad
    lambda L: L.ones(2, dtype=L.int64, requires_grad=True),
    lambda L: L.tensor(np.array([-1, 300]), dtype=L.uint8),  # an array wraps, as in torch
]


@pytest.mark.parametrize("i", range(len(EXPLICIT)))
def test_tensor_with_dtype(i):
    check(EXPLICIT[i], compiled=False)


def test_requires_grad_of_an_int_tensor_raises():
    with pytest.raises(flame.DTypeError, match="floating point"):
        flame.arange(3).requires_grad_()


FACTORIES = {
    "zeros(2,3)": lambda L, x: L.zeros(2, 3),
    "zeros((2,3))": lambda L, x: L.zeros((2, 3)),
    "zeros([2,3])": lambda L, x: L.zeros([2, 3]),
    "zeros(())": lambda L, x: L.zeros(()),
    "zeros(0,3)": lambda L, x: L.zeros(0, 3),
    "zeros(-1)": lambda L, x: L.zeros(-1),
    "zeros i32": lambda L, x: L.zeros(2, dtype=L.int32),
    "ones bool": lambda L, x: L.ones(2, dtype=L.bool),
    "full int": lambda L, x: L.full((2,), 3),
    "full bool": lambda L, x: L.full((2,), True),
    "full float": lambda L, x: L.full((2,), 3.0),
    "full np f64": lambda L, x: L.full((2,), np.float64(1.5)),
    "full int as f64": lambda L, x: L.full((2,), 3, dtype=L.float64),
    "full list shape": lambda L, x: L.full([2, 2], 1.5),
    "full overflow": lambda L, x: L.full((2,), 300, dtype=L.uint8),
    "arange(5)": lambda L, x: L.arange(5),
    "arange(5.)": lambda L, x: L.arange(5.0),
    "arange(1,5)": lambda L, x: L.arange(1, 5),
    "arange(0,1,0.1)": lambda L, x: L.arange(0, 1, 0.1),
    "arange(0,0.3,0.1)": lambda L, x: L.arange(0, 0.3, 0.1),
    "arange(0,1,1/3)": lambda L, x: L.arange(0, 1, 1 / 3),
    "arange(1,2.5,0.5)": lambda L, x: L.arange(1, 2.5, 0.5),
    "arange(5,0,-1)": lambda L, x: L.arange(5, 0, -1),
    "arange(5,0,-1.5)": lambda L, x: L.arange(5, 0, -1.5),
    "arange(-1,1,0.25)": lambda L, x: L.arange(-1.0, 1.0, 0.25),
    "arange(0,10,3)": lambda L, x: L.arange(0, 10, 3),
    "arange(1,1)": lambda L, x: L.arange(1, 1),
    "arange big": lambda L, x: L.arange(10**10, 10**10 + 3),
    "arange np int": lambda L, x: L.arange(np.int64(4)),
    "arange np float": lambda L, x: L.arange(np.float64(2.5)),
    "arange f64": lambda L, x: L.arange(5, dtype=L.float64),
    "arange bf16": lambda L, x: L.arange(0, 300, 7, dtype=L.bfloat16),
    "arange i32 float bounds": lambda L, x: L.arange(0.5, 4, 1.5, dtype=L.int32),
    "arange i32 negative float step": lambda L, x: L.arange(5, 0, -1.5, dtype=L.int32),
    "arange i64 float bounds": lambda L, x: L.arange(-2.5, 4, 1.7, dtype=L.int64),
    "arange i32 step truncates to 0": lambda L, x: L.arange(0, 2, 0.5, dtype=L.int32),
    "arange(0,-3)": lambda L, x: L.arange(0, -3),
    "arange(0,5,-1)": lambda L, x: L.arange(0, 5, -1),
    "arange step 0": lambda L, x: L.arange(0, 5, 0),
    "linspace(0,1,5)": lambda L, x: L.linspace(0, 1, 5),
    "linspace steps 1": lambda L, x: L.linspace(0, 1, 1),
    "linspace steps 0": lambda L, x: L.linspace(0, 1, 0),
    "linspace steps -1": lambda L, x: L.linspace(0, 1, -1),
    "linspace i64": lambda L, x: L.linspace(0, 10, 4, dtype=L.int64),
    "linspace u8": lambda L, x: L.linspace(0, 255, 7, dtype=L.uint8),
    "linspace f64": lambda L, x: L.linspace(0, 1, 7, dtype=L.float64),
    "linspace f16": lambda L, x: L.linspace(0, 1, 5, dtype=L.float16),
    "linspace reversed": lambda L, x: L.linspace(3, -1, 9),
    "logspace": lambda L, x: L.logspace(0, 2, 3),
    "logspace base 2": lambda L, x: L.logspace(0, 3, 4, base=2),
    "logspace base 0.5": lambda L, x: L.logspace(0, 3, 4, base=0.5),
    "logspace steps 1": lambda L, x: L.logspace(1, 2, 1),
    "logspace steps 0": lambda L, x: L.logspace(1, 2, 0),
    "logspace f64": lambda L, x: L.logspace(-1, 1, 5, dtype=L.float64),
    "logspace i64": lambda L, x: L.logspace(0, 3, 4, dtype=L.int64),
    "eye(3)": lambda L, x: L.eye(3),
    "eye(2,4)": lambda L, x: L.eye(2, 4),
    "eye i64": lambda L, x: L.eye(3, dtype=L.int64),
    "eye bool": lambda L, x: L.eye(2, 3, dtype=L.bool),
    "eye(0)": lambda L, x: L.eye(0),
    "zeros_like": lambda L, x: L.zeros_like(x),
    "zeros_like i64": lambda L, x: L.zeros_like(x, dtype=L.int64),
    "zeros_like f16": lambda L, x: L.zeros_like(x, dtype=L.float16),
    "ones_like bool": lambda L, x: L.ones_like(x, dtype=L.bool),
    "ones_like of bool": lambda L, x: L.ones_like(x > 0),
    "full_like int fill": lambda L, x: L.full_like(x, 7),
    "full_like float into int": lambda L, x: L.full_like(x.long(), 2.7),
    "full_like dtype": lambda L, x: L.full_like(x, 2.5, dtype=L.float64),
    "empty_like shape": lambda L, x: tuple(L.empty_like(x).shape),
    "empty(0) shape": lambda L, x: tuple(L.empty(0).shape),
    "new_zeros": lambda L, x: x.new_zeros(4),
    "new_ones dtype": lambda L, x: x.new_ones((2,), dtype=L.int32),
    "new_full int fill": lambda L, x: x.new_full((2,), 3),
    "tril_indices": lambda L, x: L.tril_indices(3, 3),
    "tril_indices offset": lambda L, x: L.tril_indices(3, 4, 1),
    "triu_indices offset": lambda L, x: L.triu_indices(4, 3, -1),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", FACTORIES)
def test_factories(name, compiled):
    check(FACTORIES[name], np.zeros((2, 3), np.float32), compiled=compiled)


@pytest.mark.parametrize("name", ["new_tensor ints", "new_tensor floats"])
def test_new_tensor(name):
    data = [1, 2] if name == "new_tensor ints" else [1.5, 2]
    check(lambda L, x: x.new_tensor(data), np.zeros(2, np.float64), compiled=False)


TENSOR_BOUNDS = {
    "arange(f32 tensor)": lambda L, x: L.arange(L.tensor(2.5)),
    "arange(f64 tensor)": lambda L, x: L.arange(L.tensor(2.5, dtype=L.float64)),
    "arange(i32 tensor)": lambda L, x: L.arange(L.tensor(3, dtype=L.int32)),
    "arange(0, f32 tensor, 0.25)": lambda L, x: L.arange(0, L.tensor(1.0), 0.25),
    "arange(0, 4, i64 tensor step)": lambda L, x: L.arange(0, 4, L.tensor(2)),
}


@pytest.mark.parametrize("name", TENSOR_BOUNDS)
def test_arange_tensor_bounds(name):
    """torch reads a tensor bound's value: a float tensor makes a floating range, as a float does."""
    check(TENSOR_BOUNDS[name], np.zeros(2, np.float32), compiled=False)
