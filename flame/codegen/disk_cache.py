"""The directory rules of flame's on-disk caches, which share one directory (FLAME_CACHE_DIR, owned by
codegen/nvrtc.py with its per-user HMAC key and atomic writes): NVRTC's cubins (`.cubin`), the plan cache's
entries (`.plan`, plan/cache.py), built cuDNN graphs (`.cudnn`, runtime/cudnn_cache.py) and the kernel
templates' compiled code (`.jinja`, codegen/template_cache.py).
FLAME_CACHE_SIZE bounds the bytes of all of them together (default 4 GiB; a number of bytes, or with a
K, M or G suffix; 0 turns the plan and cuDNN caches off): after a store that may have passed it the least
recently used entries (by modification time: a read entry is touched) are deleted until the rest fit. Whether
a store may have passed it, the directory's running size (codegen/cache_ledger.py) says without listing the
directory; how far it may lag is bounded there. An entry's key
includes flame's version: the release and a digest of flame's own files, so that an entry made by other
code is never read."""

from __future__ import annotations

import hashlib
import os
import re
import threading
from functools import lru_cache
from pathlib import Path

from flame import _version
from flame.codegen import cache_ledger, nvrtc
from flame.errors import ArgumentError

SUFFIX = ".plan"
KERNEL_SUFFIX = ".cubin"
CUDNN_SUFFIX = ".cudnn"  # built cuDNN graphs (flame.runtime.cudnn_cache)
TEMPLATE_SUFFIX = ".jinja"  # the kernel templates' compiled code (flame.codegen.template_cache)
DEFAULT_SIZE = 4 << 30
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_lock = threading.Lock()


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
    """Whether the plan and cuDNN caches are used: FLAME_CACHE_SIZE is not 0."""
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


def _entries(folder: Path) -> list[tuple[float, int, str]]:
    """(modification time, bytes, path) of every plan, kernel, cuDNN graph and template entry in folder (a path
    as the directory scan gives it: a store scans thousands of entries and deletes few)."""
    found = []
    with os.scandir(folder) as it:
        for e in it:
            if e.name.endswith((SUFFIX, KERNEL_SUFFIX, CUDNN_SUFFIX, TEMPLATE_SUFFIX)) and not e.name.startswith("."):
                try:
                    st = e.stat()
                except FileNotFoundError:
                    continue  # removed by another process meanwhile
                found.append((st.st_mtime, st.st_size, e.path))
    return found


def evict(folder: Path, limit: int) -> int:
    """Delete the least recently used entries (plans, kernels and cuDNN graphs) of folder until the rest hold at
    most `limit` bytes, and write what remains to the directory's ledger (cache_ledger); returns how many
    were removed (another process may remove some first). Lists the whole directory: see settle."""
    with _lock:
        before = cache_ledger.mark(folder)
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
        cache_ledger.rewrite(folder, total, before)
    return removed


def settle(folder: Path, limit: int) -> int:
    """What a store does after writing its entry: evict (listing the directory) only when the ledger says the
    entries may hold more than `limit` bytes, or is missing, damaged or due for a recount (cache_ledger);
    returns how many entries were removed."""
    if not cache_ledger.needs_scan(cache_ledger.read(folder), limit):
        return 0
    return evict(folder, limit)


def cache_info(suffix: str = SUFFIX) -> dict:
    """{'dir', 'entries', 'bytes', 'limit'} of the plan cache (for `flame cache`); `suffix`
    CUDNN_SUFFIX or TEMPLATE_SUFFIX: of the cuDNN graphs or compiled templates stored beside it."""
    d = nvrtc.cache_dir()
    files = [p for p in d.glob("*" + suffix) if p.is_file()]
    return {"dir": str(d), "entries": len(files), "bytes": sum(p.stat().st_size for p in files), "limit": size_limit()}


def cache_clear(suffix: str = SUFFIX) -> int:
    """Delete every plan entry (`suffix` CUDNN_SUFFIX or TEMPLATE_SUFFIX: every cuDNN graph or compiled
    template); returns how many were removed."""
    n = 0
    for p in nvrtc.cache_dir().glob("*" + suffix):
        try:
            p.unlink()
            n += 1
        except FileNotFoundError:
            pass
    return n
