"""The cache directory's running size (flame.codegen.cache_ledger): a store under the limit does not list
the directory; FLAME_CACHE_SIZE is still honoured, least recently used entries first; a missing, damaged,
stale or overlong ledger is recounted by a full scan; entries written without the ledger are counted by
the next scan; writers in several processes leave whole entries and a directory within the limit (plus
the bound the module states). Each test has a cache directory of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flame.codegen import cache_ledger, disk_cache, nvrtc
from flame.ir.parser import parse
from flame.plan import cache as plan_cache

ROOT = Path(__file__).resolve().parent.parent.parent
MAGIC = b"FLAMETEST1\n"
HEAD = len(MAGIC) + 65  # the magic line and the HMAC line before the payload
LISTED = disk_cache._entries  # the directory listing (the `scans` fixture counts the stores' calls)


@pytest.fixture
def folder(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("FLAME_CACHE_DIR", str(d))
    monkeypatch.delenv("FLAME_CACHE_SIZE")
    return nvrtc.cache_dir()


@pytest.fixture
def scans(monkeypatch):
    """How many times a store listed the cache directory."""
    calls = []
    monkeypatch.setattr(disk_cache, "_entries", lambda d: calls.append(d) or LISTED(d))
    return calls


def _store(folder: Path, i: int, payload_bytes: int, limit: int, age: float | None = None) -> Path:
    """Entry i written as the caches write theirs, then the store's size check (plan cache's order)."""
    path = folder / f"{i:064x}{disk_cache.SUFFIX}"
    nvrtc.write_signed(path, bytes([i % 251]) * payload_bytes, MAGIC)
    if age is not None:
        t = time.time() - age
        os.utime(path, (t, t))
    disk_cache.settle(folder, limit)
    return path


def _on_disk(folder: Path) -> int:
    return sum(n for _, n, _ in LISTED(folder))


def test_a_store_under_the_limit_does_not_list_the_directory(folder, scans):
    for i in range(30):
        _store(folder, i, 1000 + i, 1 << 30)
    assert len(scans) == 1  # the first store: no ledger yet
    state = cache_ledger.read(folder)
    assert state.total == _on_disk(folder) == 30 * (HEAD + 1000) + sum(range(30))
    assert state.records == 29


def test_the_limit_is_honoured_least_recently_used_first(folder):
    size = HEAD + 1000
    limit = 5 * size + size // 2
    paths = []
    for i in range(12):
        paths.append(_store(folder, i, 1000, limit, age=1000 - 10 * i))
        assert _on_disk(folder) <= limit
        if i == 6:
            assert nvrtc.read_signed(paths[2], MAGIC) is not None  # a read: entry 2 is now the most recent
    left = {p for p in paths if p.exists()}
    assert left == {paths[2], *paths[8:]}
    assert cache_ledger.read(folder).total == _on_disk(folder)


def test_plan_and_kernel_writes_are_counted_without_a_scan(folder, scans):
    g = parse("graph f(%0: f32[4] data) {\n  %1 = exp %0 : f32[4]\n  return %1\n}\n")
    for key in "abc":
        assert plan_cache.store(key, g, None)
    nvrtc._write(folder / ("f" * 64 + disk_cache.KERNEL_SUFFIX), b"k" * 500)  # a kernel (NVRTC's cubin)
    assert len(scans) == 1 and cache_ledger.read(folder).total == _on_disk(folder)


DAMAGED = {
    "garbage": b"\x00\xffnot a ledger",
    "empty": b"",
    "cut short": b"flame cache ledger 1 12",
    "a negative record": b"flame cache ledger 1 0 %d\n-100000\n",
    "a record cut short": b"flame cache ledger 1 0 %d\n+5\n+12",
    "another version": b"flame cache ledger 2 0 %d\n",
    "too long": b"flame cache ledger 1 0 %d\n" + b"+1\n" * 40000,
}


@pytest.mark.parametrize("damage", sorted(DAMAGED))
def test_a_damaged_ledger_is_recounted(damage, folder, scans):
    size = HEAD + 1000
    for i in range(6):
        _store(folder, i, 1000, 1 << 30, age=100 - i)
    text = DAMAGED[damage]
    (folder / cache_ledger.NAME).write_bytes(text % int(time.time()) if b"%d" in text else text)
    scans.clear()
    _store(folder, 6, 1000, 4 * size)  # 7 entries on disk, room for 4
    assert len(scans) == 1 and _on_disk(folder) <= 4 * size
    assert cache_ledger.read(folder).total == _on_disk(folder)
    scans.clear()
    _store(folder, 7, 1000, 1 << 30)
    assert not scans  # the ledger written by the scan serves the next store


def test_a_missing_or_unwritable_ledger_means_a_scan(folder, scans):
    _store(folder, 0, 100, 1 << 30)
    (folder / cache_ledger.NAME).unlink()
    _store(folder, 1, 100, 1 << 30)
    assert len(scans) == 2 and cache_ledger.read(folder).total == _on_disk(folder)
    (folder / cache_ledger.NAME).unlink()
    (folder / cache_ledger.NAME).mkdir()  # cannot be read or replaced: every store counts the directory
    for i in range(2, 5):
        _store(folder, i, 100, 1 << 30)
    assert len(scans) == 5 and not [p for p in folder.iterdir() if p.name.endswith(".part")]


def test_entries_written_without_the_ledger_are_counted_by_the_next_scan(folder, scans, monkeypatch):
    size = HEAD + 1000
    _store(folder, 0, 1000, 3 * size)
    for i in range(1, 6):  # a writer that keeps no ledger (an older flame sharing the directory)
        (folder / f"{i:064x}{disk_cache.KERNEL_SUFFIX}").write_bytes(b"x" * size)
    scans.clear()
    _store(folder, 6, 1000, 3 * size)
    assert not scans and _on_disk(folder) > 3 * size  # the ledger does not know them yet...
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now + cache_ledger.RESCAN_SECONDS)
    _store(folder, 7, 1000, 3 * size)
    assert len(scans) == 1 and _on_disk(folder) <= 3 * size  # ...until its scan is RESCAN_SECONDS old
    assert cache_ledger.read(folder).total == _on_disk(folder)


def test_a_ledger_of_many_records_is_recounted(folder, scans, monkeypatch):
    monkeypatch.setattr(cache_ledger, "MAX_RECORDS", 8)
    for i in range(20):
        _store(folder, i, 10, 1 << 30)
    assert len(scans) == 3  # the first store, then after each 8 recorded writes
    assert cache_ledger.read(folder).records < 8


def test_a_scan_keeps_the_records_appended_while_it_listed(folder):
    _store(folder, 0, 10, 1 << 30)
    before = cache_ledger.mark(folder)
    cache_ledger.record(folder, 777)  # another process's write while this one lists the directory
    cache_ledger.rewrite(folder, 5000, before)
    state = cache_ledger.read(folder)
    assert (state.total, state.records) == (5777, 1)


_WRITER = """
import os, sys, time
from pathlib import Path
from flame.codegen import disk_cache, nvrtc
folder, me, count, limit = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
while not (folder / "go").exists():
    time.sleep(0.005)
