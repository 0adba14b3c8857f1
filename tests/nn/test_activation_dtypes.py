"""The activations whose PyTorch kernels exist for floating dtypes only refuse an integer or bool input as
torch does (eagerly, inside @flame.compile and through the modules) rather than computing it in f32."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import flame
import flame.nn as nn
import flame.nn.functional as F

FLOAT_ONLY = [  # name in both functional namespaces, extra arguments
    ("elu", ()), ("selu", ()), ("celu", ()), ("gelu", ()), ("silu", ()), ("mish", ()), ("hardsigmoid", ()),
    ("hardswish", ()), ("leaky_relu", ()), ("logsigmoid", ()), ("softplus", ()), ("softshrink", ()),
    ("hardshrink", ()), ("glu", ()), ("rrelu", ()),
]
DTYPES = [np.int64, np.int32, np.uint8]


def _input(dtype):
    return (np.random.default_rng(0).standard_normal((3, 4)) * 3).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("name,args", FLOAT_ONLY, ids=[n for n, _ in FLOAT_ONLY])
@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_integer_input_refused_as_torch(name, args, dtype, mode):
    a = _input(dtype)
    with pytest.raises(RuntimeError):
        getattr(TF, name)(torch.tensor(a), *args)
    fn = lambda x: getattr(F, name)(x, *args)  # noqa: E731
    with pytest.raises(flame.errors.FlameError, match="not implemented"):
        (fn if mode == "eager" else flame.compile(fn))(flame.tensor(a))


@pytest.mark.parametrize("module", ["ELU", "GELU", "SiLU", "Mish", "LeakyReLU", "Hardswish", "Softplus"])
def test_integer_input_refused_by_the_module(module):
    a = _input(np.int64)
    with pytest.raises(RuntimeError):
        getattr(torch.nn, module)()(torch.tensor(a))
    with pytest.raises(flame.errors.FlameError, match="not implemented"):
        getattr(nn, module)()(flame.tensor(a))


@pytest.mark.parametrize("name,args", FLOAT_ONLY, ids=[n for n, _ in FLOAT_ONLY])
def test_float_input_still_matches_torch(name, args):
    a = _input(np.float32)
    want = getattr(TF, name)(torch.tensor(a), *args)
    got = getattr(F, name)(flame.tensor(a), *args)
    assert str(got.dtype) in ("f32", "float32")
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
