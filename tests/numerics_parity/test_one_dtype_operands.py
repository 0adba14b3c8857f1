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


def mixed(L, shapes, dtypes):
    """Tensors of lib L of the given shapes and dtypes (drawn once, the same numbers for both libraries)."""
    r = np.random.default_rng(1)
    arrays = [r.standard_normal(s) for s in shapes]
    return [(torch.tensor(a) if L is torch else flame.tensor(a)).to(getattr(L, d)) for a, d in zip(arrays, dtypes)]


def Fn(L):  # noqa: N802
    return L.nn.functional


GEMMS = {  # name -> (fn of the tensors, their shapes); the tensor at `other` takes the second dtype
    "bilinear input2": (lambda L, a, b, w: Fn(L).bilinear(a, b, w), [(2, 3), (2, 4), (5, 3, 4)], 1),
    "bilinear weight": (lambda L, a, b, w: Fn(L).bilinear(a, b, w), [(2, 3), (2, 4), (5, 3, 4)], 2),
    "bilinear bias": (lambda L, a, b, w, c: Fn(L).bilinear(a, b, w, c), [(2, 3), (2, 4), (5, 3, 4), (5,)], 3),
    "linear bias": (lambda L, x, w, c: Fn(L).linear(x, w, c), [(2, 3), (5, 3), (5,)], 2),
    "linear bias 3-d": (lambda L, x, w, c: Fn(L).linear(x, w, c), [(2, 2, 3), (5, 3), (5,)], 2),
    "addmm input": (lambda L, c, a, b: L.addmm(c, a, b), [(2, 4), (2, 3), (3, 4)], 0),
    "addmm input beta 0": (lambda L, c, a, b: c.addmm(a, b, beta=0), [(2, 4), (2, 3), (3, 4)], 0),
    "baddbmm input": (lambda L, c, a, b: L.baddbmm(c, a, b), [(2, 2, 4), (2, 2, 3), (2, 3, 4)], 0),
    "addbmm input": (lambda L, c, a, b: L.addbmm(c, a, b), [(2, 4), (2, 2, 3), (2, 3, 4)], 0),
    "addmv input": (lambda L, c, a, b: L.addmv(c, a, b), [(2,), (2, 3), (3,)], 0),
    "addmv vec": (lambda L, c, a, b: c.addmv(a, b), [(2,), (2, 3), (3,)], 2),
    "conv1d bias": (lambda L, x, w, c: Fn(L).conv1d(x, w, c), [(1, 2, 5), (3, 2, 2), (3,)], 2),
    "conv2d bias": (lambda L, x, w, c: Fn(L).conv2d(x, w, c), [(1, 2, 5, 5), (3, 2, 2, 2), (3,)], 2),
    "conv3d bias": (lambda L, x, w, c: Fn(L).conv3d(x, w, c), [(1, 2, 3, 3, 3), (3, 2, 2, 2, 2), (3,)], 2),
    # shapes large enough for torch's oneDNN kernel (its CPU kernel for the smallest f32 ones converts the bias)
    "conv_transpose2d bias": (lambda L, x, w, c: Fn(L).conv_transpose2d(x, w, c, stride=2),
                              [(2, 4, 9, 9), (4, 2, 3, 3), (2,)], 2),
    "conv_transpose3d bias": (lambda L, x, w, c: Fn(L).conv_transpose3d(x, w, c),
                              [(1, 2, 3, 3, 3), (2, 3, 2, 2, 2), (3,)], 2),
    "conv_transpose1d f64 bias": (lambda L, x, w, c: Fn(L).conv_transpose1d(x.double(), w.double(), c),
                                  [(1, 2, 5), (2, 3, 2), (3,)], 2),
}
GEMM_PAIRS = [(F32, F64), (F64, F32), (F32, F16), (F16, F32), (BF16, F16), (F32, BF16), (BF16, BF16)]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("low", REGIONS, ids=lambda r: f"cpu-autocast-{r}" if r else "no-region")
@pytest.mark.parametrize("a,b", GEMM_PAIRS, ids=[f"{a}-{b}" for a, b in GEMM_PAIRS])
@pytest.mark.parametrize("name", GEMMS)
def test_gemms_bilinear_and_convolution_biases_take_one_dtype(name, a, b, low, compiled):
    """Outside a region: torch's error for an operand of another dtype. Inside a CPU region: linear, the GEMMs
    (not addmv) and the convolutions run in the region's dtype (an f64 operand, never cast, still differs);
    bilinear and addmv are on none of torch's CPU lists."""
    fn, shapes, other = GEMMS[name]
    dtypes = [b if i == other else a for i in range(len(shapes))]

    def run(L):
        return region(L, low, lambda: fn(L, *mixed(L, shapes, dtypes)))

    check(lambda L: run(L), compiled=compiled, rtol=3e-2, atol=3e-2)


@pytest.mark.parametrize("low", [BF16, F16])
@pytest.mark.parametrize("name", ["addbmm", "vecdot"])
def test_addbmm_and_vecdot_run_in_the_region_dtype(name, low):
    """Both are on torch's CPU (and CUDA) lower-precision lists: an f32 operand with a low one gives the
    region's dtype."""
    fns = {"addbmm": (lambda L, c, a, b: L.addbmm(c, a, b), [(2, 4), (2, 2, 3), (2, 3, 4)]),
           "vecdot": (lambda L, a, b: L.linalg.vecdot(a, b), [(2, 3), (2, 3)])}
    fn, shapes = fns[name]
    dtypes = [F32, F16, F16][:len(shapes)]
    check(lambda L: region(L, low, lambda: fn(L, *mixed(L, shapes, dtypes))), compiled=False, rtol=3e-2, atol=3e-2)
