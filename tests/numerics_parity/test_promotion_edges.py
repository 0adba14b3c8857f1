"""Type promotion and value conversion edges against torch, eagerly and inside @flame.compile: bfloat16 with
every other dtype (bf16 with f16 is f32), 0-d tensors against dimensioned ones, where() refusing a
condition that is not bool (uint8 is taken, as torch's), and numbers written into integer tensors by
torch's overflow rule (an unsigned dtype takes -1 as its maximum; NaN, infinities and out-of-range floats
raise), through setitem, fill_, full, masked_fill and tensor(); and the pointwise losses of a 0-d tensor
(torch broadcasts the pair first, so the 0-d one promotes as a dimensioned one)."""

import numpy as np
import pytest
import torch

import flame
from tests.tensor_parity.common import check

NAMES = {"f32": "float32", "f16": "float16", "f64": "float64", "bf16": "bfloat16", "i64": "int64", "i32": "int32"}
NAMES.update({"i8": "int8", "u8": "uint8", "bool": "bool"})


def mk(L, name, values):
    """A tensor of lib L of dtype `name` holding values."""
    return L.tensor(values, dtype=getattr(L, NAMES[name]))


def put(t, key, value):
    """t with t[key] = value written in place."""
    t[key] = value
    return t


def in_cpu_autocast(L, fn):
    """fn() inside a CPU autocast region of bf16."""
    with L.autocast("cpu", dtype=L.bfloat16):
        return fn()


def pair_losses(L, a, b, **kw):
    """l1_loss, mse_loss and smooth_l1_loss of (a, b), and of (b, a)."""
    F = L.nn.functional
    return tuple(f(x, y, **kw) for f in (F.l1_loss, F.mse_loss, F.smooth_l1_loss) for x, y in ((a, b), (b, a)))


CASES = {}
for other in ["f32", "f16", "f64", "i64", "i32", "i8", "u8", "bool"]:
    CASES[f"bf16 + {other}"] = lambda L, o=other: mk(L, "bf16", [1.5, 2, 3]) + mk(L, o, [1, 0, 1])
    CASES[f"{other} * bf16"] = lambda L, o=other: mk(L, o, [1, 0, 1]) * mk(L, "bf16", [1.5, 2, 3])
    CASES[f"0-d bf16 + {other}"] = lambda L, o=other: mk(L, "bf16", 1.5) + mk(L, o, [1, 0, 1])
    CASES[f"0-d {other} + bf16"] = lambda L, o=other: mk(L, o, 1) + mk(L, "bf16", [1.5, 2, 3])
for s in [2, 2.5, True]:
    CASES[f"bf16 with {s!r}"] = lambda L, s=s: (mk(L, "bf16", [1.5, 2, 3]) + s, s * mk(L, "bf16", [1.5, 2, 3]))
CASES.update(
    {
        "bf16 compared with f16": lambda L: mk(L, "bf16", [1.5, 2, 3]) < mk(L, "f16", [2, 2, 2]),
        "maximum of bf16 and f16": lambda L: L.maximum(mk(L, "bf16", [1.5, 2, 3]), mk(L, "f16", [2, 2, 2])),
        "where bf16 or f16": lambda L: L.where(mk(L, "bool", [True, False]), mk(L, "bf16", [1.5, 2]), mk(L, "f16", 1)),
        "cat bf16 and f16": lambda L: L.cat([mk(L, "bf16", [1.5]), mk(L, "f16", [2])]),
        "0-d i64 + f16": lambda L: mk(L, "i64", 3) + mk(L, "f16", [1, 2]),
        "0-d f64 * u8": lambda L: mk(L, "f64", 2.5) * mk(L, "u8", [1, 2]),
        "0-d f16 + 0-d f32": lambda L: mk(L, "f16", 2.5) + mk(L, "f32", 1),
        "0-d i32 + 0-d f64 + i8": lambda L: mk(L, "i32", 2) + mk(L, "f64", 1.5) + mk(L, "i8", [1]),
        "i8 ** 0-d f64": lambda L: mk(L, "i32", [2, 3]) ** mk(L, "f64", 0.5),
        "i32 + np.int64 past i32": lambda L: mk(L, "i32", [1, 2]) + np.int64(2**40),
        "where with an int condition raises": lambda L: L.where(mk(L, "i64", [1, 0]), mk(L, "f32", [1, 2]), 0.0),
        "where with a float condition raises": lambda L: L.where(mk(L, "f32", [1, 0]), 1.0, 0.0),
        "where with a u8 condition": lambda L: L.where(mk(L, "u8", [1, 0]), mk(L, "f32", [1, 2]), 0.0),
        "Tensor.where with an int condition raises": lambda L: mk(L, "f32", [1, 2]).where(mk(L, "i32", [1, 0]), 0.0),
        "setitem -1 into u8": lambda L: put(mk(L, "u8", [1, 2]), 0, -1),
        "setitem -255 into u8": lambda L: put(mk(L, "u8", [1, 2]), 0, -255),
        "setitem -256 into u8 raises": lambda L: put(mk(L, "u8", [1, 2]), 0, -256),
        "setitem -1.5 into u8 raises": lambda L: put(mk(L, "u8", [1, 2]), 0, -1.5),
        "setitem -129 into i8 raises": lambda L: put(mk(L, "i8", [1, 2]), 0, -129),
        "setitem 255.5 into i32": lambda L: put(mk(L, "i32", [1, 2]), 0, 255.5),
        "setitem NaN into i32 raises": lambda L: put(mk(L, "i32", [1, 2]), 0, float("nan")),
        "setitem inf into i64 raises": lambda L: put(mk(L, "i64", [1, 2]), 1, float("inf")),
        "setitem -1 into u8 by mask": lambda L: put(mk(L, "u8", [1, 2]), mk(L, "u8", [1, 2]) > 1, -2),
        "fill_ -1 into u8": lambda L: mk(L, "u8", [1, 2]).fill_(-1),
        "fill_ NaN into i32 raises": lambda L: mk(L, "i32", [1, 2]).fill_(float("nan")),
        "full -1 u8": lambda L: L.full((2,), -1, dtype=L.uint8),
        "full -200 u8": lambda L: L.full((2,), -200, dtype=L.uint8),
        "full inf i32 raises": lambda L: L.full((2,), float("-inf"), dtype=L.int32),
        "masked_fill -1 into u8": lambda L: mk(L, "u8", [0, 2]).masked_fill(mk(L, "bool", [True, False]), -1),
        "tensor [-1] u8": lambda L: L.tensor([-1, 3], dtype=L.uint8),
        "tensor [NaN] i64 raises": lambda L: L.tensor([float("nan")], dtype=L.int64),
        "tensor [-0.5] u8 raises": lambda L: L.tensor([-0.5], dtype=L.uint8),
        # the losses broadcast their pair first (torch.broadcast_tensors): a 0-d tensor is not the weaker one
        "losses of f32 and 0-d f64": lambda L: pair_losses(L, mk(L, "f32", [0.1, 2.3]), mk(L, "f64", 0.7)),
        "losses of f16 and 0-d f32, unreduced": lambda L: pair_losses(
            L, mk(L, "f16", [0.1, 2.3]), mk(L, "f32", 0.7), reduction="none"),
        "losses of bf16 and 0-d f64 in cpu autocast": lambda L: in_cpu_autocast(
            L, lambda: pair_losses(L, mk(L, "bf16", [0.1, 2.3]), mk(L, "f64", 0.7))),
    }
)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", CASES)
def test_promotion_edge(name, compiled):
    check(CASES[name], compiled=compiled)


