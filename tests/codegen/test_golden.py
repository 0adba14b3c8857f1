"""Golden tests: the rendered CUDA of a few representative kernels, so a change to generated code
shows up in review. Regenerate with FLAME_UPDATE_GOLDEN=1."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flame.codegen import lower, single
from flame.ir import Builder, Graph, TensorType, bf16, f16, f32, f64, i64

GOLDEN = Path(__file__).parent / "golden"


def _add_bcast_f16(b, g):
    x, y = g.add_input(TensorType((4, 5), f16)), g.add_input(TensorType((5,), f16))
    b.add(x, y)


def _gelu_tanh_bf16(b, g):
    b.gelu(g.add_input(TensorType((64, 128), bf16)), approximate="tanh")


def _sum_rows_f32(b, g):
    b.reduce_sum(g.add_input(TensorType((2, 300000), f32)), axes=[1])  # partials + final


def _permute_f32(b, g):
    b.permute(g.add_input(TensorType((2, 3, 4), f32)), perm=[2, 0, 1])


def _permute_tiled_bf16(b, g):  # the innermost dim moves: a tiled transpose, odd extents (partial tiles)
    b.permute(g.add_input(TensorType((2, 40, 77), bf16)), perm=[0, 2, 1])


def _permute_runs_f16(b, g):  # the innermost dim stays: a copy of 16-byte runs
    b.permute(g.add_input(TensorType((2, 3, 5, 16), f16)), perm=[0, 2, 1, 3])


def _random_normal_f32(b, g):
    seed, offset = g.add_input(TensorType((), i64)), g.add_input(TensorType((), i64))
    b.random_normal(seed, offset, shape=(16, 16), dtype=f32)


def _random_uniform_f64(b, g):  # 53 random bits per number (two Philox words)
    seed, offset = g.add_input(TensorType((), i64)), g.add_input(TensorType((), i64))
    b.random_uniform(seed, offset, shape=(16, 16), dtype=f64)


CASES = {
    f.__name__.lstrip("_"): f
    for f in (
        _add_bcast_f16,
        _gelu_tanh_bf16,
        _sum_rows_f32,
        _permute_f32,
        _permute_tiled_bf16,
        _permute_runs_f16,
        _random_normal_f32,
        _random_uniform_f64,
    )
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case):
    g = Graph()
    CASES[case](Builder(g), g)
    text = "\n".join(
        f"// ---- kernel {k.name}: grid={k.grid} block={k.block} scratch={k.scratch}\n{k.source}"
        for k in lower(single(g.ops[-1]))
    )
    path = GOLDEN / f"{case}.cu"
    if os.environ.get("FLAME_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"missing golden {path.name}; run with FLAME_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"rendered CUDA differs from {path.name} (FLAME_UPDATE_GOLDEN=1 to accept)"
