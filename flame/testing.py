"""torch.testing's assert_close: whether two tensors (numbers, or sequences and mappings of them) are
close, with torch's default tolerances per dtype and its messages, for the user's own tests."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from flame.frontend.tensor import Tensor

__all__ = ["assert_close"]

# (rtol, atol) per dtype, torch's defaults; integer and boolean dtypes compare exactly
_TOLERANCES = {"f16": (1e-3, 1e-5), "bf16": (1.6e-2, 1e-5), "f32": (1.3e-6, 1e-5), "f64": (1e-7, 1e-7),
               "f8e4m3": (1.25e-1, 1e-5), "f8e5m2": (2.5e-1, 1e-5)}
_SCALAR = (1e-7, 1e-7)  # Python floats compare as f64


def assert_close(actual: Any, expected: Any, *, allow_subclasses: bool = True, rtol: float | None = None,
                 atol: float | None = None, equal_nan: bool = False, check_device: bool = True,
                 check_dtype: bool = True, check_layout: bool = True, check_stride: bool = False,
                 msg: str | Callable[[str], str] | None = None) -> None:
    """AssertionError unless actual and expected are close, as torch.testing.assert_close: tensors of the
    same shape (and dtype, with check_dtype) whose elements satisfy |actual - expected| <= atol + rtol *
    |expected| (NaNs equal only with equal_nan; infinities equal only to themselves), numbers likewise,
    sequences and mappings item by item. rtol and atol are given together or not at all: omitted, they
    are torch's defaults for the dtypes compared. msg replaces the message (a callable gets the message
    and returns the one to raise). check_device, check_layout and check_stride are accepted as torch's:
    a flame process has one device and one layout."""
    if (rtol is None) != (atol is None):
        raise ValueError(f"Both 'rtol' and 'atol' must be either specified or omitted, but got no "
                         f"{'rtol' if rtol is None else 'atol'}.")
    failure = _compare(actual, expected, rtol, atol, equal_nan, check_dtype, [])
    if failure is None:
        return
    if callable(msg):
        failure = msg(failure)
    elif msg is not None:
        failure = msg
    raise AssertionError(failure)


def _compare(actual, expected, rtol, atol, equal_nan, check_dtype, path: list) -> str | None:
    if isinstance(actual, (Tensor, np.ndarray)) or isinstance(expected, (Tensor, np.ndarray)):
        return _where(_tensors(actual, expected, rtol, atol, equal_nan, check_dtype), path)
    if isinstance(actual, Mapping) and isinstance(expected, Mapping):
        if set(actual) != set(expected):
            return _where(f"The keys of the mappings do not match:\nMissing keys in the actual mapping: "
                          f"{sorted(set(expected) - set(actual), key=str)}\nExtra keys in the actual mapping: "
                          f"{sorted(set(actual) - set(expected), key=str)}", path)
        for k in expected:
            failure = _compare(actual[k], expected[k], rtol, atol, equal_nan, check_dtype, [*path, k])
            if failure is not None:
                return failure
        return None
    if _sequence(actual) and _sequence(expected):
        if len(actual) != len(expected):
            return _where(f"The length of the sequences mismatch: {len(actual)} != {len(expected)}", path)
        for i, (a, e) in enumerate(zip(actual, expected)):
            failure = _compare(a, e, rtol, atol, equal_nan, check_dtype, [*path, i])
            if failure is not None:
                return failure
        return None
    if isinstance(actual, (bool, int, float)) and isinstance(expected, (bool, int, float)):
        return _where(_scalars(actual, expected, rtol, atol, equal_nan, check_dtype), path)
    raise TypeError(f"No comparison pair was able to handle inputs of type {type(actual)} and {type(expected)}.")


def _sequence(x) -> bool:
    return isinstance(x, Sequence) and not isinstance(x, str)


def _where(failure: str | None, path: list) -> str | None:
    if failure is None or not path:
        return failure
    return f"{failure}\n\nThe failure occurred for item {''.join(f'[{k!r}]' for k in path)}"


def _scalars(a, e, rtol, atol, equal_nan, check_dtype) -> str | None:
    if check_dtype and type(a) is not type(e):
        return f"The values for attribute 'type' do not match: {type(a)} != {type(e)}."
    exact = isinstance(a, (bool, int)) and isinstance(e, (bool, int))
    rt, at = (0.0, 0.0) if exact else _SCALAR if rtol is None else (rtol, atol)
    if _close(np.float64(a), np.float64(e), rt, at, equal_nan).all():
        return None
    diff = abs(float(a) - float(e))
    rel = diff / abs(float(e)) if e != 0 else (math.inf if diff else 0.0)
    if exact:
        return (f"Scalars are not equal!\n\nExpected {e} but got {a}.\nAbsolute difference: {diff:g}\n"
                f"Relative difference: {rel}")
    return (f"Scalars are not close!\n\nExpected {e} but got {a}.\nAbsolute difference: {diff} (up to {at} allowed)\n"
            f"Relative difference: {rel} (up to {rt} allowed)")


def _array(x) -> tuple[np.ndarray, str]:
    if isinstance(x, Tensor):
        return np.asarray(x.detach().numpy()), x.dtype.name
    arr = np.asarray(x)
    return arr, {"float16": "f16", "float32": "f32", "float64": "f64"}.get(arr.dtype.name, arr.dtype.name)


def _tensors(actual, expected, rtol, atol, equal_nan, check_dtype) -> str | None:
    if not (isinstance(actual, (Tensor, np.ndarray)) and isinstance(expected, (Tensor, np.ndarray))):
        return f"Expected and actual are of different types: {type(actual)} != {type(expected)}."
    a, a_dtype = _array(actual)
    e, e_dtype = _array(expected)
    if a.shape != e.shape:
        return f"The values for attribute 'shape' do not match: {list(a.shape)} != {list(e.shape)}."
    if check_dtype and a_dtype != e_dtype:
        return f"The values for attribute 'dtype' do not match: flame.{a_dtype} != flame.{e_dtype}."
    exact = a_dtype not in _TOLERANCES and e_dtype not in _TOLERANCES
    if rtol is None:
        pairs = [_TOLERANCES.get(d, (0.0, 0.0)) for d in (a_dtype, e_dtype)]
        rtol, atol = max(p[0] for p in pairs), max(p[1] for p in pairs)
    a64, e64 = a.astype(np.float64), e.astype(np.float64)
    ok = _close(a64, e64, rtol, atol, equal_nan)
    if ok.all():
        return None
    bad = int(np.count_nonzero(~ok))
    with np.errstate(invalid="ignore", divide="ignore"):
        diff = np.abs(a64 - e64)
        rel = diff / np.abs(e64)
    diff = np.where(ok, 0.0, diff)
    rel = np.where(ok, 0.0, np.where(np.isnan(rel) & (diff == 0), 0.0, rel))
    at_abs = np.unravel_index(int(np.nanargmax(diff) if not np.isnan(diff).all() else 0), a.shape) if a.size else ()
    at_rel = np.unravel_index(int(np.nanargmax(rel) if not np.isnan(rel).all() else 0), a.shape) if a.size else ()
    if np.isnan(diff).any():
        at_abs = np.unravel_index(int(np.argmax(np.isnan(diff))), a.shape)
    if np.isnan(rel).any():
        at_rel = np.unravel_index(int(np.argmax(np.isnan(rel))), a.shape)
    index = lambda at: "(" + ", ".join(str(int(i)) for i in at) + ("," if len(at) == 1 else "") + ")"  # noqa: E731
    dmax, rmax = diff[at_abs], rel[at_rel]
    head = "equal" if exact and rtol == 0 and atol == 0 else "close"
    abs_text = f"{int(dmax)}" if exact and np.isfinite(dmax) and dmax == int(dmax) else f"{dmax}"
    lines = [f"Tensor-likes are not {head}!", "", f"Mismatched elements: {bad} / {a.size} ({100 * bad / a.size:.1f}%)"]
    allowed_abs = "" if head == "equal" else f" (up to {atol} allowed)"
    allowed_rel = "" if head == "equal" else f" (up to {rtol} allowed)"
    lines.append(f"Greatest absolute difference: {abs_text} at index {index(at_abs)}{allowed_abs}")
    lines.append(f"Greatest relative difference: {rmax} at index {index(at_rel)}{allowed_rel}")
    return "\n".join(lines)


def _close(a: np.ndarray, e: np.ndarray, rtol: float, atol: float, equal_nan: bool) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        ok = np.abs(a - e) <= atol + rtol * np.abs(e)
    ok = np.where(np.isinf(a) | np.isinf(e), a == e, ok)  # an infinity equals only itself
    if equal_nan:
        ok |= np.isnan(a) & np.isnan(e)
    return np.asarray(ok)
