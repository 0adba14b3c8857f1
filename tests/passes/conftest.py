"""Helpers for the pass tests: run a pass on IR text and check that the result verifies, that the
input graph was left alone, and that the reference executor computes the same outputs before and after
(bit for bit, NaNs compared as NaN) on inputs full of special values."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from flame.ir import Graph, dtype_of, parse, print_graph, verify
from flame.ir.types import TensorType
from flame.runtime.reference import run_graph

_SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, np.nan, np.inf, -np.inf, 0.5, 3.0])


def random_array(t: TensorType, rng: np.random.Generator) -> np.ndarray:
    """Random data of type t; floats mix normal samples with 0, -0, 1, NaN and infinities."""
    if t.dtype.kind == "bool":
        return rng.random(t.shape) < 0.5
    if t.dtype.kind == "int":
        return rng.integers(-4, 5, size=t.shape).astype(t.dtype.np_dtype)
    x = rng.standard_normal(t.shape) * 2
    special = rng.random(t.shape) < 0.3
    x = np.where(special, rng.choice(_SPECIAL, size=t.shape), x)
    return np.asarray(x).astype(t.dtype.np_dtype)


def assert_same_bits(a: np.ndarray, b: np.ndarray, what: str) -> None:
    """Equal shape, dtype and bits; any NaN matches any NaN."""
    assert a.dtype == b.dtype and a.shape == b.shape, f"{what}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
    if dtype_of(a.dtype).is_float:
        nan_a, nan_b = np.isnan(a.astype(np.float64)), np.isnan(b.astype(np.float64))
        assert np.array_equal(nan_a, nan_b), f"{what}: NaNs differ\n{a}\n{b}"
        a, b = np.where(nan_a, 0, a).astype(a.dtype), np.where(nan_b, 0, b).astype(b.dtype)
        bits = np.dtype(f"u{a.dtype.itemsize}")
        a, b = np.ascontiguousarray(a).view(bits), np.ascontiguousarray(b).view(bits)
    assert np.array_equal(a, b), f"{what}: values differ\n{a}\n{b}"


def assert_same_results(before: Graph, after: Graph, seed: int = 0, trials: int = 3) -> None:
    """before and after compute the same outputs on the reference executor."""
    assert [v.type for v in before.inputs] == [v.type for v in after.inputs]
    assert before.roles == after.roles and before.aliases == after.aliases
    assert [v.type for v in before.outputs] == [v.type for v in after.outputs]
    rng = np.random.default_rng(seed)
    for _ in range(trials):
        arrays = [random_array(v.type, rng) for v in before.inputs]
        want, got = run_graph(before, arrays), run_graph(after, arrays)
        for i, (w, h) in enumerate(zip(want, got)):
            assert_same_bits(w, h, f"output {i}")


def check_pass(text: str, pass_, expect: str | None = None) -> str:
    """Parse text, run pass_, check the result (see the module docstring) and, when given, compare it
    with the expected IR text; return the printed result."""
    before = parse(textwrap.dedent(text))
    snapshot = print_graph(before)
    after = pass_(before)
    verify(after)
    assert print_graph(before) == snapshot, "the pass modified its input graph"
    assert_same_results(before, after)
    printed = print_graph(after)
    assert print_graph(parse(printed)) == printed
    if expect is not None:
        assert printed == textwrap.dedent(expect).strip() + "\n"
    return printed


@pytest.fixture(scope="session")
def check():
    return check_pass


@pytest.fixture(scope="session")
def same_results():
    return assert_same_results
