"""A row kernel is named after the composite it implements, which the op that tells it says with its
`row_kernels` trait (flame/ir/registry.py): softmax (div after max and sum), log_softmax (log after max
and sum), layer_norm (rsqrt after two means), rms_norm (rsqrt after one mean); else after its reductions
(`reduce_sum_sum_rows_...`). Both softmax and log_softmax of one row in one kernel: softmax (the op
first by name). Each kernel compiles with NVRTC."""

from __future__ import annotations

import pytest

from flame.codegen import lower
from flame.codegen.nvrtc import compile_many
from flame.ir import Builder, Graph, TensorType, f32, verify
from flame.passes.fuse import fuse

SHAPE = (64, 512)


def _graph(body) -> Graph:
    g = Graph("rows")
    b = Builder(g)
    x = g.add_input(TensorType(SHAPE, f32))
    g.outputs = body(b, x)
    return verify(g)


def _max_sum(b, x):
    m = b.reduce_max(x, axes=[1], keepdim=True)
    d = b.sub(x, m)
    return d, b.reduce_sum(b.exp(d), axes=[1], keepdim=True)


def _softmax(b, x):
    d, s = _max_sum(b, x)
    return [b.div(b.exp(d), s)]


def _log_softmax(b, x):
    d, s = _max_sum(b, x)
    return [b.sub(d, b.log(s))]


def _both(b, x):
    d, s = _max_sum(b, x)
    return [b.div(b.exp(d), s), b.sub(d, b.log(s))]


def _layer_norm(b, x):
    d = b.sub(x, b.reduce_mean(x, axes=[1], keepdim=True))
    return [b.mul(d, b.rsqrt(b.add(b.reduce_mean(b.mul(d, d), axes=[1], keepdim=True), 1e-5)))]


def _rms_norm(b, x):
    return [b.mul(x, b.rsqrt(b.add(b.reduce_mean(b.mul(x, x), axes=[1], keepdim=True), 1e-6)))]


def _sum_sum(b, x):
    d = b.sub(x, b.reduce_sum(x, axes=[1], keepdim=True))
    return [b.mul(d, b.reduce_sum(b.mul(d, d), axes=[1], keepdim=True))]


CASES = {
    "softmax": (_softmax, "reduce_softmax_rows_f32_"),
    "log_softmax": (_log_softmax, "reduce_log_softmax_rows_f32_"),
    "both": (_both, "reduce_softmax_rows_f32_"),
    "layer_norm": (_layer_norm, "reduce_layer_norm_rows_f32_"),
    "rms_norm": (_rms_norm, "reduce_rms_norm_rows_f32_"),
    "no composite": (_sum_sum, "reduce_sum_sum_rows_f32_"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_row_kernel_is_named_after_its_composite(case):
    body, stem = CASES[case]
    (group,) = [grp for grp in fuse(_graph(body)).groups if grp.ops]
    kernels = lower(group)
    assert kernels[0].name.startswith(stem), [k.name for k in kernels]
    assert len(compile_many([k.source for k in kernels], "sm_90")) == len(kernels)
