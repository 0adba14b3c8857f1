"""Norm gradients along lines holding an infinity or a NaN, against torch's norm_backward and
renorm_backward in f64, eagerly and inside @flame.compile: an ord < 1 norm's gradient at a zero element is
0 * norm ** (1 - ord), NaN where the norm is infinite or NaN; the inf / -inf norm's goes to the elements
whose |x| is the norm or NaN, times sgn(x) (0 at a NaN), so a line holding a NaN gets zeros; renorm passes
the cotangent whole to a sub-tensor whose norm does not exceed maxnorm, a NaN norm included."""

import numpy as np
import pytest

from tests.tensor_parity.common import check_gradients

INF, NAN = float("inf"), float("nan")
ROWS = np.array([[0.0, 1.0, INF], [0.0, 1.0, NAN], [0.0, 0.0, 0.0], [0.0, 2.0, -3.0], [NAN, -1.0, 0.0],
                 [INF, NAN, 0.0], [-4.0, 4.0, 1.0]])
W = np.linspace(0.5, 2.0, ROWS.shape[0])


def _norm(ord, dim=1, keepdim=False):
    def f(L, x):
        y = L.linalg.vector_norm(x, ord, dim=dim, keepdim=keepdim)
        return (y * L.tensor(W).reshape(y.shape)).sum()

    return f


CASES = {
    **{f"vector_norm ord={o}": (_norm(o), ROWS) for o in (0.5, -0.5, -1.0, INF, -INF)},
    "vector_norm ord=0.5 keepdim": (_norm(0.5, keepdim=True), ROWS),
    "vector_norm ord=inf over dim 0": (lambda L, x: (L.linalg.vector_norm(x, INF, dim=0) * L.tensor(W[:3])).sum(),
                                       ROWS),
    "norm p=0.5 of everything": (lambda L, x: L.norm(x[:2], p=0.5), ROWS),
    **{f"renorm p={p}": (lambda L, x, p=p: (L.renorm(x, p, 0, 1.0) * L.tensor(W)[:, None]).sum(), ROWS)
       for p in (0.5, 1.0, 2.0, INF)},
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", CASES)
def test_norm_gradient_with_non_finite_elements(name, compiled):
    check_gradients(name, *CASES[name], compiled)
