"""Helpers of the tensor-semantics parity tests: one function written against a library namespace (torch or
flame), run by torch, by flame eagerly and by flame inside `@flame.compile`, and the results compared
as PyTorch users see them: value, dtype, shape, and the error type where torch raises."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import torch

import flame

TORCH_TO_FLAME = {
    torch.float32: "f32",
    torch.float64: "f64",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.int32: "i32",
    torch.int64: "i64",
    torch.int8: "i8",
    torch.uint8: "u8",
    torch.bool: "bool",
}
FLAME_TO_TORCH = {v: k for k, v in TORCH_TO_FLAME.items()}


def lib_dtype(lib, name: str):
    """The dtype called `name` ("f32", "i64", ...) in lib."""
    return FLAME_TO_TORCH[name] if lib is torch else flame.ir.dtypes.dtype_of(name)


def to_lib(lib, x):
    """NumPy arrays (and tuples/lists of them) as tensors of lib; anything else as it is."""
    if isinstance(x, np.ndarray):
        return torch.from_numpy(x.copy()) if lib is torch else flame.tensor(x.copy())
    if isinstance(x, tuple):
        return tuple(to_lib(lib, v) for v in x)
    if isinstance(x, list) and x and all(isinstance(v, np.ndarray) for v in x):
        return [to_lib(lib, v) for v in x]
    return x


def _flat(out) -> list:
    """The tensors and plain values of a (possibly nested, possibly named) result, in order."""
    if isinstance(out, (tuple, list)):
        return [v for o in out for v in _flat(o)]
    return [out]


def _compare(mine, theirs, what: str, rtol: float | None, atol: float) -> None:
    if isinstance(theirs, torch.Tensor):
        assert isinstance(mine, flame.Tensor), f"{what}: flame gave {type(mine).__name__}, torch a tensor"
        assert str(mine.dtype) == TORCH_TO_FLAME[theirs.dtype], f"{what}: dtype {mine.dtype} vs torch {theirs.dtype}"
        assert tuple(mine.shape) == tuple(theirs.shape), f"{what}: shape {tuple(mine.shape)} vs {tuple(theirs.shape)}"
        t = theirs.detach().float().numpy() if theirs.dtype == torch.bfloat16 else theirs.detach().numpy()
        if rtol is None:  # torch's half kernels round intermediates (2.5 / x is 2.5 * reciprocal(x)): 1 ulp
            rtol = {torch.float16: 1e-3, torch.bfloat16: 8e-3}.get(theirs.dtype, 1e-6)
        m = np.asarray(mine.numpy(), dtype=t.dtype)
        if t.dtype.kind == "f":
            np.testing.assert_allclose(m, t, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)
        else:
            np.testing.assert_array_equal(m, t, err_msg=what)
    else:
        assert not isinstance(mine, flame.Tensor), f"{what}: flame gave a tensor, torch {type(theirs).__name__}"
        assert mine == theirs or (mine != mine and theirs != theirs), f"{what}: {mine!r} vs torch {theirs!r}"


def run_torch(fn: Callable, args: tuple):
    """torch's result of fn(torch, *args), or the exception it raised."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return fn(torch, *to_lib(torch, args)), None
        except Exception as e:  # noqa: BLE001 - torch's error is what flame must match
            return None, e


def run_flame(fn: Callable, args: tuple, compiled: bool):
    """flame's result of fn(flame, *args), eagerly or inside @flame.compile."""
    tensors = to_lib(flame, args)
    if not compiled:
        return fn(flame, *tensors)
    return flame.compile(lambda *a: fn(flame, *a))(*tensors)


def check(fn: Callable, *args, compiled: bool, rtol: float | None = None, atol: float = 1e-7, error=None) -> None:
    """flame's fn(flame, *args) agrees with torch's fn(torch, *args): values, dtypes and shapes of every
    output, or, where torch raises, flame raises (`error`: the type expected of flame; unless given,
    torch's own exception type or a flame error, whose types are ValueError/IndexError/TypeError
    where torch often says RuntimeError)."""
    theirs, err = run_torch(fn, args)
    if err is not None:
        import pytest

        with pytest.raises(error or (type(err), flame.FlameError)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                run_flame(fn, args, compiled)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mine = run_flame(fn, args, compiled)
    m, t = _flat(mine), _flat(theirs)
    assert len(m) == len(t), f"flame gave {len(m)} outputs, torch {len(t)}"
    for i, (a, b) in enumerate(zip(m, t)):
        _compare(a, b, f"output {i}", rtol, atol)


def assert_same(mine, theirs, rtol: float | None = None, atol: float = 1e-7) -> None:
    """A flame result agrees with a torch result (value, dtype, shape), output by output."""
    m, t = _flat(mine), _flat(theirs)
    assert len(m) == len(t), f"flame gave {len(m)} outputs, torch {len(t)}"
    for i, (a, b) in enumerate(zip(m, t)):
        _compare(a, b, f"output {i}", rtol, atol)


def gradients(f: Callable, x: np.ndarray, compiled: bool) -> tuple[np.ndarray, np.ndarray]:
    """(flame's, torch's) gradient of the scalar f(lib, x) with respect to x; flame's eagerly or
    through @flame.compile (flame.grad inside the compiled function)."""
    tx = torch.tensor(x, requires_grad=True)
    f(torch, tx).backward()
    if compiled:
        got = flame.compile(lambda a: flame.grad(lambda y: f(flame, y))(a))(flame.tensor(x))
    else:
        fx = flame.tensor(x, requires_grad=True)
        f(flame, fx).backward()
        got = fx.grad
    return got.numpy(), tx.grad.numpy()


def check_gradients(name: str, f: Callable, x: np.ndarray, compiled: bool) -> None:
    """flame's gradient of f at x (gradients) equals torch's to 1e-12, NaNs where torch's are."""
    got, want = gradients(f, x, compiled)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"NaNs of {name}: {got} vs torch {want}")
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0, err_msg=name)
