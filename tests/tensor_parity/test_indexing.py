"""Indexing against torch: advanced-index dims moved to the front when the index tensors are not
adjacent, broadcasting index tensors, bool masks of full and partial rank, None/Ellipsis, negative and
out-of-range indices, gather/scatter/index_* forms and duplicate writes with accumulate, nonzero (value,
dtype, shape, errors), eagerly and inside @flame.compile (bool-mask reads and nonzero: eager only)."""

import numpy as np
import pytest

import flame
from tests.tensor_parity.common import check, check_gradients

X = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
cases = {
    "x[i, :, j] nonadjacent": lambda L, x: x[L.tensor([1, 0]), :, L.tensor([0, 3])],
    "x[:, i, j] adjacent": lambda L, x: x[:, L.tensor([1, 0]), L.tensor([0, 3])],
    "x[:, i, :, j]": lambda L, x: x[:, L.tensor([1, 0]), :, L.tensor([0, 3])],
    "x[i2d, :, j bcast]": lambda L, x: x[L.tensor([[1], [0]]), :, L.tensor([0, 3, 2])],
    "x[..., i]": lambda L, x: x[..., L.tensor([4, 0, 1])],
    "x[None, i, ..., None]": lambda L, x: x[None, L.tensor([1]), ..., None],
    "x[0, i, :, j] int+adv": lambda L, x: x[0, L.tensor([1, 0]), :, L.tensor([0, 3])],
    "x[i, 0, j] int between": lambda L, x: x[L.tensor([1, 0]), 0, L.tensor([0, 3])],
    "x[:, 1, i]": lambda L, x: x[:, 1, L.tensor([1, 0])],
    "x[mask]": lambda L, x: x[:, L.tensor([True, False, True])],
    "x[mask2d]": lambda L, x: x[L.tensor([[True, False, True], [False, False, True]])],
    "x[mask full]": lambda L, x: x[x > 100],
    "x[mask, i]": lambda L, x: x[0, L.tensor([True, False, True]), L.tensor([1, 3])],
    "x[list]": lambda L, x: x[[1, 0]],
    "x[[0,1],[1,2]]": lambda L, x: x[[0, 1], [1, 2]],
    "x[neg idx]": lambda L, x: x[L.tensor([-1, -2])],
    "x[oob]": lambda L, x: x[L.tensor([2])],
    "x[oob int]": lambda L, x: x[5],
    "x[neg oob]": lambda L, x: x[:, L.tensor([-4])],
    "x[slice step]": lambda L, x: x[:, ::2, 1:-1, :: -1 if False else 3],
    "x[slice oob]": lambda L, x: x[5:10],
    "x[-1]": lambda L, x: x[-1, -1],
    "x[None]": lambda L, x: x[None, None].shape,
    "x[..., None, 0]": lambda L, x: x[..., None, 0],
    "x[i64 0d tensor]": lambda L, x: x[L.tensor(1)],
    "x[i32 index]": lambda L, x: x[L.tensor([1, 0], dtype=L.int32)],
    "x[float index]": lambda L, x: x[L.tensor([1.0])],
    "x[empty index]": lambda L, x: x[L.tensor([], dtype=L.int64)],
    "x[1:1, i]": lambda L, x: x[1:1, L.tensor([0])],
    "index_select": lambda L, x: x.index_select(2, L.tensor([3, 0, 3])),
    "gather": lambda L, x: x.gather(1, L.tensor([[[[0, 1, 2, 0, 1]]]]).expand(2, 2, 4, 5)),
    "gather smaller": lambda L, x: x.gather(3, L.tensor([[[[0], [4]]]])),
    "take_along_dim": lambda L, x: L.take_along_dim(x, L.tensor([[[[0], [4]]]]), 3),
    "take_along_dim none": lambda L, x: L.take_along_dim(x, L.tensor([5, 0])),
    "scatter": lambda L, x: L.zeros(3, 5).scatter(0, L.tensor([[0, 1, 2, 0, 0]]), x[0, 0, :1]),
    "scatter value": lambda L, x: L.zeros(3, 5).scatter(1, L.tensor([[0, 1], [2, 2]]), 7.0),
    "scatter_add": lambda L, x: L.zeros(3, 5).scatter_add(0, L.tensor([[0, 1, 2, 0, 0], [0, 0, 0, 0, 0]]), x[0, 0, :2]),
    "index_add alpha": lambda L, x: L.zeros(3, 5).index_add(0, L.tensor([0, 0]), x[0, 0, :2], alpha=2),
    "index_put acc dup": lambda L, x: L.zeros(5).index_put(
        (L.tensor([0, 0, 3]),), L.tensor([1.0, 2, 3]), accumulate=True
    ),
    "index_put_ acc dup 2d": lambda L, x: L.zeros(3, 4).index_put_(
        (L.tensor([0, 0]), L.tensor([1, 1])), L.tensor(5.0), accumulate=True
    ),
    "index_fill": lambda L, x: x.index_fill(1, L.tensor([0, 2]), -1.0),
    "masked_select bcast": lambda L, x: x[0, :, :, 0].masked_select(L.tensor([True, False, True, True])),
    "nonzero": lambda L, x: L.nonzero(x[0, 0] % 3 == 0),
    "nonzero tuple": lambda L, x: L.nonzero(x[0] % 7 == 0, as_tuple=True),
    "nonzero 0d": lambda L, x: L.nonzero(x[0, 0, 0, 1]),
    "argwhere": lambda L, x: L.argwhere(x[0, 0] > 7),
}

