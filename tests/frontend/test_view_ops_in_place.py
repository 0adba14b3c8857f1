"""torch's in-place view ops (squeeze_, unsqueeze_, transpose_, swapaxes_, swapdims_): self where the
layout stays, torch's errors first, and a NotImplementedError naming the out-of-place spelling where
torch would restride the tensor."""

import pytest

import flame

torch = pytest.importorskip("torch")

SAME = [("squeeze_", (0,)), ("squeeze_", ()), ("squeeze_", ((0, 1),)), ("transpose_", (1, -1)),
        ("swapaxes_", (0, 0)), ("swapdims_", (-1, 1))]
RESTRIDE = [("squeeze_", (1,)), ("squeeze_", ()), ("unsqueeze_", (0,)), ("transpose_", (0, 1)),
            ("swapaxes_", (0, 2)), ("swapdims_", (1, 2))]


@pytest.mark.parametrize("name,args", SAME)
def test_a_layout_that_stays_is_self(name, args):
    x, tx = flame.ones(2, 3), torch.ones(2, 3)
    assert getattr(x, name)(*args) is x and getattr(tx, name)(*args) is tx
    assert x.shape == tuple(tx.shape)


@pytest.mark.parametrize("name,args", RESTRIDE)
def test_a_new_layout_raises_naming_the_out_of_place_op(name, args):
    x = flame.ones(2, 1, 3)
    with pytest.raises(NotImplementedError, match=f"{name}: .*x = x.{name[:-1]}"):
        getattr(x, name)(*args)
    assert x.shape == (2, 1, 3)


@pytest.mark.parametrize("name,args", SAME + RESTRIDE)
def test_a_leaf_that_requires_grad_is_torchs_error(name, args):
    x, tx = flame.ones(2, 1, 3, requires_grad=True), torch.ones(2, 1, 3, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        getattr(tx, name)(*args)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        getattr(x, name)(*args)


@pytest.mark.parametrize("name,args", [("squeeze_", (5,)), ("unsqueeze_", (4,)), ("transpose_", (0, 3))])
def test_a_dim_out_of_range_is_torchs_index_error(name, args):
    with pytest.raises(IndexError):
        getattr(torch.ones(2, 3), name)(*args)
    with pytest.raises(IndexError):
        getattr(flame.ones(2, 3), name)(*args)


def test_compiled_keeps_history():
    @flame.compile
    def f(x):
        y = x * 2
        return y.squeeze_(0).sum()

    x = flame.ones(2, 3, requires_grad=True)
    f(x).backward()
    assert x.grad.numpy().tolist() == [[2.0] * 3] * 2
