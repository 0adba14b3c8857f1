"""torch.backends' switches, over flame's own (`import flame.backends.cudnn as cudnn` works as torch's):

- `flame.backends.cuda.matmul.allow_tf32` and `flame.set_float32_matmul_precision("high")` let f32
  matmuls (cuBLASLt) round their inputs to TF32; `flame.backends.cudnn.allow_tf32` lets f32 convolutions
  (cuDNN) do so. Both are off by default in flame (torch's default for convolutions is on). A compiled
  step reads them when it is compiled and keeps what it planned (set them before the first call);
  eager calls read them each time. The NumPy reference executor computes f32 exactly either way.
- `flame.use_deterministic_algorithms(True)` (torch's): a compiled step whose GPU plan holds a kernel
  adding floating-point values with atomics (a scatter_add, which embedding and index_add gradients are;
  the generated flash-attention backward) raises a `DeterminismError` naming the op and your line
  (`warn_only=True`: a warning), and cuDNN is asked for deterministic engines; so is it by
  `flame.backends.cudnn.deterministic = True` alone (runtime/determinism.py). The NumPy reference
  executor is deterministic either way.
- `flame.backends.cudnn.benchmark` and `enabled`, and the reduced-precision reduction switches of
  `flame.backends.cuda.matmul`, are kept and read back, and change nothing: flame chooses its cuDNN and
  cuBLASLt algorithms itself (FLAME_MATMUL_AUTOTUNE times the GEMMs' candidates)."""

from __future__ import annotations

from flame.backends import cuda, cudnn
from flame.runtime import determinism

__all__ = [
    "are_deterministic_algorithms_enabled",
    "cuda",
    "cudnn",
    "get_float32_matmul_precision",
    "is_deterministic_algorithms_warn_only_enabled",
    "set_float32_matmul_precision",
    "use_deterministic_algorithms",
]

_PRECISIONS = ("highest", "high", "medium")


def set_float32_matmul_precision(precision: str) -> None:
    """torch's: "highest" keeps f32 matmuls in full f32; "high" and "medium" let them use TF32 (flame
    has no bf16-internal f32 GEMM, so "medium" is "high"): flame.backends.cuda.matmul.allow_tf32."""
    if precision not in _PRECISIONS:
        raise ValueError(f"set_float32_matmul_precision: precision must be one of {list(_PRECISIONS)}, got "
                         f"{precision!r}")
    cuda.matmul.allow_tf32 = precision != "highest"
    cuda.matmul._precision = precision


def get_float32_matmul_precision() -> str:
    """"highest" unless TF32 is allowed for matmuls (then what set_float32_matmul_precision was given, or "high")."""
    if not cuda.matmul.allow_tf32:
        return "highest"
    return cuda.matmul._precision if cuda.matmul._precision != "highest" else "high"


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """torch's: with mode, a step compiled for the GPU that would add floating-point values in an order
    changing from run to run raises a DeterminismError naming the op and the user's line (with
    warn_only, warns), and cuDNN takes deterministic engines. Read when a step is compiled."""
    if not isinstance(mode, bool) or not isinstance(warn_only, bool):
        raise TypeError(f"use_deterministic_algorithms expects bools, got mode={mode!r}, warn_only={warn_only!r}")
    determinism.set_mode(mode, warn_only)


def are_deterministic_algorithms_enabled() -> bool:
    return determinism.mode() != ""


def is_deterministic_algorithms_warn_only_enabled() -> bool:
    return determinism.mode() == "warn"
