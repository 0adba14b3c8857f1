"""logaddexp, logaddexp2 and hypot take tensors only, as torch's: a Python number operand raises torch's
TypeError (hypot failed with an AttributeError, logaddexp accepted it)."""

import pytest
import torch

import flame


@pytest.mark.parametrize("name", ["logaddexp", "logaddexp2", "hypot"])
@pytest.mark.parametrize("how", ["function", "function, number first", "method", "in place"])
def test_a_number_operand_is_a_type_error(name, how):
    for lib in (torch, flame):
        with pytest.raises(TypeError, match="must be Tensor"):
            _call(lib, name, how, lib.tensor([3.0, 4.0]))


def _call(lib, name, how, x):
    if how == "function":
        return getattr(lib, name)(x, 2.0)
    if how == "function, number first":
        return getattr(lib, name)(2.0, x)
    if how == "method":
        return getattr(x, name)(2)
    return getattr(x.clone(), name + "_")(2.0) if hasattr(x, name + "_") else getattr(x, name)(True)
