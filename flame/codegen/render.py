"""lower_op: one IR op -> the CUDA kernels that compute it, in launch order.

Contract with the plan builder and the runtime (flame/plan/build.py, runtime/cuda.py):
- every kernel is `extern "C" __global__ void NAME(const T0* __restrict__ in0, ..., T* __restrict__ out
  [, void* __restrict__ scratch])` with storage types (bool: 1-byte `bool`, i64: `long long`,
  f16: `__half`, bf16: `__nv_bfloat16`); inputs are contiguous row-major buffers of their IR types
  in op.inputs order, the output a fresh contiguous buffer of op.out.type;
- kernels of one op run in list order on one stream and share ONE scratch buffer of max(k.scratch)
  bytes (contents need not be initialized);
- a zero-size output gives no kernels; matmul raises NotImplementedError (a cuBLASLt call)."""

from __future__ import annotations

from collections.abc import Callable

from flame.codegen.elementwise import VIEW_OPS, lower_elementwise, lower_view
from flame.codegen.indexing import lower_concat, lower_gather, lower_pad, lower_scatter_add
from flame.codegen.kernel import Kernel
from flame.codegen.reduce import lower_reduction
from flame.ir.graph import Op
from flame.ir.registry import get

__all__ = ["Kernel", "lower_op"]


def _matmul(op: Op) -> list[Kernel]:
    raise NotImplementedError("matmul is a cuBLASLt library call made by the runtime, not a generated kernel")


_RULES: dict[str, Callable[[Op], list[Kernel]]] = {
    **{name: lower_view for name in VIEW_OPS},
    "pad": lower_pad,
    "concat": lower_concat,
    "gather": lower_gather,
    "index_select": lower_gather,
    "scatter_add": lower_scatter_add,
}
_BY_CATEGORY: dict[str, Callable[[Op], list[Kernel]]] = {
    "elementwise": lower_elementwise,
    "reduction": lower_reduction,
    "matmul": _matmul,
}


def lower_op(op: Op) -> list[Kernel]:
    """The kernels computing `op`, to be launched in order (see the module docstring for the ABI)."""
    rule = _RULES.get(op.name) or _BY_CATEGORY.get(get(op.name).category)
    if rule is None:
        raise NotImplementedError(f"no CUDA lowering for op {op.name!r}")
    return rule(op)
