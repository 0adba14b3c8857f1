"""Helpers of the training-idiom tests: one model built from a `lib` namespace (torch or flame) in both
libraries with the same f64 weights, data in both, and comparisons of parameters and losses."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

import flame


def twin(build: Callable, seed: int = 0):
    """(torch module, flame module) from `build(lib)`, both f64, flame's loaded from torch's state_dict."""
    torch.manual_seed(seed)
    theirs = build(torch).double()
    mine = build(flame).double()
    mine.load_state_dict({k: flame.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    return theirs, mine


def batches(n: int, shape: tuple[int, ...], classes: int | None = None, seed: int = 0) -> list:
    """n NumPy batches (x f64 of `shape`, y: class labels, or f64 targets of `shape[0]` rows)."""
    r = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = r.standard_normal(shape)
        y = r.integers(0, classes, shape[0]) if classes else r.standard_normal((shape[0], 1))
        out.append((x, y))
    return out


def to_lib(lib, *arrays):
    """The arrays as tensors of lib (torch or flame)."""
    return tuple(lib.tensor(a) for a in arrays)


def maybe_compile(lib, compiled: bool):
    """flame.compile for flame when `compiled`, else the function itself."""
    return flame.compile if lib is flame and compiled else (lambda f: f)


def numpy_of(t) -> np.ndarray:
    """A torch or flame tensor as a NumPy array."""
    return t.detach().numpy() if isinstance(t, torch.Tensor) else t.numpy()


def assert_same_params(mine, theirs, rtol: float = 1e-9, atol: float = 1e-12, what: str = "") -> None:
    """Every entry of the two modules' state_dicts (parameters and buffers) agrees."""
    ms, ts = mine.state_dict(), theirs.state_dict()
    assert list(ms) == list(ts), (list(ms), list(ts))
    for k in ts:
        np.testing.assert_allclose(numpy_of(ms[k]), numpy_of(ts[k]), rtol=rtol, atol=atol, err_msg=f"{what} {k}")


def ce_step(lib, model, opt, compiled: bool, zero_grad=None):
    """The usual classification step on lib: cross-entropy of model(x) against y, backward, opt.step(),
    then zero_grad() (opt.zero_grad() unless given), compiled when asked (flame only)."""
    F = lib.nn.functional

    @maybe_compile(lib, compiled)
    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        (zero_grad or opt.zero_grad)()
        return loss

    return step


def mse_step(lib, model, opt, compiled: bool):
    """The usual regression step on lib: mean squared error of model(x) against y, backward,
    opt.step(), opt.zero_grad(), compiled when asked (flame only)."""

    @maybe_compile(lib, compiled)
    def step(x, y):
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    return step
