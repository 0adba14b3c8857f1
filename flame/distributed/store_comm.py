"""Collectives between processes through the TCP store, for the NumPy reference executor: each rank
posts its bytes under a key numbered by the call's sequence number and reads the others'. Every rank
reduces the same arrays in rank order, so all get bit-identical results. Slow (every byte crosses
the store), and meant for running the multi-rank code paths on machines without GPUs (CPU tests,
a laptop); on GPUs the NCCL communicator (runtime/nccl.py) does this work."""

from __future__ import annotations

import numpy as np

from flame.distributed.store import StoreClient

_REDUCE = {"sum": np.add, "avg": np.add, "max": np.maximum, "min": np.minimum}


class StoreCommunicator:
    """rank `rank` of `world_size`, exchanging through `store` under keys that start with `prefix`."""

    def __init__(self, store: StoreClient, rank: int, world_size: int, prefix: str):
        self.store, self.rank, self.world_size, self.prefix = store, rank, world_size, prefix
        self._seq = 0

    def _exchange(self, what: str, mine: bytes) -> dict[int, bytes]:
        """Post `mine` for this call and read every rank's post (all ranks post, even an empty one,
        so that no rank runs more than one call ahead of another)."""
        self._seq += 1
        seq, key = self._seq, f"{self.prefix}/{self._seq}"
        self.store.set(f"{key}/{self.rank}", mine)
        got = {r: self.store.get(f"{key}/{r}", what=f"{what} #{seq} from rank {r}") for r in range(self.world_size)}
        # every rank has read call seq-2 before it posted seq-1, which this rank has just read
        if seq > 2:
            self.store.delete(f"{self.prefix}/{seq - 2}/{self.rank}")
        return got

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
        for r, a in enumerate(self._arrays("all_gather", flat[self.rank * part: (self.rank + 1) * part])):
            flat[r * part: (r + 1) * part] = a

    def reduce_scatter(self, send, recv, op: str, stream) -> None:
        n = recv.size
        parts = [a[self.rank * n: (self.rank + 1) * n] for a in self._arrays("reduce_scatter", send.reshape(-1))]
        recv[...] = self._reduce(parts, op).reshape(recv.shape)

    def barrier(self) -> None:
        self._exchange("barrier", b"")