EAGER_ONLY = ("mask", "nonzero", "argwhere")
PARAMS = [(n, c) for n in cases for c in (False, True) if not (c and any(k in n for k in EAGER_ONLY))]


@pytest.mark.parametrize("name,compiled", PARAMS, ids=[f"{n}-{'compiled' if c else 'eager'}" for n, c in PARAMS])
def test_indexing(name, compiled):
    check(cases[name], X, compiled=compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_list_of_lists_index_is_a_tuple_in_torch(compiled):
    check(lambda L, x: x[[[1, 0], [0, 0]]], X, compiled=compiled)


def test_uint8_index_is_a_mask_as_torchs_with_its_warning():
    check(lambda L, x: x[L.tensor([1, 0], dtype=L.uint8)], X, compiled=False)
    with pytest.warns(UserWarning, match="uint8 is now deprecated"):
        flame.arange(6).reshape(2, 3)[flame.tensor([1, 0], dtype=flame.uint8)]


MASKS = {
    "row mask broadcast": np.array([True, False, True]),
    "full mask": np.array([[False, True, True], [True, False, True]]),
    "no True": np.zeros(3, bool),
    "all True": np.ones((2, 3), bool),
}


def _masked_scatter(lib, x, mask, src, compiled=False):
    """x.masked_scatter(mask, src) weighted and summed, backward(): the result and both gradients."""
    ts = [lib.tensor(x, requires_grad=True), lib.tensor(src, requires_grad=True)]

    def step(a, s):
        out = a.masked_scatter(lib.tensor(mask), s)
        (out * out * lib.arange(6, dtype=out.dtype).reshape(2, 3)).sum().backward()
        return out

    out = lib.compile(step)(*ts) if compiled else step(*ts)
    return [out.detach().numpy()] + [t.grad.numpy() for t in ts]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("mask", MASKS)
def test_masked_scatter_values_and_gradients(mask, compiled):
    """source's elements in order where the mask is True, as torch's; the source's gradient is the
    result's at the position each element went to (zero for the elements left over)."""
    import torch

    r = np.random.default_rng(1)
    x, src = r.standard_normal((2, 3)), r.standard_normal(8)
    got = _masked_scatter(flame, x, MASKS[mask], src, compiled)
    for g, w in zip(got, _masked_scatter(torch, x, MASKS[mask], src)):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=0)


def test_masked_scatter_in_place_and_its_errors():
    import torch

    m, src = np.array([True, False, True]), np.arange(10.0)
    x, tx = flame.zeros(2, 3, dtype=flame.float64), torch.zeros(2, 3, dtype=torch.float64)
    assert x.masked_scatter_(flame.tensor(m), flame.tensor(src)) is x
    np.testing.assert_array_equal(x.numpy(), tx.masked_scatter_(torch.tensor(m), torch.tensor(src)).numpy())
    with pytest.raises(flame.ShapeError, match="Number of elements of source < number of ones in mask"):
        x.masked_scatter(flame.tensor(m), flame.tensor(src[:3]))
    with pytest.raises(flame.DTypeError, match="same dtypes"):
        x.masked_scatter(flame.tensor(m), flame.tensor(src, dtype=flame.float32))
    with pytest.raises(flame.DTypeError, match="bool tensor"):
        x.masked_scatter(flame.tensor(m.astype(np.int64)), flame.tensor(src))


