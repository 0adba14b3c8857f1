"""Convolutions (forward, data gradient, weight gradient) through cuDNN's graph API in
nvidia-cudnn-frontend, on CuPy device memory (ARCHITECTURE.md "Library steps"), called by the plan's `ConvCall` steps
(runtime/cuda.py).

    spec = spec_of(op)                        # a conv / conv_grad_input / conv_grad_weight IR op
    why = unsupported_reason(spec)            # "" when flame knows no reason cuDNN cannot run it
    conv = cudnn_conv(spec)                   # the graph, built once per spec and cached
    conv(a, b, out, workspace=ptr)            # a, b: the op's inputs in IR order; conv.workspace bytes

The three kinds and their operands, in the IR's NC* shapes (ir/ops/conv.py):
    fprop  conv(x, w) -> y                    x [N, C, *S], w [K, C/groups, *R], y [N, K, *O]
    dgrad  conv_grad_input(dy, w) -> dx
    wgrad  conv_grad_weight(x, dy) -> dw
Each tensor is passed with its real strides in memory (`ConvSpec` holds them; NC* row-major unless a
layout says otherwise, so a channels-last buffer is the same spec with other strides: cuDNN's fast
kernels are NHWC, and it transposes NCHW operands itself). Groups (depthwise included) are implied
by the weight: C = groups * w.shape[1]. A 1-d convolution runs as a 2-d one with a unit height (cuDNN
convolves 2 or 3 spatial dims). Padding may be asymmetric (pre/post padding per dim).

Precision: f16/bf16 in and out with f32 accumulation; f32 without TF32 unless `allow_tf32` is set
(engines flagged TENSOR_CORE or DOWN_CONVERT_INPUTS are deselected, as flame's f32 GEMMs and torch
with allow_tf32=False do). Engines needing more than WORKSPACE_LIMIT bytes of workspace are
deselected, so that bound is also the estimate when no GPU is there to ask (`workspace_bytes`).

A call runs on the current CuPy stream and allocates nothing: it can be captured into a CUDA graph.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from flame.ir.indexmap import contiguous_strides
from flame.ir.ops.conv import to_channels_first
from flame.plan.steps import ConvCall
from flame.runtime import cudnn_cache, determinism
from flame.runtime.cudnn_graph import cudnn_module, device_ptr, execute, handle, refusals

DTYPES = ("f32", "f16", "bf16")
OPERANDS = {"fprop": ("x", "w", "y"), "dgrad": ("y", "w", "x"), "wgrad": ("x", "y", "w")}  # a, b -> out, as X/W/Y
UIDS = {"x": 1, "w": 2, "y": 3}  # the graph's tensors by uid: a graph read back from the cache runs the same way
WORKSPACE_LIMIT = 256 << 20  # no engine needing more is chosen
allow_tf32 = False  # explicit opt-in, as runtime/matmul.allow_tf32


def channels_last_strides(dims: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of an [N, C, *S] tensor stored as [N, *S, C] (NHWC / NDHWC)."""
    n, c, *spatial = dims
    inner = contiguous_strides((n, *spatial, c))
    return (inner[0], 1, *inner[1:-1])


@dataclass(frozen=True)
class ConvSpec:
    """What one cuDNN convolution graph is built for: the kind (fprop / dgrad / wgrad), the dtype,
    the logical dims of x [N, C, *S], w [K, C/groups, *R] and y [N, K, *O] with their element
    strides in memory, and pre/post padding, stride and dilation per spatial dim (2 or 3 of them:
    `of` turns a 1-d convolution into a 2-d one)."""

    kind: str
    dtype: str
    x: tuple[int, ...]
    w: tuple[int, ...]
    y: tuple[int, ...]
    x_strides: tuple[int, ...]
    w_strides: tuple[int, ...]
    y_strides: tuple[int, ...]
    pre_padding: tuple[int, ...]
    post_padding: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]

    @staticmethod
    def of(kind: str, dtype: str, x, w, y, padding, stride, dilation, strides: dict | None = None) -> ConvSpec:
        """The spec of one convolution: dims as in the IR, padding as [lo, hi] pairs, `strides` the
        memory strides of any of "x", "w", "y" that are not NC* row-major."""
        dims = {"x": tuple(x), "w": tuple(w), "y": tuple(y)}
        st = {n: tuple((strides or {}).get(n) or contiguous_strides(d)) for n, d in dims.items()}
        pads = [tuple(p) for p in padding]
        stride, dilation = tuple(stride), tuple(dilation)
        if len(dims["x"]) == 3:  # 1-d: a unit height in front of the length
            for n in dims:
                d, s = dims[n], st[n]
                dims[n], st[n] = (*d[:2], 1, d[2]), (*s[:2], s[2] * d[2], s[2])
            pads, stride, dilation = [(0, 0), *pads], (1, *stride), (1, *dilation)
        return ConvSpec(
            kind,
            dtype,
            dims["x"],
            dims["w"],
            dims["y"],
            st["x"],
            st["w"],
            st["y"],
            tuple(p[0] for p in pads),
            tuple(p[1] for p in pads),
            stride,
            dilation,
        )

    @property
    def groups(self) -> int:
        return self.x[1] // self.w[1] if self.w[1] else 1

    def dims(self, which: str) -> tuple[int, ...]:
        return {"x": self.x, "w": self.w, "y": self.y}[which]

    def strides(self, which: str) -> tuple[int, ...]:
        return {"x": self.x_strides, "w": self.w_strides, "y": self.y_strides}[which]

    @property
    def flops(self) -> int:
        """Multiply-adds x 2 of the call (the same for all three kinds)."""
        return 2 * math.prod(self.y) * math.prod(self.w[1:])


