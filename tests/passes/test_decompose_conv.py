"""decompose_conv: a convolution (forward, data or weight gradient) the backend cannot run as one call
becomes im2col + matmul computing what the op's NumPy reference computes, for 1, 2 and 3 spatial dims,
groups (depthwise included), stride, dilation and asymmetric padding; the ops carry the reason on their
source line; a supported op stays one op; legalization runs it as a stage and the result plans, fuses,
compiles with NVRTC and runs on the reference executor."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from flame import compiler
from flame.codegen.nvrtc import compile_many
from flame.compiler import compile_graph
from flame.ir import REGISTRY, Graph, parse, print_graph, verify
from flame.ir.builder import Builder
from flame.ir.dtypes import DType, bf16, f32, f64
from flame.ir.ops.conv import CONV_OPS
from flame.ir.ops.movement import place_strided
from flame.ir.types import TensorType
from flame.passes.decompose_conv import DECOMPOSE_ALL, decompose_conv, note
from flame.passes.pipeline import legalize, lower
from flame.plan.build import to_plan
from flame.plan.steps import ConvCall, KernelLaunch
from flame.runtime.reference import ReferenceExecutor, run_graph
from flame.target import DEFAULT_TARGET

LOC = "model.py:9  y = F.conv2d(x, w)"
# (x shape, w shape, attributes)
CASES = {
    "2d-groups-stride-asym": ((2, 4, 7, 6), (6, 2, 3, 2), {"stride": [2, 1], "padding": [[1, 2], [0, 1]],
                                                          "dilation": [1, 1], "groups": 2}),
    "2d-depthwise-dilated": ((1, 3, 8, 9), (3, 1, 3, 3), {"stride": [2, 2], "padding": [[2, 2], [2, 2]],
                                                         "dilation": [2, 2], "groups": 3}),
    "2d-1x1": ((2, 5, 4, 3), (4, 5, 1, 1), {"stride": [1, 1], "padding": [[0, 0], [0, 0]], "dilation": [1, 1]}),
    "1d-dilated": ((2, 3, 11), (4, 3, 3), {"stride": [1], "padding": [[2, 1]], "dilation": [2]}),
    "3d": ((1, 2, 4, 5, 3), (3, 2, 2, 3, 1), {"stride": [1, 2, 1], "padding": [[1, 0], [1, 1], [0, 0]],
                                              "dilation": [1, 1, 2]}),
    # a transposed convolution's with output_padding >= stride: the high padding shrunk below the low
    "2d-transpose-output-padding": ((2, 3, 9, 8), (4, 3, 3, 2), {"stride": [2, 1], "padding": [[3, 1], [1, 0]],
                                                                 "dilation": [3, 2]}),
    "2d-empty-batch": ((0, 3, 6, 5), (4, 3, 3, 3), {"stride": [2, 2], "padding": [[1, 1], [1, 1]],
                                                    "dilation": [1, 1]}),
    # symmetric padding, channels multiples of 8 (the GPU tests run these through cuDNN too)
    "2d-groups-stride": ((3, 16, 15, 17), (32, 8, 3, 3), {"stride": [2, 2], "padding": [[1, 1], [1, 1]],
                                                       "dilation": [1, 1], "groups": 2}),
    "3d-sym": ((2, 4, 5, 6, 7), (8, 4, 3, 3, 3), {"stride": [1, 2, 1], "padding": [[1, 1]] * 3,
                                                  "dilation": [1, 1, 1]}),
}


def _out_shape(xs, ws, attrs) -> tuple[int, ...]:
    conv = REGISTRY["conv"]
    return conv.infer([TensorType(xs, f64), TensorType(ws, f64)], **conv.normalize_attrs(attrs)).shape


def conv_graph(which: str, case: str, dtype: DType) -> Graph:
    """One convolution op of kind `which` on the shapes of CASES[case]."""
    xs, ws, attrs = CASES[case]
    ys = _out_shape(xs, ws, attrs)
    operands = {"conv": (xs, ws, {}), "conv_grad_input": (ys, ws, {"input_shape": xs}),
                "conv_grad_weight": (xs, ys, {"weight_shape": ws})}
    a, b_, extra = operands[which]
    g = Graph(which)
    ins = [g.add_input(TensorType(s, dtype)) for s in (a, b_)]
    g.outputs = [Builder(g, LOC).emit(which, *ins, **attrs, **extra)]
    return verify(g)


def _inputs(g: Graph, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(v.type.shape).astype(v.type.dtype.np_dtype) for v in g.inputs]


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("which", CONV_OPS)
def test_decomposition_computes_the_reference(which, case):
    g = conv_graph(which, case, f64)
    d = verify(decompose_conv(g))
    assert not any(op.name in CONV_OPS for op in d.ops)
    assert any(op.name == "matmul" for op in d.ops)
    arrays = _inputs(g, 1)
    np.testing.assert_allclose(run_graph(d, arrays)[0], run_graph(g, arrays)[0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n,start,step,length", [(3, 0, 2, 7), (3, 1, 3, 8), (4, 2, 2, 9), (2, 0, 5, 6),
                                                  (0, 1, 2, 4), (3, 2, 1, 5)])
def test_place_strided_is_a_strided_slices_adjoint(n, start, step, length):
    """place_strided (the slice VJP's and col2im's one zero interleave) puts v at start, start + step, ...
    of zeros `length` long, trailing interleaved zeros past the end cut away."""
    g = Graph("place")
    v = g.add_input(TensorType((2, n, 3), f64))
    g.outputs = [place_strided(Builder(g, LOC), v, 1, start, step, length)]
    a = _inputs(verify(g), 2)[0]
    want = np.zeros((2, length, 3))
    want[:, start:start + step * n:step] = a
    np.testing.assert_array_equal(run_graph(g, [a])[0], want)


@pytest.mark.parametrize("which", CONV_OPS)
def test_replacing_ops_carry_the_reason_and_print_and_parse(which):
    g = conv_graph(which, "2d-groups-stride-asym", f32)
    d = decompose_conv(g, lambda op: "test: no library")
    assert all(op.loc.startswith("model.py:9") and note("test: no library") in op.loc for op in d.ops)
    assert print_graph(parse(print_graph(d))) == print_graph(d)
    assert note(DECOMPOSE_ALL) in decompose_conv(g).ops[0].loc


def test_a_supported_convolution_stays_one_op():
    g = conv_graph("conv", "1d-dilated", f32)
    assert decompose_conv(g, lambda op: "") is g
    assert legalize(g) is g  # legalize's default: every convolution runs as it is


@pytest.mark.parametrize("which", CONV_OPS)
def test_legalize_then_fuse_plan_compile_and_run(which):
    """The compile path: legalize (a stage in dumps), fusion, a plan without convolution calls whose
    kernels NVRTC compiles, and the reference executor running that plan (bf16: low-precision
    matmuls, as on the GPU)."""
    g = conv_graph(which, "2d-groups-stride-asym", bf16)
    stages = []
    d = legalize(g, conv_unsupported=lambda op: "test: not one call",
                 dump=lambda stage, graph, sec: stages.append(stage))
    assert stages == ["decompose_conv"]
    plan = to_plan(lower(d))
    assert not any(isinstance(s, ConvCall) for s in plan.steps)
    sources = {s.source for s in plan.steps if isinstance(s, KernelLaunch)}
    assert len(compile_many(sorted(sources), "sm_90")) == len(sources)  # NVRTC, no GPU needed
    arrays = _inputs(g, 2)
    got = np.asarray(ReferenceExecutor().compile(plan)(arrays)[0], np.float64)
    want = run_graph(g, arrays)[0].astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=3e-2, atol=3e-2 * np.abs(want).max())


def test_compile_graph_legalizes_convolutions(monkeypatch):
    """compile_graph asks the Target which convolutions the library runs: here none."""
    g = conv_graph("conv_grad_weight", "1d-dilated", f32)
    backend = replace(DEFAULT_TARGET, conv_unsupported=lambda op: "test backend: no conv call")
    monkeypatch.setattr(compiler, "_target", lambda *settings: backend)
    compiled = compile_graph(g, key=("test_compile_graph_legalizes_convolutions",))
    assert not any(op.name in CONV_OPS for op in compiled.graph.ops)
    assert "decompose_conv" in dict(compiled.timings)
    arrays = _inputs(g, 3)
    np.testing.assert_allclose(compiled.run(arrays)[0], run_graph(g, arrays)[0], rtol=1e-5, atol=1e-5)
