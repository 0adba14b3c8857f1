"""torch.backends' switches, over flame's own (`import flame.backends.cudnn as cudnn` works as torch's):

- `flame.backends.cuda.matmul.allow_tf32` and `flame.set_float32_matmul_precision("high")` let f32
  matmuls (cuBLASLt) round their inputs to TF32; `flame.backends.cudnn.allow_tf32` lets f32 convolutions
  (cuDNN) do so. Both are off by default in flame (torch's default for convolutions is on). A compiled
  step reads them when it is compiled and keeps what it planned (set them before the first call);
  eager calls read them each time. The NumPy reference executor computes f32 exactly either way.
- `flame.backends.cudnn.benchmark`, `deterministic` and `enabled`, and the reduced-precision reduction
  switches of `flame.backends.cuda.matmul`, are kept and read back, and change nothing: flame chooses its
  cuDNN and cuBLASLt algorithms itself (FLAME_MATMUL_AUTOTUNE times the GEMMs' candidates), and does not
  promise bitwise-identical GPU results from run to run."""

from __future__ import annotations

from flame.backends import cuda, cudnn

__all__ = ["cuda", "cudnn", "get_float32_matmul_precision", "set_float32_matmul_precision"]

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
