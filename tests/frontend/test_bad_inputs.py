"""A catalogue of bad and edge inputs (shapes, dtypes, axes, 0-d, zero-size, NaN/Inf, huge shapes),
each checked eagerly and under @flame.compile (issue 14 deliverable 2): bad ones raise flame's own
errors (which are also the built-in class PyTorch raises), edge values agree with torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
import flame.nn.functional as F

M = np.arange(6, dtype=np.float32).reshape(2, 3)
S = np.float32(2.0)

BAD = {  # name: (function, inputs, the built-in class PyTorch raises)
    "matmul shapes": (lambda a: a @ a, [M], ValueError),
    "add shapes": (lambda a, b: a + b, [M, np.ones(4, np.float32)], ValueError),
    "reshape count": (lambda a: a.reshape(4, 2), [M], ValueError),
    "two -1 in reshape": (lambda a: a.reshape(-1, -1), [M], ValueError),
    "dim out of range": (lambda a: a.sum(2), [M], IndexError),
    "negative dim out of range": (lambda a: a.softmax(-3), [M], IndexError),
    "0-d transpose dim 1": (lambda a: a.transpose(0, 1), [S], IndexError),
    "cat of 0-d": (lambda a: flame.cat([a, a]), [S], ValueError),
    "permute not a permutation": (lambda a: a.permute(0, 0), [M], ValueError),
    "expand to fewer dims": (lambda a: a.expand(3), [M], ValueError),
    "float labels": (lambda a, t: F.cross_entropy(a, t), [M, np.zeros(2, np.float32)], ValueError),
    "labels of the wrong length": (lambda a, t: F.cross_entropy(a, t), [M, np.zeros(3, np.int64)], ValueError),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", BAD)
def test_bad_input_raises_flames_error(name, compiled):
    f, inputs, builtin = BAD[name]
    with pytest.raises(flame.FlameError) as info:
        (flame.compile(f) if compiled else f)(*[flame.tensor(x) for x in inputs])
    assert isinstance(info.value, builtin)


EDGE = {  # name: (flame function, torch function, inputs)
    "zero-size sum": (lambda a: a.sum(0), lambda a: a.sum(0), [np.zeros((0, 3), np.float32)]),
    "zero-size matmul": (lambda a, b: a @ b, lambda a, b: a @ b,
                         [np.zeros((2, 0), np.float32), np.zeros((0, 3), np.float32)]),
    "zero-size amax of rows": (lambda a: a.amax(1), lambda a: a.amax(1), [np.zeros((0, 3), np.float32)]),
    "NaN through relu and max": (lambda a: a.relu().amax(0), lambda a: a.relu().amax(0),
                                 [np.array([[np.nan, 1.0], [0.0, -np.inf]], np.float32)]),
    "inf softmax": (lambda a: a.softmax(-1), lambda a: a.softmax(-1), [np.array([[np.inf, 1.0]], np.float32)]),
    "-inf logsumexp": (lambda a: F.logsumexp(a, -1), lambda a: a.logsumexp(-1),
                       [np.array([[-np.inf, -np.inf], [np.inf, 1.0]], np.float32)]),
    "0-d ops": (lambda a: (a.exp() * a).flip(0).transpose(0, -1), lambda a: (a.exp() * a).flip(0).transpose(0, -1),
                [np.array(S)]),
    "int32 sum": (lambda a: a.sum(), lambda a: a.sum(), [np.array([2**31 - 1, 1], np.int32)]),
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", EDGE)
def test_edge_values_agree_with_torch(name, compiled):
    f, g, inputs = EDGE[name]
    got = (flame.compile(f) if compiled else f)(*[flame.tensor(x) for x in inputs])
    want = g(*[torch.from_numpy(np.array(x)) for x in inputs])
    assert got.shape == tuple(want.shape)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, equal_nan=True)


def test_huge_shape_is_refused_before_allocating():
    with pytest.raises((flame.FlameError, MemoryError, ValueError)):
        flame.zeros(2**40, 2**40)
