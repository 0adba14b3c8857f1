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
- barrier(): returns when every rank has called it;
- check(signature, loc): called by run_collective before each collective with what every rank must
  agree on (`signature(op)`: the collective, its reduce op or root, its inputs' shapes and dtypes);
  raises CollectiveMismatchError on every rank when the ranks' collectives differ, instead of
  exchanging bytes that do not fit together. The store exchange carries the signature in every post
  (no extra round trip); NCCL exchanges each distinct signature once, through the process group's
  store (SignatureCheck), before its first NCCL call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from flame.errors import FlameError
from flame.ir.ops.collective import ALL_GATHER


class DistributedError(FlameError, RuntimeError):
    """A process group failed: the ranks disagree about a collective, a peer aborted, a wait timed
    out, the store went away or refused this process (torch.distributed raises RuntimeError)."""


class CollectiveMismatchError(DistributedError):
    """The ranks issued collectives that do not match (kind, reduce op, shapes or dtypes)."""


class Communicator(Protocol):
    rank: int
    world_size: int

    def all_reduce(self, buf, op: str, stream) -> None: ...

    def broadcast(self, buf, root: int, stream) -> None: ...

    def all_gather(self, buf, stream) -> None: ...

    def reduce_scatter(self, send, recv, op: str, stream) -> None: ...

    def barrier(self) -> None: ...

    def check(self, signature: str, loc: str | None) -> None: ...


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

    def check(self, signature: str, loc: str | None) -> None:
        pass


_current: list[Communicator] = []


def communicator() -> Communicator:
    """The process's communicator (world size 1 until a process group is initialised)."""
    return _current[0] if _current else SingleProcess()


def set_communicator(comm: Communicator | None) -> None:
    """Install `comm` for every collective from now on (None: back to a world of one)."""
    _current[:] = [] if comm is None else [comm]


def signature(op) -> str:
    """What every rank's collective must agree on, as text: `all_reduce {op=sum, world_size=2}
    (f32[4, 3]) -> f32[4, 3]` (the kind, its attributes, the inputs' and the result's types). The
    inputs an all_gather packs into its rank's slot are each rank's own (ZeRO: the parameters a rank
    owns): only their packed size counts (`(160 x f32 per rank) -> f32[320]`), and the result's shape."""
    attrs = ", ".join(f"{k}={v}" for k, v in sorted(op.attrs.items()))
    if op.name == ALL_GATHER.name:
        ins = f"{sum(v.type.numel for v in op.inputs)} x {op.out.type.dtype} per rank"
    else:
        ins = ", ".join(str(v.type) for v in op.inputs)
    return f"{op.name} {{{attrs}}} ({ins}) -> {op.out.type}"


def mismatch_error(signatures: list[str], rank: int, loc: str | None) -> CollectiveMismatchError:
    """The error every rank raises when the ranks' signatures (one per rank, in rank order) differ."""
    calls: dict[str, list[int]] = {}
    for r, sig in enumerate(signatures):
        calls.setdefault(sig, []).append(r)
    said = "; ".join(f"rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))}: {sig}" for sig, rs in calls.items())
    at = "" if loc is None else f"\n  at {loc}"
    return CollectiveMismatchError(
        f"rank {rank}: the ranks' collectives do not match: {said}. Every rank must issue the same "
        f"collectives, with the same reduce op, shapes and dtypes, in the same order{at}"
    )


class SignatureCheck:
    """Checks each distinct collective signature once: the first time this rank issues it, every rank
    posts the signature of its next collective through `exchange(what, mine) -> [each rank's bytes]`
    (the process group's store) and all of them raise CollectiveMismatchError if they differ. Later
    calls with a signature already agreed on cost a set lookup; they cannot notice a rank that
    issues a different collective there (its own first-time check then waits for the others and
    fails when the process group's timeout expires)."""

    def __init__(self, rank: int, exchange: Callable[[str, bytes], list[bytes]]):
        self.rank, self.exchange = rank, exchange
        self.agreed: set[str] = set()

    def __call__(self, sig: str, loc: str | None = None) -> None:
        if sig in self.agreed:
            return
        posts = [p.decode(errors="replace") for p in self.exchange(f"the signature of {sig}", sig.encode())]
        if any(p != sig for p in posts):
            raise mismatch_error(posts, self.rank, loc)
        self.agreed.add(sig)


_SIGNATURES: dict[int, tuple] = {}


def _signature_of(op) -> str:
    """signature(op), remembered per op (the op is kept, so its id is not reused while remembered)."""
    hit = _SIGNATURES.get(id(op))
    if hit is None or hit[0] is not op:
        if len(_SIGNATURES) > 4096:
            _SIGNATURES.clear()
        hit = _SIGNATURES[id(op)] = (op, signature(op))
    return hit[1]


def address(a) -> int:
    """The address of array a's first element (NumPy or CuPy)."""
    return a.__array_interface__["data"][0] if isinstance(a, np.ndarray) else a.data.ptr  # NumPy / CuPy


def _pack(arrays: list, dst) -> None:
    """Copy `arrays` flat, in order, into the flat array dst (skipping one that already lives there)."""
    at = 0
    for a in arrays:
        n = a.size
        part = dst[at : at + n]
        if n and address(part) != address(a):
            part[...] = a.reshape(-1)
        at += n


def run_collective(s, bufs: dict, stream=None) -> None:
    """Run CollectiveCall s on the arrays `bufs` (buffer id -> array) through the process's
    communicator; shared by both executors (on CuPy the caller makes `stream` current, so packing
    copies are issued on it too). Packs several inputs flat first (ir/ops/collective.py). Before the
    communicator call the ranks agree on what they run (Communicator.check)."""
    comm, op = communicator(), s.op
    n = op.attrs["world_size"]
    if comm.world_size != n:
        raise FlameError(
            f"{op.name} was compiled for {n} ranks but the process group has {comm.world_size}"
            f"{'' if op.loc is None else chr(10) + '  at ' + op.loc}"
        )
    if n > 1:
        comm.check(_signature_of(op), op.loc)
    call = _CALLS.get(op.name)
    if call is None:
        raise FlameError(f"no communicator call for collective {op.name}")
    call(comm, s, [bufs[b] for b in s.inputs], bufs[s.out].reshape(-1), bufs, stream)


def _all_reduce(comm, s, ins, out, bufs, stream) -> None:
    _pack(ins, out)
    comm.all_reduce(out, s.op.attrs["op"], stream)


def _broadcast(comm, s, ins, out, bufs, stream) -> None:
    _pack(ins, out)
    comm.broadcast(out, s.op.attrs["root"], stream)


def _all_gather(comm, s, ins, out, bufs, stream) -> None:
    part = out.size // comm.world_size
    _pack(ins, out[comm.rank * part : (comm.rank + 1) * part])
    comm.all_gather(out, stream)


def _reduce_scatter(comm, s, ins, out, bufs, stream) -> None:
    send = ins[0].reshape(-1) if s.workspace is None else bufs[s.workspace].view(out.dtype).reshape(-1)
    if s.workspace is not None:
        _pack(ins, send)
    comm.reduce_scatter(send, out, s.op.attrs["op"], stream)


# each collective's communicator call: (communicator, CollectiveCall, input arrays, flat output, bufs, stream)
_CALLS: dict[str, Callable] = {
    "all_reduce": _all_reduce,
    "broadcast": _broadcast,
    "all_gather": _all_gather,
    "reduce_scatter": _reduce_scatter,
}
