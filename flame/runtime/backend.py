"""What a backend can do, as a Target (flame/target.py): the one place that asks the libraries.
compile_graph gives the result to the fusion pass, the attention legalization and the plan builder.
Both executors fuse the same matmul epilogues; fused attention and convolutions differ: the CUDA
executor runs what cuDNN runs (the rest becomes primitive ops), the reference executor runs every
attention and convolution op as one step through its NumPy reference."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, replace
from functools import cache, lru_cache
from importlib import metadata

from flame._env import env_choice, env_flag
from flame.codegen import flash_attention
from flame.ir.registry import gemm_bias
from flame.runtime import cudnn_attention, cudnn_conv, determinism, matmul
from flame.runtime.device import cuda_available
from flame.target import DEFAULT_TARGET, Target

log = logging.getLogger("flame")


def _attention_workspace(op, with_stats: bool = False, layouts: tuple = ()) -> int:
    """Exact where a GPU and cuDNN are present (cuDNN builds the graphs of the call at its strided
    operands' `layouts`, the ones the executor runs, cached), else an upper bound from the shapes (the
    reference executor does not use it; the CUDA handler checks it)."""
    if cuda_available():
        try:
            return cudnn_attention.workspace_bytes(op, with_stats, exact=True, layouts=layouts)
        except NotImplementedError:
            pass  # no cuDNN here: the CUDA handler will say so when it runs the call
    return cudnn_attention.workspace_bytes(op, with_stats)


def _matmul_workspace(op, epilogue: str = "none", ta: bool = False, tb: bool = False) -> int:
    """cuBLASLt's workspace for matmul op (ta / tb: an operand read through its transpose's input):
    what the heuristic's first algorithm asks for where a GPU is present and the shapes are numbers
    (matmul.planned_workspace), else the bound sized by its output (matmul.workspace_bytes)."""
    a, b = (v.producer.inputs[0] if t else v for v, t in zip(op.inputs, (ta, tb)))
    shapes = (a.shape, b.shape, op.out.shape)
    # fp8_matmul (its two scales after the operands): its heuristic is asked at its first call, within the bound
    fp8 = len(op.inputs) > 2 and gemm_bias(op) is None
    if cuda_available() and not fp8 and all(isinstance(d, int) for shape in shapes for d in shape):
        try:
            return matmul.planned_workspace(*shapes, ta, tb, str(op.out.dtype.np_dtype), epilogue)
        except Exception as e:  # cuBLASLt's own error type too: the call itself reports a real fault
            log.debug("flame: cuBLASLt's heuristic declined a %s GEMM %s at plan time (%s); planning the bound",
                      epilogue, shapes, e)
    return matmul.workspace_bytes(op.out.type.numel)


def _conv_unsupported(op, spec_of=cudnn_conv.spec_of) -> str:
    """flame's reasons, then, where a GPU is present, cuDNN's own answer about the call `spec_of(op)`
    (it builds the graph, once per spec): so a convolution cuDNN refuses becomes primitive ops instead
    of failing at run time. As is, for a target that keeps convolutions NC* (Target.conv_channels_last off)."""
    why = cudnn_conv.op_unsupported(op)
    if why or not cuda_available():
        return why
    return cudnn_conv.refusal(spec_of(op))


def _conv_unsupported_channels_last(op) -> str:
    """_conv_unsupported for a target whose layout pass makes every convolution channels-last
    (passes/layout.py, after this question is asked): cuDNN is asked about the call the plan will make,
    the op's activations channels-last, so the graph built to answer is the one the plan runs."""
    return _conv_unsupported(op, cudnn_conv.channels_last_spec)


def _conv_workspace(op) -> int:
    """Exact where a GPU and cuDNN are present (the graph is built and cached), else the bound."""
    if cuda_available() and not cudnn_conv.refusal(cudnn_conv.spec_of(op)):
        return cudnn_conv.workspace_bytes(op, exact=True)
    return cudnn_conv.workspace_bytes(op)


ATTENTION_ENV = "FLAME_ATTENTION"
ATTENTION_LOWERINGS = ("auto", "cudnn", "flash", "decomposed")


_ATTENTION_CHOSEN: ContextVar[str | None] = ContextVar("flame_attention_lowering", default=None)


