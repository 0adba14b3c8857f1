"""Tensor.as_strided / torch.as_strided against torch's, in f64: sliding windows, overlapping and strided
reads, an explicit storage_offset, views (transposed, sliced: their storage is their base's, their
offset the default; storage beyond the view's own elements gets no gradient), 0-d and empty sizes;
values and gradients (an element read twice gets both),
eager and inside @flame.compile; torch's errors (negative strides, lengths that differ, an offset or
extent beyond the storage); as_strided_ is a clear NotImplementedError. The result is a view, as torch's:
its layout (and Tensor.unfold's) is torch's and a write into it reaches the input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame

X = np.random.default_rng(0).standard_normal(12)

CASES = {
    "sliding windows": (lambda x: x, ((5, 4), (2, 1))),
    "overlapping": (lambda x: x, ((4, 4), (1, 1))),
    "strided": (lambda x: x, ((3, 2), (4, 2))),
    "offset": (lambda x: x, ((3,), (3,), 2)),
    "broadcast (stride 0)": (lambda x: x, ((3, 4), (0, 1), 1)),
    "of a transposed view": (lambda x: x.view(3, 4).t(), ((2, 3), (1, 4))),
    "of a sliced view": (lambda x: x.view(3, 4)[1:, 1:], ((2, 2), (1, 1))),
    # storage outside the view's own elements is read, and torch's gradient reaches none of it
    "of a column, reading beside it": (lambda x: x.view(3, 4).t()[1], ((2, 3), (3, 1), 2)),
    "of a slice, reading before it": (lambda x: x[4:], ((3,), (1,), 2)),
    "of every other column": (lambda x: x.view(3, 4)[:, ::2], ((2, 3), (1, 2), 1)),
    "0-d": (lambda x: x, ((), (), 5)),
    "empty": (lambda x: x, ((0, 3), (1, 1), 40)),
}


def _run(lib, name, compiled):
    view, args = CASES[name]
    x = lib.tensor(X, requires_grad=True)
    w = lib.tensor(np.cos(np.arange(int(np.prod(args[0])))).reshape(args[0]))

    def step(x):
        y = view(x).as_strided(*args)
        (y * w).sum().backward()
        return y.detach()

    y = (flame.compile(step) if compiled else step)(x)
    return y.numpy(), x.grad.numpy()


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("name", CASES)
def test_as_strided_as_torch(name, compiled):
    for a, b in zip(_run(torch, name, False), _run(flame, name, compiled)):
        np.testing.assert_allclose(b, a, rtol=1e-12)


def test_the_function_and_a_detached_view():
    for lib in (torch, flame):
        x = lib.tensor(X, requires_grad=True)
        np.testing.assert_array_equal(lib.as_strided(x, (2, 2), (3, 1), 1).detach().numpy(), X[[[1, 2], [4, 5]]])
        assert not x.detach().as_strided((2,), (1,)).requires_grad


@pytest.mark.parametrize("args", [((4, 3), (4, 1)), ((3,), (-1,)), ((3, 2), (1,)), ((2, 2), (1, 1), 11),
                                  ((2, 2), (1, 1), -1)])
def test_errors_as_torch(args):
    messages = []
    for lib in (torch, flame):
        with pytest.raises(RuntimeError) as e:
            lib.tensor(X).as_strided(*args)
        messages.append(str(e.value).split("\n")[0])
    assert messages[1] == messages[0]


def test_in_place_restride_is_refused_clearly():
    with pytest.raises(NotImplementedError, match="as_strided_: flame does not restride a tensor in place"):
        flame.tensor(X).as_strided_((2,), (1,))


WRITES = {
    "add_": lambda y: y.add_(1.0),
    "item assignment": lambda y: y.__setitem__(0, 5.0),
    "copy_": lambda y: y.copy_(y * 0 - 1),
    "zero_": lambda y: y.zero_(),
    "into a view of it": lambda y: y[1].mul_(2.0),
}


@pytest.mark.parametrize("write", WRITES.values(), ids=WRITES.keys())
def test_a_write_into_its_result_reaches_the_input_as_torch(write):
    """torch's as_strided is a view of the input's storage: a write into it (or a view of it) changes
    the input, eagerly and inside @flame.compile."""
    want = torch.tensor(X)
    write(want.view(3, 4)[1:].as_strided((3, 2), (2, 1)))
    got = flame.tensor(X)
    write(got.view(3, 4)[1:].as_strided((3, 2), (2, 1)))
    np.testing.assert_array_equal(got.numpy(), want.numpy())

    @flame.compile
    def step(x):
        write(x.view(3, 4)[1:].as_strided((3, 2), (2, 1)))
        return x * 1

    np.testing.assert_array_equal(step(flame.tensor(X)).numpy(), want.numpy())


def _written_through(lib, make, write_grad: bool):
    """(the result's layout, the storage after a write into the result, the leaf's gradient)."""
    x = lib.tensor(X, requires_grad=True)
    y = x * 1
    out = make(y, x)
    layout = (tuple(out.stride()), out.storage_offset(), out.requires_grad)
    w = lib.tensor(np.cos(np.arange(out.numel())).reshape(out.shape))
    if write_grad:
        out.mul_(w)
        y.sum().backward()
    else:
        with lib.no_grad():
            out.mul_(w)
    return layout, y.detach().numpy().copy(), None if x.grad is None else x.grad.numpy()


VIEW_INPUTS = {
    # of a view that requires grad, reading only its own elements: a view, as torch's
    "of a view that requires grad": (lambda y, x: y.view(3, 4)[1:].as_strided((3, 2), (2, 1)), True),
    "of a transposed view that requires grad": (lambda y, x: y.view(3, 4).t()[1:].as_strided((2, 2), (1, 4), 5), True),
    # through detach(): a view of the storage that carries no gradient
    "of a detached tensor": (lambda y, x: y.detach().as_strided((2, 2), (1, 4), 1), False),
    "of a detached view": (lambda y, x: y.detach()[2:].as_strided((2, 2), (1, 4)), False),
    "of a detached leaf": (lambda y, x: x.detach().view(3, 4)[1].as_strided((3,), (2,)), False),
}


@pytest.mark.parametrize("name", VIEW_INPUTS)
def test_its_result_is_a_view_that_a_write_reaches_as_torch(name):
    """as_strided of a view that requires grad and reads only its elements, or of a tensor through
    detach(), is a view of the storage in torch: its layout, a write into it and the gradient after the
    write are torch's."""
    make, write_grad = VIEW_INPUTS[name]
    want, got = _written_through(torch, make, write_grad), _written_through(flame, make, write_grad)
    assert got[0] == want[0]
    for a, b in zip(want[1:], got[1:]):
        np.testing.assert_array_equal(b, a)