def test_where_names_the_condition_dtype_and_the_users_line():
    with pytest.raises(flame.errors.DTypeError, match=r"boolean tensor(.|\n)*i64(.|\n)*test_promotion_edges"):
        flame.where(flame.tensor([1, 0]), 1.0, 0.0)


@pytest.mark.xfail(strict=True, reason="flame has no int16: uint8 with int8 promotes to int32 (docs)")
def test_uint8_with_int8_is_int16():
    t = torch.tensor([200], dtype=torch.uint8) + torch.tensor([-5], dtype=torch.int8)
    f = flame.tensor([200], dtype=flame.uint8) + flame.tensor([-5], dtype=flame.int8)
    assert str(t.dtype) == "torch.int16" and f.dtype.name == "int16"


@pytest.mark.parametrize(
    "dtype,op,value",
    [
        ("float16", "clamp", 1e5),
        ("bfloat16", "clamp", 1e39),
        ("float32", "clamp", -1e39),
        ("int8", "clamp", 300),
        ("float16", "masked_fill", -1e9),
        ("uint8", "masked_fill", 300),
        ("uint8", "masked_fill", -256),
        ("int8", "masked_fill", -129),
        ("float16", "index_fill", 7e4),
        ("float16", "hardtanh", 1e5),
        ("float16", "threshold", 1e5),
    ],
)
def test_a_number_the_dtype_cannot_hold_raises_as_torchs(dtype, op, value):
    """torch's checked conversion of a Scalar argument: a RuntimeError (flame.OverflowValueError, naming
    the op, the argument and the dtype's range); infinities, a bf16 1e5 and a uint8 -1 (which wraps)
    convert."""
    forms = {
        "clamp": lambda L, x: x.clamp(max=value),
        "masked_fill": lambda L, x: x.masked_fill(L.tensor([True, False]), value),
        "index_fill": lambda L, x: x.index_fill(0, L.tensor([0]), value),
        "hardtanh": lambda L, x: L.nn.functional.hardtanh(x, -1.0, value),
        "threshold": lambda L, x: L.nn.functional.threshold(x, 0.5, value),
    }
    for L, error in ((torch, RuntimeError), (flame, flame.OverflowValueError)):
        with pytest.raises(error, match="without overflow"):
            forms[op](L, L.tensor([1, 2]).to(getattr(L, dtype)))


@pytest.mark.parametrize("dtype,value", [("float16", float("inf")), ("bfloat16", 1e5), ("uint8", -1), ("bool", 7)])
def test_a_number_the_dtype_can_take_converts_as_torchs(dtype, value):
    for L in (torch, flame):
        x = L.tensor([1, 2]).to(getattr(L, dtype))
        assert x.masked_fill(L.tensor([True, False]), value).tolist() == \
            torch.tensor([1, 2]).to(getattr(torch, dtype)).masked_fill(torch.tensor([True, False]), value).tolist()
