"""The op torch's error names where an in-place op's node saved an operand that is the tensor it writes
(`y.lerp_(y, w)`, `y.clamp_(min=y)`, `y.addcmul_(x, y)`): torch raises "one of the variables needed for
gradient computation has been modified by an inplace operation: ..., which is output 0 of LerpBackward1"
(spelled `Lerp1` by torch 2.13's message), its node of the in-place op; flame's error names that op, a
composite (lerp, clamp, addcdiv ...) by its own name, not one of the ops flame builds it from. Eagerly,
inside @flame.compile, and outside it on the compiled result; against torch in float64. Neighbours torch
lets through (a number weight, masked_fill_ of a value read before the write, copysign_ of the tensor itself,
whose node saves its self as a clone) give torch's gradient."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import flame
from tests.frontend.backward_ways import MODIFIED, WAYS, grad_or_none, run_backward, same_as_torch

X = np.array([[0.3, -0.2, 0.5, 0.1], [0.7, 0.2, -0.4, 0.9], [0.1, 0.0, 0.6, -0.3]])


def _twice(x):
    return x * 2


def _shifted(x):
    return x * 2 + 3


def _row(x):
    return x[0] * 2


def _positive(x):
    return x.abs() + 1


WRITES = {  # name: (y made from x, the in-place op writing y, torch's node in its message, flame's op)
    "lerp_ end": (_twice, lambda lib, x, y: y.lerp_(y, x * 0.5), "Lerp1", "lerp"),
    "lerp_ weight": (_twice, lambda lib, x, y: y.lerp_(x * 1, y), "Lerp1", "lerp"),
    "lerp_ 0-d weight": (_row, lambda lib, x, y: y.lerp_(y, x[1, 1] * 1), "Lerp1", "lerp"),
    "clamp_ min": (_twice, lambda lib, x, y: y.clamp_(min=y), "Clamp", "clamp"),
    "clamp_ max": (_twice, lambda lib, x, y: y.clamp_(max=y), "Clamp", "clamp"),
    "clamp_ both": (_twice, lambda lib, x, y: y.clamp_(x * 0.1, y), "Clamp", "clamp"),
    "clip_": (_twice, lambda lib, x, y: y.clip_(min=y), "Clamp", "clamp"),
    "clamp_min_": (_twice, lambda lib, x, y: y.clamp_min_(y), "ClampMin1", "clamp_min"),
    "clamp_max_": (_twice, lambda lib, x, y: y.clamp_max_(y), "ClampMax1", "clamp_max"),
    "addcmul_ tensor1": (_twice, lambda lib, x, y: y.addcmul_(y, x * 1), "Addcmul", "addcmul"),
    "addcmul_ tensor2": (_twice, lambda lib, x, y: y.addcmul_(x * 1, y, value=2), "Addcmul", "addcmul"),
    "addcdiv_ tensor1": (_twice, lambda lib, x, y: y.addcdiv_(y, x * 1 + 3), "Addcdiv", "addcdiv"),
    "addcdiv_ tensor2": (_shifted, lambda lib, x, y: y.addcdiv_(x * 1, y, value=-2), "Addcdiv", "addcdiv"),
    "ldexp_": (_shifted, lambda lib, x, y: y.ldexp_(y), "Ldexp", "ldexp"),
    "mul_": (_twice, lambda lib, x, y: y.mul_(y), "Mul", "mul"),
    "div_": (_twice, lambda lib, x, y: y.div_(y), "Div", "div"),
    "pow_": (_positive, lambda lib, x, y: y.pow_(y), "Pow1", "pow"),
    "atan2_": (_shifted, lambda lib, x, y: y.atan2_(y), "Atan2", "atan2"),
    "hypot_": (_shifted, lambda lib, x, y: y.hypot_(y), "Hypot", "hypot"),
    "xlogy_": (_positive, lambda lib, x, y: y.xlogy_(y), "Xlogy", "xlogy"),
    "exp_ then mul_": (_twice, lambda lib, x, y: (y.exp_(), y.mul_(2)), "Exp", "exp"),
}

ALLOWED = {  # name: (y made from x, an in-place op whose node saved nothing it writes)
    "lerp_ by a number": (_twice, lambda lib, x, y: y.lerp_(y, 0.3)),
    "lerp_ into end": (_twice, lambda lib, x, y: y.lerp_(x * 1, x * 0.25)),
    "masked_fill_ of its sum": (_twice, lambda lib, x, y: y.masked_fill_(x > 0, y.sum())),
    "addcdiv_ of another": (_twice, lambda lib, x, y: y.addcdiv_(x * 1, y + 3)),
    "clamp_ by numbers": (_twice, lambda lib, x, y: y.clamp_(-0.3, 0.5)),
    "copysign_ by itself": (_shifted, lambda lib, x, y: y.copysign_(y)),  # saves self (a clone) and the result
    "copysign_ by a view of itself": (_shifted, lambda lib, x, y: y[:1].copysign_(y[1:2])),
    "sub_ of itself": (_twice, lambda lib, x, y: y.sub_(y, alpha=0.5)),
}


def _body(make, write):
    def body(lib, x):
        y = make(x)
        write(lib, x, y)
        return (y * y.detach()).sum()

    return body


def _x(lib):
    return lib.tensor(X, dtype=lib.float64, requires_grad=True)


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("name", list(WRITES))
def test_the_error_names_torchs_node(name, way):
    make, write, node, op = WRITES[name]
    with pytest.raises(RuntimeError, match=MODIFIED) as e:
        run_backward(torch, _body(make, write), _x(torch), "eager")
    assert re.search(rf"output 0 of {node}\b", str(e.value)), e.value  # (the oracle's spelling)
    with pytest.raises(flame.errors.AutogradError, match=MODIFIED) as e:
        run_backward(flame, _body(make, write), _x(flame), way)
    assert re.search(rf"saved for its backward was modified in place after it was used by {op}\n", str(e.value)), (
        e.value
    )
    assert "test_inplace_error_names.py" in str(e.value)


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("name", list(ALLOWED))
def test_a_write_into_what_no_node_saved_is_torchs_gradient(name, way):
    body = _body(*ALLOWED[name])
    want = grad_or_none(torch, body, "eager", _x(torch), "")
    assert want is not None
    same_as_torch(grad_or_none(flame, body, way, _x(flame), "test_inplace_error_names.py"), want, rtol=1e-12)
