"""The everyday PyTorch ops against torch on the CPU: values, and gradients of every float input (a random
cotangent pulled back through both), eagerly and inside @flame.compile (values and .grad after the call)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import flame
import flame.nn.functional as F
from flame.errors import FlameError, ShapeError, TraceError

MODES = ("eager", "compiled")


def _rng(*key) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _list(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _torch_side(fn, arrays, wrt):
    ts = [torch.tensor(a, requires_grad=i in wrt) for i, a in enumerate(arrays)]
    outs = _list(fn(*ts))
    cts = [np.asarray(_rng("ct", i, tuple(o.shape)).standard_normal(tuple(o.shape)), np.float32)
           if o.dtype.is_floating_point else None for i, o in enumerate(outs)]
    terms = [(o * torch.tensor(c)).sum() for o, c in zip(outs, cts) if c is not None]
    if wrt and terms and any(t.requires_grad for t in terms):
        sum(terms).backward()
    grads = [ts[i].grad.numpy() if ts[i].grad is not None else np.zeros(arrays[i].shape, np.float32) for i in wrt]
    return [o.detach().numpy() for o in outs], grads, cts


def _flame_side(fn, arrays, wrt, cts, mode):
    xs = [flame.tensor(a, requires_grad=i in wrt) for i, a in enumerate(arrays)]
    ct = [flame.tensor(c) if c is not None else None for c in cts]

    def body(*xs):
        outs = _list(fn(*xs))
        terms = [(o * c).sum() for o, c in zip(outs, ct) if c is not None]
        if wrt and terms and (mode == "compiled" or any(t.requires_grad for t in terms)):
            sum(terms).backward()
        return tuple(outs)

    outs = body(*xs) if mode == "eager" else flame.compile(body)(*xs)
    grads = [xs[i].grad.numpy() if xs[i].grad is not None else np.zeros(arrays[i].shape, np.float32) for i in wrt]
    return [o.numpy() for o in outs], grads


def check(fn, tfn, *arrays, wrt=None, mode="eager", rtol=1e-5, atol=1e-5):
    """fn (flame) and tfn (torch) on the same arrays agree in values and in the gradients of `wrt`
    (default: every float input)."""
    arrays = [np.asarray(a) for a in arrays]
    wrt = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"] if wrt is None else list(wrt)
    want, want_grads, cts = _torch_side(tfn, arrays, wrt)
    got, got_grads = _flame_side(fn, arrays, wrt, cts, mode)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape, f"shape {g.shape} vs torch {w.shape}"
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
        else:
            np.testing.assert_array_equal(g, w)
    for i, g, w in zip(wrt, got_grads, want_grads):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"gradient of input {i}")


def check_gpu_step(body, param, *inputs, rtol=1e-4, atol=1e-5):
    """body(*inputs), a loss that calls backward() itself, eagerly and then @flame.compile'd for the
    CUDA target (the cuda_target fixture): the same loss and gradient of `param` on the reference
    executor, and every kernel of the compiled plan compiles with NVRTC for sm_90."""
    from flame.codegen.nvrtc import compile_cubin

    want = body(*inputs).item(), param.grad.numpy()
    param.grad = None
    step = flame.compile(body)
    got = step(*inputs).item(), param.grad.numpy()
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    np.testing.assert_allclose(got[1], want[1], rtol=rtol, atol=atol)
    sources = {k.source for k in step._last.plan.kernels()}
    assert sources
    for source in sources:
        assert compile_cubin(source, "sm_90")[:4] == b"\x7fELF"


def check_gpu_loss(loss_of, x):
    """check_gpu_step of the step computing loss_of(x) and its backward (x requires grad)."""
    def body(x):
        loss = loss_of(x)
        loss.backward()
        return loss

    check_gpu_step(body, x, x)


def randn(*shape, key=0):
    return _rng("x", shape, key).standard_normal(shape).astype(np.float32)


# ---- indexing: reads and functional writes ------------------------------------------------------------

def test_mask_read_eager_and_gradient():
    x = randn(4, 5)
    check(lambda t: t[t > 0.3], lambda t: t[t > 0.3], x)
    check(lambda t: t[t.sum(1) > 0], lambda t: t[t.sum(1) > 0], x)  # a mask over the leading dim: rows


def test_mask_read_inside_compile_is_a_trace_error():
    f = flame.compile(lambda t: t[t > 0])
    with pytest.raises(TraceError, match="(?s)boolean mask.*test_everyday_ops.py"):
        f(flame.tensor(randn(3)))


@pytest.mark.parametrize("mode", MODES)
def test_advanced_index_read(mode):
    x = randn(4, 5, 3)
    i0, i1 = np.array([3, 0, -1, 1]), np.array([[0, 4], [2, 2]])
    check(lambda t: t[flame.tensor(i0)], lambda t: t[torch.tensor(i0)], x, mode=mode)
    check(lambda t: t[:, flame.tensor(i1)], lambda t: t[:, torch.tensor(i1)], x, mode=mode)
    check(lambda t: t[flame.tensor(i0), flame.tensor([1, 2, 3, 4])],
          lambda t: t[torch.tensor(i0), torch.tensor([1, 2, 3, 4])], x, mode=mode)
    check(lambda t: t[flame.tensor([0, 2]), :, flame.tensor([1, 0])],
          lambda t: t[torch.tensor([0, 2]), :, torch.tensor([1, 0])], x, mode=mode)
    check(lambda t: t[1, :, [0, 2]], lambda t: t[1, :, [0, 2]], x, mode=mode)
    check(lambda t: t[None, ..., 1], lambda t: t[None, ..., 1], x, mode=mode)


def _write(key, value_index=None):
    """y = x * 1; y[key] = v (or a constant); return y — through autograd in both libraries."""
    def run(lib):
        def fn(x, *v):
            y = x * 1
            k = key(lib, x) if callable(key) else key
            y[k] = v[0] if v else 2.5
            return y
        return fn
    return run(flame), run(torch)


@pytest.mark.parametrize("mode", MODES)
def test_index_writes(mode):
    x = randn(4, 5)
    fn, tfn = _write((slice(1, 3), 2))
    check(fn, tfn, x, mode=mode)
    fn, tfn = _write((slice(None), slice(None, None, 2)))
    check(fn, tfn, x, randn(3), mode=mode)  # broadcast row into every selected column
    fn, tfn = _write(lambda lib, t: lib.tensor([3, 0]))
    check(fn, tfn, x, randn(2, 5), mode=mode)
    fn, tfn = _write(lambda lib, t: (lib.tensor([0, 2, 3]), lib.tensor([4, 1, 0])))
    check(fn, tfn, x, randn(3), mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_mask_writes(mode):
    x = randn(4, 5)
    fn, tfn = _write(lambda lib, t: t > 0)  # a scalar into every True element
    check(fn, tfn, x, mode=mode)
    fn, tfn = _write(lambda lib, t: t > 0)
    check(fn, tfn, x, randn(1), mode=mode)
    fn, tfn = _write(lambda lib, t: t.sum(1) > 0)  # one row for every selected row
    check(fn, tfn, x, randn(5), mode=mode)
    mask = x > 0
    fn, tfn = _write(lambda lib, t: t > 0)  # the k-th True element takes v[k]
    check(fn, tfn, x, randn(int(mask.sum())), mode=mode)


def test_eager_index_write_duplicates_last_wins_and_leaf_error():
    x = flame.zeros(5)
    x[flame.tensor([1, 1, 3])] = flame.tensor([1.0, 2.0, 3.0])
    t = torch.zeros(5)
    t[torch.tensor([1, 1, 3])] = torch.tensor([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(x.numpy(), t.numpy())
    leaf = flame.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(FlameError, match="leaf Variable that requires grad"):
        leaf[0] = 3.0
    with flame.no_grad():
        leaf[0] = 3.0
    assert leaf.tolist() == [3.0, 2.0]


def test_compiled_write_into_an_argument_updates_the_caller():
    @flame.compile
    def step(x, m):
        x[m] = 0.0
        x[0] = -1.0
        return x.sum()

    a = randn(3, 4)
    x = flame.tensor(a)
    s = step(x, flame.tensor(a > 0))
    want = np.where(a > 0, 0, a)
    want[0] = -1
    np.testing.assert_allclose(x.numpy(), want)
    np.testing.assert_allclose(s.item(), want.sum(), rtol=1e-5)


def test_bool_tensor_writes():
    x = flame.tensor([True, False, True])
    x[1] = True
    x[flame.tensor([0])] = False
    assert x.tolist() == [False, True, True]


# ---- masked_fill, clamp ----------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_masked_fill(mode):
    x = randn(3, 4)
    check(lambda t: t.masked_fill(t > 0, -1.5), lambda t: t.masked_fill(t > 0, -1.5), x, mode=mode)
    check(lambda t: flame.masked_fill(t, t[0] > 0, 0.0), lambda t: torch.masked_fill(t, t[0] > 0, 0.0), x, mode=mode)

    def inplace(lib):
        def fn(t):
            y = t * 2
            y.masked_fill_(y < 0, 0.25)
            return y
        return fn
    check(inplace(flame), inplace(torch), x, mode=mode)


def test_masked_fill_needs_a_bool_mask():
    with pytest.raises(flame.DTypeError, match="bool"):
        flame.ones(3).masked_fill(flame.ones(3), 0.0)


@pytest.mark.parametrize("mode", MODES)
def test_clamp_variants(mode):
    x = np.array([[-2.0, -1.0, 0.0, 0.5], [1.0, 2.0, 3.0, np.nan]], np.float32)  # values on the bounds
    lo, hi = np.full((1, 4), -1.0, np.float32), np.array([2.0, 0.5, -0.5, 3.0], np.float32)
    check(lambda t: t.clamp(-1.0, 2.0), lambda t: t.clamp(-1.0, 2.0), x, mode=mode)
    check(lambda t, a, b: t.clamp(a, b), lambda t, a, b: t.clamp(a, b), x, lo, hi, mode=mode)
    check(lambda t, a: flame.clamp_min(t, a), lambda t, a: torch.clamp_min(t, a), x, lo, mode=mode)
    check(lambda t: t.clamp_max(0.5), lambda t: t.clamp_max(0.5), x, mode=mode)
    check(lambda t: flame.clip(t, max=1.0), lambda t: torch.clip(t, max=1.0), x, mode=mode)
    check(lambda t: t.clamp(2.0, 1.0), lambda t: t.clamp(2.0, 1.0), x, mode=mode)  # min > max: max
    ints = np.array([1, 5, 9])
    check(lambda t: t.clamp(2, 6), lambda t: t.clamp(2, 6), ints, mode=mode)
    check(lambda t: t.clamp(min=2.5), lambda t: t.clamp(min=2.5), ints, mode=mode)  # promotes to float


# ---- sorting and selection -----------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_sort_argsort_topk(mode):
    x = randn(4, 6)
    check(lambda t: t.sort(1), lambda t: t.sort(1), x, mode=mode)
    check(lambda t: flame.sort(t, 0, descending=True), lambda t: torch.sort(t, 0, descending=True), x, mode=mode)
    check(lambda t: t.argsort(-1, descending=True), lambda t: t.argsort(-1, descending=True), x, mode=mode)
    check(lambda t: t.topk(3), lambda t: t.topk(3), x, mode=mode)
    check(lambda t: flame.topk(t, 2, dim=0, largest=False), lambda t: torch.topk(t, 2, dim=0, largest=False), x,
          mode=mode)
    ties = np.array([[3, 1, 3, 2, 1, 3], [0, 0, 0, 0, 0, 0]])
    check(lambda t: t.sort(dim=1, stable=True), lambda t: t.sort(dim=1, stable=True), ties, mode=mode)
    check(lambda t: t.sort(dim=1, descending=True, stable=True),
          lambda t: t.sort(dim=1, descending=True, stable=True), ties, mode=mode)
    nans = np.array([1.0, np.nan, -2.0, np.inf, 0.5], np.float32)
    check(lambda t: t.sort(), lambda t: t.sort(), nans, wrt=[], mode=mode)
    check(lambda t: t.topk(2), lambda t: t.topk(2), nans, wrt=[], mode=mode)


def test_topk_error_names_the_line():
    with pytest.raises(ShapeError, match=r"topk: k=9 is out of range.*\n  at test_everyday_ops.py"):
        flame.ones(3, 4).topk(9)


# ---- scans, tests ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_cumsum_cumprod(mode):
    x = randn(3, 5)
    check(lambda t: t.cumsum(1), lambda t: t.cumsum(1), x, mode=mode)
    check(lambda t: flame.cumsum(t, 0), lambda t: torch.cumsum(t, 0), x, mode=mode)
    zeros = np.array([[1.5, 0.0, 2.0, 0.0, -1.0], [0.5, 1.2, 0.0, 3.0, 2.0], [0.7, -1.3, 1.1, 0.9, 1.4]], np.float32)
    check(lambda t: t.cumprod(1), lambda t: t.cumprod(1), zeros, mode=mode)
    check(lambda t: flame.cumprod(t, 0), lambda t: torch.cumprod(t, 0), zeros, mode=mode)
    check(lambda t: t.cumsum(0), lambda t: t.cumsum(0), np.array([True, False, True]), mode=mode)  # -> int64
    check(lambda t: t.cumsum(0), lambda t: t.cumsum(0), np.array([1, 2, 3], np.int32), mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_any_all_isnan_isinf_isfinite(mode):
    x = np.array([[0.0, np.nan, 1.0], [np.inf, -np.inf, 0.0], [0.0, 0.0, 0.0]], np.float32)
    for name in ("isnan", "isinf", "isfinite"):
        check(lambda t, n=name: getattr(t, n)(), lambda t, n=name: getattr(t, n)(), x, wrt=[], mode=mode)
        check(lambda t, n=name: getattr(flame, n)(t), lambda t, n=name: getattr(torch, n)(t), np.array([1, 2]),
              mode=mode)
    check(lambda t: (t.any(), t.all(), t.any(1), t.all(dim=0, keepdim=True)),
          lambda t: (t.any(), t.all(), t.any(1), t.all(dim=0, keepdim=True)), x, wrt=[], mode=mode)
    check(lambda t: (flame.any(t), flame.all(t)), lambda t: (torch.any(t), torch.all(t)), np.zeros((0, 3), np.int64),
          mode=mode)


# ---- splitting, tiling ------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_split_chunk_repeat_tile(mode):
    x = randn(5, 4)
    check(lambda t: t.split(2), lambda t: t.split(2), x, mode=mode)
    check(lambda t: flame.split(t, [1, 3], dim=1), lambda t: torch.split(t, [1, 3], dim=1), x, mode=mode)
    check(lambda t: t.chunk(3), lambda t: t.chunk(3), x, mode=mode)
    check(lambda t: flame.chunk(t, 4, 1), lambda t: torch.chunk(t, 4, 1), x, mode=mode)
    check(lambda t: t.repeat(2, 1, 3), lambda t: t.repeat(2, 1, 3), x, mode=mode)
    check(lambda t: t.tile((2,)), lambda t: t.tile((2,)), x, mode=mode)
    check(lambda t: flame.tile(t, (2, 1, 1)), lambda t: torch.tile(t, (2, 1, 1)), x, mode=mode)
    check(lambda t: t.repeat_interleave(2), lambda t: t.repeat_interleave(2), x, mode=mode)
    check(lambda t: t.repeat_interleave(3, dim=1), lambda t: t.repeat_interleave(3, dim=1), x, mode=mode)
    reps = [2, 0, 1, 3, 1]
    check(lambda t: t.repeat_interleave(flame.tensor(reps), dim=0, output_size=7),
          lambda t: t.repeat_interleave(torch.tensor(reps), dim=0, output_size=7), x, mode=mode)


def test_repeat_interleave_tensor_counts_eager_and_traced_error():
    x = randn(3)
    check(lambda t: flame.repeat_interleave(t, flame.tensor([1, 0, 2])),
          lambda t: torch.repeat_interleave(t, torch.tensor([1, 0, 2])), x)
    with pytest.raises(TraceError, match="output_size"):
        flame.compile(lambda t, r: t.repeat_interleave(r))(flame.tensor(x), flame.tensor([1, 0, 2]))


# ---- einsum, norms ------------------------------------------------------------------------------------------

EINSUMS = [("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ij,jk", [(3, 4), (4, 2)]), ("ii->i", [(3, 3)]),
           ("ii", [(3, 3)]), ("ij->", [(3, 4)]), ("i,j->ij", [(3,), (4,)]), ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]),
           ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]), ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
           ("ij,ij->i", [(3, 4), (3, 4)]), ("bij->jb", [(2, 3, 4)]), ("ij,j->i", [(3, 4), (1,)])]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("eq,shapes", EINSUMS, ids=[e for e, _ in EINSUMS])
def test_einsum(eq, shapes, mode):
    arrays = [randn(*s, key=i) for i, s in enumerate(shapes)]
    check(lambda *ts: flame.einsum(eq, *ts), lambda *ts: torch.einsum(eq, *ts), *arrays, mode=mode)


def test_einsum_integers_and_errors():
    a, b = np.arange(6).reshape(2, 3), np.arange(12).reshape(3, 4)
    check(lambda x, y: flame.einsum("ij,jk->ik", x, y), lambda x, y: torch.einsum("ij,jk->ik", x, y), a, b)
    with pytest.raises(ShapeError, match="einsum: label 'j' has sizes 3 and 4"):
        flame.einsum("ij,jk->ik", flame.ones(2, 3), flame.ones(4, 4))


MIXED_EINSUMS = [  # torch pairs the operands left to right: a pair that sums a dim is a bmm, any other a mul
    ("ij,jk->ik", [((2, 3), "float32"), ((3, 2), "float64")]),
    ("ij,jk->ik", [((2, 3), "float64"), ((3, 2), "float32")]),
    ("ij,jk->ik", [((2, 3), "bfloat16"), ((3, 2), "float32")]),
    ("ij,jk->ik", [((2, 3), "float32"), ((3, 2), "int64")]),
    ("ij,jk->ik", [((2, 3), "int64"), ((3, 2), "float32")]),
    ("i,i->", [((3,), "int32"), ((3,), "int64")]),
    ("ij,ij->i", [((2, 3), "float32"), ((2, 3), "float64")]),
    ("ij,ij->i", [((2, 3), "float32"), ((2, 1), "float64")]),  # a dim of one element: no sum in the pair
    ("ij,jk->ik", [((2, 1), "float32"), ((1, 3), "float64")]),
    ("ij,jk->ik", [((0, 2), "float32"), ((2, 3), "float64")]),  # an operand with no element: zeros, promoted
    ("ij,jk,kl->il", [((2, 3), "float32"), ((3, 2), "float32"), ((2, 2), "float64")]),
    ("ij,jk,kl->il", [((2, 3), "float64"), ((3, 2), "float32"), ((2, 2), "float32")]),
    ("i,i,i->i", [((3,), "float32"), ((3,), "float16"), ((3,), "float64")]),
    ("ij,kl->", [((2, 3), "float32"), ((3, 2), "float64")]),
    ("i,j->ij", [((3,), "int32"), ((2,), "float32")]),
    ("ii,i->", [((2, 2), "float32"), ((2,), "float64")]),
    ("bij,bjk->bik", [((2, 2, 3), "float32"), ((2, 3, 2), "float64")]),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("eq,operands", MIXED_EINSUMS,
                         ids=[f"{e}-{'-'.join(d for _, d in o)}" for e, o in MIXED_EINSUMS])
def test_einsum_of_operands_of_different_dtypes_is_torchs(eq, operands, mode):
    """torch's einsum promotes a pair of dtypes it multiplies and refuses one it contracts (its bmm's
    RuntimeError 'expected scalar type Float but found Double'): flame's value and dtype, or its error,
    are torch's, eagerly and compiled."""
    arrays = [(np.arange(int(np.prod(s))).reshape(s) % 5 - 2) for s, _ in operands]
    theirs = [torch.tensor(a).to(getattr(torch, d)) for a, (_, d) in zip(arrays, operands)]
    mine = [flame.tensor(a).to(getattr(flame, d)) for a, (_, d) in zip(arrays, operands)]
    run = (lambda *ts: flame.einsum(eq, *ts)) if mode == "eager" else flame.compile(lambda *ts: flame.einsum(eq, *ts))
    got, want = _run_like_torch(lambda: torch.einsum(eq, *theirs), run, mine)
    if want is not None:
        np.testing.assert_array_equal(got.float().numpy(), want.float().numpy())


