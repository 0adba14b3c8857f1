"""Convolution epilogues (passes/conv_epilogue.py, DESIGN.md §8): a per-channel bias add, a residual add
and one relu / silu / gelu after a forward convolution join its library call, in order, when the value
before each has no other reader; what stays out (a pre-activation the backward reads, a bias along
another dim, a constant, a gradient convolution, stages the target's library does not chain); the plan's
ConvCall names the epilogue and its operands, the reference executor computes it in f32 and rounds once,
a refusal by the library leaves the stages to one kernel after the call, and a training step through
the real pipeline (channels-last layout) fuses and matches the op-by-op oracle."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from flame.explain import explain_plan
from flame.ir import Builder, Graph, TensorType, parse, print_graph, verify
from flame.ir.dtypes import bf16, f32
from flame.passes.autodiff import autodiff
from flame.passes.fuse import fuse
from flame.passes.pipeline import legalize, lower
from flame.plan.build import to_plan
from flame.plan.steps import ConvCall, KernelLaunch, LibraryCall
from flame.runtime import cudnn_conv
from flame.runtime.reference import ReferenceExecutor, run_graph
from flame.target import DEFAULT_TARGET
from tests.passes.test_decompose_conv import CASES, _out_shape

CASE = "2d-groups-stride"  # x [3, 16, 15, 17], w [32, 8, 3, 3], groups 2 -> y [3, 32, 8, 9]


def conv_net(stages: list[str], dtype=f32, case: str = CASE, returned: tuple[int, ...] = ()) -> Graph:
    """conv(x, w) followed by `stages` (bias / residual / relu / silu / gelu / gelu_tanh / spatial_bias /
    const_bias); `returned`: indices of stages whose input is also returned."""
    xs, ws, attrs = CASES[case]
    ys = _out_shape(xs, ws, attrs)
    g = Graph("conv_net")
    b = Builder(g)
    x, w = g.add_input(TensorType(xs, dtype)), g.add_input(TensorType(ws, dtype), "param")
    y, extra = b.emit("conv", x, w, **attrs), []
    for i, stage in enumerate(stages):
        if i in returned:
            extra.append(y)
        if stage == "bias":
            y = b.add(y, b.reshape(g.add_input(TensorType((ys[1],), dtype), "param"), shape=[1, ys[1], 1, 1]))
        elif stage == "spatial_bias":  # one number per column: not a channel's
            y = b.add(y, b.reshape(g.add_input(TensorType((ys[3],), dtype), "param"), shape=[1, 1, 1, ys[3]]))
        elif stage == "const_bias":
            y = b.add(y, b.emit("full", shape=[1, ys[1], 1, 1], value=0.5, dtype=dtype.name))
        elif stage == "residual":
            y = b.add(g.add_input(TensorType(ys, dtype)), y)  # either operand order
        elif stage.startswith("gelu"):
            y = b.gelu(y, approximate="tanh" if stage == "gelu_tanh" else "none")
        else:
            y = b.emit(stage, y)
    g.outputs = [y, *extra]
    return verify(g)


def _inputs(g: Graph, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(v.type.shape).astype(v.type.dtype.np_dtype) for v in g.inputs]


def _conv_groups(g: Graph) -> list:
    return [grp for grp in g.groups if grp.kind == "conv"]


def _work(plan) -> list:
    return [s for s in plan.steps if isinstance(s, (KernelLaunch, LibraryCall))]


@pytest.mark.parametrize("stages", [["bias"], ["bias", "relu"], ["residual"], ["bias", "residual", "relu"],
                                    ["relu", "residual"], ["bias", "silu"], ["bias", "gelu"], ["gelu_tanh"]])
def test_stages_join_the_call_and_match_the_oracle(stages):
    g = conv_net(stages)
    fused = fuse(g)
    (grp,) = _conv_groups(fused)
    assert grp.epilogue == "+".join(stages) and [op.name for op in grp.ops][0] == "conv"
    assert len(grp.ops) == 1 + len(stages) and "epilogue " + grp.epilogue in grp.reason
    plan = to_plan(fused)
    (call,) = _work(plan)  # no kernel at all: the bias reshape is a view
    assert isinstance(call, ConvCall) and call.epilogue == grp.epilogue
    assert (call.bias is not None) == ("bias" in stages) and (call.residual is not None) == ("residual" in stages)
    assert call.reads == call.operands + tuple(b for b in (call.bias, call.residual) if b is not None)
    assert f'{{epilogue="{call.epilogue}"}}' in call.format(g.numbering())
    arrays = _inputs(g)
    got = ReferenceExecutor().compile(plan)(arrays)[0]
    np.testing.assert_allclose(got, run_graph(g, arrays)[0], rtol=1e-5, atol=1e-5)


def test_bf16_epilogue_is_computed_in_f32_and_rounded_once():
    stages = ["bias", "residual", "silu"]
    g, g32 = conv_net(stages, bf16), conv_net(stages, f32)
    arrays = _inputs(g, 3)
    plan = to_plan(fuse(g))
    (call,) = [s for s in _work(plan) if isinstance(s, ConvCall)]
    assert call.epilogue == "bias+residual+silu"
    got = ReferenceExecutor().compile(plan)(arrays)[0]
    want = run_graph(g32, [a.astype(np.float32) for a in arrays])[0].astype(bf16.np_dtype)  # one rounding
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    assert not np.array_equal(run_graph(g, arrays)[0].view(np.uint16), want.view(np.uint16))  # op by op differs


@pytest.mark.parametrize("stages, returned, joined", [
    (["bias", "relu"], (1,), "bias"),  # the pre-activation is returned: relu stays out
    (["spatial_bias", "relu"], (), None),  # a bias along the width is not per channel
    (["const_bias"], (), None),  # a constant is computed by kernels, held in no buffer
    (["relu", "relu"], (), "relu"),  # one activation per call
    (["bias", "bias"], (), "bias"),  # each stage once
])
def test_what_stays_out(stages, returned, joined):
    (grp,) = _conv_groups(fuse(conv_net(stages, returned=returned)))
    assert grp.epilogue == (joined or "none")


def test_the_target_says_which_stages_the_library_chains():
    g = conv_net(["bias", "residual", "relu"])
    for allowed, want in ((frozenset(), "none"), (frozenset({"bias"}), "bias"),
                          (frozenset({"bias", "relu"}), "bias")):  # stages join in order: no relu past the add
        (grp,) = _conv_groups(fuse(g, replace(DEFAULT_TARGET, conv_epilogues=allowed)))
        assert grp.epilogue == want


def test_gradient_convolutions_take_no_epilogue():
    xs, ws, attrs = CASES[CASE]
    ys = _out_shape(xs, ws, attrs)
    g = Graph("dgrad")
    b = Builder(g)
    dy, w, r = g.add_input(TensorType(ys, f32)), g.add_input(TensorType(ws, f32)), g.add_input(TensorType(xs, f32))
    g.outputs = [b.relu(b.add(b.emit("conv_grad_input", dy, w, **attrs, input_shape=xs), r))]
    (grp,) = _conv_groups(fuse(verify(g)))
    assert grp.epilogue == "none"


def test_a_refused_epilogue_runs_as_one_kernel_after_the_call():
    g = conv_net(["bias", "residual", "relu"])
    refusing = replace(DEFAULT_TARGET, conv_unsupported=lambda op, epilogue="none": "" if epilogue == "none"
                       else "test: no pointwise fusion here")
    plan = to_plan(fuse(g, refusing), target=refusing)
    call, kernel = _work(plan)
    assert isinstance(call, ConvCall) and call.epilogue == "none" and call.bias is None
    assert isinstance(kernel, KernelLaunch) and [op.name for op in kernel.ops] == ["add", "add", "relu"]
    assert "conv epilogue not run by the library: test: no pointwise fusion here" in kernel.reason
    arrays = _inputs(g, 1)
    np.testing.assert_allclose(ReferenceExecutor().compile(plan)(arrays)[0], run_graph(g, arrays)[0],
                               rtol=1e-5, atol=1e-5)


def test_explain_names_the_epilogue_and_the_ir_round_trips():
    g = conv_net(["bias", "residual", "relu"])
    fused = fuse(g)
    report = explain_plan("conv_net", fused, to_plan(fused))
    assert "conv (cuDNN call, epilogue bias+residual+relu)" in report
    text = print_graph(fused)
    assert "(conv, epilogue bias+residual+relu)" in text and print_graph(parse(text)) == text
    assert [k.epilogue for k in parse(text).groups if k.kind == "conv"] == ["bias+residual+relu"]


def train_graph(dtype) -> Graph:
    """Two convolutions with biases, ReLU and a residual (h + conv(h)), loss = sum(y^2), and the
    gradients of every parameter: a ResNet-like training step in the IR."""
    xs, ws = (2, 8, 6, 7), (8, 8, 3, 3)
    attrs = {"stride": [1, 1], "padding": [[1, 1], [1, 1]], "dilation": [1, 1]}
    g = Graph("step")
    b = Builder(g)
    x = g.add_input(TensorType(xs, dtype))
    w1, w2 = (g.add_input(TensorType(ws, dtype), "param") for _ in range(2))
    b1, b2 = (g.add_input(TensorType((8,), dtype), "param") for _ in range(2))
    h = b.relu(b.add(b.emit("conv", x, w1, **attrs), b.reshape(b1, shape=[1, 8, 1, 1])))
    y = b.relu(b.add(h, b.add(b.emit("conv", h, w2, **attrs), b.reshape(b2, shape=[1, 8, 1, 1]))))
    loss = b.reduce_sum(b.mul(y, y), axes=[0, 1, 2, 3], keepdim=False)
    g.outputs = [loss, *autodiff(g, loss, [w1, w2, b1, b2])]
    return verify(g)


def test_a_training_step_fuses_bias_residual_and_relu_in_channels_last_layout():
    g = train_graph(f32)
    plan = to_plan(lower(legalize(g), target=DEFAULT_TARGET))
    forward = [s for s in plan.steps if isinstance(s, ConvCall) and s.kind == "fprop"]
    assert sorted(c.epilogue for c in forward) == ["bias+relu", "bias+residual+relu"]
    assert all(c.op.attrs["channels_last"] for c in forward)  # the bias is a [1, 1, 1, C] view there
    arrays = _inputs(g, 2)
    for a, w in zip(ReferenceExecutor().compile(plan)(arrays), run_graph(g, arrays)):
        np.testing.assert_allclose(a, w, rtol=1e-4, atol=1e-3)


def test_the_spec_and_so_the_graph_cache_key_hold_the_epilogue():
    op = conv_net(["bias"]).ops[0]
    plain, fused = cudnn_conv.spec_of(op), cudnn_conv.spec_of(op, epilogue="bias+residual+relu")
    assert plain.epilogue == "none" and fused.epilogue == "bias+residual+relu" and plain != fused
    assert hash(plain) != hash(fused)
    assert fused.dims("bias") == (1, 32, 1, 1) and fused.strides("bias")[1] == 1
    assert (fused.dims("residual"), fused.strides("residual")) == (fused.y, fused.y_strides)
    assert cudnn_conv.unsupported_reason(fused) == ""
    assert "distinct" in cudnn_conv.unsupported_reason(replace(fused, epilogue="relu+tanh"))
    assert "distinct" in cudnn_conv.unsupported_reason(replace(fused, epilogue="bias+bias"))
    assert "after a dgrad" in cudnn_conv.unsupported_reason(replace(fused, kind="dgrad"))
