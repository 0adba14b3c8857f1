"""format(tensor, spec) against torch: a 0-d tensor formats as its Python number (the
f"loss {loss:.4f}" idiom), other tensors and Parameters as object.__format__ does."""

import pytest
import torch

import flame


@pytest.mark.parametrize(
    "make,spec",
    [
        (lambda L: L.tensor(0.123456, dtype=L.float64), ".4f"),
        (lambda L: L.tensor(0.25, requires_grad=True), ".3f"),
        (lambda L: L.tensor(0.25), ""),
        (lambda L: L.tensor(7), "5d"),
        (lambda L: L.tensor(True), ""),
        (lambda L: L.tensor(1234.5, dtype=L.float64), ".2e"),
    ],
)
def test_zero_dim_tensor_formats_as_its_number(make, spec):
    assert format(make(flame), spec) == format(make(torch), spec)


def test_other_tensors_format_as_object_as_torch():
    with pytest.raises(TypeError):
        format(torch.tensor([1.0]), ".3f")
    with pytest.raises(TypeError):
        format(flame.tensor([1.0]), ".3f")
    with pytest.raises(TypeError):
        format(flame.nn.Parameter(flame.tensor(1.0)), ".3f")
    assert format(flame.tensor([1.0]), "") == repr(flame.tensor([1.0]))
