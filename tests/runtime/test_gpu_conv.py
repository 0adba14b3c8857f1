"""cuDNN convolutions (runtime/cudnn_conv.py) on CuPy memory against the ops' NumPy references: forward,
data and weight gradient in f32/f16/bf16 with groups, depthwise, stride, dilation and padding, 1-d, 2-d
and 3-d; channels-last operands passed with their real strides, and the channels_last ops of
passes/layout.py; replay from a CUDA-graph capture; the
exact workspace in the plan; and a compiled training step on the CUDA executor (plain launches, then
captured and replayed) against the reference executor. Device arrays hold bf16 bits as uint16 (cuDNN
takes pointers), so the tests do not depend on CuPy's bfloat16 support."""

from __future__ import annotations

import numpy as np
import pytest

from flame.ir.dtypes import bf16, f16, f32
from flame.ir.evaluate import evaluate_op
from flame.ir.ops.conv import CONV_OPS
from tests.passes.test_decompose_conv import conv_graph
from tests.plan.test_conv_call import _train_graph

DTYPES = {"f32": f32, "f16": f16, "bf16": bf16}
TOL = {"f32": 1e-4, "f16": 4e-3, "bf16": 2e-2}  # |got - want| <= TOL * max |want|
# symmetric padding: what every cuDNN since 8 runs (asymmetric cases go through the compile path below)
SUPPORTED = ("2d-depthwise-dilated", "2d-1x1", "3d-sym", "2d-groups-stride")


def _cupy():
    cupy = pytest.importorskip("cupy")
    pytest.importorskip("cudnn")
    return cupy


def _device(cupy, a: np.ndarray):
    return cupy.asarray(a.view(np.uint16) if a.dtype == bf16.np_dtype else a)


def _host(cupy, a, dtype: str) -> np.ndarray:
    h = cupy.asnumpy(a)
    return (h.view(bf16.np_dtype) if dtype == "bf16" else h).astype(np.float64)


def _empty(cupy, shape, dtype: str):
    """Device memory for a result, filled with NaN bits (so an element cuDNN does not write shows)."""
    if dtype == "bf16":
        return cupy.full(shape, 0xFFFF, dtype=np.uint16)
    return cupy.full(shape, np.nan, dtype={"f16": np.float16, "f32": np.float32}[dtype])


def _inputs(op, seed=0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(v.type.shape).astype(v.type.dtype.np_dtype) for v in op.inputs]


def _close(got, want, dtype, what):
    err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)
    assert err <= TOL[dtype], f"{what}: max error {err:.3g} of max |want|"


def _run(cupy, op, arrays, strides=None):
    from flame.runtime.cudnn_conv import cudnn_conv, spec_of

    conv = cudnn_conv(spec_of(op, strides))
    dtype = op.out.type.dtype.name
    out = _empty(cupy, op.out.type.shape, dtype)
    ws = cupy.empty(max(conv.workspace, 1), dtype=np.uint8)
    conv(*(_device(cupy, a) for a in arrays), out, ws)
    return conv, out, ws


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("case", SUPPORTED)
@pytest.mark.parametrize("which", CONV_OPS)
def test_cudnn_conv_matches_reference(which, case, dtype):
    cupy = _cupy()
    op = conv_graph(which, case, DTYPES[dtype]).ops[0]
    arrays = _inputs(op)
    _, out, _ = _run(cupy, op, arrays)
    want = evaluate_op(op, arrays).astype(np.float64)  # f32 compute for f16/bf16, as cuDNN accumulates
    _close(_host(cupy, out, dtype), want, dtype, f"{which} {case} {dtype}")


@pytest.mark.gpu
@pytest.mark.parametrize("which", CONV_OPS)
def test_channels_last_operands_with_their_strides(which):
    """The same call on NHWC buffers: x and y (or dx / dy) stored channels-last, described by strides."""
    from flame.runtime.cudnn_conv import channels_last_strides

    cupy = _cupy()
    op = conv_graph(which, "2d-groups-stride", bf16).ops[0]
    arrays = _inputs(op, 1)
    roles = {"conv": ("x", "w", "y"), "conv_grad_input": ("y", "w", "x"), "conv_grad_weight": ("x", "y", "w")}[which]
    shapes = dict(zip(roles, [a.shape for a in arrays] + [op.out.type.shape]))
    strides = {r: channels_last_strides(shapes[r]) for r in ("x", "y")}
    nhwc = [np.ascontiguousarray(np.moveaxis(a, 1, -1)) if r in strides else a for r, a in zip(roles, arrays)]
    from flame.runtime.cudnn_conv import cudnn_conv, spec_of

    conv = cudnn_conv(spec_of(op, strides))
    out_shape = op.out.type.shape
    out_dev = shapes[roles[2]] if roles[2] not in strides else (out_shape[0], *out_shape[2:], out_shape[1])
    out = cupy.zeros(out_dev, dtype=np.uint16)
    ws = cupy.empty(max(conv.workspace, 1), dtype=np.uint8)
    conv(*(_device(cupy, a) for a in nhwc), out, ws)
    got = _host(cupy, out, "bf16")
    if roles[2] in strides:
        got = np.moveaxis(got, -1, 1)
    _close(got, evaluate_op(op, arrays).astype(np.float64), "bf16", f"{which} channels-last")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("case", SUPPORTED)
