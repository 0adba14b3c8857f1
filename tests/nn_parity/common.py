"""Helpers of the module parity tests: the same module built in torch and flame from torch's f64 weights, run
on the same inputs eagerly or inside @flame.compile, with outputs, input gradients and parameter
gradients compared."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

import flame


def rng(seed: int = 0) -> np.random.Generator:
    """A NumPy generator for test data."""
    return np.random.default_rng(seed)


def twin(build: Callable, seed: int = 0, double: bool = True):
    """(torch module, flame module) from `build(lib)`, flame's loaded from torch's state_dict."""
    torch.manual_seed(seed)
    theirs = build(torch)
    mine = build(flame)
    if double:
        theirs, mine = theirs.double(), mine.double()
    sd = {k: flame.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()}
    mine.load_state_dict(sd)
    return theirs, mine


class Fixed:
    """An input array that does not require grad."""

    def __init__(self, array: np.ndarray):
        self.array = array


def _as_tensor(lib, a, grad: bool):
    if isinstance(a, Fixed):
        return lib.tensor(a.array)
    if a is None or not isinstance(a, np.ndarray):
        return a
    t = lib.tensor(a)
    if grad and a.dtype.kind == "f":
        t.requires_grad_(True)
    return t


def _flat(out) -> list:
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flat(o)]
    return [out]


def numpy_of(t) -> np.ndarray:
    """A torch or flame tensor as a NumPy array."""
    return t.detach().numpy() if isinstance(t, torch.Tensor) else t.numpy()


def _run(lib, model, call, arrays, grad_inputs: bool, compiled: bool):
    """Outputs, input gradients and parameter gradients of `call(model, *inputs)` under lib."""
    tensors = [_as_tensor(lib, a, grad_inputs) for a in arrays]
    for p in model.parameters():
        p.grad = None

    def step(*ts):
        outs = _flat(call(model, *ts))
        loss = 0.0
        for i, o in enumerate(outs):
            if o is not None and o.dtype in (lib.float64, lib.float32) and o.requires_grad:
                w = np.cos(np.arange(int(np.prod(o.shape))) * (0.37 + i)).reshape(tuple(o.shape))
                loss = loss + (o * lib.tensor(w).to(o.dtype)).sum()
        if not isinstance(loss, float):
            loss.backward()
        return tuple(outs)

    if lib is flame and compiled:
        step = flame.compile(step)
    outs = step(*tensors)
    in_grads = [t.grad if isinstance(t, lib.Tensor) and t.requires_grad else None for t in tensors]
    p_grads = {k: p.grad for k, p in model.named_parameters()}
    return outs, in_grads, p_grads


def _close(a, b, rtol, atol, what):
    if a is None or b is None:
        assert a is None and b is None, f"{what}: one side is None (flame {a is None}, torch {b is None})"
        return
    ma, mb = numpy_of(a), numpy_of(b)
    assert ma.shape == mb.shape, f"{what}: shape {ma.shape} vs torch {mb.shape}"
    np.testing.assert_allclose(ma, mb, rtol=rtol, atol=atol, err_msg=what)


def compare(
    theirs,
    mine,
    call: Callable,
    arrays: Sequence,
    compiled: bool,
    grad_inputs: bool = True,
    rtol: float = 1e-9,
    atol: float = 1e-10,
) -> None:
    """`call(model, *inputs)` of torch's and flame's modules agree: outputs, gradients of the float
    inputs and of every parameter (a fixed cosine-weighted sum of the outputs is the loss)."""
    t_out, t_in, t_p = _run(torch, theirs, call, arrays, grad_inputs, False)
    f_out, f_in, f_p = _run(flame, mine, call, arrays, grad_inputs, compiled)
    assert len(t_out) == len(f_out), (len(t_out), len(f_out))
    for i, (a, b) in enumerate(zip(f_out, t_out)):
        _close(a, b, rtol, atol, f"output {i}")
    for i, (a, b) in enumerate(zip(f_in, t_in)):
        _close(a, b, rtol, atol, f"grad of input {i}")
    assert list(f_p) == list(t_p), (list(f_p), list(t_p))
    for k in t_p:
        _close(f_p[k], t_p[k], rtol, atol, f"grad of {k}")


def check(build: Callable, call: Callable, arrays: Sequence, compiled: bool, **kw) -> None:
    """twin(build) then compare."""
    theirs, mine = twin(build)
    compare(theirs, mine, call, arrays, compiled, **kw)


def weighted_run(lib, fn: Callable, x: np.ndarray, compiled: bool) -> tuple[np.ndarray, np.ndarray]:
    """(fn(lib, x), the gradient to x of sum(fn(lib, x) * w)) as NumPy arrays, w fixed weights from 0.5 to
    1.5; flame's eagerly or (compiled) through @flame.compile with flame.grad inside."""
    t = lib.tensor(x.copy(), requires_grad=True)

    def loss(t):
        y = fn(lib, t)
        w = lib.tensor(np.linspace(0.5, 1.5, max(int(np.prod(y.shape)), 1)).reshape(tuple(y.shape)))
        return y, (y * w).sum()

    if compiled:
        y, g = flame.compile(lambda a: (fn(flame, a), flame.grad(lambda b: loss(b)[1])(a)))(flame.tensor(x.copy()))
        return y.numpy(), g.numpy()
    y, total = loss(t)
    total.backward()
    return y.detach().numpy(), t.grad.numpy()


def check_weighted(fn: Callable, x: np.ndarray, compiled: bool, atol: float = 0.0) -> None:
    """flame's weighted_run agrees with torch's: shape, values (rtol 1e-10) and gradient (rtol 1e-9)."""
    want, want_grad = weighted_run(torch, fn, x, False)
    got, got_grad = weighted_run(flame, fn, x, compiled)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=atol)
    np.testing.assert_allclose(got_grad, want_grad, rtol=1e-9, atol=1e-12)
