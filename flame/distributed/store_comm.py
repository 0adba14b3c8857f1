"""Collectives between processes through the TCP store, for the NumPy reference executor: each rank
posts its bytes under a key numbered by the call's sequence number and reads the others'. Every rank
reduces the same arrays in rank order, so all get bit-identical results. Slow (every byte crosses
the store), and meant for running the multi-rank code paths on machines without GPUs (CPU tests,
a laptop); on GPUs the NCCL communicator (runtime/nccl.py) does this work.

Every post starts with the signature of the collective it belongs to (runtime/communicator.py's
`check`): the ranks compare them before touching the bytes, so a rank whose collective differs in
kind, reduce op, shape or dtype makes every rank raise CollectiveMismatchError instead of reducing
bytes that do not fit together. It costs no extra round trip."""

from __future__ import annotations

import struct

import numpy as np

from flame.distributed.store import StoreClient
from flame.runtime.communicator import mismatch_error

_REDUCE = {"sum": np.add, "avg": np.add, "max": np.maximum, "min": np.minimum, "product": np.multiply}
_HEAD = struct.Struct("<I")  # the signature's length


class StoreExchange:
    """exchange(what, mine) -> every rank's bytes, in rank order: rank `rank` of `world_size` posts
    `mine` under `prefix`/call number/rank and reads every rank's post of the same call (all ranks
    post, even an empty one, so that no rank runs more than one call ahead of another)."""

    def __init__(self, store: StoreClient, rank: int, world_size: int, prefix: str):
        self.store, self.rank, self.world_size, self.prefix = store, rank, world_size, prefix
        self.calls = 0

    def __call__(self, what: str, mine: bytes) -> list[bytes]:
        self.calls += 1
        seq, key = self.calls, f"{self.prefix}/{self.calls}"
        self.store.set(f"{key}/{self.rank}", mine, what=f"posting {what} #{seq}")
        got = [self.store.get(f"{key}/{r}", what=f"{what} #{seq} from rank {r}") for r in range(self.world_size)]
        # every rank has read call seq-2 before it posted seq-1, which this rank has just read
        if seq > 2:
            self.store.delete(f"{self.prefix}/{seq - 2}/{self.rank}")
        return got


class StoreCommunicator:
    """rank `rank` of `world_size`, exchanging through `store` under keys that start with `prefix`."""

    def __init__(self, store: StoreClient, rank: int, world_size: int, prefix: str):
        self.store, self.rank, self.world_size, self.prefix = store, rank, world_size, prefix
        self._exchange_posts = StoreExchange(store, rank, world_size, prefix)
        self._next: tuple[str, str | None] | None = None

    def check(self, signature: str, loc: str | None) -> None:
        """The signature of the next collective: it travels in that collective's post (module docstring)."""
        self._next = (signature, loc)

    def _exchange(self, what: str, mine: bytes) -> list[memoryview]:
        """Every rank's bytes for this call, after checking that every rank runs the same collective
        (the signature given to check(), else `what`)."""
        sig, loc = self._next or (what, None)
        self._next = None
        head = sig.encode()
        posts = self._exchange_posts(what, _HEAD.pack(len(head)) + head + mine)
        sigs, data = [], []
        for p in posts:
            (n,) = _HEAD.unpack_from(p)
            sigs.append(p[_HEAD.size : _HEAD.size + n].decode(errors="replace"))
            data.append(memoryview(p)[_HEAD.size + n :])
        if any(s != sig for s in sigs):
            raise mismatch_error(sigs, self.rank, loc)
        return data

    def _arrays(self, what: str, buf: np.ndarray) -> list[np.ndarray]:
        posts = self._exchange(what, np.ascontiguousarray(buf).tobytes())
        return [np.frombuffer(posts[r], dtype=buf.dtype) for r in range(self.world_size)]

    @staticmethod
    def _reduce(arrays: list[np.ndarray], op: str) -> np.ndarray:
        total = arrays[0].copy()
        for a in arrays[1:]:
            total = _REDUCE[op](total, a)
        if op == "avg":
            total = (total / total.dtype.type(len(arrays))).astype(total.dtype)
        return total

    def all_reduce(self, buf, op: str, stream) -> None:
        buf[...] = self._reduce(self._arrays("all_reduce", buf.reshape(-1)), op).reshape(buf.shape)

    def broadcast(self, buf, root: int, stream) -> None:
        mine = np.ascontiguousarray(buf).tobytes() if self.rank == root else b""
        posts = self._exchange("broadcast", mine)
        buf[...] = np.frombuffer(posts[root], dtype=buf.dtype).reshape(buf.shape)

    def all_gather(self, buf, stream) -> None:
        part = buf.size // self.world_size
        flat = buf.reshape(-1)
        for r, a in enumerate(self._arrays("all_gather", flat[self.rank * part : (self.rank + 1) * part])):
            flat[r * part : (r + 1) * part] = a

    def reduce_scatter(self, send, recv, op: str, stream) -> None:
        n = recv.size
        parts = [a[self.rank * n : (self.rank + 1) * n] for a in self._arrays("reduce_scatter", send.reshape(-1))]
        recv[...] = self._reduce(parts, op).reshape(recv.shape)

    def barrier(self) -> None:
        self._exchange("barrier", b"")