S = np.array(3.0)
ZERO_DIM = {
    "scatter": lambda L, x: (x.scatter(0, L.tensor(0), x * 2), x.scatter(-1, L.tensor(0), 5.0)),
    "scatter_add": lambda L, x: x.scatter_add(0, L.tensor(0), x * 2),
    "index_select": lambda L, x: (x.index_select(0, L.tensor(0)), x.index_select(-1, L.tensor([0]))),
    "index_add": lambda L, x: x.index_add(0, L.tensor(0), x**2, alpha=2),
    "index_copy": lambda L, x: x.index_copy(0, L.tensor(0), x**2),
    "scatter_ in place": lambda L, x: (x * 1).scatter_(0, L.tensor(0), x**2),
    "narrow": lambda L, x: x.narrow(0, 0, 1),
    "chunk": lambda L, x: x.chunk(1, 0),
    "searchsorted": lambda L, x: L.searchsorted(x, x),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", ZERO_DIM)
def test_index_ops_of_a_0d_tensor_take_it_as_one_element(name, compiled):
    """torch's index ops take a 0-d tensor as one element along dim 0 (result 0-d); narrow, chunk and
    searchsorted refuse it: values, gradients and errors as torch's."""
    f = ZERO_DIM[name]
    check(f, S, compiled=compiled)
    if name not in ("narrow", "chunk", "searchsorted"):
        outs = lambda L, x: (lambda o: o if isinstance(o, tuple) else (o,))(f(L, x))  # noqa: E731
        check_gradients(name, lambda L, x: sum(3 * t for t in outs(L, x)), S, compiled)


def _write_through_a_0d_index(L, x):
    y = x.clone()
    i = L.tensor(1)
    row = y[i]  # torch selects with a 0-d integer tensor, as with an int: a view
    row.mul_(10)
    y[L.tensor(-1)][L.tensor(2)].fill_(-5)
    return y, row, x[:, L.tensor(0)]


def test_a_0d_integer_tensor_index_is_a_view_eagerly():
    check(_write_through_a_0d_index, X[0, :, :, 0], compiled=False)
    weighted = lambda L, x: (x[L.tensor(1)] * L.arange(4.0, dtype=x.dtype)).sum()  # noqa: E731
    check_gradients("x[i] of a 0-d i", weighted, X[0, :, :, 0].astype(np.float64), compiled=False)


def test_a_write_into_a_traced_0d_index_read_is_refused():
    """While tracing, x[i] with a 0-d index tensor reads a copy (the index is a graph input), where
    torch's is a view: a write into it would be lost, so it raises; a read and x[i] = v work."""

    @flame.compile
    def write(x, i):
        x[i].fill_(5.0)
        return x

    with pytest.raises(flame.errors.ViewError, match="x\\[i\\] with a 0-d index tensor"):
        write(flame.zeros(3), flame.tensor(1))

    @flame.compile
    def read_and_assign(x, i):
        y = x[i] * 2
        x[i] = 7.0
        return y

    x = flame.zeros(3) + 1
    assert read_and_assign(x, flame.tensor(1)).item() == 2.0 and x.tolist() == [1.0, 7.0, 1.0]


M = np.arange(12.0).reshape(3, 4)
MASK_ACCUMULATE = {
    "a number": lambda L, x: x.clone().index_put_((x > 4,), L.tensor(1.0, dtype=x.dtype), accumulate=True),
    "a one-element tensor": lambda L, x: L.index_put(x, (x > 4,), L.tensor([2.0], dtype=x.dtype), accumulate=True),
    "a row per True row": lambda L, x: x.index_put(
        (L.tensor([True, False, True]),), L.tensor([1.0, 2, 3, 4], dtype=x.dtype), accumulate=True
    ),
    "no True": lambda L, x: x.index_put((x > 100,), L.tensor(1.0, dtype=x.dtype), accumulate=True),
    "a mask of another shape": lambda L, x: x.index_put((L.tensor([True, False]),), L.tensor(1.0), accumulate=True),
    "a row that does not broadcast": lambda L, x: x.index_put(
        (L.tensor([True, False, True]),), L.tensor([1.0, 2, 3], dtype=x.dtype), accumulate=True
    ),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", MASK_ACCUMULATE)
def test_index_put_accumulate_of_a_mask_adds_the_same_value_at_each_true_position(name, compiled):
    """index_put(..., accumulate=True) with a bool mask and one number (or one row) needs no count of the
    True values, so it traces too: values, gradients and errors as torch's."""
    f = MASK_ACCUMULATE[name]
    check(f, M, compiled=compiled)
    if name in ("a number", "a row per True row"):
        weights = lambda L, x: (f(L, x) * L.arange(12.0, dtype=x.dtype).reshape(3, 4)).sum()  # noqa: E731
        check_gradients(name, weights, M / 10, compiled)


def _set(key, value):
    """x[key] = value on a copy of x, returned."""
    def write(L, x):
        y = x.clone()
        y[key(L, y)] = value(L)
        return y
    return write


WRITES_OF_ANOTHER_DTYPE = {  # torch's index_put_ refuses the value; where it is masked_fill_, it converts it
    "x[i] = long values": _set(lambda L, y: L.tensor([0, 2]), lambda L: L.tensor([1, 2, 3, 4])),
    "x[list] = 0-d double": _set(lambda L, y: [0, 1], lambda L: L.tensor(1, dtype=L.float64)),
    "x[i, 1:] = 0-d double": _set(
        lambda L, y: (L.tensor([0, 1]), slice(1, None)), lambda L: L.tensor(1.0, dtype=L.float64)
    ),
    "x[mask] = long values": _set(lambda L, y: y > 4, lambda L: L.arange(7)),
    "x[mask] = one long": _set(lambda L, y: y > 4, lambda L: L.tensor([[3]])),
    "x[0, mask] = one long": _set(lambda L, y: (0, L.tensor([True, False, True, True])), lambda L: L.tensor(3)),
    "x[0-d long] = long row": _set(lambda L, y: L.tensor(1), lambda L: L.tensor([1, 2, 3, 4])),
    "index_put_ mask one long": lambda L, x: x.clone().index_put_((x > 4,), L.tensor(2)),
    "index_put_ mask one long accumulate": lambda L, x: x.clone().index_put_((x > 4,), L.tensor(2), accumulate=True),
    "index_put_ long": lambda L, x: x.clone().index_put_((L.tensor([0, 2]),), L.tensor(2)),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", WRITES_OF_ANOTHER_DTYPE)
def test_a_write_at_index_tensors_takes_a_value_of_another_dtype_where_torch_does(name, compiled):
    if compiled and name in ("x[mask] = long values", "x[0, mask] = one long"):
        pytest.skip("the positions of a mask with other indices (or of its rows) are known eagerly only")
    check(WRITES_OF_ANOTHER_DTYPE[name], M.astype(np.float32), compiled=compiled)


SEQUENCES = {  # torch reads a range, and a tuple inside the key, as a list: an index tensor
    "x[range(n), i]": lambda L, x: x[range(3), L.tensor([0, 2, 3])],
    "x[range]": lambda L, x: x[range(1, 3)],
    "x[:, range step]": lambda L, x: x[:, range(0, 4, 2)],
    "x[empty range]": lambda L, x: x[range(0)],
    "x[range, range]": lambda L, x: x[range(2), range(1, 3)],
    "x[tuple, 1]": lambda L, x: x[(0, 2), 1],
    "x[list, tuple]": lambda L, x: x[[0, 1], (1, 2)],
    "x[bool tuple,]": lambda L, x: x[(True, False, True),],
    "x[nested tuple,]": lambda L, x: x[((0, 1), (1, 2)),],
    "x[[range]] is x[range]": lambda L, x: x[[range(2)]],
    "x[range(n), i] = v": _set(lambda L, y: (range(3), L.tensor([0, 1, 2])), lambda L: -1.0),
    "x[tuple, tuple] = v": _set(lambda L, y: ((0, 1), (3, 3)), lambda L: L.tensor([5.0, 6.0], dtype=L.float64)),
    "x[tuple, tuple] = v of another dtype": _set(lambda L, y: ((0, 1), (3, 3)), lambda L: L.tensor([5.0, 6.0])),
    "x[range] = v of another dtype": _set(lambda L, y: range(2), lambda L: L.ones(4, dtype=L.float32)),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", SEQUENCES)
def test_a_range_or_a_tuple_in_the_key_indexes_as_a_list(name, compiled):
    if compiled and "bool" in name:
        pytest.skip("a bool mask's positions are known eagerly only")
    check(SEQUENCES[name], M, compiled=compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_the_negative_log_likelihood_of_picked_entries_has_torchs_gradient(compiled):
    """The torch.nn tutorial's `-input[range(target.shape[0]), target].mean()`."""
    def nll(L, x):
        return -x.log_softmax(-1)[range(3), L.tensor([1, 3, 0])].mean()

    check_gradients("nll of picked entries", nll, M / 10, compiled)
