"""flame.testing.assert_close against torch.testing.assert_close: the same inputs pass or fail, with
torch's messages (dtype names in flame's spelling), its default tolerances per dtype, containers item
by item, and msg."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import flame
from flame.testing import assert_close

CASES = [
    ([1.0, 2.0, 3.0], [1.0, 2.5, 3.0], "f32", {}),
    ([1.0, 2.0, 3.0], [1.0, 2.000001, 3.0], "f32", {}),
    ([1.0, 2.0], [1.0, 2.001], "f16", {}),
    ([1.0, 2.0], [1.0, 2.02], "bf16", {}),
    ([1.0, 2.0], [1.0, 2.0 + 1e-9], "f64", {}),
    ([[1, 2], [3, 4]], [[1, 2], [3, 5]], "i64", {}),
    ([1.0, math.inf], [1.0, math.inf], "f32", {}),
    ([1.0, math.inf], [1.0, -math.inf], "f32", {}),
    ([math.nan], [math.nan], "f32", {}),
    ([math.nan], [math.nan], "f32", {"equal_nan": True}),
    ([1.0, 2.0], [1.1, 2.0], "f32", {"rtol": 0.2, "atol": 0.0}),
]
TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64,
         "i64": torch.int64}


def _outcome(fn, *args, **kw):
    try:
        fn(*args, **kw)
    except AssertionError as e:
        return str(e)
    return None


def _flame_spelling(message: str) -> str:
    return message.replace("torch.Size(", "").replace("])", "]").replace("torch.float", "flame.f")


@pytest.mark.parametrize("actual,expected,dtype,kw", CASES)
def test_tensors_as_torchs(actual, expected, dtype, kw):
    got = _outcome(assert_close, flame.tensor(actual, dtype=getattr(flame, dtype)),
                   flame.tensor(expected, dtype=getattr(flame, dtype)), **kw)
    want = _outcome(torch.testing.assert_close, torch.tensor(actual, dtype=TORCH[dtype]),
                    torch.tensor(expected, dtype=TORCH[dtype]), **kw)
    assert (got is None) == (want is None), (got, want)
    if want is not None:  # the same lines, up to the rounding of the relative difference's digits
        g, w = got.splitlines(), want.splitlines()
        assert [x.split(":")[0] for x in g] == [x.split(":")[0] for x in w]
        assert g[:3] == w[:3]


def test_shapes_dtypes_containers_and_msg_as_torchs():
    pairs = [
        ((flame.ones(2), flame.ones(3)), (torch.ones(2), torch.ones(3))),
        ((flame.ones(2), flame.ones(2, dtype=flame.float64)), (torch.ones(2), torch.ones(2, dtype=torch.float64))),
        (({"a": flame.ones(2)}, {"a": flame.zeros(2)}), ({"a": torch.ones(2)}, {"a": torch.zeros(2)})),
        (([flame.ones(2)], [flame.ones(2), flame.ones(1)]), ([torch.ones(2)], [torch.ones(2), torch.ones(1)])),
        (([1.0, (2.0, 3.0)], [1.0, (2.0, 3.5)]), ([1.0, (2.0, 3.0)], [1.0, (2.0, 3.5)])),
        ((1.0, 1.1), (1.0, 1.1)),
        ((3, 3), (3, 3)),
    ]
    for (fa, fe), (ta, te) in pairs:
        got, want = _outcome(assert_close, fa, fe), _outcome(torch.testing.assert_close, ta, te)
        assert (got is None) == (want is None)
        if want is not None:
            assert got == _flame_spelling(want) or got.splitlines()[0] == want.splitlines()[0], (got, want)
    assert _outcome(assert_close, flame.ones(2), flame.zeros(2), msg="custom") == "custom"
    assert _outcome(assert_close, flame.ones(2), flame.zeros(2), msg=lambda m: m.upper()).startswith("TENSOR-LIKES")
    with pytest.raises(ValueError, match="rtol"):
        assert_close(flame.ones(1), flame.ones(1), atol=1.0)
    assert_close(flame.ones(3), np.ones(3, np.float32))
