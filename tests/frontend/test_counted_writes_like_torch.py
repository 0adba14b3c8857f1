"""Counted writes (with a gradient recorded, under no_grad, through detach()) that torch's backward refuses
because its node saved the tensor written, and their neighbours it lets through, eagerly and inside
@flame.compile (backward inside, and outside on the compiled result):
- an in-place op whose operand is the tensor it writes (y.mul_(y), y.mul_(y.detach()), y.addcmul_(y, w)):
  its node saved that operand as it is, and the write changes it (self alone it clones);
- a tensor that requires no grad made in the body, saved by the node that read it (mul's other operand,
  scaled_dot_product_attention's float mask on its fused CPU path; not on the math path, which a mask that
  requires grad or 3-d operands take, nor by hand-written attention, whose add saves nothing);
- the result of a reduction whose node saves it (max(), min(), median(), nanmedian() over every element,
  amax, logsumexp along a dim, norm, prod), and the input and tensor bounds of clamp;
- a detach() of the written tensor read by a node: mul's saves it, add's does not (no error, eagerly too);
- sgn's input and result (its gradient is zeros; sign's node saves nothing);
- batch_norm's input and weight, and evaluating its running statistics (its own update of them, training,
  is no counted write: a second call before the backward is no error).
Against torch in float64."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

import flame
from tests.frontend.backward_ways import MODIFIED, WAYS, grad_or_none, same_as_torch

X = np.array([[0.3, -0.2, 0.5, 0.1], [0.7, 0.2, -0.4, 0.9], [0.1, 0.0, 0.6, -0.3]])


def _no_grad(lib, y, write):
    with lib.no_grad():
        write(y)


# ---- an in-place op reading the tensor it writes ----------------------------------------------------------

def _exp_mul_itself(lib, x):
    y = x.exp()
    y.mul_(y)
    return y.sum()


def _mul_itself(lib, x):
    y = x * 2
    y.mul_(y)
    return y.sum()


def _imul_itself(lib, x):
    y = x * 2
    y *= y
    return y.sum()


def _div_itself(lib, x):
    y = x * 2
    y.div_(y)
    return y.sum()


def _pow_itself(lib, x):
    y = x.abs() + 1
    y.pow_(y)
    return y.sum()


def _mul_its_detached(lib, x):
    y = x * 2
    y.mul_(y.detach())  # detach() shares y's version counter
    return y.sum()


def _view_mul_another_view(lib, x):
    y = x * 2
    y[:1].mul_(y[1:2])  # the two views share y's counter
    return y.sum()


def _addcmul_itself(lib, x):
    y = x * 2
    y.addcmul_(y, x * 1)  # tensor1 saved for tensor2's gradient
    return y.sum()


def _addcmul_itself_by_a_constant(lib, x):
    y = x * 2
    y.addcmul_(y, lib.ones_like(x) * 3)  # tensor2 requires no grad: tensor1 is not saved
    return y.sum()


def _clamp_by_itself(lib, x):
    y = x * 2
    y.clamp_(min=y)
    return y.sum()


def _sgn_then_written(lib, x):  # sgn's node saves its input and result (its gradient is zeros all the same)
    y = x * 2
    z = y.sgn() + lib.sgn(y * 1)
    y.mul_(3)
    return (z + y).sum()


def _sgn_in_place_then_written(lib, x):  # sgn_'s node saves its result
    y = x * 2
    y.sgn_()
    y.mul_(3)
    return y.sum()


def _sign_then_written(lib, x):  # sign's saves nothing
    y = x * 2
    z = y.sign()
    y.mul_(3)
    return (z + y).sum()


def _add_itself(lib, x):  # add saves nothing
    y = x * 2
    y.add_(y)
    return y.sum()


def _mul_by_a_number(lib, x):  # the op's own node clones y
    y = x * 2
    y.mul_(3)
    return (y * y).sum()


# ---- a tensor that requires no grad, saved ----------------------------------------------------------------

def _constant_saved_by_mul(lib, x):
    c = lib.ones_like(x) * 2
    z = x * c  # mul saves c for x's gradient
    _no_grad(lib, c, lambda c: c.add_(1))
    return z.sum()


def _constant_read_by_add(lib, x):
    c = lib.ones_like(x) * 2
    z = x + c
    c.detach().mul_(2)
    return z.sum()


def _detached_read_by_add(lib, x):  # add saves nothing of the detach() that shares y's counter
    y = x * 2
    z = x + y.detach()
    _no_grad(lib, y, lambda y: y.add_(1))
    return z.sum()


def _detached_read_by_mul(lib, x):  # mul saves it for x's gradient
    y = x * 2
    z = x * y.detach()
    _no_grad(lib, y, lambda y: y.add_(1))
    return z.sum()


def _attention(lib, x, mask_grad: bool, rank: int, hand: bool, write):
    q = x.reshape((1, 1, 3, 4) if rank == 4 else (1, 3, 4))
    m = lib.tensor(X[:, :3] * 2, dtype=lib.float64, requires_grad=mask_grad) * 1
    if hand:
        s = q @ (q * 1.5).transpose(-1, -2) / 2.0 + m
        out = s.softmax(-1) @ (q * 0.5)
    else:
        out = lib.nn.functional.scaled_dot_product_attention(q, q * 1.5, q * 0.5, attn_mask=m)
    write(lib, m)
    return (out * out).sum()


def _batch_norm(lib, x, training: bool, written: str):
    stats = {"mean": lib.zeros(4, dtype=lib.float64), "var": lib.ones(4, dtype=lib.float64) * 2,
             "weight": lib.tensor([0.5, 1.5, 2.0, 1.0], dtype=lib.float64, requires_grad=True) * 1}
    y = lib.nn.functional.batch_norm(x * 1, stats["mean"], stats["var"], stats["weight"], training=training)
    if written == "second call":  # its own update of the running statistics: no counted write, as torch's
        y = y + lib.nn.functional.batch_norm(x * 2, stats["mean"], stats["var"], training=training)
    else:
        _no_grad(lib, stats[written], lambda t: t.add_(1))
    return (y * y.detach()).sum()


BATCH_NORM = {f"batch_norm {'training' if t else 'eval'}, {w}": functools.partial(_batch_norm, training=t, written=w)
              for t, ws in ((False, ("mean", "var", "weight", "second call")), (True, ("weight", "second call")))
              for w in ws}


def _add_1(lib, t):
    _no_grad(lib, t, lambda t: t.add_(1))


def _detach_mul_2(lib, t):
    t.detach().mul_(2)


ATTENTION = {f"{'hand-written' if hand else 'sdpa'} {rank}-d, mask {'learned' if g else 'constant'}, {wn}":
             functools.partial(_attention, mask_grad=g, rank=rank, hand=hand, write=w)
             for hand in (False, True) for rank in (3, 4) for g in (False, True)
             for wn, w in (("no_grad add_", _add_1), ("detach().mul_", _detach_mul_2))}


# ---- the result of a reduction ----------------------------------------------------------------------------

REDUCTIONS = {
    "max()": lambda lib, x: x.max(),
    "min()": lambda lib, x: x.min(),
    "abs().max()": lambda lib, x: x.abs().max(),
    "torch.max(x)": lambda lib, x: lib.max(x),
    "median()": lambda lib, x: x.median(),
    "nanmedian()": lambda lib, x: x.nanmedian(),
    "amax()": lambda lib, x: x.amax(),
    "amin(0)": lambda lib, x: x.amin(0),
    "max(1).values": lambda lib, x: x.max(1).values,  # saves the indices only
    "logsumexp(0)": lambda lib, x: x.logsumexp(0),
    "logsumexp(1, keepdim)": lambda lib, x: x.logsumexp(1, keepdim=True),
    "norm()": lambda lib, x: x.norm(),
    "prod()": lambda lib, x: x.prod(),
    "sum()": lambda lib, x: x.sum(),  # saves nothing
    "clamp(min=0)": lambda lib, x: x.clamp(min=0.0),  # saves its input, as a reduction its result
}


def _reduced(reduce, write, into: str):
    def body(lib, x):
        h = x * 1
        r = reduce(lib, h)
        write(lib, r if into == "result" else h)
        return (r * 3).sum()

    return body


PROGRAMS = {
    **{f.__name__.strip("_"): f for f in (
        _exp_mul_itself, _mul_itself, _imul_itself, _div_itself, _pow_itself, _mul_its_detached,
        _view_mul_another_view, _addcmul_itself, _addcmul_itself_by_a_constant, _clamp_by_itself, _sgn_then_written,
        _sgn_in_place_then_written, _sign_then_written, _add_itself,
        _mul_by_a_number, _constant_saved_by_mul, _constant_read_by_add, _detached_read_by_add,
        _detached_read_by_mul)},
    **ATTENTION,
    **BATCH_NORM,
    **{f"{name}, {wn} into its {into}": _reduced(r, w, into) for name, r in REDUCTIONS.items()
       for wn, w in (("no_grad add_", _add_1), ("detach().mul_", _detach_mul_2)) for into in ("result", "input")},
}


def _grad(lib, body, way: str):
    """x's gradient, or None where the backward raises torch's error (its message checked)."""
    return grad_or_none(lib, body, way, lib.tensor(X, dtype=lib.float64, requires_grad=True),
                        "test_counted_writes_like_torch.py")


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("program", list(PROGRAMS))
def test_counted_write_like_torch(program, way):
    want, got = _grad(torch, PROGRAMS[program], "eager"), _grad(flame, PROGRAMS[program], way)
    same_as_torch(got, want, rtol=1e-10)


@pytest.mark.parametrize("program", ["mul_itself", "sdpa 4-d, mask constant, no_grad add_",
                                     "max(), no_grad add_ into its result",
                                     "logsumexp(0), detach().mul_ into its result"])
def test_torch_raises_for_these(program):
    """The oracle: these are writes torch refuses (a table that silently stopped raising would test nothing)."""
    assert _grad(torch, PROGRAMS[program], "eager") is None


def test_a_value_computed_again_from_a_detached_alias_written_since_is_refused_eagerly():
    """z = (x + y.detach()).sin(), then a no_grad write into y: torch's add saved nothing and its sin saved z as
    it was. flame's eager backward would compute z again from y's new values, so it raises a flame error
    naming the line (not torch's, which does not raise); inside @flame.compile the gradient is torch's."""

    def body(lib, x):
        y = x * 2
        z = (x + y.detach()).sin()
        _no_grad(lib, y, lambda y: y.add_(1))
        return z.sum()

    want = _grad(torch, body, "eager")
    for way in ("backward inside", "backward outside"):
        np.testing.assert_allclose(_grad(flame, body, way), want, rtol=1e-12)
    x = flame.tensor(X, dtype=flame.float64, requires_grad=True)
    with pytest.raises(flame.errors.AutogradError, match="sin saved a value computed from a tensor") as e:
        body(flame, x).backward()
    assert MODIFIED not in str(e.value) and "test_counted_writes_like_torch.py" in str(e.value)
