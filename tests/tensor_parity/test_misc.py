"""Miscellaneous tensor ops against torch: clamp (min > max, integer tensors with float bounds, NaN),
round (decimals), trunc/frac/sign of negatives, -0.0 and NaN, remainder/floor_divide signs, bitwise
ops, isclose/allclose (torch's: infinite differences, integers in floats), nan_to_num, where with scalar
branches, flip/roll/rot90, repeat/expand/tile/repeat_interleave, tril/triu/diag/diagonal/diag_embed with
offsets, einsum forms, chunk/split, cat/stack of mixed dtypes and with empty tensors (value, dtype, shape,
errors), softmax's floating-only inputs, cov of integer and bool tensors, eagerly and inside
@flame.compile (masked_select, nonzero, allclose and a tensor of repeats: eager only)."""

import numpy as np
import pytest

from tests.tensor_parity.common import check

F = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.0, 0.0, np.nan, np.inf, -np.inf, 1.25], np.float32)
I = np.array([-7, -3, 0, 3, 7, 8])  # noqa: E741
D = np.array([2, -2, 3, -3, 2, -5])
M = np.arange(12, dtype=np.float32).reshape(3, 4)
cases = {
    "clamp min>max": (lambda L, x: x.clamp(2, 1), F),
    "clamp int float bounds": (lambda L, x: x.clamp(-2.5, 3.5), I),
    "clamp int int bounds": (lambda L, x: x.clamp(-2, 3), I),
    "clamp tensor bounds": (lambda L, x, y: x.clamp(min=y), I, D),
    "clamp nan": (lambda L, x: x.clamp(0, 1), F),
    "clamp only max": (lambda L, x: x.clamp(max=0.1), F),
    "round": (lambda L, x: x.round(), F),
    "round decimals": (lambda L, x: x.round(decimals=1), F * 1.37),
    "round decimals neg": (lambda L, x: L.round(x * 100, decimals=-1), F),
    "round int decimals": (lambda L, x: x.round(decimals=1), I),
    "trunc frac": (lambda L, x: (x.trunc(), x.frac(), L.fix(x)), F),
    "sign": (lambda L, x: (x.sign(), L.sgn(x), L.signbit(x)), F),
    "sign int": (lambda L, x: x.sign(), I),
    "remainder": (lambda L, x, y: (L.remainder(x, y), x % y), I, D),
    "remainder float": (lambda L, x: (x % 2, x % -2), F),
    "floor_divide": (lambda L, x, y: (L.floor_divide(x, y), x // y), I, D),
    "floor_divide float": (lambda L, x: x // -2, F),
    "isclose": (lambda L, x: (L.isclose(x, x + 1e-7), L.isclose(x, x, equal_nan=True), L.isclose(x, x)), F),
    "isclose int": (lambda L, x: L.isclose(x, x + 1), I),
    "isclose an infinite difference is not close": (
        lambda L, a, b: (L.isclose(a, b), L.isclose(a, b, rtol=1e10, atol=1e10), L.isclose(a, b, equal_nan=True)),
        np.array([2.5, np.inf, -np.inf, np.inf, 1e308, np.nan]),
        np.array([np.inf, np.inf, np.inf, 1.0, -1e308, np.inf]),
    ),
    "isclose integers in floats": (
        lambda L, a, b: (L.isclose(a, b), L.isclose(a.int(), b.int(), rtol=1.0, atol=0.0), L.isclose(a, a + 1, 0, 0.5)),
        np.array([-(2**31), 16777217, 7, 200, 2**31 - 1]),
        np.array([2**31 - 1, 16777216, 200, 7, -(2**31)]),
    ),
    "isclose u8 and bool": (
        lambda L, a: (L.isclose(a, a.flip(0), rtol=1.0, atol=0.0), L.isclose(a > 5, a > 100, rtol=0.5, atol=0.1)),
        np.array([0, 7, 200, 255, 3], np.uint8),
    ),
    "fill_ with a 1-d tensor raises": (lambda L, x: x[:4].fill_(L.tensor([5.0, 6.0, 7.0, 8.0])), F),
    "fill_ with a 0-d tensor": (lambda L, x: x.fill_(L.tensor(5)), F),
    "isclose of two dtypes raises": (lambda L, x: L.isclose(x, x.double()), F),
    "isclose negative rtol raises": (lambda L, x: L.isclose(x, x, rtol=-1.0), F),
    "allclose": (lambda L, x: (L.allclose(x, x), L.allclose(x, x, equal_nan=True)), F),
    "nan_to_num": (lambda L, x: (L.nan_to_num(x), x.nan_to_num(nan=1.0, posinf=2.0), L.nan_to_num(x, neginf=-3.0)), F),
    "nan_to_num f16": (lambda L, x: L.nan_to_num(x.half()), F),
    "nan_to_num int": (lambda L, x: L.nan_to_num(x), I),
    "where scalars": (lambda L, x: (L.where(x > 0, 1.0, 0.0), L.where(x > 0, 1, 0), L.where(x > 0, x, 0)), I),
    "masked_select": (lambda L, x: L.masked_select(x, x > 1), M),
    "nonzero tuple": (lambda L, x: L.nonzero(x > 4, as_tuple=True), M),
    "roll": (lambda L, x: (x.roll(1), x.roll(-1, 1), x.roll((1, 2), (0, 1)), x.roll(5, 0)), M),
    "rot90": (lambda L, x: (L.rot90(x), L.rot90(x, 2), L.rot90(x, -1, (0, 1)), x.rot90(3, [1, 0])), M),
    "repeat": (lambda L, x: (x.repeat(2, 1), x.repeat(1, 2, 1)), M),
    "repeat_interleave": (lambda L, x: (x.repeat_interleave(2), x.repeat_interleave(2, dim=0)), M),
    "repeat_interleave tensor": (lambda L, x: x.repeat_interleave(L.tensor([1, 0, 2]), dim=0), M),
    "repeat_interleave of counts tensor": (
        lambda L, x: (L.repeat_interleave(L.tensor([1, 2, 0, 3])), L.repeat_interleave(L.tensor([2], dtype=L.int32))),
        M,
    ),
    "repeat_interleave of counts output_size": (lambda L, x: L.repeat_interleave(L.tensor([2, 1]), output_size=3), M),
    "repeat_interleave of counts 0-d": (lambda L, x: L.repeat_interleave(L.tensor(3)), M),
    "repeat_interleave of counts float": (lambda L, x: L.repeat_interleave(L.tensor([1.0, 2.0])), M),
    "repeat_interleave negative raises": (lambda L, x: x.repeat_interleave(L.tensor([1, -1, 2]), dim=0), M),
    "repeat_interleave int": (lambda L, x: L.repeat_interleave(L.tensor([1, 2]), 3), M),
    "expand": (lambda L, x: (x[:1].expand(3, -1), x[None].expand(2, 3, 4)), M),
    "tile": (lambda L, x: (x.tile(2), L.tile(x, (2, 1, 1))), M),
    "tril triu": (lambda L, x: (x.tril(), x.tril(1), x.triu(-1), x.triu(5), L.tril(x, -5)), M),
    "tril 3d": (lambda L, x: x.reshape(1, 3, 4).triu(1), M),
    "diag": (lambda L, x: (L.diag(x), L.diag(x, 1), L.diag(x, -2), L.diag(x[0]), L.diag(x[0], -1)), M),
    "diag of NaN, inf and -0": (lambda L, x: (L.diag(x[6:10]), L.diagflat(x[6:10], 1), x[8:].diag(-1)), F),
    "trunc of bool": (lambda L, x: ((x > 0).trunc(), L.fix(x > 0)), I),
    "unary plus": (lambda L, x: (+x, L.positive(x), x.positive()), I),
    "unary plus of bool": (lambda L, x: +(x > 0), I),
    "positive of bool": (lambda L, x: L.positive(x > 0), I),
    "diff of negative order": (lambda L, x: L.diff(x, n=-1), I),
    "diag of ints and bools": (lambda L, x: (L.diag(x), L.diag(x > 0, 1)), I),
    "diagonal": (lambda L, x: (x.diagonal(), x.diagonal(1), x.diagonal(-1), x.diagonal(5), L.diagonal(x, 0, 1, 0)), M),
    "diagonal 3d": (lambda L, x: (x.reshape(3, 2, 2).diagonal(0, 1, 2), x.reshape(3, 2, 2).diagonal(1, 0, 2)), M),
    "diagonal of one dim twice": (lambda L, x: x.diagonal(0, 1, -1), M),
    "diagonal of a float offset": (lambda L, x: x.diagonal(1.5), M),
    "diagonal of a bool offset": (lambda L, x: L.diagonal(x, True), M),
    "diag_embed": (lambda L, x: (L.diag_embed(x), L.diag_embed(x, 1), L.diag_embed(x, -1, 0, 2)), M),
    "einsum": (
        lambda L, x: (
            L.einsum("ij->", x),
            L.einsum("ij->ji", x),
            L.einsum("ii->i", x[:, :3]),
            L.einsum("ij,kj->ik", x, x),
            L.einsum("i,j", x[0], x[1]),
            L.einsum("...j,j->...", x, x[0]),
            L.einsum("bij,bjk->bik", x[None], x.T[None]),
        ),
        M,
    ),
    "einsum list form": (lambda L, x: L.einsum("ij,jk", [x, x.T]), M),
    "einsum trace": (lambda L, x: L.einsum("ii", x[:, :3]), M),
    "chunk": (lambda L, x: (L.chunk(x, 2, 1), x.chunk(3, 1), x.chunk(5), x.chunk(4, 1)), M),
    "chunk 6 of 5": (lambda L, x: L.arange(5).chunk(4), M),
    "split": (lambda L, x: (x.split(2), x.split([1, 3], 1), L.split(x, 3, 1)), M),
    "split bad sizes": (lambda L, x: x.split([1, 1], 1), M),
    "stack mixed": (lambda L, x, y: L.stack([x.float(), y]), I, D),
    "cat mixed": (lambda L, x, y: (L.cat([x, y.float()]), L.cat([x.int(), y]), L.cat([x > 0, y])), I, D),
    "cat empty": (lambda L, x: (L.cat([x, x[:0]]), L.cat([x, L.tensor([])])), I),
    "cat 1d empty with 2d": (lambda L, x: L.cat([x, L.tensor([])]), M),
    "stack dim -1": (lambda L, x: L.stack([x, x], -1), M),
    "bitwise ops": (lambda L, x, y: (x & y, x | y, x ^ y, ~x, x << 2, x >> 1), I, D),
    "abs neg int": (lambda L, x: (x.abs(), -x), I),
    "cumsum int32": (lambda L, x: (x.int().cumsum(0), x.int().cumprod(0)), I),
    "cumsum bool": (lambda L, x: (x > 0).cumsum(0), I),
    "lerp tensors": (lambda L, x: L.lerp(x, x * 2, x / 10), M),
    "lerp end of another dtype": (lambda L, x: L.lerp(x, x.double(), 0.5), M),
    "lerp weight of another dtype": (lambda L, x: L.lerp(x, x, x[:1].double()), M),
    "lerp 0-d weight of another dtype": (
        lambda L, x: (x.half().lerp(x.half(), L.tensor(0.25)), L.lerp(x, x, L.tensor(0.5, dtype=L.float64))),
        M,
    ),
    "square int": (lambda L, x: (x.square(), L.square(x > 0)), I),
    "reciprocal int": (lambda L, x: x.reciprocal(), I),
    "float_power": (lambda L, x: L.float_power(x, 2), I),
    "clip": (lambda L, x: x.clip(-1, 1), F),
    "movedim": (lambda L, x: (x.reshape(3, 2, 2).movedim(0, -1), L.movedim(x.reshape(3, 2, 2), (0, 1), (2, 0))), M),
    "unflatten": (lambda L, x: x.unflatten(1, (2, -1)), M),
    "squeeze multi": (lambda L, x: (x.reshape(1, 3, 1, 4).squeeze((0, 2)), x.reshape(1, 3, 1, 4).squeeze(1)), M),
    "narrow neg": (lambda L, x: x.narrow(-1, -2, 2), M),
    "view -1": (lambda L, x: (x.view(-1, 6), x.reshape(2, -1)), M),
    "t of 1d": (lambda L, x: x[0].t(), M),
    "T of 3d": (lambda L, x: x.reshape(3, 2, 2).permute(2, 1, 0), M),
    "unbind": (lambda L, x: L.unbind(x, 1), M),
    "meshgrid": (
        lambda L, x: (L.meshgrid(x[0], x[1, :2], indexing="ij"), L.meshgrid(x[0], x[1, :2], indexing="xy")),
        M,
    ),
    "cartesian_prod": (lambda L, x: L.cartesian_prod(x[0, :2], x[1, :3]), M),
    "diff": (lambda L, x: (L.diff(x), L.diff(x, 2, 0), L.diff(x, prepend=x[:, :1])), M),
    "outer int": (lambda L, x: L.outer(x, x), I),
    "count_nonzero dims": (lambda L, x: L.count_nonzero(x, (0, 1)), M),
    "masked_fill mask of more dims": (
        lambda L, x: x.masked_fill(L.tensor([[[True, False, True, False]], [[False] * 4]]), -1),
        M,
    ),
    "masked_fill_ mask of more dims": (lambda L, x: x.clone().masked_fill_(L.ones(2, 3, 4, dtype=L.bool), 2.5), M),
    "masked_fill mask not broadcasting": (lambda L, x: x.masked_fill(L.ones(2, 3, dtype=L.bool), 2.5), M),
    "softmax int": (lambda L, x: x.softmax(0), I),
    "log_softmax bool": (lambda L, x: L.log_softmax(x > 0, 0), I),
    "softmax method dtype": (lambda L, x: (x.softmax(0, dtype=L.float64), x.log_softmax(0, dtype=L.float32)), I),
    "cov int": (lambda L, x: (L.cov(x.reshape(2, 3)), L.corrcoef(x.reshape(3, 2))), I),
    "cov bool": (lambda L, x: L.cov(x > 0), I),
    "cov int weights": (
        lambda L, x: x.reshape(2, 3).cov(fweights=L.tensor([1, 2, 1]), aweights=L.tensor([0.5, 1, 2])),
        I,
    ),
}
cases["where(cond) alone"] = (lambda L, x: L.where(x > 0), I)
EAGER_ONLY = ("masked_select", "nonzero", "where(cond)", "tensor", "allclose")
PARAMS = [(n, c) for n in cases for c in (False, True) if not (c and any(k in n for k in EAGER_ONLY))]


@pytest.mark.parametrize("name,compiled", PARAMS, ids=[f"{n}-{'compiled' if c else 'eager'}" for n, c in PARAMS])
def test_misc(name, compiled):
    f, *args = cases[name]
    check(f, *args, compiled=compiled)


def _lerp_grads(lib, a, b, w, compiled=False):
    """The gradients of lerp's three operands where the incoming gradient is +-inf (a variance with
    correction equal to the count above it), and the result's values."""
    ts = [lib.tensor(v, requires_grad=True) for v in (a, b, w)]

    def step(x, e, wt):
        out = x.lerp(e, wt)
        out.var(-1, correction=2).sum().backward()
        return out

    out = lib.compile(step)(*ts) if compiled else step(*ts)
    return [out.detach().numpy()] + [t.grad.numpy() for t in ts]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_lerp_gradients_are_torchs_products_at_infinite_gradients(compiled):
    """torch's lerp gradients are grad * (1 - weight), grad * weight and grad * (end - self): an infinite
    grad gives +-inf there, not the NaN of inf - inf that a sum of terms would give."""
    import torch

    import flame

    r = np.random.default_rng(0)
    a, b, w = r.standard_normal((3, 2)), r.standard_normal((3, 2)), r.uniform(-1.0, 2.0, (3, 2))
    want = _lerp_grads(torch, a, b, w)
    got = _lerp_grads(flame, a, b, w, compiled)
    assert np.isinf(want[1]).all()
    for g, t in zip(got, want):
        np.testing.assert_allclose(g, t, rtol=1e-12, atol=1e-15)