def spec_of(op, strides: dict | None = None) -> ConvSpec:
    """The spec of a conv / conv_grad_input / conv_grad_weight IR op (`strides`: see ConvSpec.of). A
    channels_last op's activations ([N, *S, C] in the IR) are its NC* dims with channels-last strides."""
    kind = ConvCall.KINDS[op.name]
    a, b = (v.type.shape for v in op.inputs)
    shapes = dict(zip(OPERANDS[kind], (a, b, op.out.type.shape)))
    at = op.attrs
    if at.get("channels_last"):
        shapes.update({n: to_channels_first(shapes[n]) for n in ("x", "y")})
        strides = {n: channels_last_strides(shapes[n]) for n in ("x", "y")} | (strides or {})
    return ConvSpec.of(
        kind,
        op.out.type.dtype.name,
        shapes["x"],
        shapes["w"],
        shapes["y"],
        at["padding"],
        at["stride"],
        at["dilation"],
        strides,
    )


def channels_last_spec(op) -> ConvSpec:
    """The spec of convolution op `op` once made channels_last (passes/layout.py): its activations x and
    y (the op's NC* operands, or already channels-last ones) with channels-last strides."""
    if op.attrs.get("channels_last"):
        return spec_of(op)
    kind = ConvCall.KINDS[op.name]
    shapes = dict(zip(OPERANDS[kind], (*(v.type.shape for v in op.inputs), op.out.type.shape)))
    return spec_of(op, {n: channels_last_strides(tuple(shapes[n])) for n in ("x", "y")})


def unsupported_reason(spec: ConvSpec) -> str:
    """Why cuDNN cannot run `spec` as far as flame knows without asking it ("" if it may); building
    the graph may still refuse (CudnnConv raises NotImplementedError with cuDNN's words)."""
    if spec.dtype not in DTYPES:
        return f"cuDNN convolutions take f32/f16/bf16, not {spec.dtype}"
    if not 2 <= len(spec.x) - 2 <= 3:
        return f"cuDNN convolves 1, 2 or 3 spatial dims, not {len(spec.x) - 2}"
    if 0 in spec.x or 0 in spec.w or 0 in spec.y:
        return f"an empty tensor (x {list(spec.x)}, w {list(spec.w)}, y {list(spec.y)})"
    return ""


def op_unsupported(op) -> str:
    """Why cuDNN cannot run convolution op `op` ("" if flame knows no reason)."""
    return unsupported_reason(spec_of(op))


def workspace_bytes(op, exact: bool = False) -> int:
    """The workspace op's call needs: exact (cuDNN's own figure; builds the graph) when `exact`,
    else the most any engine flame lets cuDNN choose may need (WORKSPACE_LIMIT)."""
    return cudnn_conv(spec_of(op)).workspace if exact else WORKSPACE_LIMIT


