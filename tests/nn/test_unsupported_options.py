"""PyTorch options flame does not implement are refused at the user's line with a FlameError that is also
torch-style NotImplementedError (never run with other results than torch's): sparse embedding and bag gradients,
EmbeddingBag's max_norm and scale_grad_by_freq, an optimizer's differentiable=True."""

from __future__ import annotations

import inspect

import pytest

import flame
from flame.errors import FlameError, UnsupportedError

CASES = {
    "Embedding sparse": (lambda: flame.nn.Embedding(5, 3, sparse=True), "Embedding: sparse gradients"),
    "EmbeddingBag sparse": (lambda: flame.nn.EmbeddingBag(5, 3, sparse=True), "EmbeddingBag: sparse gradients"),
    "EmbeddingBag max_norm": (lambda: flame.nn.EmbeddingBag(5, 3, max_norm=1.0), "EmbeddingBag: max_norm"),
    "EmbeddingBag scale_grad_by_freq": (
        lambda: flame.nn.EmbeddingBag(5, 3, scale_grad_by_freq=True),
        "EmbeddingBag: max_norm and scale_grad_by_freq",
    ),
    "SGD differentiable": (lambda: flame.optim.SGD([flame.nn.Parameter(flame.ones(2))], differentiable=True), "SGD: "),
    "AdamW differentiable": (
        lambda: flame.optim.AdamW([flame.nn.Parameter(flame.ones(2))], differentiable=True),
        "AdamW: differentiable=True",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_refused_at_the_users_line(case):
    make, words = CASES[case]
    line = inspect.getsourcelines(make)[1]
    with pytest.raises(UnsupportedError, match=words) as info:
        make()
    assert isinstance(info.value, FlameError) and isinstance(info.value, NotImplementedError)
    assert f"at test_unsupported_options.py:{line}" in str(info.value)


def test_functional_embedding_bag_refuses_sparse_gradients_at_the_users_line():
    w = flame.nn.Parameter(flame.ones(5, 3))
    line = inspect.currentframe().f_lineno + 2
    with pytest.raises(NotImplementedError, match="embedding_bag: sparse gradients") as info:
        flame.nn.functional.embedding_bag(flame.tensor([[0, 1]]), w, sparse=True)
    assert f"at test_unsupported_options.py:{line}" in str(info.value)
