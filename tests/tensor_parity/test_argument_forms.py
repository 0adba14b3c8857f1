"""Argument forms of reductions and differences against torch: diff's prepend / append of another dtype
(concatenated in the promoted dtype, as torch.cat) or another number of dims (torch's RuntimeError);
var / std / var_mean / std_mean with a bool where the dim goes (torch's var(input, unbiased) form, which
takes no other argument: TypeError); eagerly and inside @flame.compile."""

import numpy as np
import pytest

from tests.tensor_parity.common import check

I = np.array([[1, 5, 2, 9], [4, -3, 0, 7]])  # noqa: E741
F = np.array([[0.5, 2.25, -1.0, 3.0], [1.0, 1.0, 4.5, -2.0]])
B = np.array([[True, False, False, True], [False, True, True, True]])

DIFF = {
    "int input, float prepend": (lambda L, x, p: L.diff(x, prepend=p), I, F[:, :1]),
    "int input, float append": (lambda L, x, p: L.diff(x, 2, append=p), I, F[:, 1:3]),
    "int input, f32 prepend along dim 0": (lambda L, x, p: L.diff(x, dim=0, prepend=p), I, F[:1].astype(np.float32)),
    "bool input, int prepend": (lambda L, x, p: L.diff(x, prepend=p), B, I[:, :1]),
    "bool input, float append": (lambda L, x, p: x.diff(append=p), B, F[:, :2]),
    "f32 input, f64 prepend": (lambda L, x, p: L.diff(x, prepend=p, append=p), F.astype(np.float32), F[:, :1]),
    "u8 input, i32 append": (lambda L, x, p: L.diff(x, append=p), I.astype(np.uint8), -I[:, :2].astype(np.int32)),
    "0-d prepend": (lambda L, x, p: L.diff(x, prepend=p), F, np.array(2.0)),
    "prepend of fewer dims": (lambda L, x, p: L.diff(x, append=p), F, F[0]),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", list(DIFF))
def test_diff_concatenates_in_the_promoted_dtype(name, compiled):
    f, *args = DIFF[name]
    check(f, *args, compiled=compiled)


UNBIASED = {
    "var(unbiased=False)": (lambda L, x: x.var(False), F),
    "var(unbiased=True) of a 1-D tensor": (lambda L, x: L.var(x[0], True), F),
    "std(unbiased=False)": (lambda L, x: L.std(x, False), F),
    "std(unbiased=True) of f16": (lambda L, x: x.std(True), F.astype(np.float16)),
    "var_mean(unbiased=False)": (lambda L, x: L.var_mean(x, False), F),
    "std_mean(unbiased=True)": (lambda L, x: L.std_mean(x, True), F),
    "var(dim, unbiased, keepdim)": (lambda L, x: x.var(0, False, True), F),
    "var(bool, keepdim=True) refused": (lambda L, x: x.var(False, keepdim=True), F),
    "std(bool, correction=0) refused": (lambda L, x: L.std(x, True, correction=0), F),
    "var_mean(bool, keepdim=True) refused": (lambda L, x: L.var_mean(x, True, keepdim=True), F),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", list(UNBIASED))
def test_a_bool_in_place_of_dim_is_unbiased(name, compiled):
    f, *args = UNBIASED[name]
    check(f, *args, compiled=compiled, error=TypeError if "refused" in name else None)
