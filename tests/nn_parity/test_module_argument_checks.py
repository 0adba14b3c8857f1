"""Module constructors refuse the arguments PyTorch's refuse, with its wording, where accepting them would
compute something else: an Embedding padding_idx outside the table (a modulo would pick another row),
Hardtanh bounds out of order, a convolution's unknown padding string or padding='same' with a stride."""

from __future__ import annotations

import pytest
import torch

import flame

REFUSED = {
    "Embedding padding_idx past the end": (lambda L: L.nn.Embedding(4, 2, padding_idx=4),
                                           AssertionError, "Padding_idx must be within num_embeddings"),
    "Embedding padding_idx before the start": (lambda L: L.nn.Embedding(4, 2, padding_idx=-5),
                                               AssertionError, "Padding_idx must be within num_embeddings"),
    "EmbeddingBag padding_idx past the end": (lambda L: L.nn.EmbeddingBag(4, 2, padding_idx=4),
                                              AssertionError, "(?i)padding_idx must be within num_embeddings"),
    "Hardtanh bounds reversed": (lambda L: L.nn.Hardtanh(1.0, -1.0),
                                 AssertionError, r"max_val \(-1.0\) must be greater than min_val \(1.0\)"),
    "Hardtanh bounds equal": (lambda L: L.nn.Hardtanh(0.5, 0.5), AssertionError, "must be greater than min_val"),
    "Conv2d same with stride": (lambda L: L.nn.Conv2d(1, 1, 3, stride=(1, 2), padding="same"),
                                ValueError, "padding='same' is not supported for strided convolutions"),
    "Conv1d unknown padding string": (lambda L: L.nn.Conv1d(1, 1, 3, padding="full"),
                                      ValueError, "Invalid padding string 'full'"),
}


@pytest.mark.parametrize("name", REFUSED)
def test_refused_as_torch(name):
    build, kind, message = REFUSED[name]
    with pytest.raises(kind, match=message):
        build(torch)
    with pytest.raises(kind, match=message):
        build(flame)


@pytest.mark.parametrize("padding_idx, row", [(3, 3), (-1, 3), (-4, 0)])
def test_embedding_padding_idx_in_range(padding_idx, row):
    for lib in (torch, flame):
        m = lib.nn.Embedding(4, 2, padding_idx=padding_idx)
        assert m.padding_idx == row
        assert float(m.weight[row].abs().sum()) == 0.0


def test_same_padding_without_stride_builds():
    for lib in (torch, flame):
        assert lib.nn.Conv2d(1, 1, (3, 4), padding="same", dilation=2).padding == "same"
