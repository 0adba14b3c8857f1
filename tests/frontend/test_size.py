"""flame.Size against torch.Size: x.shape and x.size() are one (eager and traced), a tuple equal to the
tuple of its ints, with numel(), slices, concatenation and repetition that stay a Size, and torch's
constructor checks."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import flame

torch = pytest.importorskip("torch")


def test_shape_and_size_are_a_size_eagerly_and_traced():
    x = flame.ones(2, 3)
    assert isinstance(x.shape, flame.Size) and isinstance(x.size(), flame.Size)
    assert x.shape == flame.Size([2, 3]) == (2, 3) and x.size(1) == 3 and type(x.size(1)) is int
    seen = []

    @flame.compile
    def f(a):
        seen.append((type(a.shape), a.shape.numel(), a.shape[1:]))
        return a.reshape(a.shape[:1] + (-1,))

    assert f(flame.ones(2, 3, 4)).shape == (2, 12)
    assert seen[0][0] is flame.Size and seen[0][1] == 24 and seen[0][2] == flame.Size([3, 4])


@pytest.mark.parametrize("expr", [
    lambda S: S([2, 3])[1:], lambda S: S([2, 3]) + (4,), lambda S: (4,) + S([2, 3]), lambda S: S([2, 3]) * 2,
    lambda S: 2 * S([2, 3]), lambda S: S(), lambda S: S([2, 3])[0], lambda S: S([2, 3]).numel(),
    lambda S: S([]).numel(), lambda S: S(S([5, 6])), lambda S: S((np.int64(3), 4)), lambda S: S([2, 3]) == (2, 3),
    lambda S: S([2, 3]).index(3), lambda S: S([2, 3]).count(2), lambda S: len(S([1, 1, 1])),
    lambda S: hash(S([2, 3])) == hash((2, 3)),
])
def test_values_and_types_as_torch(expr):
    got, want = expr(flame.Size), expr(torch.Size)
    assert got == want
    assert (type(got) is flame.Size) == (type(want) is torch.Size), (type(got), type(want))


@pytest.mark.parametrize("bad", [[2.5], 3, ["a"], [None]])
def test_constructor_errors_as_torch(bad):
    with pytest.raises(TypeError) as want:
        torch.Size(bad)
    with pytest.raises(TypeError) as got:
        flame.Size(bad)
    if "item 0" in str(want.value):
        assert "item 0 is" in str(got.value) and type(bad[0]).__name__ in str(got.value)


def test_zero_dim_integer_tensor_is_an_item_and_a_float_one_is_not():
    assert flame.Size([flame.tensor(3)]) == torch.Size([torch.tensor(3)]) == (3,)
    with pytest.raises(TypeError):
        torch.Size([torch.tensor(3.0)])
    with pytest.raises(TypeError):
        flame.Size([flame.tensor(3.0)])


def test_repr_pickle_and_creation_from_a_size():
    s = flame.Size([2, 3])
    assert repr(s) == "flame.Size([2, 3])" and str(flame.Size()) == "flame.Size([])"
    assert pickle.loads(pickle.dumps(s)) == s and type(pickle.loads(pickle.dumps(s))) is flame.Size
    assert flame.zeros(s).shape == s and flame.ones(2, 3).new_zeros(s).shape == s
    assert flame.ones(2, 3).view(flame.Size([3, 2])).shape == (3, 2)
