"""What the backend can do, as data: the fusion pass and codegen ask a Target instead of writing the
backend's abilities into themselves. It sits below passes/ and codegen/ (both import it) and above
nothing; the backend fills it in (flame.runtime.matmul.capabilities) and whoever assembles the
pipeline passes it to fuse(g, target). The default describes the CUDA backend as flame builds it."""

from __future__ import annotations

from dataclasses import dataclass

MATMUL_EPILOGUES = ("bias", "relu", "bias_relu")  # what FusionGroup.epilogue can name besides "none"


@dataclass(frozen=True)
class Target:
    """matmul_epilogues: the epilogues the GEMM library runs inside the call (the fusion pass marks
    only these). row_cache: the longest row (elements) a row kernel's block keeps in registers; longer
    rows are streamed, and column reductions ride along only in rows up to this long."""

    matmul_epilogues: frozenset[str] = frozenset(MATMUL_EPILOGUES)
    row_cache: int = 32768  # <= 32 elements per thread at 1024 threads per row


DEFAULT_TARGET = Target()
