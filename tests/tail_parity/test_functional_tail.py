"""nn.functional's long tail against torch in f64: unfold/fold, grid_sample/affine_grid, embedding_bag,
pixel (un)shuffle, similarities and distances, normalize, one_hot; values and gradients, eager and
compiled."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.tail_parity.common import Fixed, check_fn, raises_like, rng

R = rng(1)
X4 = R.standard_normal((2, 3, 5, 6))
X3 = R.standard_normal((2, 4, 7))
A, B = R.standard_normal((4, 5)), R.standard_normal((4, 5))
A3, B3 = R.standard_normal((2, 4, 3)), R.standard_normal((2, 6, 3))
THETA = np.array([[[0.9, -0.2, 0.1], [0.3, 1.1, -0.05]], [[1.2, 0.4, 0.0], [-0.1, 0.8, 0.2]]])
GRID = R.uniform(-1.3, 1.3, (2, 4, 3, 2))
W_EMB = R.standard_normal((10, 3))
IDX = np.array([1, 2, 4, 5, 4, 3, 2, 9])
OFFSETS = np.array([0, 2, 2, 5])
PSW = R.random(8)

FN = {
    "unfold": (lambda F, x: F.nn.functional.unfold(x, (2, 3)), [X4]),
    "unfold_all": (
        lambda F, x: F.nn.functional.unfold(x, (3, 2), dilation=(1, 2), padding=1, stride=(2, 1)),
        [X4],
    ),
    "fold": (lambda F, x: F.nn.functional.fold(x, (4, 5), (2, 2)), [R.standard_normal((2, 12, 12))]),
    "fold_all": (
        lambda F, x: F.nn.functional.fold(x, (5, 6), (2, 3), dilation=(2, 1), padding=1, stride=2),
        [R.standard_normal((1, 6, 9))],
    ),
    "fold_unbatched": (lambda F, x: F.nn.functional.fold(x, (4, 5), 2), [R.standard_normal((8, 12))]),
    "unfold_fold": (
        lambda F, x: F.nn.functional.fold(F.nn.functional.unfold(x, 3, padding=1), (5, 6), 3, padding=1),
        [X4],
    ),
    "pixel_shuffle": (lambda F, x: F.nn.functional.pixel_shuffle(x, 2), [R.standard_normal((2, 8, 3, 2))]),
    "pixel_unshuffle": (lambda F, x: F.nn.functional.pixel_unshuffle(x, 2), [R.standard_normal((2, 2, 4, 6))]),
    "pixel_shuffle_5d": (lambda F, x: F.nn.functional.pixel_shuffle(x, 3), [R.standard_normal((2, 1, 9, 2, 1))]),
    "cosine_similarity": (lambda F, a, b: F.nn.functional.cosine_similarity(a, b), [A, B]),
    "cosine_similarity_dim0_bcast": (
        lambda F, a, b: F.nn.functional.cosine_similarity(a, b, dim=0, eps=1e-3),
        [A, B[:1]],
    ),
    "cosine_similarity_zero": (
        lambda F, a, b: F.nn.functional.cosine_similarity(a, b, dim=-1),
        [np.vstack([A[:2], np.zeros((1, 5))]), B[:3]],
    ),
    "pairwise_distance": (lambda F, a, b: F.nn.functional.pairwise_distance(a, b), [A, B]),
    "pairwise_distance_p1_keepdim": (
        lambda F, a, b: F.nn.functional.pairwise_distance(a, b, p=1.0, keepdim=True),
        [A, B],
    ),
    "pairwise_distance_p3": (lambda F, a, b: F.nn.functional.pairwise_distance(a, b, p=3.0, eps=1e-3), [A, B]),
    "pairwise_distance_inf": (lambda F, a, b: F.nn.functional.pairwise_distance(a, b, p=float("inf")), [A, B]),
    "pairwise_distance_1d": (lambda F, a, b: F.nn.functional.pairwise_distance(a, b), [A[0], B[0]]),
    "cdist": (lambda F, a, b: F.cdist(a, b), [A3, B3]),
    "cdist_p1": (lambda F, a, b: F.cdist(a, b, p=1.0), [A3, B3]),
    "cdist_p3": (lambda F, a, b: F.cdist(a, b, p=3.0), [A3, B3]),
    "cdist_inf": (lambda F, a, b: F.cdist(a, b, p=float("inf")), [A3, B3]),
    "cdist_2d": (lambda F, a, b: F.cdist(a, b), [A, B[:3]]),
    "normalize": (lambda F, x: F.nn.functional.normalize(x), [A]),
    "normalize_p1_dim0": (lambda F, x: F.nn.functional.normalize(x, p=1.0, dim=0), [A]),
    "normalize_zero_row": (lambda F, x: F.nn.functional.normalize(x, dim=-1), [np.vstack([A, np.zeros((1, 5))])]),
    "normalize_inf": (lambda F, x: F.nn.functional.normalize(x, p=float("inf"), dim=1), [A]),
    "one_hot": (lambda F, y: F.nn.functional.one_hot(y, 5), [Fixed(np.array([[0, 3], [4, 1]]))]),
    "one_hot_infer": (lambda F, y: F.nn.functional.one_hot(y), [Fixed(np.array([0, 3, 2]))]),
    "affine_grid": (lambda F, t: F.nn.functional.affine_grid(t, [2, 3, 4, 5], align_corners=False), [THETA]),
    "affine_grid_ac": (lambda F, t: F.nn.functional.affine_grid(t, [2, 3, 4, 5], align_corners=True), [THETA]),
    "embedding_bag_mean": (
        lambda F, i, w, o: F.nn.functional.embedding_bag(i, w, o),
        [Fixed(IDX), W_EMB, Fixed(OFFSETS)],
    ),
    "embedding_bag_sum_psw": (
        lambda F, i, w, o, s: F.nn.functional.embedding_bag(i, w, o, mode="sum", per_sample_weights=s),
        [Fixed(IDX), W_EMB, Fixed(OFFSETS), PSW],
    ),
    "embedding_bag_last_offset": (
        lambda F, i, w, o: F.nn.functional.embedding_bag(i, w, o, mode="sum", include_last_offset=True),
        [Fixed(IDX), W_EMB, Fixed(np.array([0, 2, 5, 8]))],
    ),
    "embedding_bag_padding_idx": (
        lambda F, i, w, o: F.nn.functional.embedding_bag(i, w, o, padding_idx=4),
        [Fixed(IDX), W_EMB, Fixed(OFFSETS)],
    ),
    "embedding_bag_2d_max": (
        lambda F, i, w: F.nn.functional.embedding_bag(i, w, mode="max"),
        [Fixed(IDX.reshape(2, 4)), W_EMB],
    ),
    "embedding_bag_2d_mean": (
        lambda F, i, w: F.nn.functional.embedding_bag(i, w),
        [Fixed(IDX.reshape(4, 2)), W_EMB],
    ),
}


EAGER_ONLY = {"one_hot_infer"}  # a width that depends on the values (compiled: test_one_hot_needs_classes)
RUNS = [(n, c) for n in FN for c in (False, True) if not (c and n in EAGER_ONLY)]


@pytest.mark.parametrize("name,compiled", RUNS, ids=[f"{n}-{'compiled' if c else 'eager'}" for n, c in RUNS])
def test_functional(name, compiled):
    fn, arrays = FN[name]
    check_fn(fn, arrays, compiled)


def test_one_hot_needs_classes_compiled():
    with pytest.raises(flame.TraceError, match="num_classes"):
        flame.compile(lambda y: flame.nn.functional.one_hot(y))(flame.tensor(np.array([0, 3, 2])))


GS_IN = R.standard_normal((2, 3, 4, 5))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample(mode, padding, align, compiled):
    fn = lambda F, x, g: F.nn.functional.grid_sample(x, g, mode=mode, padding_mode=padding, align_corners=align)
    grid = GRID if mode == "bilinear" else Fixed(GRID)
    check_fn(fn, [GS_IN, grid], compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize(
    "name,fn,arrays",
    [
        ("pixel_shuffle_channels", lambda F, x: F.nn.functional.pixel_shuffle(x, 2), [X4]),
        ("pixel_unshuffle_size", lambda F, x: F.nn.functional.pixel_unshuffle(x, 2), [X4]),
        ("fold_blocks", lambda F, x: F.nn.functional.fold(x, (4, 5), 2), [R.standard_normal((2, 12, 11))]),
        ("one_hot_too_few", lambda F, y: F.nn.functional.one_hot(y, 3), [Fixed(np.array([0, 3]))]),
        ("grid_sample_mode", lambda F, x, g: F.nn.functional.grid_sample(x, g, mode="bogus"), [GS_IN, GRID]),
        (
            "grid_sample_padding",
            lambda F, x, g: F.nn.functional.grid_sample(x, g, padding_mode="bogus"),
            [GS_IN, GRID],
        ),
        (
            "embedding_bag_mode",
            lambda F, i, w: F.nn.functional.embedding_bag(i, w, mode="median"),
            [Fixed(IDX.reshape(2, 4)), W_EMB],
        ),
    ],
)
def test_functional_errors(name, fn, arrays, compiled):
    raises_like(fn, arrays, compiled and name != "one_hot_too_few")  # a check of the values: eager


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("method", ["view_as", "reshape_as"])
def test_view_as_reshape_as(method, compiled):
    check_fn(lambda L, x, y: getattr(x, method)(y) * 3.0, [R.standard_normal(12), Fixed(np.zeros((3, 4)))], compiled)


def test_view_as_shares_memory():
    """A write through view_as reaches the base; a transposed tensor cannot be viewed flat (both as torch)."""
    x, tx = flame.zeros(6), torch.zeros(6)
    x.view_as(flame.zeros(2, 3))[1, 2] = 5.0
    tx.view_as(torch.zeros(2, 3))[1, 2] = 5.0
    np.testing.assert_array_equal(x.numpy(), tx.numpy())
    with pytest.raises(RuntimeError):
        torch.zeros(2, 3).t().view_as(tx)
    with pytest.raises(flame.ShapeError, match="view size is not compatible"):
        flame.zeros(2, 3).t().view_as(x)