def attention_lowering() -> str:
    """How the CUDA target runs an attention op: what `choose_attention_lowering` chose for the block
    being run (flame.nn.attention.sdpa_kernel), else FLAME_ATTENTION. auto (the default): cuDNN's fused
    attention where it supports the op, else the generated flash-attention kernel
    (codegen/flash_attention.py) where its template covers the op, else the unfused graph; cudnn: cuDNN
    where it can, else the unfused graph, never the generated kernel; flash: the generated kernel
    wherever its template covers the op, else as auto; decomposed: every attention op as the unfused
    graph (primitive ops)."""
    chosen = _ATTENTION_CHOSEN.get()
    return chosen if chosen is not None else env_choice(ATTENTION_ENV, ATTENTION_LOWERINGS, "auto")


@contextlib.contextmanager
def choose_attention_lowering(mode: str) -> Iterator[None]:
    """attention_lowering() is `mode` (one of ATTENTION_LOWERINGS) inside the block, whatever
    FLAME_ATTENTION says; the compile cache keys plans by it, so nothing planned under another choice
    is reused."""
    if mode not in ATTENTION_LOWERINGS:
        raise ValueError(f"attention lowering must be one of {ATTENTION_LOWERINGS}, got {mode!r}")
    token = _ATTENTION_CHOSEN.set(mode)
    try:
        yield
    finally:
        _ATTENTION_CHOSEN.reset(token)


@dataclass(frozen=True)
class AttentionLowering:
    """Where the CUDA target runs each attention op under one FLAME_ATTENTION setting: `choice(op)` is
    ("cudnn" | "flash" | "decomposed", why), and the Target's attention fields read it."""

    mode: str

    def choice(self, op) -> tuple[str, str]:
        """(how op runs, why it is not cuDNN's call where it is not)."""
        if self.mode == "decomposed":
            return "decomposed", "FLAME_ATTENTION=decomposed: every attention op runs as primitive ops"
        cudnn_why, flash_why = cudnn_attention.op_unsupported(op), flash_attention.unsupported(op)
        if self.mode == "flash" and not flash_why:
            return "flash", "FLAME_ATTENTION=flash: the generated flash-attention kernel"
        if not cudnn_why:
            return "cudnn", ""
        if self.mode == "cudnn":
            return "decomposed", f"{cudnn_why}; FLAME_ATTENTION=cudnn leaves the generated flash-attention kernel off"
        if not flash_why:
            return "flash", f"{cudnn_why}; the generated flash-attention kernel runs it"
        return "decomposed", f"{cudnn_why}; nor can the generated flash-attention kernel ({flash_why})"

    def unsupported(self, op) -> str:
        """Target.attention_unsupported: why op becomes primitive ops ("" if it stays one op)."""
        how, why = self.choice(op)
        return why if how == "decomposed" else ""

    def kernel(self, op) -> bool:
        """Target.attention_kernel: op runs as the generated flash-attention kernels."""
        return self.choice(op)[0] == "flash"

    def layout_unsupported(self, op, name: str, shape: tuple[int, ...], layout) -> str:
        """cuDNN's strided operands; the generated kernels read and write contiguous ones."""
        if self.kernel(op):
            return "the generated flash-attention kernel reads and writes contiguous operands"
        return cudnn_attention.layout_unsupported(op, name, shape, layout)


@cache
def attention_rules(mode: str) -> AttentionLowering:
    """The one AttentionLowering of a FLAME_ATTENTION setting (its methods are part of cached Targets)."""
    return AttentionLowering(mode)


def capabilities(executor: str = "cuda", target: Target = DEFAULT_TARGET) -> Target:
    """`target` with the matmul epilogues cuBLASLt runs inside the call and, for the CUDA executor,
    which attention and convolution ops cuDNN runs (with the workspace each call needs; attention under
    the FLAME_ATTENTION setting: attention_lowering), whether
    collectives overlap on a communication stream, whether optimizer updates overlap on a side stream and
    the current GPU's architecture; for every executor, whether bias gradients take cuBLASLt's BGRAD
    epilogue (bgrad_enabled), so that the reference runs the plan the GPU runs."""
    target = replace(target, matmul_epilogues=frozenset(matmul.SUPPORTED_EPILOGUES) - {"none"},
                     bgrad_epilogue=bgrad_enabled(), fused_pieces=pieces_enabled())
    if executor != "cuda":
        return target
    rules = attention_rules(attention_lowering())
    return replace(target, attention_unsupported=rules.unsupported, attention_kernel=rules.kernel,
                   attention_layout_unsupported=rules.layout_unsupported,
                   attention_workspace=_attention_workspace, matmul_workspace=_matmul_workspace,
                   comm_stream=comm_stream_enabled(), side_stream=side_stream_enabled(),
                   conv_unsupported=_conv_unsupported_channels_last if target.conv_channels_last else _conv_unsupported,
                   conv_workspace=_conv_workspace, arch=_arch(), deterministic=determinism.mode())


