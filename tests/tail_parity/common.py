"""Helpers of the long-tail parity tests: one function written against a library namespace (torch or
flame), run by torch and by flame (eagerly or inside @flame.compile) on the same f64 inputs; the outputs
and the gradients of every float input (of a fixed cosine-weighted sum of the outputs) are compared."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import numpy as np
import torch

import flame
from tests.tensor_parity.common import TORCH_TO_FLAME


class Fixed:
    """An input array that takes no gradient (targets, indices, lengths)."""

    def __init__(self, array: np.ndarray):
        self.array = array


def rng(seed: int = 0) -> np.random.Generator:
    """A NumPy generator for test data."""
    return np.random.default_rng(seed)


def _tensor(lib, a):
    if isinstance(a, Fixed):
        return lib.tensor(a.array.copy())
    if not isinstance(a, np.ndarray):
        return a
    t = lib.tensor(a.copy())
    if a.dtype.kind == "f":
        t.requires_grad_(True)
    return t


def flat(out) -> list:
    """The tensors and values of a nested result, in order."""
    if isinstance(out, (tuple, list)):
        return [v for o in out for v in flat(o)]
    return [out]


def numpy_of(t) -> np.ndarray:
    """A torch or flame tensor as a NumPy array."""
    return t.detach().numpy() if isinstance(t, torch.Tensor) else t.numpy()


def _weighted_sum(lib, outs):
    loss = None
    for i, o in enumerate(outs):
        if isinstance(o, lib.Tensor) and o.requires_grad and o.dtype in (lib.float64, lib.float32):
            w = np.cos(np.arange(int(np.prod(o.shape))) * (0.37 + i)).reshape(tuple(o.shape))
            term = (o * lib.tensor(w).to(o.dtype)).sum()
            loss = term if loss is None else loss + term
    return loss


def _run(lib, fn: Callable, arrays: Sequence, compiled: bool):
    tensors = [_tensor(lib, a) for a in arrays]

    def step(*ts):
        outs = flat(fn(lib, *ts))
        loss = _weighted_sum(lib, outs)
        if loss is not None:
            loss.backward()
        return tuple(outs)

    if lib is flame and compiled:
        step = flame.compile(step)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outs = step(*tensors)
    grads = [t.grad if isinstance(t, lib.Tensor) and t.requires_grad else None for t in tensors]
    return list(outs), grads


def close(mine, theirs, what: str, rtol: float = 1e-9, atol: float = 1e-10) -> None:
    """A flame value agrees with a torch value: dtype, shape and values (or plain equality)."""
    if theirs is None or mine is None:
        assert mine is None and theirs is None, f"{what}: flame {mine!r}, torch {theirs!r}"
        return
    if not isinstance(theirs, torch.Tensor):
        assert not isinstance(mine, flame.Tensor), f"{what}: flame gave a tensor, torch {theirs!r}"
        assert mine == theirs, f"{what}: {mine!r} vs torch {theirs!r}"
        return
    assert isinstance(mine, flame.Tensor), f"{what}: flame gave {type(mine).__name__}"
    assert str(mine.dtype) == TORCH_TO_FLAME[theirs.dtype], f"{what}: dtype {mine.dtype} vs torch {theirs.dtype}"
    m, t = numpy_of(mine), numpy_of(theirs)
    assert m.shape == t.shape, f"{what}: shape {m.shape} vs torch {t.shape}"
    if t.dtype.kind == "f":
        np.testing.assert_allclose(m, t, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(m, t, err_msg=what)


def check_fn(fn: Callable, arrays: Sequence, compiled: bool, rtol: float = 1e-9, atol: float = 1e-10) -> None:
    """fn(flame, *inputs) agrees with fn(torch, *inputs): every output, and the gradient of every float
    input (plain ndarrays take gradients, `Fixed` ones do not)."""
    t_out, t_grads = _run(torch, fn, arrays, False)
    f_out, f_grads = _run(flame, fn, arrays, compiled)
    assert len(f_out) == len(t_out), f"flame gave {len(f_out)} outputs, torch {len(t_out)}"
    for i, (a, b) in enumerate(zip(f_out, t_out)):
        close(a, b, f"output {i}", rtol, atol)
    for i, (a, b) in enumerate(zip(f_grads, t_grads)):
        close(a, b, f"grad of input {i}", rtol, atol)


def raises_like(fn: Callable, arrays: Sequence, compiled: bool, match: str | None = None):
    """torch raises on fn(torch, *inputs); flame raises too, a flame error or torch's exception type, whose
    message (when `match` is given) contains `match`."""
    import pytest

    try:
        _run(torch, fn, arrays, False)
    except Exception as e:  # noqa: BLE001 - torch's error is the one flame must match
        theirs = e
    else:
        raise AssertionError("torch did not raise")
    with pytest.raises((type(theirs), flame.FlameError)) as info:
        _run(flame, fn, arrays, compiled)
    if match is not None:
        assert match in str(info.value), f"flame's message {str(info.value)!r} does not name {match!r}"
    return info.value