class CudnnConv:
    """The cuDNN graph of one ConvSpec, built on construction (or read back from the cache of built
    graphs, runtime/cudnn_cache.py); calling it runs the convolution."""

    def __init__(self, spec: ConvSpec, deterministic: bool = False):
        why = unsupported_reason(spec)
        if why:
            raise NotImplementedError(f"cuDNN convolution: {why}")
        self.spec = spec
        self.deterministic = deterministic  # engines with the NONDETERMINISTIC note are left out
        cudnn = cudnn_module("cuDNN convolution")
        self._io = {"f32": cudnn.data_type.FLOAT, "f16": cudnn.data_type.HALF, "bf16": cudnn.data_type.BFLOAT16}[
            spec.dtype
        ]
        try:
            self._graph = cudnn_cache.graph(cudnn, self._key(), f"{spec.kind} convolution", lambda: self._build(cudnn))
        except refusals(cudnn) as e:
            raise NotImplementedError(f"cuDNN refused the {spec.kind} convolution {spec}: {e}") from None
        self._tensors = tuple(UIDS[n] for n in OPERANDS[spec.kind])  # a, b, out
        self.workspace = self._graph.get_workspace_size()

    def _key(self) -> str:
        """What decides the graph besides the GPU and the libraries (runtime/cudnn_cache.py's key)."""
        tf32 = self.spec.dtype == "f32" and allow_tf32
        return (f"conv {self.spec!r} tf32={tf32} workspace<={WORKSPACE_LIMIT}"
                + (" deterministic" if self.deterministic else ""))

    def _tensor(self, g, which: str):
        t = g.tensor(
            name=which.upper(),
            dim=list(self.spec.dims(which)),
            stride=list(self.spec.strides(which)),
            data_type=self._io,
        )
        t.set_uid(UIDS[which])
        return t

    def _build(self, cudnn):
        s, f32 = self.spec, cudnn.data_type.FLOAT
        g = cudnn.pygraph(io_data_type=self._io, intermediate_data_type=f32, compute_data_type=f32, handle=handle())
        a_name, b_name, out_name = OPERANDS[s.kind]
        a, b = self._tensor(g, a_name), self._tensor(g, b_name)
        conv = {
            "fprop": lambda: g.conv_fprop(image=a, weight=b, **self._attrs(f32)),
            "dgrad": lambda: g.conv_dgrad(loss=a, filter=b, **self._attrs(f32)),
            "wgrad": lambda: g.conv_wgrad(image=a, loss=b, **self._attrs(f32)),
        }[s.kind]
        out = conv()
        out.set_output(True).set_dim(list(s.dims(out_name))).set_stride(list(s.strides(out_name)))
        out.set_data_type(self._io)
        out.set_uid(UIDS[out_name])
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        notes = [cudnn.numerical_note.NONDETERMINISTIC] if self.deterministic else []
        if s.dtype == "f32" and not allow_tf32:
            notes += [cudnn.numerical_note.TENSOR_CORE, cudnn.numerical_note.DOWN_CONVERT_INPUTS]
        if notes:
            g.deselect_numeric_notes(notes)
        g.deselect_workspace_greater_than(WORKSPACE_LIMIT)
        g.check_support()
        g.build_plans()
        return g

    def _attrs(self, compute) -> dict:
        s = self.spec
        return {
            "pre_padding": list(s.pre_padding),
            "post_padding": list(s.post_padding),
            "stride": list(s.stride),
            "dilation": list(s.dilation),
            "compute_data_type": compute,
        }

    def __call__(self, a, b, out, workspace=0) -> None:
        """out = the convolution of a and b (the op's inputs in IR order: x, w / dy, w / x, dy); each a
        CuPy array or a device pointer with the spec's strides. `workspace`: `self.workspace` bytes
        (an array or a pointer; 0 when none is needed). Runs on the current CuPy stream."""
        ta, tb, tout = self._tensors
        execute(self._graph, {ta: device_ptr(a), tb: device_ptr(b), tout: device_ptr(out)}, device_ptr(workspace))


def cudnn_conv(spec: ConvSpec) -> CudnnConv:
    """The built graph for `spec` under the determinism setting (runtime/determinism.cudnn: engines with
    cuDNN's NONDETERMINISTIC note are left out), cached in the process and on disk
    (runtime/cudnn_cache.py: building takes milliseconds)."""
    return _built_conv(spec, determinism.cudnn())


@lru_cache(maxsize=512)
def _built_conv(spec: ConvSpec, deterministic: bool) -> CudnnConv:
    return CudnnConv(spec, deterministic)


cudnn_conv.cache_clear = _built_conv.cache_clear


def refusal(spec: ConvSpec) -> str:
    """Why cuDNN cannot run `spec` (under the determinism setting), asking cuDNN itself (builds the
    graph; needs a GPU): "" if it can, else flame's or cuDNN's reason. Remembered, so a refused spec is
    not rebuilt at each compile."""
    return _refusal(spec, determinism.cudnn())


@lru_cache(maxsize=512)
def _refusal(spec: ConvSpec, deterministic: bool) -> str:
    try:
        _built_conv(spec, deterministic)
    except NotImplementedError as e:
        return str(e)
    return ""


refusal.cache_clear = _refusal.cache_clear
