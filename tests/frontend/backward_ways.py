"""A program's backward run the three ways a user can (eagerly, inside @flame.compile, outside it on the
compiled result), and x's gradient or torch's in-place error from it: the harness of the counted-write
and .data tests that hold flame against torch."""

from __future__ import annotations

import numpy as np

import flame

WAYS = ("eager", "backward inside", "backward outside")
MODIFIED = "modified by an inplace operation"


def run_backward(lib, body, x, way: str) -> None:
    """body(lib, x).backward() run `way` (one of WAYS; the compiled ways are flame's)."""
    if way == "eager":
        body(lib, x).backward()
    elif way == "backward inside":
        flame.compile(lambda x: body(flame, x).backward())(x)
    else:
        flame.compile(lambda x: body(flame, x))(x).backward()


def grad_or_none(lib, body, way: str, x, where: str):
    """x's gradient after run_backward, or None where it raises torch's in-place error (for flame, one
    naming a line of the test file `where`)."""
    try:
        run_backward(lib, body, x, way)
    except RuntimeError as e:
        assert MODIFIED in str(e), e
        if lib is flame:  # the line that recorded the node
            assert where in str(e), e
        return None
    return np.asarray(x.grad.tolist())


def same_as_torch(got, want, rtol: float) -> None:
    """flame's gradient or refusal (None, grad_or_none's) is torch's: both raise, or both give close values."""
    if want is None:
        assert got is None, f"torch raises; flame gave {got}"
    else:
        assert got is not None, "flame raises where torch does not"
        np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-12)
