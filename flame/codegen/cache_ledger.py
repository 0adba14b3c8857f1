"""The running size of the cache directory (FLAME_CACHE_DIR), so that a store decides whether the size limit
(codegen/disk_cache.py) may be exceeded without listing the directory: a store into a directory of tens of
thousands of entries would otherwise stat every one of them.

The ledger is the file `.size-ledger` in the directory: a first line `flame cache ledger 1 TOTAL TIME`
written by a full scan (the bytes of every entry it found, after its eviction, and when it ran), then one
line `+BYTES` per entry written since, appended by the writer (nvrtc.write_signed) with one O_APPEND write
and no lock. A store reads it (a few kilobytes) and lists the directory only when

- the ledger is missing or does not read back (damaged, cut short, written by something else): a scan
  writes a new one;
- the bytes it counts exceed the limit: a scan evicts the least recently used entries and writes the
  remaining total;
- it records MAX_RECORDS writes or more, or its scan is RESCAN_SECONDS old or more (or in the future):
  a scan recounts what writers that keep no ledger (an older flame sharing the directory, a copied file)
  added, and keeps the ledger short.

A rewritten entry is counted again and a deleted one (`flame cache clear`, a damaged entry) is not
subtracted: the ledger overcounts, which only brings the next scan closer. It undercounts only when another
process appends between a scan's last read of the ledger and its atomic replacement of it (the scan carries
over the lines appended while it listed the directory; that window is a few microseconds): then the
directory may hold more than the limit by at most the entries that writers stored in that window (one per
writing process) until the next full scan, which counts every file again. Every rewrite is a temporary file
renamed into place, so readers see one whole ledger."""

from __future__ import annotations

import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from flame._tempfiles import temp_prefix

NAME = ".size-ledger"
MAX_RECORDS = 1024  # writes recorded before a scan recounts the directory (the ledger stays under ~12 KB)
RESCAN_SECONDS = 600.0  # a scan this old is repeated: writers that keep no ledger are counted within this time
_HEADER = re.compile(rb"flame cache ledger 1 (\d{1,20}) (\d{1,12}(?:\.\d{1,9})?)\n")
_RECORD = re.compile(rb"(?:\+\d{1,15}\n)*")
_MAX_BYTES = 64 << 10  # a longer ledger is not read: it is due for a scan anyway
_TMP = ".tmp-"  # nvrtc's temporary prefix: remove_dead_temps cleans up after a writer that died


@dataclass(frozen=True)
class State:
    """What the ledger says: `total` bytes (the last scan's total plus every write recorded since),
    `records` writes recorded since that scan, `scanned` its time (seconds since the epoch)."""

    total: int
    records: int
    scanned: float


def record(folder: Path, nbytes: int) -> None:
    """Count an entry of `nbytes` bytes just written into folder: one appended line, no lock (best-effort:
    with no ledger, or one that cannot be written, the next store scans the directory)."""
    try:
        fd = os.open(folder / NAME, os.O_WRONLY | os.O_APPEND)
    except OSError:
        return
    try:
        os.write(fd, b"+%d\n" % nbytes)
    except OSError:
        pass
    finally:
        os.close(fd)


def parse(data: bytes) -> State | None:
    """The State a ledger's bytes hold, or None when they are not a whole ledger."""
    head = _HEADER.match(data)
    if head is None:
        return None
    rest = data[head.end() :]
    if _RECORD.fullmatch(rest) is None:
        return None
    records = rest.count(b"\n")
    added = sum(int(line[1:]) for line in rest.split()) if records else 0
    return State(int(head.group(1)) + added, records, float(head.group(2)))


def _read(folder: Path) -> tuple[bytes, int] | None:
    """The ledger's bytes (at most _MAX_BYTES + 1) and its inode, or None when there is none."""
    try:
        with open(folder / NAME, "rb") as f:
            return f.read(_MAX_BYTES + 1), os.fstat(f.fileno()).st_ino
    except OSError:
        return None


def read(folder: Path) -> State | None:
    """The ledger of folder, or None when it is missing, too long or does not read back."""
    found = _read(folder)
    if found is None or len(found[0]) > _MAX_BYTES:
        return None
    return parse(found[0])


def needs_scan(state: State | None, limit: int, now: float | None = None) -> bool:
    """Whether a store must list the directory (module doc): no ledger, the limit may be exceeded, too
    many writes recorded, or the last scan is too old."""
    if state is None or state.total > limit or state.records >= MAX_RECORDS:
        return True
    age = (time.time() if now is None else now) - state.scanned
    return not 0 <= age < RESCAN_SECONDS


def mark(folder: Path) -> tuple[int, int] | None:
    """Where the ledger ends now (its inode and length), taken before a scan lists the directory: the
    lines appended after it are carried over by `rewrite`."""
    found = _read(folder)
    return None if found is None else (found[1], len(found[0]))


def rewrite(folder: Path, total: int, before: tuple[int, int] | None, now: float | None = None) -> None:
    """Replace the ledger by one saying `total` bytes (a scan's count after its eviction), scanned now,
    plus the records appended since `before` (mark() before the scan; all the records of a ledger
    another scan wrote meanwhile). Best-effort: a failure leaves the next store to scan again."""
    carried = b""
    found = _read(folder)
    if found is not None and len(found[0]) <= _MAX_BYTES:
        data, inode = found
        if before is not None and before[0] == inode:
            tail = data[before[1] :]
        else:
            head = _HEADER.match(data)
            tail = data[head.end() :] if head else b""
        carried = tail[: tail.rfind(b"\n") + 1]  # whole lines only
        if _RECORD.fullmatch(carried) is None:
            carried = b""
    ms = int((time.time() if now is None else now) * 1000)  # rounded down: never after now
    text = b"flame cache ledger 1 %d %d.%03d\n" % (total, ms // 1000, ms % 1000) + carried
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=temp_prefix(_TMP), suffix=".part")
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text)
        os.replace(tmp, folder / NAME)
    except OSError:
        Path(tmp).unlink(missing_ok=True)
