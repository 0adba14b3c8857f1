"""The communicator the executors' collective handlers call (ARCHITECTURE.md "Collectives are ops").
One per process: the
world-size-1 one below until `flame.distributed.init_process_group` installs another (NCCL on CUDA,
runtime/nccl.py; the TCP-store exchange for the reference executor, flame/distributed/store_comm.py).
This module is the only thing the runtime knows about process groups, so runtime/ never imports
flame.distributed.

A communicator works in place on flat, contiguous arrays of the executor (CuPy on CUDA, NumPy on
the reference) and takes the stream to issue on (None on the reference):
- all_reduce(buf, op, stream): buf <- op over ranks of buf (op: sum, avg, max, min);
- broadcast(buf, root, stream): buf <- the root's buf;
- all_gather(buf, stream): buf holds world_size equal parts; part `rank` is this rank's input, and
  every part ends up holding that rank's input;
- reduce_scatter(send, recv, op, stream): recv <- part `rank` of op over ranks of send
  (send holds world_size parts of recv's size);
- barrier(): returns when every rank has called it.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class Communicator(Protocol):
    rank: int
    world_size: int

    def all_reduce(self, buf, op: str, stream) -> None: ...

    def broadcast(self, buf, root: int, stream) -> None: ...

    def all_gather(self, buf, stream) -> None: ...

    def reduce_scatter(self, send, recv, op: str, stream) -> None: ...

    def barrier(self) -> None: ...


class SingleProcess:
    """The communicator of a world of one rank: every collective leaves the data as it is."""

    rank = 0
    world_size = 1

    def all_reduce(self, buf, op: str, stream) -> None:
        pass

    def broadcast(self, buf, root: int, stream) -> None:
        pass

    def all_gather(self, buf, stream) -> None:
        pass

    def reduce_scatter(self, send, recv, op: str, stream) -> None:
        recv[...] = send.reshape(recv.shape)  # on CuPy: on the current stream, which the handler sets

    def barrier(self) -> None:
        pass


_current: list[Communicator] = []


def communicator() -> Communicator:
    """The process's communicator (world size 1 until a process group is initialised)."""
    return _current[0] if _current else SingleProcess()


def set_communicator(comm: Communicator | None) -> None:
    """Install `comm` for every collective from now on (None: back to a world of one)."""
    _current[:] = [] if comm is None else [comm]


def _address(a) -> int:
    return a.__array_interface__["data"][0] if isinstance(a, np.ndarray) else a.data.ptr  # NumPy / CuPy


def _pack(arrays: list, dst) -> None:
    """Copy `arrays` flat, in order, into the flat array dst (skipping one that already lives there)."""
    at = 0
    for a in arrays:
        n = a.size
        part = dst[at: at + n]
        if n and _address(part) != _address(a):
            part[...] = a.reshape(-1)
        at += n


def run_collective(s, bufs: dict, stream=None) -> None:
    """Run CollectiveCall s on the arrays `bufs` (buffer id -> array) through the process's
    communicator; shared by both executors (on CuPy the caller makes `stream` current, so packing
    copies are issued on it too). Packs several inputs flat first (ir/ops/collective.py)."""
    from flame.errors import FlameError

    comm, op = communicator(), s.op
    n = op.attrs["world_size"]
    if comm.world_size != n:
        raise FlameError(f"{op.name} was compiled for {n} ranks but the process group has {comm.world_size}"
                         f"{'' if op.loc is None else chr(10) + '  at ' + op.loc}")
    ins = [bufs[b] for b in s.inputs]
    out = bufs[s.out].reshape(-1)
    if op.name == "all_reduce":
        _pack(ins, out)
        comm.all_reduce(out, op.attrs["op"], stream)
    elif op.name == "broadcast":
        _pack(ins, out)
        comm.broadcast(out, op.attrs["root"], stream)
    elif op.name == "all_gather":
        part = out.size // n
        _pack(ins, out[comm.rank * part: (comm.rank + 1) * part])
        comm.all_gather(out, stream)
    elif op.name == "reduce_scatter":
        send = ins[0].reshape(-1) if s.workspace is None else bufs[s.workspace].view(out.dtype).reshape(-1)
        if s.workspace is not None:
            _pack(ins, send)
        comm.reduce_scatter(send, out, op.attrs["op"], stream)
    else:
        raise FlameError(f"no communicator call for collective {op.name}")
