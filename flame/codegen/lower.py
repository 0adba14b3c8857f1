"""lower: one FusionGroup -> the CUDA kernels that compute it, in launch order. A single op is a
group of one (`single(op)`); larger groups are lowered by their Kind, one lowering per kind (LOWERINGS).

Contract with the runtime (the plan builder and executors):
- every kernel is `extern "C" __global__ void NAME(const T0* __restrict__ in0, ..., T* __restrict__
  out...[, void* __restrict__ scratch])` with storage types (bool: 1-byte `bool`, i64: `long long`,
  f16: `__half`, bf16: `__nv_bfloat16`); inputs and outputs are contiguous row-major buffers of
  their IR types, in the order `kernel_inputs(group)` and `group.outputs` give (a group of one op:
  the op's inputs in op.inputs order, duplicates included, and one output `out`);
- kernels of one group run in list order on one stream and share ONE scratch buffer of
  max(k.scratch) bytes (contents need not be initialized);
- a zero-size output gives no kernels; a library call (matmul) raises NotImplementedError: the
  runtime makes it."""

from __future__ import annotations

from collections.abc import Callable

from flame.codegen.elementwise import lower_elementwise, lower_view
from flame.codegen.fused import group_inputs, lower_map
from flame.codegen.fused_rows import lower_rows
from flame.codegen.indexing import (
    lower_concat,
    lower_gather,
    lower_pad,
    lower_scatter,
    lower_scatter_add,
    lower_segment_sum,
)
from flame.codegen.kernel import DEFAULT_CONFIG, Config, Kernel
from flame.codegen.reduce import lower_reduction
from flame.codegen.scan import lower_argsort, lower_cumarg, lower_scan
from flame.codegen.transpose import lower_permute, lower_tiled_map
from flame.codegen.user import lower_user
from flame.ir.graph import FusionGroup, Kind, Op, Value
from flame.ir.registry import get
from flame.target import DEFAULT_TARGET, Target

__all__ = ["LOWERINGS", "Kernel", "kernel_inputs", "lower", "single"]


def _library(op: Op) -> list[Kernel]:
    raise NotImplementedError(
        f"{op.name} is a {get(op.name).library} library call made by the runtime, not a generated kernel"
    )


_BY_NAME: dict[str, Callable[[Op], list[Kernel]]] = {  # the copies that are not index-mapping copies
    "permute": lower_permute,  # a view, but a transpose wants a tiled kernel
    "pad": lower_pad,
    "concat": lower_concat,
    "gather": lower_gather,
    "index_select": lower_gather,
    "scatter_add": lower_scatter_add,
    "scatter": lower_scatter,
    "segment_sum": lower_segment_sum,
    "cumsum": lower_scan,
    "cumprod": lower_scan,
    "logcumsumexp": lower_scan,
    "argsort": lower_argsort,
    "cumarg": lower_cumarg,
}
_CONFIGURED = (lower_permute,)  # the rules that also take the Config (its tile settings)
_BY_CATEGORY: dict[str, Callable[[Op], list[Kernel]]] = {
    "elementwise": lower_elementwise,
    "reduction": lower_reduction,
}


def _op_rule(op: Op) -> Callable[[Op], list[Kernel]] | None:
    opdef = get(op.name)
    if opdef.library:
        return _library
    if opdef.user is not None and opdef.category == "opaque":  # flame.cuda.kernel: the user's own kernel
        return lower_user
    if op.name in _BY_NAME:
        return _BY_NAME[op.name]
    if opdef.view is not None:
        return lower_view
    return _BY_CATEGORY.get(opdef.category)


def _one_op(group: FusionGroup, config: Config, target: Target) -> list[Kernel]:
    (op,) = group.ops
    rule = _op_rule(op)
    if rule is None:
        raise NotImplementedError(f"no CUDA lowering for op {op.name!r}")
    return rule(op, config) if rule in _CONFIGURED else rule(op)


def _fused_library(group: FusionGroup, config: Config, target: Target) -> list[Kernel]:
    return _library(group.ops[0])


def _map(group: FusionGroup, config: Config, target: Target) -> list[Kernel]:
    """An elementwise group: a tiled transpose when it writes pointwise values only transposed
    (transpose.lower_tiled_map), else the fused elementwise kernel."""
    tiled = lower_tiled_map(group, config)
    return tiled if tiled is not None else lower_map(group, config, target)


def _not_fused(group: FusionGroup, config: Config, target: Target) -> list[Kernel]:
    raise NotImplementedError(f"a {group.kind} group is one op with its own kernel")


LOWERINGS: dict[Kind, Callable[[FusionGroup, Config, Target], list[Kernel]]] = {
    Kind.ELEMENTWISE: _map,
    Kind.SCALAR: lower_map,
    Kind.ROWS: lower_rows,
    Kind.MATMUL: _fused_library,
    Kind.ATTENTION: _fused_library,
    Kind.CONV: _fused_library,
    Kind.REDUCTION: _not_fused,
    Kind.OPAQUE: _not_fused,
}


def single(op: Op) -> FusionGroup:
    """The group of one op: lowered by the op's own rule, with the op ABI."""
    opdef = get(op.name)
    kind = (
        Kind(opdef.library)
        if opdef.library
        else {"elementwise": Kind.ELEMENTWISE, "movement": Kind.ELEMENTWISE, "reduction": Kind.REDUCTION}.get(
            opdef.category, Kind.OPAQUE
        )
    )
    return FusionGroup((op,), kind, "one op", (op.out,))


def kernel_inputs(group: FusionGroup) -> list[Value]:
    """The input buffers of the group's kernels, in argument order."""
    return list(group.ops[0].inputs) if len(group.ops) == 1 else group_inputs(group)


def lower(group: FusionGroup, config: Config = DEFAULT_CONFIG, target: Target = DEFAULT_TARGET) -> list[Kernel]:
    """The kernels computing `group`, to be launched in order (see the module docstring for the ABI);
    `config` tunes launch shapes, `target` says what the backend holds (the row cache)."""
    rule = _one_op if len(group.ops) == 1 else LOWERINGS[Kind(group.kind)]
    return rule(group, config, target)
