"""The gather/scatter family and indexed writes against torch: negative and out-of-bounds indices
(torch's answer where it wraps, an IndexValueError where it raises) and duplicate write positions
(the last write wins, eagerly and compiled; the gradients torch gives), values and gradients,
eagerly and inside @flame.compile with the indices as arguments (unknown while tracing), on the
reference executor; and the same programs planned for the CUDA target with their kernels compiled."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
import flame.nn.functional as F
from flame.errors import IndexValueError
from tests.ops.test_everyday_ops import MODES, check, check_gpu_step, randn

# ---- where torch raises on a negative or too-large index, flame raises --------------------------------


def _raisers(lib):
    """(name, fn(x, i)) for the ops torch rejects a negative index in; x is [4, 3], i is 1-D."""
    fns = lib.nn.functional if lib is torch else F
    return [
        ("gather", lambda x, i: x.gather(0, i.reshape(-1, 1).expand(-1, 3))),
        ("scatter", lambda x, i: x.scatter(0, i.reshape(-1, 1).expand(-1, 3), x[: i.shape[0]] * 2)),
        ("scatter_add", lambda x, i: x.scatter_add(0, i.reshape(-1, 1).expand(-1, 3), x[: i.shape[0]])),
        ("index_select", lambda x, i: x.index_select(0, i)),
        ("index_add", lambda x, i: x.index_add(0, i, x[: i.shape[0]])),
        ("index_copy", lambda x, i: x.index_copy(0, i, x[: i.shape[0]])),
        ("embedding", lambda x, i: fns.embedding(i, x)),
        ("take_along_dim", lambda x, i: lib.take_along_dim(x, i)),  # no dim: the flattened tensor
    ]


BAD = {"negative": [0, -1], "too large": [1, 4], "below -size": [-5, 0]}


@pytest.mark.parametrize("bad", sorted(BAD))
@pytest.mark.parametrize("k", range(len(_raisers(torch))))
def test_rejected_index_raises_eagerly_and_compiled(k, bad):
    name, tfn = _raisers(torch)[k]
    _, fn = _raisers(flame)[k]
    idx = np.array([1, 12] if name == "take_along_dim" and bad == "too large" else BAD[bad])  # 12 elements
    x = randn(4, 3)
    with pytest.raises((IndexError, RuntimeError), match="out of"):
        tfn(torch.tensor(x), torch.tensor(idx))
    at = f"(?s)index {idx[1] if bad != 'below -size' else idx[0]} is out of bounds.*test_index_family.py"
    with pytest.raises(IndexValueError, match=at):  # eagerly: before anything runs
        fn(flame.tensor(x), flame.tensor(idx))
    # compiled, the index an argument (its values unknown while tracing): raised when the step runs
    with pytest.raises(IndexValueError, match=at):
        flame.compile(fn)(flame.tensor(x), flame.tensor(idx))


# ---- where torch wraps a negative index, values and gradients wrap ------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_advanced_index_reads_wrap_negative_indices(mode):
    x = randn(4, 5, 3)
    i0, i1 = np.array([-1, 0, -4, 3, -1]), np.array([[-5, 4], [-2, 0]])
    check(lambda t, i: t[i], lambda t, i: t[i], x, i0, mode=mode)
    check(lambda t, i: t[:, i], lambda t, i: t[:, i], x, i1, mode=mode)
    check(lambda t, i, j: t[i, 1, j], lambda t, i, j: t[i, 1, j], x, i0, np.array([-3, 2, -1, 0, 1]), mode=mode)
    check(lambda t: t[[-1, -1, 0]], lambda t: t[[-1, -1, 0]], x, mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_take_along_dim_wraps_negative_indices_along_a_dim(mode):
    x = randn(4, 3)
    idx = np.array([[-1], [0], [-3], [2]])
    check(lambda t, i: flame.take_along_dim(t, i, 1), lambda t, i: torch.take_along_dim(t, i, 1), x, idx, mode=mode)
    wide = np.array([[-1, -1, 0], [3, -4, -2]])  # duplicates: their gradients add up
    check(lambda t, i: t.take_along_dim(i, 0), lambda t, i: t.take_along_dim(i, 0), x, wide, mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_gather_one_index_per_row_gradient(mode):
    x = randn(5, 7)
    labels = np.array([[6], [0], [3], [3], [1]])
    check(lambda t, i: t.gather(1, i), lambda t, i: t.gather(1, i), x, labels, mode=mode)
    check(lambda t, i: t.gather(0, i), lambda t, i: t.gather(0, i), x, np.array([[4, 0, 0, 2, 1, 3, 4]]), mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_index_fill_and_index_put_wrap_negative_indices(mode):
    x = randn(4, 3)
    check(
        lambda t, i: t.index_fill(0, i, -2.0),
        lambda t, i: t.index_fill(0, i, -2.0),
        x,
        np.array([-1, 1, -1]),
        mode=mode,
        wrt=[],
    )
    # torch's index_fill backward rejects a negative index: the gradient is compared at the wrapped one
    check(
        lambda t, i: t.index_fill(1, i - 3, 0.5),
        lambda t, i: t.index_fill(1, i, 0.5),
        x,
        np.array([2, 0, 2]),
        mode=mode,
    )
    check(
        lambda t, v, i: t.index_fill(0, i, v),
        lambda t, v, i: t.index_fill(0, i, v),
        x,
        np.float32(1.5),
        np.array([3, 1, 3]),
        mode=mode,
    )

    def put(lib, accumulate):
        return lambda t, v, i, j: (t * 1).index_put((i, j), v, accumulate=accumulate)

    rows, cols = np.array([-1, 0, 3, -1]), np.array([-3, 2, 0, 0])  # (3, 0) named twice
    for acc in (False, True):
        check(put(flame, acc), put(torch, acc), x, randn(4, key=1), rows, cols, mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_setitem_with_negative_indices(mode):
    def write(lib):
        def fn(t, v, i):
            y = t * 1
            y[i, -1] = v
            return y

        return fn

    check(write(flame), write(torch), randn(4, 3), randn(3, key=1), np.array([-1, 0, -3]), mode=mode)


# ---- duplicate write positions: the last write wins, eagerly and compiled --------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_setitem_with_duplicate_positions(mode):
    def const(lib):
        def fn(t):
            y = t * 1
            y[[1, 1, 3], 2] = 7.0
            return y

        return fn

    check(const(flame), const(torch), randn(4, 4), mode=mode)

    def values(lib):
        def fn(t, v, i):
            y = t * 1
            y[i] = v  # torch on the CPU: the last write wins; every write gets its position's gradient
            return y

        return fn

    check(values(flame), values(torch), randn(5), randn(4, key=1), np.array([1, 3, 1, -4]), mode=mode)
    check(values(flame), values(torch), randn(5, 2), randn(3, 2, key=1), np.array([0, 0, 0]), mode=mode)

    def scalar(lib):  # one value written at duplicate positions: its gradient counts each write
        def fn(t, v, i):
            y = t * 1
            y[i] = v
            return y

        return fn

    check(scalar(flame), scalar(torch), randn(5), np.float32(2.5), np.array([2, 2, 4]), mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_scatter_and_index_copy_with_duplicates(mode):
    x = randn(4, 3)
    idx = np.array([[1, 0, 1], [1, 2, 1], [3, 0, 1]])
    check(lambda t, s, i: t.scatter(0, i, s), lambda t, s, i: t.scatter(0, i, s), x, randn(3, 3, key=1), idx, mode=mode)
    check(lambda t, i: t.scatter(0, i, 7.0), lambda t, i: t.scatter(0, i, 7.0), x, idx, mode=mode)
    big = randn(4, 5, key=2)  # src larger than index: its leading part (torch's backward fails there: no src grad)
    check(
        lambda t, s, i: t.scatter(1, i, s),
        lambda t, s, i: t.scatter(1, i, s),
        x,
        big,
        np.array([[2, 2], [0, 1], [1, 1], [0, 0]]),
        mode=mode,
        wrt=[0],
    )
    check(
        lambda t, s, i: t.index_copy(0, i, s),
        lambda t, s, i: t.index_copy(0, i, s),
        x,
        randn(3, 3, key=3),
        np.array([2, 0, 2]),
        mode=mode,
    )
    check(
        lambda t, i: t.masked_fill(t > 0, 7.0).index_fill(1, i, 7.0),
        lambda t, i: t.masked_fill(t > 0, 7.0).index_fill(1, i, 7.0),
        x,
        np.array([1, 1]),
        mode=mode,
    )

    def inplace(lib):
        def fn(t, s, i):
            y = t * 1
            y.scatter_(0, i, s)
            y.index_add_(0, i[0], s)
            return y

        return fn

    check(inplace(flame), inplace(torch), x, randn(3, 3, key=4), idx, mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_gather_and_scatter_with_an_index_smaller_than_the_input(mode):
    """torch takes an index no larger than the input on the dims but dim (and than src on all): gather
    reads the leading part, scatter and scatter_add write only where the index reaches."""
    x, idx = randn(3, 4, 2), np.array([[[1], [0], [3]], [[3], [3], [0]]])  # [2, 3, 1] along dim 1
    check(lambda t, i: t.gather(1, i), lambda t, i: t.gather(1, i), x, idx, mode=mode)
    for op in ("scatter", "scatter_add"):
        fn = lambda t, s, i, op=op: getattr(t, op)(1, i, s)  # noqa: E731
        check(fn, fn, x, randn(2, 3, 1, key=5), idx, mode=mode)
        check(fn, fn, x, randn(2, 1, 2, key=6), np.array([[[2, 0]], [[2, 2]]]), mode=mode)
    check(lambda t, i: t.scatter(0, i, 2.5), lambda t, i: t.scatter(0, i, 2.5), x[0], idx[0, :2, :1].T, mode=mode)
    empty = np.zeros((0,), np.int64)  # an empty index is not shape-checked; the result keeps x's graph
    check(lambda t, i: t.gather(0, i) * 2, lambda t, i: t.gather(0, i) * 2, randn(3, 0, 4), empty, mode=mode)
    check(lambda t, i: t.gather(1, i) + 1, lambda t, i: t.gather(1, i) + 1, x[0], np.zeros((5, 0), np.int64), mode=mode)
    for bad in (np.zeros((5, 2), np.int64), np.zeros((2,), np.int64)):
        with pytest.raises(RuntimeError):
            torch.tensor(x[0]).gather(1, torch.tensor(bad))
        with pytest.raises(flame.ShapeError, match="index"):
            flame.tensor(x[0]).gather(1, flame.tensor(bad))


def test_compiled_duplicate_write_into_an_argument():
    @flame.compile
    def step(y, i):
        y[i, 2] = 7.0
        return y.sum()

    y = flame.zeros(4, 4)
    s = step(y, flame.tensor([1, 1, 3]))
    t = torch.zeros(4, 4)
    t[[1, 1, 3], 2] = 7.0
    np.testing.assert_array_equal(y.numpy(), t.numpy())
    assert s.item() == t.sum().item() == 14.0


def test_index_put_with_a_mask_and_errors():
    x = randn(2, 5)
    got = flame.tensor(x).index_put((flame.tensor([True, False]),), flame.tensor(3.0))
    want = torch.tensor(x).index_put((torch.tensor([True, False]),), torch.tensor(3.0))
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    with pytest.raises(IndexValueError, match="index -6 is out of bounds for dimension 1 with size 5"):
        flame.tensor(x).index_put((flame.tensor([0]), flame.tensor([-6])), flame.tensor(1.0))
    with pytest.raises(IndexValueError, match="index_fill: index 5 is out of bounds"):
        flame.tensor(x).index_fill(1, flame.tensor([5]), 0.0)


# ---- the same programs planned for the GPU ---------------------------------------------------------------


def test_index_family_step_planned_for_the_gpu(cuda_target):
    w = flame.tensor(randn(6, 4), requires_grad=True)
    rows, labels = flame.tensor([-1, 2, 2, 0]), flame.tensor([[3], [0], [1], [3]])
    src = flame.tensor(randn(3, 4, key=1))

    def body(rows, labels, src):
        a = w[rows]  # negative rows wrap
        b = a.gather(1, labels)
        c = (w * 1).scatter(0, flame.tensor([[1, 1, 1, 1], [4, 1, 0, 0], [1, 5, 5, 0]]), src * w[:3])
        c[flame.tensor([2, 2, -1]), 1] = 0.5  # duplicates: the last write wins
        d = c.index_copy(1, flame.tensor([3, 3]), w[:, :2]).index_add(0, flame.tensor([5, 5, 0]), src)
        loss = (b * b).sum() + (d * d).sum() + w.take_along_dim(flame.tensor([[-1], [0]]), 0).sum()
        small = flame.tensor([[2, 0], [5, 5]])  # smaller than w on dim 1: padded, the rest of w kept
        e = w.scatter(0, small, src[:2, :2]).scatter_add(0, small, src[:2, :2] * w[:2, :2]).gather(1, small % 4)
        loss = loss + (e * e).sum()
        loss.backward()
        return loss

    check_gpu_step(body, w, rows, labels, src)