def _run_like_torch(theirs, run, mine):
    """(run(*mine), theirs()) with the same dtype, or (None, None) where theirs() raises a RuntimeError and
    run(*mine) raises one with torch's message, naming the test's line."""
    try:
        want = theirs()
    except RuntimeError as e:
        with pytest.raises(RuntimeError, match=str(e)) as got:
            run(*mine)
        assert "test_everyday_ops.py" in str(got.value)
        return None, None
    got = run(*mine)
    assert got.dtype == getattr(flame, str(want.dtype).removeprefix("torch."))
    return got, want


AUTOCAST_EINSUMS = [
    ("ij,jk->ik", [((2, 3), "float32"), ((3, 4), "float64")]),  # the GEMM's autocast leaves float64 as it is
    ("ij,jk->ik", [((2, 3), "float64"), ((3, 4), "float32")]),
    ("ij,jk->ik", [((2, 3), "float32"), ((3, 4), "float16")]),  # both cast to the region's dtype
    ("ij,jk->ik", [((2, 3), "float32"), ((3, 4), "int64")]),
    ("ij,ij->i", [((2, 3), "float32"), ((2, 3), "float64")]),  # a sum over j both hold: torch's bmm too
    ("i,j->ij", [((3,), "float32"), ((2,), "float64")]),  # no dim summed (torch's mul): promoted
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("eq,operands", AUTOCAST_EINSUMS,
                         ids=[f"{e}-{'-'.join(d for _, d in o)}" for e, o in AUTOCAST_EINSUMS])
def test_einsum_of_different_dtypes_in_an_autocast_region_is_torchs(eq, operands, mode):
    """Inside a bfloat16 autocast region torch's einsum contracts a pair with its bmm, whose autocast casts
    the floating operands but float64 ones: a float64 or integer operand beside a cast one raises its
    RuntimeError ('expected scalar type BFloat16 but found Double'); flame's error or dtype is torch's."""
    arrays = [(np.arange(int(np.prod(s))).reshape(s) % 5 - 2) for s, _ in operands]
    theirs = [torch.tensor(a).to(getattr(torch, d)) for a, (_, d) in zip(arrays, operands)]
    mine = [flame.tensor(a).to(getattr(flame, d)) for a, (_, d) in zip(arrays, operands)]

    def body(*ts):
        with flame.autocast("cpu", dtype=flame.bfloat16):
            return flame.einsum(eq, *ts)

    def theirs_in_autocast():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return torch.einsum(eq, *theirs)

    _run_like_torch(theirs_in_autocast, body if mode == "eager" else flame.compile(body), mine)


@pytest.mark.parametrize("mode", MODES)
def test_norms(mode):
    x = randn(3, 4)
    for p in ("fro", 2, 1, float("inf"), float("-inf"), 3, 0.5):
        check(lambda t, p=p: t.norm(p), lambda t, p=p: t.norm(p), x, mode=mode, rtol=2e-5)
        check(lambda t, p=p: flame.norm(t, p, dim=1, keepdim=True),
              lambda t, p=p: torch.norm(t, p, dim=1, keepdim=True), x, mode=mode, rtol=2e-5)
    check(lambda t: flame.linalg.vector_norm(t, 0, dim=0), lambda t: torch.linalg.vector_norm(t, 0, dim=0), x,
          mode=mode)
    zero_row = np.array([[0.0, 0.0], [3.0, 4.0]], np.float32)  # the 2-norm's gradient at zero is zero
    check(lambda t: flame.linalg.vector_norm(t, dim=1), lambda t: torch.linalg.vector_norm(t, dim=1), zero_row,
          mode=mode)


# ---- floor division and remainder --------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_floor_divide_and_remainder(mode):
    a = np.array([7.0, -7.0, 7.0, -7.0, 0.5, -0.5, 5.25], np.float32)
    b = np.array([2.0, 2.0, -2.0, -2.0, 3.0, 3.0, -1.5], np.float32)
    check(lambda x, y: (x // y, x % y), lambda x, y: (x // y, x % y), a, b, wrt=[], mode=mode)
    check(lambda x, y: x % y, lambda x, y: x % y, a, b, mode=mode)  # torch has no gradient of //
    check(lambda x: flame.remainder(x, -4), lambda x: torch.remainder(x, -4), a, mode=mode)
    check(lambda x: 3.0 % x, lambda x: 3.0 % x, a, wrt=[], mode=mode)
    check(lambda x: x // 2.5, lambda x: x // 2.5, a, wrt=[], mode=mode)
    ia, ib = np.array([7, -7, 7, -7, 0, 9]), np.array([2, 2, -2, -2, 3, -4])
    check(lambda x, y: (x // y, x % y, flame.floor_divide(x, 3), x % -3),
          lambda x, y: (x // y, x % y, torch.floor_divide(x, 3), x % -3), ia, ib, mode=mode)


# ---- constructors and conversions ---------------------------------------------------------------------------

def test_new_constructors_contiguous_and_aliases():
    x = flame.tensor(randn(2, 3)).to(flame.float64)
    for got, want in ((x.new_zeros(2, 2), np.zeros((2, 2))), (x.new_ones((3,)), np.ones(3)),
                      (x.new_full((2,), 7), np.full(2, 7.0)), (x.new_empty(1, 2), np.zeros((1, 2)))):
        assert got.dtype == flame.f64
        np.testing.assert_array_equal(got.numpy(), want)
    assert x.new_zeros(2, dtype=flame.long).dtype == flame.i64
    assert x.contiguous() is x and x.is_contiguous()
    assert (flame.float, flame.long, flame.int, flame.double, flame.half, flame.bool) == \
        (flame.f32, flame.i64, flame.i32, flame.f64, flame.f16, flame.boolean)


def test_linspace_eye_empty():
    for args in ((0.0, 1.0, 5), (-3.0, 7.5, 11), (2.0, 2.0, 1), (0.0, 1.0, 0), (1.0, -1.0, 4)):
        np.testing.assert_allclose(flame.linspace(*args).numpy(), torch.linspace(*args).numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(flame.linspace(0, 10, 6, dtype=flame.long).numpy(),
                                  torch.linspace(0, 10, 6, dtype=torch.long).numpy())
    np.testing.assert_array_equal(flame.eye(3).numpy(), torch.eye(3).numpy())
    np.testing.assert_array_equal(flame.eye(2, 4, dtype=flame.long).numpy(), torch.eye(2, 4, dtype=torch.long).numpy())
    assert flame.empty(2, 3).shape == (2, 3) and flame.empty_like(flame.ones(4)).shape == (4,)


def test_randint_range_dtype_and_spread():
    g = flame.Generator(3)
    a = flame.randint(-2, 5, (4000,), generator=g)
    b = flame.randint(10, size=(3, 2), generator=g)
    assert a.dtype == flame.i64 and b.shape == (3, 2)
    vals = a.numpy()
    assert vals.min() == -2 and vals.max() == 4
    counts = np.bincount(vals + 2, minlength=7)
    assert counts.min() > 4000 / 7 * 0.8  # each value about equally often
    assert flame.randint(0, 3, (5,), dtype=flame.int32, generator=g).dtype == flame.i32


def test_multinomial_distribution_and_no_replacement():
    g = flame.Generator(5)
    w = flame.tensor([0.0, 1.0, 3.0, 0.0, 4.0])
    draws = flame.multinomial(w, 8000, replacement=True, generator=g).numpy()
    freq = np.bincount(draws, minlength=5) / 8000
    np.testing.assert_allclose(freq, [0, 0.125, 0.375, 0, 0.5], atol=0.025)
    rows = flame.multinomial(flame.tensor([[1.0, 1, 1, 1], [0, 2, 0, 1]]), 2, generator=g).numpy()
    assert rows.shape == (2, 2) and len(set(rows[0])) == 2 and set(rows[1]) == {1, 3}
    first = np.stack([flame.multinomial(w, 1, generator=g).numpy() for _ in range(300)])[:, 0]
    np.testing.assert_allclose(np.bincount(first, minlength=5) / 300, [0, 0.125, 0.375, 0, 0.5], atol=0.09)
    with pytest.raises(ValueError, match="without replacement"):
        flame.multinomial(w, 4)


def test_from_numpy_shares_and_tensor_copies():
    a = np.arange(4, dtype=np.float32)
    shared, copied = flame.from_numpy(a), flame.tensor(a)
    a[0] = 42
    assert shared.tolist()[0] == 42 and copied.tolist()[0] == 0
    shared[1] = -1.0  # a write through the tensor shows in the array, as with torch.from_numpy
    assert a[1] == -1


def test_device_and_moves():
    x = flame.ones(2)
    assert x.device == flame.device("cpu") and str(x.device) == "cpu" and not x.is_cuda
    assert x.cpu() is x and x.to("cpu") is x and x.to(flame.device("cpu"), flame.float64).dtype == flame.f64
    assert x.to(x) is x
    with pytest.raises(FlameError, match="reference executor.*one executor per process"):
        x.cuda()
    model = flame.nn.Linear(2, 3)
    assert model.to("cpu") is model and model.cpu() is model
    with pytest.raises(FlameError):
        model.to("cuda")


# ---- softmax, nn.functional -----------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_softmax_one_hot(mode):
    x = randn(3, 5)
    check(lambda t: (flame.softmax(t, 1), flame.log_softmax(t, dim=0)),
          lambda t: (torch.softmax(t, 1), torch.log_softmax(t, dim=0)), x, mode=mode)
    labels = np.array([[0, 3], [2, 1]])
    check(lambda t: F.one_hot(t, 4), lambda t: TF.one_hot(t, 4), labels, mode=mode)
    check(lambda t: F.one_hot(t), lambda t: TF.one_hot(t), labels)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss(mode, reduction):
    logp = np.log(np.abs(randn(6, 4)) + 0.1).astype(np.float32)
    t = np.array([0, 3, -100, 1, 2, 3])
    w = np.array([0.5, 1.0, 2.0, 1.5], np.float32)
    check(lambda x, y: F.nll_loss(x, y, reduction=reduction), lambda x, y: TF.nll_loss(x, y, reduction=reduction),
          logp, t, mode=mode)
    check(lambda x, y, ww: F.nll_loss(x, y, ww, reduction=reduction),
          lambda x, y, ww: TF.nll_loss(x, y, ww, reduction=reduction), logp, t, w, wrt=[0], mode=mode)
    spatial = np.log(np.abs(randn(2, 3, 4)) + 0.1).astype(np.float32)
    st = np.array([[0, 1, 2, 1], [2, 2, 0, -100]])
    check(lambda x, y: F.nll_loss(x, y, reduction=reduction), lambda x, y: TF.nll_loss(x, y, reduction=reduction),
          spatial, st, mode=mode)


def test_nll_loss_bad_label_names_the_line():
    with pytest.raises(IndexError, match=r"nll_loss: target 7 is out of bounds for 4 classes\n  at test_everyday_ops"):
        F.nll_loss(flame.zeros(2, 4), flame.tensor([1, 7]))


@pytest.mark.parametrize("mode", MODES)
def test_binary_cross_entropy(mode):
    p = 1 / (1 + np.exp(-randn(3, 4)))
    t = (randn(3, 4, key=1) > 0).astype(np.float32)
    w = np.abs(randn(4, key=2))
    check(lambda x, y: F.binary_cross_entropy(x, y), lambda x, y: TF.binary_cross_entropy(x, y), p, t, wrt=[0],
          mode=mode)
    check(lambda x, y, ww: F.binary_cross_entropy(x, y, ww, reduction="sum"),
          lambda x, y, ww: TF.binary_cross_entropy(x, y, ww.expand(3, 4), reduction="sum"), p, t, w, wrt=[0],
          mode=mode)
    logits = randn(3, 4) * 4
    logits[0, 0] = 0.0  # the gradient there is sigmoid(0) - t
    check(lambda x, y: F.binary_cross_entropy_with_logits(x, y), lambda x, y: TF.binary_cross_entropy_with_logits(x, y),
          logits, t, mode=mode)
    check(lambda x, y, pw: F.binary_cross_entropy_with_logits(x, y, pos_weight=pw, reduction="none"),
          lambda x, y, pw: TF.binary_cross_entropy_with_logits(x, y, pos_weight=pw, reduction="none"),
          logits, t, w, wrt=[0, 1], mode=mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sigmoid_far_below_zero_stays_positive_as_torchs(dtype, mode):
    """sigmoid(-30) is 9.4e-14, not 0: log(sigmoid(x)) and a BCE of a saturated sigmoid stay finite and
    keep their gradients (0.5 * (1 + tanh(x / 2)) cancels to 0 below -17 in f32, -37 in f64)."""
    x = np.array([-100.0, -53.5, -30.0, -20.0, -8.0, -1.0, 0.0, 3.0, 20.0], dtype)
    t = np.array([1, 1, 0, 1, 0, 1, 0, 1, 0], dtype)
    check(lambda a: a.sigmoid(), lambda a: a.sigmoid(), x, mode=mode, rtol=1e-6, atol=0)
    check(lambda a: a.sigmoid().log(), lambda a: a.sigmoid().log(), x, mode=mode, rtol=1e-6)
    check(lambda a, b: F.binary_cross_entropy(a.sigmoid(), b, reduction="none"),
          lambda a, b: TF.binary_cross_entropy(a.sigmoid(), b, reduction="none"), x, t, wrt=[0], mode=mode, rtol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_l1_and_smooth_l1(mode):
    x, y = randn(4, 5), randn(4, 5, key=1)
    check(lambda a, b: F.l1_loss(a, b), lambda a, b: TF.l1_loss(a, b), x, y, mode=mode)
    for beta in (1.0, 0.3, 0.0):
        check(lambda a, b, beta=beta: F.smooth_l1_loss(a, b, beta=beta, reduction="sum"),
              lambda a, b, beta=beta: TF.smooth_l1_loss(a, b, beta=beta, reduction="sum"), x, y, mode=mode)
    check(lambda a, b: flame.nn.L1Loss(reduction="none")(a, b), lambda a, b: torch.nn.L1Loss(reduction="none")(a, b),
          x, y, mode=mode)
    for f, tf in ((F.l1_loss, TF.l1_loss), (F.smooth_l1_loss, TF.smooth_l1_loss)):  # broadcasts, with a warning
        a, b = np.arange(3.0, dtype=np.float32).reshape(3, 1), np.ones(3, np.float32)
        with pytest.warns(UserWarning, match="target size"):
            want = tf(torch.from_numpy(a), torch.from_numpy(b)).item()
        with pytest.warns(UserWarning, match=r"target size \[3\] that is different to the input size \[3, 1\]"):
            assert f(flame.tensor(a), flame.tensor(b)).item() == pytest.approx(want, rel=1e-6)


PADS = [((1, 2), "constant"), ((0, 1, 2, 0), "constant"), ((-1, 2), "constant"), ((2, 1), "reflect"),
        ((1, 1, 1, 2), "reflect"), ((2, 3), "replicate"), ((1, 0, 0, 2), "replicate"), ((2, 1), "circular"),
        ((1, 2, 2, 1), "circular")]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pads,pad_mode", PADS, ids=[f"{m}{p}" for p, m in PADS])
def test_pad(pads, pad_mode, mode):
    x = randn(2, 3, 4)
    check(lambda t: F.pad(t, pads, mode=pad_mode), lambda t: TF.pad(t, pads, mode=pad_mode), x, mode=mode)
    if pad_mode == "constant":
        check(lambda t: F.pad(t, pads, value=1.5), lambda t: TF.pad(t, pads, value=1.5), x, mode=mode)


def test_pad_reflect_too_wide():
    with pytest.raises(ShapeError, match="reflect padding"):
        F.pad(flame.ones(1, 3), (3, 0), mode="reflect")


# ---- nn containers, grad modes, save / load ---------------------------------------------------------------------

def test_module_dict_and_parameter_list():
    class Net(flame.nn.Module):
        def __init__(self):
            super().__init__()
            self.heads = flame.nn.ModuleDict({"a": flame.nn.Linear(2, 3), "b": flame.nn.Linear(3, 1)})
            self.scales = flame.nn.ParameterList([flame.ones(3), flame.nn.Parameter(flame.zeros(1))])

        def forward(self, x):
            return self.heads["b"](self.heads["a"](x) * self.scales[0]) + self.scales[1]

    class TNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.heads = torch.nn.ModuleDict({"a": torch.nn.Linear(2, 3), "b": torch.nn.Linear(3, 1)})
            self.scales = torch.nn.ParameterList([torch.ones(3), torch.nn.Parameter(torch.zeros(1))])

    net = Net()
    assert list(net.state_dict()) == list(TNet().state_dict())
    assert len(list(net.parameters())) == 6 and "a" in net.heads and len(net.scales) == 2
    assert all(p.requires_grad for p in net.scales)
    loss = net(flame.ones(4, 2)).sum()
    loss.backward()
    assert net.scales[0].grad is not None and net.scales[1].grad.tolist() == [4.0]
    net.heads["c"] = flame.nn.Identity()
    assert list(net.heads.keys()) == ["a", "b", "c"]


def test_enable_grad_inference_mode():
    x = flame.ones(2, requires_grad=True)
    with flame.no_grad():
        assert not (x * 2).requires_grad
        with flame.enable_grad():
            assert (x * 2).requires_grad and flame.is_grad_enabled()
    with flame.inference_mode():
        assert not (x * 2).requires_grad
    with flame.set_grad_enabled(False):
        assert not flame.is_grad_enabled()

    @flame.inference_mode()
    def f(t):
        return t * 3
    assert not f(x).requires_grad


def test_save_load_structures(tmp_path):
    model = flame.nn.Linear(3, 2)
    flame.save(model.state_dict(), tmp_path / "sd.safetensors")
    import safetensors.torch

    theirs = safetensors.torch.load_file(str(tmp_path / "sd.safetensors"))  # a plain state_dict file
    np.testing.assert_array_equal(theirs["weight"].numpy(), model.weight.numpy())
    back = flame.load(tmp_path / "sd.safetensors", map_location="cpu")
    assert sorted(back) == ["bias", "weight"] and np.array_equal(back["bias"].numpy(), model.bias.numpy())
    obj = {"model": model.state_dict(), "epoch": 3, "history": [0.5, 0.25], "pair": (flame.ones(2), "x"),
           0: None}
    flame.save(obj, tmp_path / "ck.safetensors")
    got = flame.load(tmp_path / "ck.safetensors")
    assert got["epoch"] == 3 and got["history"] == [0.5, 0.25] and got[0] is None
    assert got["pair"][1] == "x" and got["pair"][0].tolist() == [1.0, 1.0]
    np.testing.assert_array_equal(got["model"]["weight"].numpy(), model.weight.numpy())
    flame.save(flame.arange(3), tmp_path / "t.safetensors")
    assert flame.load(tmp_path / "t.safetensors").tolist() == [0, 1, 2]
    with pytest.raises(flame.CheckpointError, match="no pickle"):
        flame.save({"f": object()}, tmp_path / "bad.safetensors")
