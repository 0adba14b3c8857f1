"""Operands of several floating dtypes where torch takes one, against torch, eagerly and inside
@flame.compile. index_copy (the Tensor method, torch.index_copy and index_copy_) refuses a source of
another dtype than self's. Inside a CPU autocast region index_copy (out of place) is on torch's CPU promote
list: its floating inputs are cast to the promote type (float32 where one is, else the region's dtype; the
other low dtype met in argument order before a float32 is torch's error, f64 never cast), and then they must
agree; index_copy_ (in place) is on no list. index_add, index_fill, scatter, scatter_add, scatter_reduce,
masked_scatter, masked_fill, index_put, put and setitem already matched torch and are checked here too."""

import numpy as np
import pytest
import torch

import flame
from tests.tensor_parity.common import check

F16, BF16, F32, F64 = "float16", "bfloat16", "float32", "float64"
DTYPES = [F16, BF16, F32, F64]
R = np.random.default_rng(0)
SELF, SOURCE = R.standard_normal((4, 3)), R.standard_normal((2, 3))


def region(L, low: str | None, fn):
    """fn() inside a CPU autocast region of dtype `low` (None: outside any region)."""
    if low is None:
        return fn()
    with L.autocast("cpu", dtype=getattr(L, low)):
        return fn()


def index_copies(L, x, s, a: str, b: str, low: str | None):
    """x of dtype a with s of dtype b written at rows 0 and 2, by each form of index_copy."""
    x, s, i = x.to(getattr(L, a)), s.to(getattr(L, b)), L.tensor([0, 2])
    return region(L, low, lambda: (x.index_copy(0, i, s), L.index_copy(x, 0, i, s)))


def index_copy_in_place(L, x, s, a: str, b: str, low: str | None):
    x, s = x.to(getattr(L, a)), s.to(getattr(L, b))
    return region(L, low, lambda: x.index_copy_(0, L.tensor([0, 2]), s))


PAIRS = [(a, b) for a in DTYPES for b in DTYPES]
REGIONS = [None, BF16, F16]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("low", REGIONS, ids=lambda r: f"cpu-autocast-{r}" if r else "no-region")
@pytest.mark.parametrize("a,b", PAIRS, ids=[f"{a}-{b}" for a, b in PAIRS])
def test_index_copy_takes_one_dtype_or_torchs_cpu_promote(a, b, low, compiled):
    check(lambda L, x, s: index_copies(L, x, s, a, b, low), SELF, SOURCE, compiled=compiled, rtol=1e-2)
    check(lambda L, x, s: index_copy_in_place(L, x, s, a, b, low), SELF, SOURCE, compiled=compiled, rtol=1e-2)


def test_index_copy_names_both_dtypes_and_the_users_line():
    x, s = flame.zeros(4, 3), flame.ones(2, 3, dtype=flame.float16)
    with pytest.raises(flame.errors.DTypeError, match=r"same dtype(.|\n)*f32(.|\n)*f16(.|\n)*test_one_dtype_operands"):
        x.index_copy(0, flame.tensor([0, 1]), s)
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.zeros(4, 3).index_copy(0, torch.tensor([0, 1]), torch.ones(2, 3, dtype=torch.float16))


def put(t, key, value):
    """t with t[key] = value written in place (torch casts value to t's dtype)."""
    t[key] = value
    return t


def _scalar(L, b):
    return L.tensor(1.5, dtype=getattr(L, b))


SIBLINGS = {  # ops that already matched torch with a second operand of another dtype
    "index_add": lambda L, x, s, b: x.index_add(0, L.tensor([0, 2]), s.to(getattr(L, b))),
    "index_fill 0-d": lambda L, x, s, b: x.index_fill(0, L.tensor([0, 2]), _scalar(L, b)),
    "scatter": lambda L, x, s, b: x.scatter(0, L.tensor([[0, 1, 2]]), s[:1].to(getattr(L, b))),
    "scatter_add": lambda L, x, s, b: x.scatter_add(0, L.tensor([[0, 1, 2]]), s[:1].to(getattr(L, b))),
    "scatter_reduce": lambda L, x, s, b: x.scatter_reduce(0, L.tensor([[0, 1, 2]]), s[:1].to(getattr(L, b)), "sum"),
    "masked_scatter": lambda L, x, s, b: x.masked_scatter(x > 0, x.to(getattr(L, b))),
    "masked_fill 0-d": lambda L, x, s, b: x.masked_fill(x > 0, _scalar(L, b)),
    "index_put": lambda L, x, s, b: x.index_put((L.tensor([0, 2]),), s.to(getattr(L, b))),
    "put_": lambda L, x, s, b: x.clone().put_(L.tensor([0, 2]), s[0, :2].to(getattr(L, b))),
    "setitem": lambda L, x, s, b: put(x.clone(), L.tensor([0, 2]), s.to(getattr(L, b))),
}


@pytest.mark.parametrize("b", [F16, F64])
@pytest.mark.parametrize("name", SIBLINGS)
def test_index_family_with_a_second_dtype(name, b):
    check(lambda L, x, s: SIBLINGS[name](L, x.float(), s, b), SELF, SOURCE, compiled=False, rtol=1e-3)
