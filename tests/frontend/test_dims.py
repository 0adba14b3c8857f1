"""Out-of-range dims raise IndexError (PyTorch's class) naming the user's line; 0-d tensors take dim 0
and -1 as PyTorch does (issue 14 items 5 and 8)."""

import numpy as np
import pytest

import flame

X = flame.ones(2, 3)
S = flame.tensor(1.0)

OUT_OF_RANGE = {
    "transpose": lambda: X.transpose(0, 5),
    "permute": lambda: X.permute(0, 3),
    "unsqueeze": lambda: X.unsqueeze(7),
    "flip": lambda: X.flip(4),
    "flatten": lambda: X.flatten(5),
    "cat": lambda: flame.cat([X, X], dim=5),
    "stack": lambda: flame.stack([X, X], dim=5),
    "sum": lambda: X.sum(2),
    "softmax": lambda: X.softmax(-3),
    "squeeze": lambda: X.squeeze(3),
    "gather": lambda: X.gather(3, flame.zeros(2, 3, dtype=flame.int64)),
    "argmax": lambda: X.argmax(4),
    "size": lambda: X.size(2),
    "scalar transpose": lambda: S.transpose(0, 1),
}


@pytest.mark.parametrize("name", OUT_OF_RANGE)
def test_out_of_range_dim_raises_index_error_at_the_users_line(name):
    with pytest.raises(IndexError, match="dimension out of range") as info:
        OUT_OF_RANGE[name]()
    assert "test_dims.py" in str(info.value)


@pytest.mark.parametrize("call", [lambda: X.expand(-1, 3, 4), lambda: X.expand(3), lambda: X.permute(0, 0)])
def test_bad_expand_and_permute_raise(call):
    with pytest.raises(flame.ShapeError):
        call()


def test_zero_d_tensors_take_dim_zero_like_pytorch():
    assert S.transpose(0, 0).item() == 1.0
    assert S.transpose(0, -1).item() == 1.0
    assert S.flip(0).item() == 1.0
    assert S.gather(0, flame.tensor(0)).item() == 1.0
    assert S.sum(0).item() == 1.0
    assert S.argmax(0).item() == 0
    assert S.unsqueeze(0).shape == (1,)
    assert S.flatten(0).shape == (1,)


def test_cat_of_zero_d_tensors_raises_a_shape_error():
    with pytest.raises(flame.ShapeError, match="zero-dimensional"):
        flame.cat([S, S])


def test_verifier_rejects_a_concat_of_zero_d_values():
    text = "graph g(%0: f32[] data) {\n  %1 = concat %0, %0 {axis=0} : f32[2]\n  return %1\n}\n"
    with pytest.raises(flame.VerifyError):
        flame.ir.parse(text)


def test_squeeze_of_a_dim_that_is_not_one_is_a_no_op():
    np.testing.assert_array_equal(X.squeeze(0).numpy(), X.numpy())
