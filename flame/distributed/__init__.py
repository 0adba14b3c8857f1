"""flame.distributed: data-parallel training on several GPUs through NCCL, with torch.distributed's
names. Start one process per GPU with torchrun or `python3 -m flame.distributed.run --nproc-per-node N
script.py`, call `init_process_group()` in each, and wrap the model in
`flame.nn.parallel.DistributedDataParallel`. Without a process group (or on one GPU) every call works
with world size 1. The collectives are IR ops (ARCHITECTURE.md "Collectives are ops"),
eager and inside @flame.compile."""

from flame.distributed.collectives import (
    ReduceOp,
    all_gather,
    all_gather_into_tensor,
    all_reduce,
    broadcast,
    reduce_scatter,
    reduce_scatter_tensor,
)
from flame.distributed.process_group import (
    barrier,
    destroy_process_group,
    get_backend,
    get_local_rank,
    get_rank,
    get_world_size,
    init_process_group,
    is_initialized,
)
from flame.distributed.store import DistributedError

__all__ = [
    "DistributedError",
    "ReduceOp",
    "all_gather",
    "all_gather_into_tensor",
    "all_reduce",
    "barrier",
    "broadcast",
    "destroy_process_group",
    "get_backend",
    "get_local_rank",
    "get_rank",
    "get_world_size",
    "init_process_group",
    "is_initialized",
    "reduce_scatter",
    "reduce_scatter_tensor",
]
