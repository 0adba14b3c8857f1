"""Argument forms of reductions and differences against torch: diff's prepend / append of another dtype
(concatenated in the promoted dtype, as torch.cat) or another number of dims (torch's RuntimeError),
eagerly and inside @flame.compile."""

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
