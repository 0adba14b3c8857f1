"""The persistent plan cache: the whole result of compiling a graph (the graph after every pass and
its memory-planned Plan, whose kernel launches carry their sources: the kernel cache holds their
cubins) on disk, so that a new process compiling the same graph skips the passes, the plan builder
and NVRTC.

An entry's name is the sha256 of its key: the text flame.compiler makes of everything that decides
the result (the traced graph's printed text, the guards of the trace, the Target with the executor's
identity (GPU, compute capability, driver and library versions), the settings read while compiling)
and flame's version, which is the release number and a digest of flame's own files, so that an entry
made by other code is never read. The user's lines are not in the key: the same program in another
file or at other lines loads the entry. Its locs are stored as positions in the trace
(flame.plan.serial) and read back from the trace being compiled, whose ops are the stored trace's, one
for one in order (the same printed text), sharing lines alike (the key holds flame.ir.locs.layout):
so what a loaded plan reports (an error at run time, `flame explain`, a profile) names the loading
program's lines.

Entries live in the kernel cache's directory (FLAME_CACHE_DIR, by default ~/.cache/flame) under its
rules: the same per-user HMAC key signs them (flame.codegen.nvrtc.read_signed / write_signed), each is
written to a temporary file and renamed into place (concurrent writers of one entry leave one whole
entry), and a directory that is not the user's own is not used. An entry is read when its graph is
compiled, never before.

An entry that fails its check (damaged, truncated, written without the key) or that does not read back
as a graph and a plan (stale: another layout) is deleted, and its graph is compiled and stored again,
with one RuntimeWarning. The directory's size limit (FLAME_CACHE_SIZE; 0 turns the plan cache off), its
eviction and flame's version are codegen/disk_cache.py's, shared with the kernel and cuDNN caches.
`flame cache info` shows the caches and `flame cache clear` empties them."""

from __future__ import annotations

import hashlib
import logging
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from flame.codegen import disk_cache, nvrtc
from flame.codegen.disk_cache import (  # the directory's rules, shared with the kernel and cuDNN caches
    SUFFIX,
    enabled,
    flame_version,
    size_limit,
)
from flame.errors import FlameError
from flame.ir.graph import Graph
from flame.plan import serial
from flame.plan.steps import Plan

log = logging.getLogger("flame")

MAGIC = b"FLAMEPLAN1\n"


@dataclass
class Counts:
    """What the plan cache did in this process: entries loaded, compiled and stored, rebuilt (their
    entry failed its check or did not read back), and removed by the size limit."""

    hits: int = 0
    misses: int = 0
    stored: int = 0
    rebuilt: int = 0
    evicted: int = 0
    rebuilt_names: list[str] = field(default_factory=list)


COUNTS = Counts()


def entry_name(key: str) -> str:
    """The file name of the entry for key text `key` (made by the compiler, flame's version added here)."""
    h = hashlib.sha256()
    for part in ("flame plan cache", flame_version(), key):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest() + SUFFIX


def _warn(name: str, folder: Path, why: str) -> None:
    COUNTS.rebuilt += 1
    COUNTS.rebuilt_names.append(name)
    warnings.warn(
        f"flame: the cached plan of {name} in {str(folder)!r} {why}; it is compiled again and stored anew",
        RuntimeWarning,
        stacklevel=4,
    )


def load(key: str, name: str, trace: Graph | None = None) -> tuple[Graph, Plan | None] | None:
    """The cached (graph, plan) for key text `key` (plan None: the entry holds the optimised graph
    alone), or None when there is none, the cache is off or its directory cannot be used. trace: the
    graph being compiled, whose ops' lines the loaded graph's locs are (as `store` was given its
    trace; the key holds its text and loc layout). An entry that fails its check or does not read
    back is deleted with one RuntimeWarning naming graph `name`, and None is returned (the caller
    compiles and stores it again)."""
    if not enabled():
        return None
    folder = nvrtc.usable_dir()
    if folder is None:
        return None
    path = folder / entry_name(key)
    try:
        payload = nvrtc.read_signed(path, MAGIC)
    except nvrtc.UnsignedEntry:
        _warn(name, folder, "failed its check (damaged, cut short or not written by flame with your key)")
        return None
    except (OSError, FlameError) as e:
        log.info("flame: cannot read the plan cache %s (%s)", folder, e)
        return None
    if payload is None:
        COUNTS.misses += 1
        return None
    try:
        found = serial.loads(payload, trace)
    except serial.BadPayload as e:
        path.unlink(missing_ok=True)
        _warn(name, folder, f"does not read back ({e})")
        return None
    COUNTS.hits += 1
    return found


def store(key: str, graph: Graph, plan: Plan | None, trace: Graph | None = None) -> bool:
    """Write the entry for key text `key` (best-effort: a graph with no stored form, or a directory
    that cannot be written, is logged and skipped), then evict to the size limit if the directory's ledger
    says it may be exceeded (disk_cache.settle). trace: the graph `graph` was compiled from, whose ops'
    positions its locs are stored as (None: the locs as they are, for a `load` without a trace). Whether
    it was written."""
    if not enabled():
        return False
    folder = nvrtc.usable_dir()
    if folder is None:
        return False
    try:
        payload = serial.dumps(graph, plan, trace)
    except serial.NotStorable as e:
        log.info("flame: %s is not stored in the plan cache: %s", graph.name, e)
        return False
    try:
        nvrtc.write_signed(folder / entry_name(key), payload, MAGIC)
    except (OSError, FlameError) as e:
        log.info("flame: cannot write to the plan cache %s (%s)", folder, e)
        return False
    COUNTS.stored += 1
    COUNTS.evicted += disk_cache.settle(folder, size_limit())
    return True


def evict(folder: Path, limit: int) -> int:
    """disk_cache.evict (every entry listed), counted in COUNTS.evicted."""
    removed = disk_cache.evict(folder, limit)
    COUNTS.evicted += removed
    return removed