def test_its_result_of_a_leaf_view_that_requires_grad_has_torchs_gradient():
    """A leaf that is a view (arange(...).view(...).requires_grad_()): the gradient of as_strided of a
    view of it reaches the leaf's elements that view holds, as torch's."""
    grads = []
    for lib in (torch, flame):
        x = lib.arange(12.0, dtype=lib.float64).view(3, 4).requires_grad_()
        y = x[1:].as_strided((2, 2), (1, 4), 2)  # storage 2 and 3 are not x[1:]'s
        (y * lib.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=lib.float64)).sum().backward()
        grads.append(x.grad.numpy())
    np.testing.assert_array_equal(grads[1], grads[0])


def test_a_write_into_its_result_of_a_view_that_requires_grad_reading_beside_it_is_refused():
    """The result of as_strided of a view that requires grad, reading storage outside the view (which
    torch's gradient does not reach), is a copy in flame, so a write into it, which torch's would make
    into the input, raises."""
    x = flame.tensor(X, requires_grad=True)
    with pytest.raises(flame.errors.ViewError, match="a write into the result of as_strided"):
        (x * 1).view(3, 4)[1:].as_strided((3, 2), (2, 1), 1).add_(1.0)


def _layout(t) -> tuple:
    return tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.is_contiguous(), t.tolist()


BASES = {
    "vector": lambda lib: lib.arange(24, dtype=lib.float64),
    "matrix": lambda lib: lib.arange(24, dtype=lib.float64).reshape(4, 6),
    "transposed": lambda lib: lib.arange(24, dtype=lib.float64).reshape(4, 6).t(),
    "every other": lambda lib: lib.arange(48, dtype=lib.float64)[1::2].reshape(4, 6),
    "3-d slice": lambda lib: lib.arange(48, dtype=lib.float64).reshape(2, 4, 6)[:, 1:],
}
AFTER = {
    "itself": lambda y: y,
    "a transpose": lambda y: y.transpose(0, -1),
    "a slice of the last dim": lambda y: y[..., 1:],
    "a row": lambda y: y[-1],
}


def _unfolds(x):
    for d in range(x.ndim):
        for size in (1, 2, 3):
            for step in (1, 2, 3):
                if size <= x.shape[d]:
                    yield x.unfold(d, size, step)


def _strideds(x):
    for size, stride, off in [((2, 2), (1, 2), 0), ((3,), (2,), 1), ((2, 3), (3, 1), 2), ((2, 2), (0, 1), 1),
                              ((4,), (1,), 5), ((3, 2), (1, 3), None), ((2, 2), (1, 1), 0), ((), (), 3)]:
        yield x.as_strided(size, stride, off)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("after", AFTER)
@pytest.mark.parametrize("base", BASES)
def test_unfold_and_as_strided_layouts_as_torch(base, after, compiled):
    """stride(), storage_offset(), is_contiguous() and values of Tensor.unfold's and as_strided's results
    and of views of them, over a grid of inputs, sizes, steps, strides and offsets."""
    def layouts(lib, x):
        outs = [AFTER[after](y) if y.ndim else y for y in (*_unfolds(x), *_strideds(x))]
        # (the stride of a dim of one element, and where an empty tensor starts, are not compared: flame's
        # select and slices there follow NumPy's)
        return [(tuple(y.shape), tuple(st if n > 1 else None for n, st in zip(y.shape, y.stride())),
                 y.storage_offset() if y.numel() else None, y.is_contiguous()) for y in outs], [y * 1 for y in outs]

    want_meta, want_vals = layouts(torch, BASES[base](torch))
    if compiled:
        seen = []

        @flame.compile
        def step(x):
            meta, vals = layouts(flame, x.reshape(-1)[:x.numel()].view(x.shape) if base == "vector" else x)
            seen.append(meta)
            return vals

        got_vals = step(BASES[base](flame).contiguous())
        got_meta = seen[0]
        if base in ("transposed", "every other", "3-d slice"):  # an argument's layout is its own, contiguous
            want_meta, want_vals = layouts(torch, BASES[base](torch).contiguous())
    else:
        got_meta, got_vals = layouts(flame, BASES[base](flame))
    assert got_meta == want_meta
    for g, w in zip(got_vals, want_vals):
        np.testing.assert_array_equal(g.numpy(), w.numpy())
