"""A stand-in for `cupy.cuda.nccl` that records each call instead of running it, so the code of
runtime/nccl.py and the process group's NCCL paths (the signature check, the watchdog) run on the CPU."""

from __future__ import annotations

import sys
import types

NCCL_CALLS: list[list] = []
_NAMES = (
    "NCCL_FLOAT32",
    "NCCL_FLOAT64",
    "NCCL_INT32",
    "NCCL_INT64",
    "NCCL_FLOAT16",
    "NCCL_BFLOAT16",
    "NCCL_UINT8",
    "NCCL_INT8",
    "NCCL_SUM",
    "NCCL_AVG",
    "NCCL_MAX",
    "NCCL_MIN",
)


class _FakeNcclComm:
    def __init__(self, world_size, uid, rank):
        self.rank = rank

    def allReduce(self, send, recv, count, dtype, op, stream):  # noqa: N802 (CuPy's name)
        NCCL_CALLS.append(["allReduce", count, dtype, op])

    def broadcast(self, send, recv, count, dtype, root, stream):
        NCCL_CALLS.append(["broadcast", count, dtype, root])

    def abort(self):
        print("fake NCCL communicator aborted", file=sys.stderr, flush=True)


def install_fake_nccl() -> None:
    """Make `from cupy.cuda import nccl` give the stand-in (only in a test worker's own process)."""
    nccl = types.ModuleType("cupy.cuda.nccl")
    nccl.NcclCommunicator = _FakeNcclComm
    nccl.get_unique_id = lambda: tuple(range(128))
    for i, name in enumerate(_NAMES):
        setattr(nccl, name, i)
    cuda = types.ModuleType("cupy.cuda")
    cuda.nccl = nccl
    cuda.get_current_stream = lambda: types.SimpleNamespace(ptr=0)
    cupy = types.ModuleType("cupy")
    cupy.cuda = cuda
    sys.modules.update({"cupy": cupy, "cupy.cuda": cuda, "cupy.cuda.nccl": nccl})
