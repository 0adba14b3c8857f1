"""Integer matmul against torch's CPU, which computes it (cuBLAS has no integer GEMM; flame sums the
products): `@` with 1-D, 2-D and broadcast batched operands, linalg.multi_dot and matrix_power, in
int64, int32, int8 and uint8, products and sums wrapping in the dtype as torch's, eager and inside
@flame.compile; bool operands are refused as by torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame

R = np.random.default_rng(0)
A, B, C = R.integers(-9, 10, (3, 4)), R.integers(-9, 10, (4, 2)), R.integers(-9, 10, (2, 5))
BATCH, SQ = R.integers(-9, 10, (2, 1, 3, 4)), R.integers(-3, 4, (2, 3, 3))

CASES = {
    "mm": (lambda L, a, b, c: a @ b, (A, B, C)),
    "vector @ matrix": (lambda L, a, b, c: a[0] @ b, (A, B, C)),
    "matrix @ vector": (lambda L, a, b, c: a @ b[:, 0], (A, B, C)),
    "dot": (lambda L, a, b, c: a[0] @ b[:, 0], (A, B, C)),
    "broadcast batch": (lambda L, a, b, c: a @ L.matmul(b, c), (BATCH, B, C)),
    "multi_dot": (lambda L, a, b, c: L.linalg.multi_dot([a, b, c]), (A, B, C)),
    "multi_dot vectors": (lambda L, a, b, c: L.linalg.multi_dot([a[0], b, c[:, 0]]), (A, B, C)),
    "matrix_power 3": (lambda L, a, b, c: L.linalg.matrix_power(a, 3), (SQ, B, C)),
    "matrix_power 13": (lambda L, a, b, c: L.linalg.matrix_power(a, 13), (SQ, B, C)),  # (wraps in int8, int32)
    "Tensor.matrix_power 0": (lambda L, a, b, c: a.matrix_power(0), (SQ, B, C)),
}


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("dtype", ["int64", "int32", "int8", "uint8"])
@pytest.mark.parametrize("name", CASES)
def test_integer_matmul_as_torch(name, dtype, compiled):
    fn, arrays = CASES[name]
    want = fn(torch, *(torch.tensor(a).to(getattr(torch, dtype)) for a in arrays))
    run = (lambda *ts: fn(flame, *ts))
    got = (flame.compile(run) if compiled else run)(*(flame.tensor(a).to(getattr(flame, dtype)) for a in arrays))
    assert got.dtype.name == {"int64": "i64", "int32": "i32", "int8": "i8", "uint8": "u8"}[dtype]
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_bool_matmul_is_refused_as_by_torch():
    for lib in (torch, flame):
        a = lib.tensor(A > 0)
        with pytest.raises((NotImplementedError, RuntimeError)):
            lib.linalg.multi_dot([a, a.mT])