for i in range(count):
    size = 200 + (me * 7919 + i * 104729) % 1800
    nvrtc.write_signed(folder / f"{me:032x}{i:032x}.plan", bytes([i % 256]) * size, b"FLAMETEST1\\n")
    disk_cache.settle(folder, limit)
print("ok")
"""


def test_concurrent_writers_stay_within_the_limit(folder):
    writers, count, limit = 4, 40, 30_000
    env = dict(
        os.environ, FLAME_CACHE_DIR=str(folder), PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(folder), str(me), str(count), str(limit)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        for me in range(writers)
    ]
    (folder / "go").touch()
    try:
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0 and out.strip() == "ok", err
    finally:
        for p in procs:
            p.kill()
    largest = HEAD + 2000
    assert _on_disk(folder) <= limit + (writers - 1) * largest  # the bound of cache_ledger's module doc
    assert not [p for p in folder.iterdir() if p.name.endswith(".part")]
    entries = sorted(folder.glob("*.plan"))
    assert entries and all(nvrtc.read_signed(p, MAGIC) is not None for p in entries)  # whole and signed
    state = cache_ledger.read(folder)
    assert state is not None and state.total + (writers - 1) * largest >= _on_disk(folder)
    (folder / cache_ledger.NAME).unlink()
    disk_cache.settle(folder, limit)
    assert _on_disk(folder) <= limit
