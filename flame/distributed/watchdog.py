"""The watchdog of an NCCL process group. NCCL waits on the GPU: a rank whose peer is gone, stopped
(SIGSTOP) or cut off would wait forever in its next collective. A daemon thread on each rank
therefore, every `period` (a quarter of the timeout, at most 5 s):

- posts a heartbeat (a counter under pg{generation}/alive/{rank}) to the store;
- waits up to `period` for an abort posted by any rank or the launcher;
- checks the other ranks' heartbeats: one that has not moved for the timeout (and whose rank has not
  left the group, pg{generation}/gone/{rank}) is declared stopped, and this rank posts an abort
  naming it.

On an abort, or when the store goes away or stops answering (its host stopped), the thread aborts
the NCCL communicator and ends the process with the reason: every rank stops within about the
timeout instead of hanging. The heartbeat comes from this thread, not from the training loop, so a
rank that computes for long between collectives is not taken for a stopped one."""

from __future__ import annotations

import os
import sys
import threading
import time

from flame.distributed.store import ABORT_KEY, DistributedError, StoreClient, StoreTimeout


def start(group, store: StoreClient, seconds: float) -> threading.Thread:
    """Watch `group` (rank, world_size, generation, comm with abort(), closing) through its own
    connection `store`, with the process group's timeout `seconds`."""
    t = threading.Thread(target=_run, args=(group, store, seconds), name="flame-watchdog", daemon=True)
    t.start()
    return t


def gone(store: StoreClient, group) -> None:
    """Say that this rank leaves the group (its heartbeat stops on purpose)."""
    store.set(f"pg{group.generation}/gone/{group.rank}", b"1", what="leaving the process group")


def _run(group, store: StoreClient, seconds: float) -> None:
    why = _watch(group, store, seconds)
    if why is None or group.closing:
        return
    print(f"flame.distributed: rank {group.rank}: stopping: {why}", file=sys.stderr, flush=True)
    try:
        group.comm.abort()
    finally:
        os._exit(1)


def _watch(group, store: StoreClient, seconds: float) -> str | None:
    """The reason to stop (None: the group was closed)."""
    prefix, period = f"pg{group.generation}", min(seconds / 4, 5.0)
    seen = {r: (None, time.monotonic()) for r in range(group.world_size) if r != group.rank}
    beat = 0
    try:
        while True:
            beat += 1
            store.set(f"{prefix}/alive/{group.rank}", str(beat).encode(), what="posting a heartbeat")
            try:
                return store.get(ABORT_KEY, timeout=period).decode(errors="replace")
            except StoreTimeout:
                if group.closing:
                    return None
            stopped = _stopped(store, prefix, seen, seconds)
            if stopped is not None:
                why = (
                    f"rank {stopped} has not answered for {seconds:g} s (stopped, or its host unreachable; "
                    f"FLAME_DIST_TIMEOUT sets the limit)"
                )
                store.abort(f"rank {group.rank}: {why}")
                return why
    except DistributedError as e:
        return str(e)


def _stopped(store: StoreClient, prefix: str, seen: dict, seconds: float) -> int | None:
    """A rank whose heartbeat has not changed for `seconds` (seen: rank -> (last beat, since when))."""
    now = time.monotonic()
    for r, (last, since) in list(seen.items()):
        beat = _value(store, f"{prefix}/alive/{r}")
        if beat != last:
            seen[r] = (beat, now)
        elif now - since > seconds:
            if _value(store, f"{prefix}/gone/{r}") is not None:
                del seen[r]
                continue
            return r
    return None


def _value(store: StoreClient, key: str) -> bytes | None:
    try:
        return store.get(key, timeout=0)
    except StoreTimeout:
        return None
