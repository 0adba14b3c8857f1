"""Values and gradients at ties, NaNs, zeros and integer wrap-around, against torch in f64 (and the integer
dtypes), eagerly and inside @flame.compile.

fmax / fmin send the whole gradient to the operand they pick, to input at a tie and to the number where the
other is NaN (maximum / minimum split a tie evenly). max(), min() and median() of all elements share the
gradient among the elements equal to the result, among the NaNs where it is NaN (amax's is NaN everywhere
then); median(dim)'s goes to the first NaN of a line holding one, the index it returns. relu and threshold
pass the gradient at a NaN; threshold, softshrink and hardshrink keep a NaN a NaN (softshrink and hardshrink
with no gradient there, as torch's vectorized kernels: its scalar loop, for a few elements, passes one, as it
does for hardtanh, relu6 and the elus). A vector norm of negative ord gives zero gradient to its zero
elements (and, being 0 then, to every element). A uint8 divided by a negative Python int divides by its
wrapped value (253 for -3) with rounding_mode="trunc" as with "floor". round(decimals=) past f64's range
gives NaN, as torch's. trapezoid follows torch's formulas (with dx: (sum(y) - (y[0] + y[-1]) / 2) * dx, an
integer sum taken in int64, so int8 / int32 samples whose neighbours' sums wrap integrate as torch's). A zero
remainder keeps fmod's sign, the dividend's (4.0 % -2.0 is +0.0, where Python's % gives -0.0), and
relu(-0.0) is -0.0, as torch's (seen through 1 / x). histc bins an element e at
int((e - min) * bins / (max - min)) in the input's dtype, as torch's, so elements on or near a bin edge land
where torch's do. cumsum, cumprod and logcumsumexp of f32 accumulate in f64, as torch's CPU kernels."""

import numpy as np
import pytest

from tests.tensor_parity.common import check, check_gradients

NANS = np.array([[1.0, np.nan, 3.0, np.nan], [2.0, 2.0, 1.0, 1.0]])
TIES = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 1.0, 0.0]])
LEFT = np.array([1.0, 2.0, np.nan, 1.0, -0.0, 0.0, np.nan, np.inf, -1.0])
RIGHT = np.array([1.0, 1.0, 1.0, np.nan, 0.0, -0.0, np.nan, 3.0, 2.0])
W = np.linspace(0.5, 2.0, LEFT.size)
ZEROS = np.array([0.0, 3.0, -4.0, 0.0])


ACT = np.array([np.nan, 1.0, -1.0, 0.5, -0.5, 0.0, 0.2, 6.0, 7.0])
ACTIVATIONS = [("relu",), ("threshold", 0.5, 0.1), ("softshrink",), ("hardshrink",), ("relu6",), ("hardtanh",)]


def _act(name, *args):
    return lambda L, x: (getattr(L.nn.functional, name)(x, *args) * L.tensor(np.linspace(1.0, 2.0, ACT.size))).sum()


def _pair(name, side):
    if side == 0:
        return lambda L, x: (getattr(L, name)(x, L.tensor(RIGHT)) * L.tensor(W)).sum()
    return lambda L, y: (getattr(L, name)(L.tensor(LEFT), y) * L.tensor(W)).sum()


