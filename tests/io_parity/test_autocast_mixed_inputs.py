"""Inputs of several floating dtypes inside an autocast region, as torch's autocast takes them.

An op on torch's CUDA promote list (dot, addcmul, addcdiv, atan2, scatter_add, ...) casts its
floating inputs with autocast's promote_type: starting from the region's dtype, each input in argument order
(float64 ones left out) makes it float32 if either is float32 and keeps it where both are the region's dtype;
the other low dtype met before a float32 is torch's RuntimeError ("Unexpected floating ScalarType in
at::autocast::prioritize"), so addcmul(f32, bf16, f16) is float32 but addcmul(bf16, f16, f32) an error. An op
on none of the lists (add, mul, where, maximum, index_add, scatter, ...) runs on its inputs as
they are, as outside a region: torch's type promotion, or its error where the op takes one dtype only.
Oracles: torch's CUDA autocast dispatch on fake CUDA tensors, and for the index ops (whose index
tensors the fake CUDA path cannot take from the CPU) torch outside a region, with their AutocastCUDA
registration showing that torch's autocast leaves them alone. cat and stack (and hstack, vstack, ... which torch
composes of them) are on torch's CPU promote list alone, the list's tensors taken in order: the oracle is
torch's CPU autocast on real tensors, and on CUDA the fake tensors (type promotion, as outside a region)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import flame
from tests.io_parity.test_autocast_lists import MODES, _name

BF, F16, F32, F64 = "bfloat16", "float16", "float32", "float64"
V = (6,)

PROMOTE = {
    "dot": lambda lib, a, b: lib.dot(a, b),
    "atan2": lambda lib, a, b: lib.atan2(a, b),
    "addcmul": lambda lib, a, b, c: lib.addcmul(a, b, c),
    "addcdiv": lambda lib, a, b, c: lib.addcdiv(a, b, c.abs() + 1),
}
ORDERS = [(F16, F16), (BF, F16), (F16, BF), (F32, F16), (F16, F32), (BF, F32), (F32, BF), (BF, BF), (F16, F64),
          (BF, F16, F32), (F32, BF, F16), (F16, F16, F16), (BF, BF, F32)]
ROWS = [(name, dts) for name, fn in PROMOTE.items() for dts in ORDERS if fn.__code__.co_argcount - 1 == len(dts)]


def _fake_cuda(fn, dts: tuple, low: str, shapes=None) -> str:
    """fn's result dtype under torch's CUDA autocast of `low` on fake CUDA tensors, or "error"."""
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        ts = [torch.empty(s, dtype=getattr(torch, d), device="cuda") for d, s in zip(dts, shapes or [V] * len(dts))]
    before = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
    torch.set_autocast_enabled("cuda", True)
    torch.set_autocast_dtype("cuda", getattr(torch, low))
    try:
        with mode:
            return str(fn(torch, *ts).dtype).split(".")[-1]
    except RuntimeError:
        return "error"
    finally:
        torch.set_autocast_enabled("cuda", before[0])
        torch.set_autocast_dtype("cuda", before[1])


def _flame(fn, arrays: list, dts: tuple, device: str, low: str, mode: str) -> str:
    def body(*xs):
        with flame.autocast(device, dtype=getattr(flame, low)):
            return fn(flame, *xs)

    xs = [flame.tensor(a).to(getattr(flame, d)) for a, d in zip(arrays, dts)]
    try:
        return _name((body if mode == "eager" else flame.compile(body))(*xs).dtype)
    except RuntimeError:
        return "error"


def _arrays(dts: tuple, shapes=None) -> list:
    r = np.random.default_rng(1)
    return [r.uniform(0.5, 2.0, s) for s in (shapes or [V] * len(dts))]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("low", [BF, F16])
@pytest.mark.parametrize("name,dts", ROWS, ids=[f"{n}-{'-'.join(d)}" for n, d in ROWS])
def test_promote_list_ops_take_torchs_promote_type_in_argument_order(name, dts, low, mode):
    fn = PROMOTE[name]
    want = _fake_cuda(fn, dts, low)
    assert _flame(fn, _arrays(dts), dts, "cuda", low, mode) == want, f"{name}{dts} under CUDA autocast {low}"


M = (4, 6)
NONE = {  # on none of torch's lists: name -> (fn, its ATen op, the second input's shape)
    "add": (lambda lib, a, b: a + b, "aten::add.Tensor", M),
    "mul_0d": (lambda lib, a, b: a * b, "aten::mul.Tensor", ()),
    "where": (lambda lib, a, b: lib.where(a > 1, a, b), "aten::where.self", M),
    "where_0d": (lambda lib, a, b: lib.where(a > 1, a, b), "aten::where.self", ()),
    "maximum": (lambda lib, a, b: lib.maximum(a, b), "aten::maximum", M),
    "index_add": (lambda lib, a, b: a.index_add(0, lib.tensor([0, 2]), b[:2]), "aten::index_add", M),
    "scatter": (lambda lib, a, b: a.scatter(0, lib.tensor([[0] * 6, [2] * 6]), b[:2]), "aten::scatter.src", M),
}
PAIRS = [(BF, F32), (F32, BF), (BF, F16), (F16, F64)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dts", PAIRS, ids="-".join)
@pytest.mark.parametrize("name", list(NONE))
def test_ops_on_no_list_run_on_their_inputs_as_outside_a_region(name, dts, mode):
    fn, aten, shape = NONE[name]
    assert not torch._C._dispatch_has_kernel_for_dispatch_key(aten, "AutocastCUDA")
    arrays = _arrays(dts, [M, shape])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            want = str(fn(torch, *[torch.tensor(a).to(getattr(torch, d)) for a, d in zip(arrays, dts)]).dtype)
            want = want.split(".")[-1]
        except RuntimeError:
            want = "error"
    if name in ("add", "mul_0d", "where", "where_0d", "maximum"):  # the fake CUDA dispatch says the same
        assert _fake_cuda(fn, dts, BF, [M, shape]) == want
    assert _flame(fn, arrays, dts, "cuda", BF, mode) == want, f"{name}{dts} under CUDA autocast"


LISTS = {  # torch's CPU promote list takes a list of tensors: cat and stack, and the ops torch composes of them
    "cat": lambda lib, *xs: lib.cat(list(xs)),
    "cat_tuple": lambda lib, *xs: lib.cat(xs, dim=-1),
    "stack": lambda lib, *xs: lib.stack(list(xs)),
    "hstack": lambda lib, *xs: lib.hstack(list(xs)),
    "vstack": lambda lib, *xs: lib.vstack(list(xs)),
    "dstack": lambda lib, *xs: lib.dstack(list(xs)),
    "column_stack": lambda lib, *xs: lib.column_stack(list(xs)),
}
LIST_ROWS = [(name, dts) for name in LISTS for dts in ORDERS + [(F64, BF), (BF, F32, F64)]]


def _cpu_autocast(fn, arrays: list, dts: tuple, low: str) -> str:
    """fn's result dtype under torch's CPU autocast of `low` on real CPU tensors, or "error"."""
    with torch.autocast("cpu", dtype=getattr(torch, low)):
        try:
            return str(fn(torch, *[torch.tensor(a).to(getattr(torch, d)) for a, d in zip(arrays, dts)]).dtype)[6:]
        except RuntimeError:
            return "error"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("low", [BF, F16])
@pytest.mark.parametrize("name,dts", LIST_ROWS, ids=[f"{n}-{'-'.join(d)}" for n, d in LIST_ROWS])
def test_cat_and_stack_take_torchs_cpu_promote_type_over_the_list(name, dts, low, mode):
    """cat([f16, f32]) in a bf16 CPU region is torch's error (the other low dtype before a float32), as is
    cat of f16 tensors alone there; on CUDA torch's lists hold neither: type promotion, as outside a region."""
    fn, arrays = LISTS[name], _arrays(dts)
    assert _flame(fn, arrays, dts, "cpu", low, mode) == _cpu_autocast(fn, arrays, dts, low), f"{name}{dts}, cpu {low}"
    for aten in ("aten::cat", "aten::stack"):
        assert not torch._C._dispatch_has_kernel_for_dispatch_key(aten, "AutocastCUDA")
    assert _flame(fn, arrays, dts, "cuda", low, mode) == _fake_cuda(fn, dts, low), f"{name}{dts}, cuda {low}"
