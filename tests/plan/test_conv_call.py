"""Convolutions in the plan (ARCHITECTURE.md "Library steps"):
each conv / conv_grad_input / conv_grad_weight op becomes one
ConvCall naming its operands in the op's order, with the workspace the Target asks for as arena scratch
that the memory planner keeps apart from what is live at the call; the reference executor runs the
calls through the ops' NumPy references; a compiled training step (forward + autodiff) plans all three
kinds; the cuDNN spec of an op (dims, strides, 1-d as 2-d) and what the CUDA target says without a GPU."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from flame.ir import Builder, Graph, TensorType, verify
from flame.ir.dtypes import bf16, f32, f64
from flame.ir.ops.conv import CONV_OPS
from flame.passes.autodiff import autodiff
from flame.plan.build import to_plan
from flame.plan.memory import check_plan, live_ranges
from flame.plan.steps import ConvCall
from flame.runtime import cudnn_conv
from flame.runtime.backend import capabilities
from flame.runtime.device import cuda_available
from flame.runtime.reference import ReferenceExecutor, run_graph
from flame.target import DEFAULT_TARGET
from tests.passes.test_decompose_conv import CASES, conv_graph

WORKSPACE = 1000  # bytes a pretend library asks for per call


def _plan(g: Graph, workspace: int = WORKSPACE):
    return to_plan(g, target=replace(DEFAULT_TARGET, conv_workspace=lambda op: workspace))


@pytest.mark.parametrize("which", CONV_OPS)
def test_each_convolution_is_one_call_with_its_operands_and_workspace(which):
    g = conv_graph(which, "2d-groups-stride-asym", f32)
    plan = _plan(g)
    (call,) = plan.steps[:1]
    assert isinstance(call, ConvCall) and call.op is g.ops[0]
    a, b = (plan.buffer_of[v] for v in g.inputs)
    assert call.reads == (a, b) and call.outputs == (call.out,)
    named = {"conv": (call.x, call.w, call.dy), "conv_grad_input": (call.dy, call.w, call.x),
             "conv_grad_weight": (call.x, call.dy, call.w)}[which]
    assert named == (a, b, None)
    ws = plan.buffers[call.workspace]
    assert ws.role == "scratch" and ws.nbytes == WORKSPACE and call.writes == (call.out, call.workspace)
    assert call.kind == {"conv": "fprop", "conv_grad_input": "dgrad", "conv_grad_weight": "wgrad"}[which]
    line = f"b{call.out} = call {which} (b{a}, b{b}) scratch=b{call.workspace}  # %2 = {which} %0, %1"
    assert line in str(plan), str(plan)
    assert call.renamed(a, 99).reads == (99, b)


def test_no_workspace_no_scratch():
    plan = _plan(conv_graph("conv", "1d-dilated", f32), workspace=0)
    assert plan.steps[0].workspace is None and "scratch" not in str(plan)


def _train_graph(dtype) -> Graph:
    """loss = sum(relu(conv(x, w1)) conv w2) and its gradients for x, w1 and w2: every kind of call."""
    g = Graph("step")
    b = Builder(g)
    x = g.add_input(TensorType((2, 3, 9, 8), dtype))
    w1 = g.add_input(TensorType((4, 3, 3, 3), dtype), "param")
    w2 = g.add_input(TensorType((6, 2, 3, 1), dtype), "param")
    attrs = {"stride": [1, 1], "padding": [[1, 1], [1, 1]], "dilation": [1, 1]}
    h = b.relu(b.conv(x, w1, **attrs, groups=1))
    y = b.conv(h, w2, stride=[2, 1], padding=[[0, 1], [0, 0]], dilation=[1, 1], groups=2)
    loss = b.reduce_sum(b.mul(y, y), axes=[0, 1, 2, 3], keepdim=False)
    g.outputs = [loss, *autodiff(g, loss, g.inputs)]
    return verify(g)


def test_a_training_step_plans_every_kind_and_keeps_workspaces_apart():
    g = _train_graph(f32)
    plan = _plan(g)
    calls = [s for s in plan.steps if isinstance(s, ConvCall)]
    assert {c.kind for c in calls} == {"fprop", "dgrad", "wgrad"}
    check_plan(plan)  # no two live arena buffers overlap
    ranges = live_ranges(plan.buffers, plan.steps)
    for c in calls:
        i = plan.steps.index(c)
        assert ranges[c.workspace] == (i, i)  # scratch lives only during its call
        ws = plan.buffers[c.workspace]
        for bid in c.reads + (c.out,):
            other = plan.root(bid)
            if other.offset is not None:  # in the arena: must not overlap the workspace
                assert other.offset + other.nbytes <= ws.offset or ws.offset + ws.nbytes <= other.offset
    arrays = [np.random.default_rng(i).standard_normal(v.type.shape).astype(np.float32)
              for i, v in enumerate(g.inputs)]
    got = ReferenceExecutor().compile(plan)(arrays)
    for a, w in zip(got, run_graph(g, arrays)):
        np.testing.assert_allclose(a, w, rtol=1e-5, atol=1e-4)


def test_reference_handler_computes_in_f32_for_bf16():
    g = conv_graph("conv_grad_weight", "3d", bf16)
    arrays = [np.random.default_rng(5).standard_normal(v.type.shape).astype(bf16.np_dtype) for v in g.inputs]
    got = ReferenceExecutor().compile(_plan(g))(arrays)[0]
    assert got.dtype == bf16.np_dtype
    np.testing.assert_array_equal(got, run_graph(g, arrays)[0])


# ---- the cuDNN spec of an op -------------------------------------------------------------------------

def test_spec_of_each_kind_names_x_w_y():
    for which in CONV_OPS:
        s = cudnn_conv.spec_of(conv_graph(which, "2d-groups-stride-asym", bf16).ops[0])
        assert (s.x, s.w, s.y) == ((2, 4, 7, 6), (6, 2, 3, 2), (2, 6, 4, 6)) and s.groups == 2
        assert (s.pre_padding, s.post_padding, s.stride, s.dilation) == ((1, 0), (2, 1), (2, 1), (1, 1))
        assert s.x_strides == (168, 42, 6, 1) and s.dtype == "bf16"
        assert s.kind == {"conv": "fprop", "conv_grad_input": "dgrad", "conv_grad_weight": "wgrad"}[which]


def test_a_1d_convolution_is_specified_as_2d_with_unit_height():
    s = cudnn_conv.spec_of(conv_graph("conv", "1d-dilated", f32).ops[0])
    assert (s.x, s.w, s.y) == ((2, 3, 1, 11), (4, 3, 1, 3), (2, 4, 1, 10))
    assert (s.x_strides, s.w_strides) == ((33, 11, 11, 1), (9, 3, 3, 1))
    assert (s.pre_padding, s.post_padding, s.stride, s.dilation) == ((0, 2), (0, 1), (1, 1), (1, 2))
    assert s.flops == 2 * (2 * 4 * 10) * (3 * 3)


def test_channels_last_strides_and_spec_strides():
    assert cudnn_conv.channels_last_strides((2, 3, 4, 5)) == (60, 1, 15, 3)
    assert cudnn_conv.channels_last_strides((2, 3, 4, 5, 6)) == (360, 1, 90, 18, 3)
    xs, ws, attrs = CASES["2d-1x1"]
    s = cudnn_conv.ConvSpec.of("fprop", "f16", xs, ws, (2, 4, 4, 3), attrs["padding"], attrs["stride"],
                               attrs["dilation"], {"x": cudnn_conv.channels_last_strides(xs)})
    assert s.x_strides == (60, 1, 15, 5) and s.y_strides == (48, 12, 3, 1)


def test_unsupported_reasons():
    assert cudnn_conv.op_unsupported(conv_graph("conv", "3d", f32).ops[0]) == ""
    assert "f32/f16/bf16" in cudnn_conv.op_unsupported(conv_graph("conv", "3d", f64).ops[0])
    spec = cudnn_conv.spec_of(conv_graph("conv", "2d-1x1", f32).ops[0])
    assert "empty" in cudnn_conv.unsupported_reason(replace(spec, x=(0, *spec.x[1:])))


def test_cuda_target_without_a_gpu_bounds_the_workspace():
    target = capabilities("cuda")
    op64, op32 = conv_graph("conv", "2d-1x1", f64).ops[0], conv_graph("conv", "2d-1x1", f32).ops[0]
    assert "f32/f16/bf16" in target.conv_unsupported(op64)
    assert capabilities("reference").conv_unsupported(op64) == ""  # NumPy runs every case
    if not cuda_available():
        assert target.conv_unsupported(op32) == ""
        assert target.conv_workspace(op32) == cudnn_conv.WORKSPACE_LIMIT