def _arch() -> str:
    """The current GPU's architecture ("sm_90"), or "" where there is none (plans made without a GPU)."""
    if not cuda_available():
        return ""
    from flame.codegen.nvrtc import device_arch

    return device_arch()


def side_stream_enabled() -> bool:
    """FLAME_SIDE_STREAM=1 has the CUDA executor issue each optimizer update on a second stream as soon
    as its gradient is final, so it may overlap the rest of the backward. Off by default: the update's
    short blocks are dispatched before the next matmul's and delay it, so nothing is hidden, and
    gpt_train's 48 per-layer updates take 1.5 % longer than its one multi-tensor update on an H200
    (benchmarks/results/2026-11-29-H200-side-stream/; docs/performance.md, "Settings that stay off")."""
    return env_flag("FLAME_SIDE_STREAM", False)


def pieces_enabled() -> bool:
    """FLAME_FUSE_PIECES=1 has concat and pad (a rotary embedding's cat([-x2, x1]) and its gradient's
    pads, a U-Net's skip connections) fused as elementwise work into their neighbours' kernels, each
    element reading the input its region comes from (the default; FLAME_FUSE_PIECES=0 runs each as a
    kernel of its own). The reference executor plans as the GPU does, for every executor."""
    return env_flag("FLAME_FUSE_PIECES", True)


def bgrad_enabled() -> bool:
    """FLAME_MATMUL_BGRAD=1 has a Linear's bias gradient computed by its weight-gradient GEMM (cuBLASLt's
    BGRADA / BGRADB epilogue). Off by default: cuBLASLt 13 runs every such epilogue as a kernel of its
    own after the GEMM (globalKernelBgradAB_v2), slower than flame's column reduction of the same
    gradient on an H200: [8192, 4096] bf16 30.6 us against 18.6 + 2.2, [8192, 3072] 20.3 against
    14.0 + 1.7, [8192, 1024] 8.4 against 3.8 + 2.0; gpt_train's step spans 8410 us with it, 8280
    without (benchmarks/results/2026-11-29-H200-bias-grad/). Tiny layers lose a little without it
    (mlp_small_train, [128, 256] f32 gradients: 84.8 us against 83.3): there the epilogue's
    one kernel beats the column sum's two."""
    return env_flag("FLAME_MATMUL_BGRAD", False)


def comm_stream_enabled() -> bool:
    """FLAME_COMM_STREAM=0 issues collectives on the plan's own stream, in order (no overlap with
    the computation after them); by default the CUDA executor runs them on a second stream."""
    return env_flag("FLAME_COMM_STREAM", True)


def target_identity(executor_name: str, target: Target, gpu: int | None = None) -> str:
    """Text naming what a plan made for `target` on this executor depends on besides the graph: the
    Target's fields (a function by its module and name) and the executor: on CUDA the current GPU
    (name, compute capability) and the versions of the driver, the CUDA runtime, NVRTC and the
    libraries flame calls; the reference executor by its name and NumPy's version. The persistent plan
    cache keys its entries with it (flame.plan.cache); `gpu`: the current GPU's id (its answers are kept
    per GPU)."""
    fields = []
    for f in dataclasses.fields(target):
        v = getattr(target, f.name)
        if callable(v):
            v = f"{getattr(v, '__module__', '?')}.{getattr(v, '__qualname__', type(v).__name__)}"
        elif isinstance(v, frozenset):
            v = sorted(v)
        fields.append(f"{f.name}={v}")
    return f"{_executor_identity(executor_name, gpu)}; target {', '.join(fields)}"


@lru_cache(maxsize=8)
def _executor_identity(executor_name: str, gpu: int | None = None) -> str:
    """The executor, and on CUDA the GPU and the driver's and libraries' versions (target_identity)."""
    import numpy

    if executor_name != "cuda":
        return f"executor {executor_name}, numpy {numpy.__version__}"
    import cupy

    from flame.codegen.nvrtc import nvrtc_version

    dev = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    parts = [f"executor cuda, gpu {name} sm_{dev.compute_capability}",
             f"driver {cupy.cuda.runtime.driverGetVersion()}", f"runtime {cupy.cuda.runtime.runtimeGetVersion()}",
             f"nvrtc {nvrtc_version()}", f"cupy {cupy.__version__}"]
    for dist in ("nvidia-cublas-cu12", "nvidia-cublas", "nvmath-python", "nvidia-cudnn-cu12", "nvidia-cudnn-cu13",
                 "nvidia-cudnn-frontend", "nvidia-nccl-cu12"):
        try:
            parts.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            pass
    return ", ".join(parts)
