"""The persistent plan cache: the whole result of compiling a graph (the graph after every pass and
its memory-planned Plan, whose kernel launches carry their sources: the kernel cache holds their
cubins) on disk, so that a new process compiling the same graph skips the passes, the plan builder
and NVRTC.

An entry's name is the sha256 of its key: the text flame.compiler makes of everything that decides
the result (the traced graph's printed text, the guards of the trace, the Target with the executor's
identity (GPU, compute capability, driver and library versions), the settings read while compiling)
and flame's version, which is the release number and a digest of flame's own files, so that an entry
made by other code is never read. Entries live in the kernel cache's directory (FLAME_CACHE_DIR, by
default ~/.cache/flame) under its rules: the same per-user HMAC key signs them
(flame.codegen.nvrtc.read_signed / write_signed), each is written to a temporary file and renamed
into place (concurrent writers of one entry leave one whole entry), and a directory that is not the
user's own is not used. An entry is read when its graph is compiled, never before.

An entry that fails its check (damaged, truncated, written without the key) or that does not read back
as a graph and a plan (stale: another layout) is deleted, and its graph is compiled and stored again,
with one RuntimeWarning. FLAME_CACHE_SIZE bounds the bytes of the directory's entries (plans and
kernels; default 4 GiB; a number of bytes, or with a K, M or G suffix; 0 turns the plan cache off):
after each store, the least recently used entries (by modification time: a read entry is touched)
are deleted until the rest fit. The built cuDNN graphs of flame.runtime.cudnn_cache (CUDNN_SUFFIX) share
the directory, the key, the switch and the limit. `flame cache info` shows the caches and `flame cache
clear` empties them."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from flame import _version
from flame.codegen import nvrtc
from flame.errors import ArgumentError, FlameError
from flame.ir.graph import Graph
from flame.plan import serial
from flame.plan.steps import Plan

log = logging.getLogger("flame")

MAGIC = b"FLAMEPLAN1\n"
SUFFIX = ".plan"
KERNEL_SUFFIX = ".cubin"
CUDNN_SUFFIX = ".cudnn"  # built cuDNN graphs (flame.runtime.cudnn_cache)
DEFAULT_SIZE = 4 << 30
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_lock = threading.Lock()


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


def size_limit() -> int:
    """FLAME_CACHE_SIZE in bytes (module doc); ArgumentError naming the variable if it is not a size."""
    text = os.environ.get("FLAME_CACHE_SIZE", "").strip()
    if not text:
        return DEFAULT_SIZE
    m = re.fullmatch(r"(\d+)\s*([kmgt]?)i?b?", text.lower())
    if m is None:
        raise ArgumentError(
            f"environment variable FLAME_CACHE_SIZE={os.environ['FLAME_CACHE_SIZE']!r}: expected "
            f"a number of bytes, optionally with a K, M or G suffix (such as 500M or 4G)"
        )
    return int(m.group(1)) * _UNITS[m.group(2)]


def enabled() -> bool:
    """Whether the plan cache is used: FLAME_CACHE_SIZE is not 0."""
    return size_limit() > 0


@lru_cache(maxsize=1)
def _source_digest() -> str:
    """sha256 of every file of the flame package (its path and bytes): code that differs plans differently."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            h.update(str(p.relative_to(root)).encode() + b"\0")
            h.update(p.read_bytes())
    return h.hexdigest()


def flame_version() -> str:
    """flame's version as the plan cache keys it: the release and a digest of flame's files."""
    return f"{_version.__version__}+{_source_digest()[:16]}"


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


def load(key: str, name: str) -> tuple[Graph, Plan | None] | None:
    """The cached (graph, plan) for key text `key` (plan None: the entry holds the optimised graph
    alone), or None when there is none, the cache is off or its directory cannot be used. An entry that
    fails its check or does not read back is deleted with one RuntimeWarning naming graph `name`, and
    None is returned (the caller compiles and stores it again)."""
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
        found = serial.loads(payload)
    except serial.BadPayload as e:
        path.unlink(missing_ok=True)
        _warn(name, folder, f"does not read back ({e})")
        return None
    COUNTS.hits += 1
    return found


def store(key: str, graph: Graph, plan: Plan | None) -> bool:
    """Write the entry for key text `key` (best-effort: a graph with no stored form, or a directory
    that cannot be written, is logged and skipped), then evict to the size limit. Whether it was written."""
    if not enabled():
        return False
    folder = nvrtc.usable_dir()
    if folder is None:
        return False
    try:
        payload = serial.dumps(graph, plan)
    except serial.NotStorable as e:
        log.info("flame: %s is not stored in the plan cache: %s", graph.name, e)
        return False
    try:
        nvrtc.write_signed(folder / entry_name(key), payload, MAGIC)
    except (OSError, FlameError) as e:
        log.info("flame: cannot write to the plan cache %s (%s)", folder, e)
        return False
    COUNTS.stored += 1
    evict(folder, size_limit())
    return True


def _entries(folder: Path) -> list[tuple[float, int, str]]:
    """(modification time, bytes, path) of every plan, kernel and cuDNN graph entry in folder (a path
    as the directory scan gives it: a store scans thousands of entries and deletes few)."""
    found = []
    with os.scandir(folder) as it:
        for e in it:
            if e.name.endswith((SUFFIX, KERNEL_SUFFIX, CUDNN_SUFFIX)) and not e.name.startswith("."):
                try:
                    st = e.stat()
                except FileNotFoundError:
                    continue  # removed by another process meanwhile
                found.append((st.st_mtime, st.st_size, e.path))
    return found


def evict(folder: Path, limit: int) -> int:
    """Delete the least recently used entries (plans, kernels and cuDNN graphs) of folder until the rest hold at
    most `limit` bytes; returns how many were removed (another process may remove some first)."""
    with _lock:
        entries = _entries(folder)
        total = sum(n for _, n, _ in entries)
        removed = 0
        for _, n, path in sorted(entries, key=lambda e: e[0]):
            if total <= limit:
                break
            try:
                os.unlink(path)
                removed += 1
            except FileNotFoundError:
                pass
            total -= n
    COUNTS.evicted += removed
    return removed


def cache_info(suffix: str = SUFFIX) -> dict:
    """{'dir', 'entries', 'bytes', 'limit'} of the plan cache (for `flame cache`); `suffix`
    CUDNN_SUFFIX: of the cuDNN graphs stored beside it."""
    d = nvrtc.cache_dir()
    files = [p for p in d.glob("*" + suffix) if p.is_file()]
    return {"dir": str(d), "entries": len(files), "bytes": sum(p.stat().st_size for p in files), "limit": size_limit()}


def cache_clear(suffix: str = SUFFIX) -> int:
    """Delete every plan entry (`suffix` CUDNN_SUFFIX: every cuDNN graph); returns how many were removed."""
    n = 0
    for p in nvrtc.cache_dir().glob("*" + suffix):
        try:
            p.unlink()
            n += 1
        except FileNotFoundError:
            pass
    return n