@pytest.mark.parametrize("which", CONV_OPS)
def test_channels_last_ops_match_reference(which, case, dtype):
    """The channels_last ops passes/layout.py makes ([N, *S, C] activations in the IR): spec_of gives
    cuDNN their NC* dims with channels-last strides; the answer is the op's reference."""
    from flame.passes.layout import channels_last

    cupy = _cupy()
    op = next(o for o in channels_last(conv_graph(which, case, DTYPES[dtype])).ops if o.name in CONV_OPS)
    assert op.attrs["channels_last"]
    arrays = _inputs(op, 4)
    _, out, _ = _run(cupy, op, arrays)
    _close(_host(cupy, out, dtype), evaluate_op(op, arrays).astype(np.float64), dtype, f"{which} {case} NHWC")


@pytest.mark.gpu
def test_cudnn_conv_replays_inside_a_cuda_graph():
    cupy = _cupy()
    calls = []
    for which in CONV_OPS:
        op = conv_graph(which, "2d-groups-stride", bf16).ops[0]
        arrays = _inputs(op, 2)
        conv, want, ws = _run(cupy, op, arrays)  # the eager call builds and warms up
        calls.append((conv, [_device(cupy, a) for a in arrays], cupy.zeros_like(want), ws, cupy.asnumpy(want)))
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        for conv, ins, out, ws, _ in calls:
            conv(*ins, out, ws)
        graph = stream.end_capture()
    assert not any(out.any() for _, _, out, _, _ in calls)  # captured, not run
    graph.launch(stream)
    stream.synchronize()
    for _, _, out, _, want in calls:
        np.testing.assert_array_equal(cupy.asnumpy(out), want)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_compiled_training_step_on_cuda_matches_reference(dtype):
    """forward + autodiff (every kind of call) planned for the CUDA target, run three times (plain
    launches, capture, replay) against the reference executor; each call's workspace is cuDNN's exact
    figure; asymmetric padding and groups included."""
    _cupy()
    from flame.passes.pipeline import legalize, lower
    from flame.plan.build import to_plan
    from flame.plan.steps import ConvCall
    from flame.runtime.backend import capabilities
    from flame.runtime.cuda import CudaExecutor
    from flame.runtime.cudnn_conv import cudnn_conv, spec_of
    from flame.runtime.reference import run_graph

    g = _train_graph(DTYPES[dtype])
    target = capabilities("cuda")
    plan = to_plan(lower(legalize(g, conv_unsupported=target.conv_unsupported), target=target), target=target)
    calls = [s for s in plan.steps if isinstance(s, ConvCall)]
    assert {c.kind for c in calls} == {"fprop", "dgrad", "wgrad"}, "cuDNN refused a call: " + "; ".join(
        target.conv_unsupported(op) for op in g.ops if op.name in CONV_OPS)
    for c in calls:
        need = cudnn_conv(spec_of(c.op)).workspace
        assert (0 if c.workspace is None else plan.buffers[c.workspace].nbytes) == need
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(v.type.shape).astype(v.type.dtype.np_dtype) for v in g.inputs]
    want = run_graph(g, arrays)
    ex = CudaExecutor()
    run = ex.compile(plan)
    for _ in range(3):
        got = [ex.to_numpy(o) for o in run([ex.asarray(a) for a in arrays])]
        for i, (a, w) in enumerate(zip(got, want)):
            _close(np.asarray(a, np.float64), w.astype(np.float64), dtype, f"output {i}")


@pytest.mark.gpu
@pytest.mark.parametrize("which", CONV_OPS)
def test_asymmetric_padding_runs_on_the_cuda_path(which):
    """Asymmetric padding (PyTorch's "same" with an even kernel): cuDNN's pre/post padding, or, where
    cuDNN refuses, the decomposition; either way the answer is the reference's."""
    _cupy()
    from tests.runtime.test_gpu_ops import _run as run_cuda

    g = conv_graph(which, "2d-groups-stride-asym", f32)
    arrays = _inputs(g.ops[0], 4)
    (got,) = run_cuda(g, arrays)
    _close(np.asarray(got, np.float64), evaluate_op(g.ops[0], arrays).astype(np.float64), "f32", which)
