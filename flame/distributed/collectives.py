"""Collectives on flame Tensors, with torch.distributed's names and in-place semantics. Each is one IR
op (ir/ops/collective.py) applied through the frontend, so it runs eagerly (a one-op plan) and inside
@flame.compile (an op of the traced graph, captured in its CUDA graph) alike; the result is written
into the given tensor with copy_ (a rebinding while tracing)."""

from __future__ import annotations

from enum import Enum

from flame.distributed.process_group import get_world_size
from flame.errors import FlameError
from flame.frontend.dispatch import apply
from flame.frontend.tensor import Tensor


class ReduceOp(str, Enum):
    """How all_reduce and reduce_scatter combine the ranks' values."""

    SUM = "sum"
    AVG = "avg"
    MAX = "max"
    MIN = "min"
    PRODUCT = "product"

    def __str__(self) -> str:
        return self.value


class _Done:
    """What an async_op=True call returns: the work is ordered on the stream already."""

    def wait(self) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


def _finish(async_op: bool):
    return _Done() if async_op else None


def _check(group) -> None:
    if group is not None:
        raise FlameError("flame.distributed: process subgroups are not supported; pass group=None (the world)")


def _op(op) -> str:
    return ReduceOp(op).value if not isinstance(op, ReduceOp) else op.value


def all_reduce(tensor: Tensor, op: ReduceOp | str = ReduceOp.SUM, group=None, async_op: bool = False):
    """tensor <- op over every rank's tensor (in place)."""
    _check(group)
    tensor.copy_(apply("all_reduce", tensor, op=_op(op), world_size=get_world_size()))
    return _finish(async_op)


def broadcast(tensor: Tensor, src: int = 0, group=None, async_op: bool = False):
    """tensor <- rank src's tensor (in place)."""
    _check(group)
    tensor.copy_(apply("broadcast", tensor, root=src, world_size=get_world_size()))
    return _finish(async_op)


def all_gather_into_tensor(output_tensor: Tensor, input_tensor: Tensor, group=None, async_op: bool = False):
    """output <- the ranks' inputs concatenated along axis 0 (output has world_size x input's rows)."""
    _check(group)
    output_tensor.copy_(apply("all_gather", input_tensor, world_size=get_world_size()))
    return _finish(async_op)


def all_gather(tensor_list: list[Tensor], tensor: Tensor, group=None, async_op: bool = False):
    """tensor_list[r] <- rank r's tensor (one entry per rank, each of tensor's shape)."""
    _check(group)
    n = get_world_size()
    if len(tensor_list) != n:
        raise FlameError(f"all_gather: tensor_list has {len(tensor_list)} entries for {n} ranks")
    flat = tensor.reshape(-1) if tensor.ndim != 1 else tensor
    gathered = apply("all_gather", flat, world_size=n)
    k = tensor.numel()
    for r, t in enumerate(tensor_list):
        t.copy_(gathered[r * k : (r + 1) * k].reshape(tensor.shape))
    return _finish(async_op)


def reduce_scatter_tensor(
    output: Tensor, input: Tensor, op: ReduceOp | str = ReduceOp.SUM, group=None, async_op: bool = False
):
    """output <- this rank's slice (along axis 0) of op over the ranks' inputs."""
    _check(group)
    output.copy_(apply("reduce_scatter", input, op=_op(op), world_size=get_world_size()))
    return _finish(async_op)


def reduce_scatter(
    output: Tensor, input_list: list[Tensor], op: ReduceOp | str = ReduceOp.SUM, group=None, async_op: bool = False
):
    """output <- op over the ranks' input_list[rank] (one entry per rank, each of output's shape)."""
    _check(group)
    n = get_world_size()
    if len(input_list) != n:
        raise FlameError(f"reduce_scatter: input_list has {len(input_list)} entries for {n} ranks")
    if n == 1:
        output.copy_(apply("reduce_scatter", input_list[0], op=_op(op), world_size=1))
    else:
        output.copy_(apply("reduce_scatter", *input_list, op=_op(op), world_size=n).reshape(output.shape))
    return _finish(async_op)
