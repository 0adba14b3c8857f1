"""hstack, vstack, dstack, column_stack, atleast_3d, tensor_split (sections and indices, negative and
backward cuts, Tensor.tensor_split), fliplr and flipud against torch: values, shapes and gradients,
eager and inside @flame.compile."""

import numpy as np
import pytest
import torch

import flame
from tests.tensor_parity.common import check

A = np.arange(24.0).reshape(2, 3, 4)
V = np.arange(5.0)

CASES = {
    "hstack 1-D": (lambda L, x: L.hstack([x[0, 0], x[1, 1], L.tensor(7.0, dtype=x.dtype)]), A),
    "hstack 2-D": (lambda L, x: L.hstack([x[0], x[1, :, :2]]), A),
    "vstack": (lambda L, x: L.vstack([x[0, 0], x[1], L.tensor(1.0, dtype=x.dtype).expand(4)]), A),
    "dstack": (lambda L, x: L.dstack([x[0], x[1]]), A),
    "dstack 1-D": (lambda L, x: L.dstack([x[0, 0], x[1, 1]]), A),
    "column_stack": (lambda L, x: L.column_stack([x[0, 0], x[1, :2, :].T, L.tensor(3.0, dtype=x.dtype).expand(4)]), A),
    "atleast_3d": (lambda L, x: [t * 2 for t in L.atleast_3d(x[0, 0, 0], x[0, 0], x[0], x)], A),
    "tensor_split sections": (lambda L, x: L.tensor_split(x, 3, dim=2), A),
    "tensor_split uneven": (lambda L, x: x.tensor_split(3, 0), np.arange(8.0)),
    "tensor_split indices": (lambda L, x: L.tensor_split(x, [1, 3], dim=-1), A),
    "tensor_split backward cut": (lambda L, x: x.tensor_split([3, 1, -1, 9], 0), np.arange(8.0)),
    "tensor_split more sections": (lambda L, x: x.tensor_split(7), V),
    "fliplr": (lambda L, x: L.fliplr(x), A),
    "flipud": (lambda L, x: x.flipud(), A),
}


def _flat(out):
    return list(out) if isinstance(out, (list, tuple)) else [out]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", CASES)
def test_matches_torch(name, compiled):
    fn, x = CASES[name]
    t = torch.tensor(x, requires_grad=True)
    want = _flat(fn(torch, t))
    sum(((w * (k + 1)).sum() for k, w in enumerate(want)), torch.tensor(0.0, dtype=torch.float64)).backward()

    def run(a):
        outs = _flat(fn(flame, a))
        grad = flame.grad(lambda b: sum(((w * (k + 1)).sum() for k, w in enumerate(_flat(fn(flame, b)))),
                                        flame.tensor(0.0, dtype=flame.float64)))(a)
        return (*outs, grad)

    *got, grad = (flame.compile(run) if compiled else run)(flame.tensor(x))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert tuple(g.shape) == tuple(w.shape)
        np.testing.assert_array_equal(g.numpy(), w.detach().numpy())
    np.testing.assert_array_equal(grad.numpy(), t.grad.numpy())


def test_bad_arguments_raise():
    with pytest.raises(flame.ShapeError, match="fliplr"):
        flame.fliplr(flame.ones(3))
    with pytest.raises(flame.ShapeError, match="tensor_split"):
        flame.ones(3).tensor_split(0)


@pytest.mark.parametrize("kw", [{"sections": 4}, {"indices": [1, -2]}, {"sections": 2, "dim": 1}])
def test_tensor_split_takes_torchs_keywords(kw):
    x = np.arange(12.0).reshape(6, 2)
    for split in (lambda L, t: L.tensor_split(t, **kw), lambda L, t: t.tensor_split(**kw)):
        want, got = split(torch, torch.tensor(x)), split(flame, flame.tensor(x))
        assert [g.numpy().tolist() for g in got] == [w.numpy().tolist() for w in want]
    with pytest.raises(TypeError):
        torch.tensor(x).tensor_split()
    with pytest.raises(flame.ArgumentTypeError, match="tensor_split"):
        flame.tensor(x).tensor_split(2, **kw)


EMPTY_SPLITS = {
    "split of an empty dim": lambda L, x: x.split(1),
    "split of an empty last dim": lambda L, x: x.T.split(2, 1),
    "torch.split of an empty dim": lambda L, x: L.split(x, 3),
    "unsafe_split of an empty dim": lambda L, x: x.unsafe_split(2),
    "chunk of an empty dim": lambda L, x: x.chunk(2),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", EMPTY_SPLITS)
def test_an_empty_dim_splits_into_one_empty_piece(name, compiled):
    """torch splits a dim of size 0 into max(ceil(0 / size), 1) = 1 empty piece (it gave none)."""
    check(EMPTY_SPLITS[name], np.zeros((0, 3)), compiled=compiled)