GRADIENTS = {
    "fmax input": (_pair("fmax", 0), LEFT),
    "fmax other": (_pair("fmax", 1), RIGHT),
    "fmin input": (_pair("fmin", 0), LEFT),
    "fmin other": (_pair("fmin", 1), RIGHT),
    "max() at NaNs": (lambda L, x: x.max() * 2, NANS),
    "min() at NaNs": (lambda L, x: L.min(x) * 2, NANS),
    "max() at ties": (lambda L, x: x.max() * 2, TIES),
    "min() at ties": (lambda L, x: x.min() * 2, TIES),
    "median() at NaNs": (lambda L, x: L.median(x) * 2, NANS),
    "median() at ties": (lambda L, x: L.median(x) * 2, TIES),
    "median(dim) at NaNs": (lambda L, x: (L.median(x, 1).values * L.tensor([1.0, 2.0])).sum(), NANS),
    "median(dim, keepdim) at NaNs": (lambda L, x: (L.median(x, 1, True)[0] * L.tensor([[1.0], [2.0]])).sum(), NANS),
    **{f"{name} at NaN": (_act(name, *args), ACT) for name, *args in ACTIVATIONS},
    "vector_norm ord -1 at zeros": (lambda L, x: L.linalg.vector_norm(x, -1), ZEROS),
    "vector_norm ord -2 at zeros": (lambda L, x: L.linalg.vector_norm(x, -2.0), ZEROS),
    "vector_norm ord -1 all zero": (lambda L, x: L.linalg.vector_norm(x, -1), np.zeros(3)),
    "vector_norm ord -1.5": (lambda L, x: L.linalg.vector_norm(x, -1.5), ZEROS + 1.0),
    "trapezoid dx": (lambda L, y: L.trapezoid(y, dx=0.3).sum(), np.linspace(-1.0, 2.0, 12).reshape(3, 4)),
    "trapezoid x": (lambda L, y: L.trapezoid(y, L.tensor([0.0, 1.5, 3.0, 4.0])).sum(), np.ones((3, 4))),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", GRADIENTS)
def test_gradient(name, compiled):
    check_gradients(name, *GRADIENTS[name], compiled)


U8 = np.array([0, 1, 3, 7, 100, 200, 250, 255], dtype=np.uint8)
SIGNED_ZEROS = (np.array([-4.0, 4.0, -0.0, 0.0, -4.0, 5.5, -5.5, 1.0, 2.0]),
                np.array([-2.0, -2.0, -2.0, 2.0, 2.0, np.inf, np.inf, 0.0, -np.inf]))
HISTC = np.concatenate([np.round(np.linspace(0.1, 4.0, 40), 1), np.linspace(0.3, 3.8, 18), [np.nan, np.inf]])
ROUNDED = np.array([1.5, 2.675, -0.0, 1e300, np.inf, np.nan])

VALUES = {
    "fmax": (lambda L, a, b: L.fmax(a, b), LEFT, RIGHT),
    "fmin": (lambda L, a, b: L.fmin(a, b), LEFT, RIGHT),
    "u8 div trunc by a negative int": (lambda L, a: L.div(a, -3, rounding_mode="trunc"), U8),
    "u8 div trunc by a u8": (lambda L, a: L.div(a, a[::2].repeat(2) | 1, rounding_mode="trunc"), U8),
    "trapezoid int8": (lambda L, a: L.trapezoid(a), np.array([100, 100, -100, 27], dtype=np.int8)),
    "trapezoid int32 dx": (lambda L, a: L.trapezoid(a, dx=0.5), np.array([2**30, 2**30, -5, 7], dtype=np.int32)),
    "trapezoid int32 x": (lambda L, a, x: L.trapezoid(a, x), np.array([2**30, 2**30, -5, 7], dtype=np.int32),
                          np.array([0, 1, 3, 4])),
    "trapezoid u8 dim 0": (lambda L, a: L.trapezoid(a, dim=0), U8.reshape(4, 2)),
    "trapezoid f64": (lambda L, a: L.trapezoid(a, dx=0.3), np.linspace(-1.0, 2.0, 12).reshape(3, 4) ** 3),
    "remainder's zeros": (lambda L, a, b: 1 / L.remainder(a, b), SIGNED_ZEROS[0], SIGNED_ZEROS[1]),
    "% a number's zeros": (lambda L, a: 1 / (a % -2.0), SIGNED_ZEROS[0]),
    "relu's zeros": (lambda L, a: 1 / L.relu(a * 0), SIGNED_ZEROS[0]),
    **{f"{name} of NaN": (lambda L, a, name=name, args=args: getattr(L.nn.functional, name)(a, *args), ACT)
       for name, *args in ACTIVATIONS},
    "round decimals=400": (lambda L, a: L.round(a, decimals=400), ROUNDED),
    "round decimals=-400": (lambda L, a: L.round(a, decimals=-400), ROUNDED),
    "round decimals=308": (lambda L, a: L.round(a, decimals=308), ROUNDED),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", VALUES)
def test_value(name, compiled):
    f, *args = VALUES[name]
    check(f, *args, compiled=compiled)


HISTCS = {
    "at the edges": (lambda L, a: L.histc(a, 17, 0.3, 3.8), HISTC),
    "at the edges f32": (lambda L, a: L.histc(a, 6, 0.6, 6.2), HISTC.astype(np.float32) * 2),
    "of the data's range": (lambda L, a: L.histc(a, 7), HISTC[:-2]),
}
_RNG = np.random.default_rng(1)
BINS, WEIGHTS = _RNG.integers(0, 4, 600), _RNG.standard_normal(600) * 10
BINCOUNTS = {
    "f32 weights in order": (lambda L, i, w: L.bincount(i, w), BINS, WEIGHTS.astype(np.float32)),
    "f16 weights in f64": (lambda L, i, w: L.bincount(i, w, minlength=6), BINS, WEIGHTS.astype(np.float16)),
    "empty with weights": (lambda L, i, w: L.bincount(i, w, minlength=3), BINS[:0], WEIGHTS[:0]),
}


@pytest.mark.parametrize("name", [f"histc {k}" for k in HISTCS] + [f"bincount {k}" for k in BINCOUNTS])
def test_counts_as_torch(name):
    """histc and bincount, eagerly (inside @flame.compile they raise: their counts are taken on the host).
    bincount sums f32 weights in f32 in order, any other weights (f16 and bf16 too) in f64, and counts an
    empty input in int64, as torch."""
    kind, key = name.split(" ", 1)
    f, *args = (HISTCS if kind == "histc" else BINCOUNTS)[key]
    check(f, *args, compiled=False, rtol=0, atol=0)


LONG = np.random.default_rng(0).standard_normal((2, 20000)).astype(np.float32) + np.float32(0.1)
SCANS = {
    "cumsum": (lambda L, a: L.cumsum(a, 1), LONG),
    "cumprod": (lambda L, a: L.cumprod(a, 1), 1 + LONG * np.float32(1e-3)),
    "logcumsumexp": (lambda L, a: L.logcumsumexp(a, 1), LONG),
    "cumsum f16": (lambda L, a: L.cumsum(a, 1), LONG[:, :3000].astype(np.float16)),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", SCANS)
def test_long_f32_scans_round_as_torch(name, compiled):
    """An f32 scan accumulates in f64 (f16 in f32), as torch's CPU kernels: every element of a long line
    equals torch's bit for bit (f32 accumulation drifts by ~1e-2 over 20000 elements)."""
    f, *args = SCANS[name]
    check(f, *args, compiled=compiled, rtol=0, atol=0)
