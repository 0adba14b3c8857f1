"""Dynamic sizes (flame/frontend/dynamic.py) with a body that writes through a view of a tensor whose size
follows the batch, or makes a tensor from Python values: every size, the ones instantiated from the
template included, gives torch's values and gradients; a constant that cannot follow the size makes the
dim traced per size, with a RecompileWarning saying why."""

import warnings

import numpy as np
import pytest
import torch

import flame

SIZES = [3, 4, 5, 6, 2, 7]  # the template is made at 4; 5 (traced too, to check it), 6, 2 and 7 instantiated


def _written(write):
    def body(lib, x):
        y = x * 2
        write(lib, y, x)
        return y
    return body


BODIES = {
    "column_mul_": _written(lambda lib, y, x: y[:, 0].mul_(2)),
    "row_of_transpose": _written(lambda lib, y, x: y.t()[0].zero_()),
    "last_row_fill_": _written(lambda lib, y, x: y[-1].fill_(5)),
    "slice_setitem": _written(lambda lib, y, x: y.__setitem__(slice(1, None), 0)),
    "column_setitem": _written(lambda lib, y, x: y.__setitem__((slice(None), 0), 1)),
    "view_of_view_copy_": _written(lambda lib, y, x: y[:, 1:][:, 0].copy_(x[:, 0])),
    "data_mul_": _written(lambda lib, y, x: y.data.mul_(2)),
    "data_column_mul_": _written(lambda lib, y, x: y.data[:, 1].mul_(2)),
    "narrow_zero_": _written(lambda lib, y, x: y.narrow(0, 1, y.shape[0] - 2).zero_()),
    "mask_setitem": _written(lambda lib, y, x: y.__setitem__(x > 0, 0)),
    "arange_mask_setitem": _written(lambda lib, y, x: y.__setitem__(lib.arange(y.shape[0]) % 2 == 0, 0)),
    "masked_fill_": _written(lambda lib, y, x: y.masked_fill_(x < 0, 3.0)),
    "index_put_": _written(lambda lib, y, x: y.index_put_((lib.arange(y.shape[0] - 1),), y[1:] * 3)),
    "expanded_masked_fill_": lambda lib, x: _expanded_fill(lib, x),
}


def _expanded_fill(lib, x):
    b = x[:1].detach() * 1
    b.expand(x.shape[0], 3).masked_fill_(x[:, :1].expand(x.shape[0], 3) > 0, 1.0)  # a fill of shared elements
    return x * b


def _check(body, backward: bool, sizes=SIZES, dynamic=None):
    """Run body compiled and in torch (float64) at each size; returns the compiled function."""
    @flame.compile(dynamic=dynamic)
    def f(x):
        y = body(flame, x)
        if backward:
            (y * y).sum().backward()
        return y

    for n in sizes:
        a = np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32)
        x, xt = flame.tensor(a, requires_grad=backward), torch.tensor(a, dtype=torch.float64, requires_grad=backward)
        yt = body(torch, xt)
        if backward:
            (yt * yt).sum().backward()
        np.testing.assert_allclose(f(x).numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-5, err_msg=f"size {n}")
        if backward:
            np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-5, err_msg=f"size {n}")
    return f


@pytest.mark.filterwarnings("ignore:Use of masked_fill_ on expanded tensors is deprecated")  # torch's
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("name", sorted(BODIES))
def test_writes_through_views_follow_the_size(name, backward):
    with warnings.catch_warnings():
        warnings.simplefilter("error", flame.RecompileWarning)  # each size after the third instantiated, silently
        f = _check(BODIES[name], backward)
    stats = f.stats()
    assert (stats.traces, stats.instantiations) == (3, len(SIZES) - 2)


def test_writes_through_views_with_the_batch_dynamic_from_the_first_call():
    def body(lib, x):
        y = x * 2
        y.data[:, 1].mul_(3)
        y[-1] = 7
        return y

    with warnings.catch_warnings():
        warnings.simplefilter("error", flame.RecompileWarning)
        f = _check(body, backward=True, sizes=[5, 3, 8, 2, 9], dynamic=True)
    assert (f.stats().traces, f.stats().instantiations) == (3, 4)  # the first, its probe at 6, the check at 3


def test_narrow_past_the_end_at_an_instantiated_size_raises_as_eagerly():
    @flame.compile
    def f(x):
        y = x * 2
        y.narrow(0, 1, 2).zero_()
        return y

    for n in (3, 4, 5):
        f(flame.tensor(np.ones((n, 3), np.float32)))
    with pytest.raises(flame.ShapeError, match="narrow: start 1 and length 2 exceed dimension 0 of size 2"):
        f(flame.tensor(np.ones((2, 3), np.float32)))


@pytest.mark.parametrize("name, body, at", [
    ("a number", lambda lib, x: x + lib.tensor(float(x.shape[0])), "has other values at sizes 3 and 4"),
    ("an array", lambda lib, x: x + lib.tensor(np.arange(x.shape[0], dtype=np.float32))[:, None],
     "has other shapes at sizes 3 and 4"),
])
def test_a_constant_made_from_the_size_is_traced_per_size(name, body, at):
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        f = _check(body, backward=False)
    said = [str(w.message) for w in warned if issubclass(w.category, flame.RecompileWarning)]
    assert len(said) == len(SIZES) - 1 and "cannot be dynamic" in said[0], said  # each size after: re-traced
    assert "a tensor made in the body from Python values" in said[0] and at in said[0]
    assert (f.stats().traces, f.stats().instantiations) == (len(SIZES), 0)


def test_a_constant_equal_at_the_two_sizes_is_checked_at_the_third():
    # n // 2 is 2 at sizes 4 and 5, 3 at 6: the trace that checks the template at 6 tells them apart
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        f = _check(lambda lib, x: x + lib.tensor(float(x.shape[0] // 2)), backward=False, sizes=[4, 5, 6, 7, 3])
    said = [str(w.message) for w in warned if issubclass(w.category, flame.RecompileWarning)]
    assert any("does not hold" in m and "has other values at sizes 5 and 6" in m for m in said), said
    assert f.stats().instantiations == 0


def test_a_constant_that_does_not_depend_on_the_size_stays_dynamic():
    with warnings.catch_warnings():
        warnings.simplefilter("error", flame.RecompileWarning)
        f = _check(lambda lib, x: x * lib.tensor([1.0, -2.0, 3.0]), backward=True)
    assert (f.stats().traces, f.stats().instantiations) == (3, len(SIZES) - 2)
