"""What the backend can do, as data: the fusion pass and codegen ask a Target instead of writing the
backend's abilities into themselves. It sits below passes/ and codegen/ (both import it) and above
nothing; the backend fills it in (flame.runtime.backend.capabilities) and whoever assembles the
pipeline passes it to fuse(g, target). The default describes the CUDA backend as flame builds it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flame.ir.graph import Op

# what FusionGroup.epilogue can name besides "none" (runtime/matmul.py maps each to a cuBLASLt epilogue):
# bias: + bias[n]; relu / bias_relu; gelu / bias_gelu: tanh-GELU (GELU(approximate="tanh") only);
# gelu_aux / bias_gelu_aux: the same, also writing the pre-activation (the backward reads it) as a
# second result; bgrad_a / bgrad_b: also writing the sum over k of op(a) ([m]) / of op(b) ([n]), a
# Linear's bias gradient taken by the weight-gradient GEMM.
MATMUL_EPILOGUES = ("bias", "relu", "bias_relu", "gelu", "bias_gelu", "gelu_aux", "bias_gelu_aux", "bgrad_a", "bgrad_b")


@dataclass(frozen=True)
class Target:
    """matmul_epilogues: the epilogues the GEMM library runs inside the call (the fusion pass marks
    only these). row_cache: the longest row (elements) a row kernel's block keeps in registers; longer
    rows are streamed, and column reductions ride along only in rows up to this long.
    attention_unsupported(op): why the attention library cannot run attention op `op` as one call
    ("" if it can; the op then becomes the unfused graph: passes/decompose_attention.py).
    attention_layout_unsupported(op, name, shape, layout): why the attention library cannot read or
    write operand `name` (q, k, v, o, grad_out, dq, dk, dv) of attention op `op` at a strided layout
    (flame.plan.views.Strided) of its buffer ("" if it can; the views are then copied, as before).
    attention_kernel(op): the op (a forward or backward the attention library does not run, or one a
    setting forces) runs as the generated flash-attention kernels (codegen/flash_attention.py) instead of
    a library call. attention_workspace(op, with_stats, layouts): the bytes of arena workspace that op's
    library call needs (with_stats: a forward whose call also writes its softmax statistics to a planned
    buffer; layouts: the operands the call reads or writes through strides, AttentionCall.layouts).
    conv_unsupported(op) / conv_workspace(op): the same for convolution ops (conv, conv_grad_input,
    conv_grad_weight; without a library call they become im2col + matmul: passes/decompose_conv.py).
    matmul_workspace(op, epilogue, ta, tb): the bytes of arena workspace that matmul op's GEMM library call
    may use (with that epilogue, ta / tb: an operand read through its transpose's input). comm_stream: the
    executor issues collectives on a communication stream (plan: CollectiveCall.overlap). side_stream:
    the executor issues optimizer updates (kernels that only write parameters and state in place) on a
    second stream, so they overlap the backward after them (plan: KernelLaunch.side). bgrad_epilogue:
    a Linear's bias gradient becomes its weight-gradient GEMM's BGRAD epilogue (when matmul_epilogues
    has it) instead of a column-reduction kernel of its own (runtime/backend.bgrad_enabled says why that
    is the default). fused_pieces: concat and pad (the `pieces` trait) fuse as elementwise work, a kernel
    selecting per element the region it reads (runtime/backend.pieces_enabled says why it is off by
    default). sm_count,
    split_row_min, split_work_min: when a row reduction's rows are split across blocks (splits_rows).
    conv_channels_last: convolution library calls take channels-last activations, so the layout pass
    (passes/layout.py) keeps the activations of convolutional segments [N, *S, C] inside the step.
    arch: the GPU architecture the plan is made for, as NVRTC spells it ("sm_90"; "" for the NumPy
    reference): the libraries' answers and workspaces depend on it, so it is part of the compile cache key
    (a Target is hashable; the whole of it is in the key). kernel_param_bytes: the parameter space of one
    kernel, which bounds how many tensors a horizontal (multi-tensor) kernel takes (one pointer each).
    matmul_rate / matmul_rate_f32: the GEMM work per second (FLOP/s) of 16-bit and of f32 (and wider)
    operands; memory_bandwidth: the device memory's bytes per second; host_link_bandwidth: bytes per
    second one way between device memory and pinned host memory. The activation-budget solver
    (passes/activation_budget.py) prices a recomputation or an offload with them. The defaults are
    declared figures of an H200 SXM (dense bf16 989 TFLOP/s, f32 67 TFLOP/s, HBM3e 4.8 TB/s, a PCIe
    5.0 x16 link at 55 GB/s); a backend may fill in measured ones. deterministic: what a plan holding a kernel
    whose floating-point sums change order from run to run (Kernel.deterministic) gets: "" nothing, "error" a
    DeterminismError, "warn" a warning (runtime/determinism.py)."""

    matmul_epilogues: frozenset[str] = frozenset(MATMUL_EPILOGUES)
    row_cache: int = 32768  # <= 32 elements per thread at 1024 threads per row
    attention_unsupported: Callable[[Op], str] = lambda op: ""  # the NumPy reference runs every case
    attention_workspace: Callable[[Op, bool, tuple], int] = lambda op, with_stats=False, layouts=(): 0
    attention_kernel: Callable[[Op], bool] = lambda op: False  # the NumPy reference runs the op as one step
    attention_layout_unsupported: Callable[[Op, str, tuple, object], str] = lambda op, name, shape, layout: ""
    conv_unsupported: Callable[[Op], str] = lambda op: ""  # the NumPy reference runs every case
    conv_workspace: Callable[[Op], int] = lambda op: 0
    matmul_workspace: Callable[..., int] = lambda op, epilogue="none", ta=False, tb=False: 0
    sm_count: int = 132  # multiprocessors (H100 / H200 SXM): a reduction's grid should fill them
    split_row_min: int = 8192  # a row at least this long may be split across blocks ...
    split_work_min: int = 1 << 20  # ... when the reduction reads at least this many elements
    comm_stream: bool = False  # collectives run on a second stream, overlapping the steps after them
    side_stream: bool = False  # optimizer updates run on a second stream, overlapping the steps after them
    bgrad_epilogue: bool = False  # bias gradients ride in their weight-gradient GEMMs (cuBLASLt BGRAD)
    fused_pieces: bool = False  # concat and pad fuse as elementwise work (FLAME_FUSE_PIECES)
    conv_channels_last: bool = True  # convolutions and the activations around them run [N, *S, C]
    arch: str = ""
    deterministic: str = ""  # runtime/determinism.mode(): "", "error" or "warn"
    kernel_param_bytes: int = 32764  # a kernel's parameters (CUDA 12.1+ on Volta and newer; 4096 before)
    matmul_rate: float = 989e12  # FLOP/s of a GEMM on 16-bit operands
    matmul_rate_f32: float = 67e12  # FLOP/s of a GEMM on f32 operands (no TF32)
    memory_bandwidth: float = 4.8e12  # bytes/s of device memory
    host_link_bandwidth: float = 55e9  # bytes/s one way between device and pinned host memory

    def splits_rows(self, rows: int, length: int) -> bool:
        """Whether `rows` reductions of `length` elements each should split every row across blocks
        (partials, then a fold kernel): one block per row would leave most multiprocessors idle
        (fewer than 2 rows per SM), and the work outweighs the fold's launch."""
        return rows < 2 * self.sm_count and length >= self.split_row_min and rows * length >= self.split_work_min


DEFAULT_TARGET = Target()
