"""NVRTC compiles in worker processes (flame.codegen.nvrtc_pool) with the real NVRTC: the same cubins
and the same compile-error messages as compiling in this process; concurrent compiles get workers of
their own, up to FLAME_NVRTC_PROCESSES; a worker that dies or does not answer in time is stopped with
one warning and the kernel compiled here; a forked process starts its own workers; 0 turns them off;
and a worker imports nothing of flame."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import warnings

import pytest

from flame.codegen import nvrtc, nvrtc_pool
from flame.errors import FlameError
from tests.codegen.test_nvrtc import SRC

SOURCES = [SRC.replace("flame_test_k", f"flame_pool_k{i}") for i in range(4)]
BAD = SRC.replace("2.0f * in0[threadIdx.x]", "undefined_name")


@pytest.fixture
def pool(monkeypatch, tmp_path):
    """A pool of this test's own (closed after it), no kernel cache, warnings not yet given."""
    monkeypatch.setenv("FLAME_CACHE_SIZE", "0")
    monkeypatch.setenv("FLAME_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(nvrtc_pool, "_pool", None)
    monkeypatch.setattr(nvrtc_pool, "_warned", [False])
    monkeypatch.setenv(nvrtc_pool.PROCESSES_ENV, "2")
    yield
    nvrtc_pool._close()


def _compile_here(monkeypatch, fn):
    with monkeypatch.context() as m:
        m.setenv(nvrtc_pool.PROCESSES_ENV, "0")
        return fn()


def test_workers_give_the_cubins_and_errors_compiling_here_gives(pool, monkeypatch):
    there = [nvrtc._compile(s, "sm_90", "k") for s in SOURCES]
    assert nvrtc_pool._pool is not None and nvrtc_pool._pool.all  # compiled by workers
    here = _compile_here(monkeypatch, lambda: [nvrtc._compile(s, "sm_90", "k") for s in SOURCES])
    assert there == here
    messages = []
    for compile_in in (lambda f: f(), lambda f: _compile_here(monkeypatch, f)):
        with pytest.raises(FlameError) as e:
            compile_in(lambda: nvrtc._compile(BAD, "sm_90", "bad_kernel"))
        messages.append(str(e.value))
    assert messages[0] == messages[1] and "undefined_name" in messages[0] and "NVRTC log" in messages[0]


def test_concurrent_compiles_get_workers_of_their_own_up_to_the_limit(pool):
    barrier = threading.Barrier(3)
    out = {}

    def work(i):
        barrier.wait()
        out[i] = nvrtc._compile(SOURCES[i], "sm_90", "k")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    [t.start() for t in threads]
    [t.join(120) for t in threads]
    assert sorted(out) == [0, 1, 2] and all(b"flame_pool_k" in c for c in out.values())
    assert 1 <= len(nvrtc_pool._pool.all) <= 2


def test_the_first_compile_starts_every_worker_and_the_others_warm_up(pool):
    there = nvrtc._compile(SOURCES[0], "sm_90", "k")
    assert len(nvrtc_pool._pool.all) == 2 and b"flame_pool_k0" in there
    (warming,) = [w for w in nvrtc_pool._pool.all if w.unread]
    opts = ["--gpu-architecture=sm_90", *nvrtc.OPTIONS] + [f"-I{d}" for d in nvrtc.include_dirs()]
    kind, cubin = warming.call((SOURCES[1], "k.cu", opts), 120)  # its warm-up's answer read and dropped first
    assert kind == "cubin" and b"flame_pool_k1" in cubin and b"flame_warm_up" not in cubin and warming.unread == 0


def test_a_dead_worker_is_warned_about_once_and_the_kernel_compiled_here(pool, monkeypatch):
    monkeypatch.setenv(nvrtc_pool.PROCESSES_ENV, "1")
    nvrtc._compile(SOURCES[0], "sm_90", "k")
    (worker,) = nvrtc_pool._pool.all
    worker.proc.kill()
    worker.proc.wait()
    with pytest.warns(RuntimeWarning, match="an NVRTC compile process failed"):
        cubin = nvrtc._compile(SOURCES[1], "sm_90", "k")
    assert b"flame_pool_k1" in cubin and worker not in nvrtc_pool._pool.all
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert b"flame_pool_k2" in nvrtc._compile(SOURCES[2], "sm_90", "k")  # a new worker, no warning


def test_a_worker_that_does_not_answer_is_stopped(pool, monkeypatch, tmp_path):
    monkeypatch.setenv(nvrtc_pool.PROCESSES_ENV, "1")
    silent = tmp_path / "silent.py"
    silent.write_text("import sys, time\nsys.stdin.buffer.read(1)\ntime.sleep(600)\n")
    monkeypatch.setattr(nvrtc_pool, "WORKER", silent)
    monkeypatch.setattr(nvrtc_pool, "WAIT_S", 0.5)
    with pytest.warns(RuntimeWarning, match="gave no answer within 0.5 s"):
        assert nvrtc_pool.run(SOURCES[0], "k.cu", []) is None
    assert nvrtc_pool._pool.all == []


def test_no_workers_when_turned_off(pool, monkeypatch):
    monkeypatch.setenv(nvrtc_pool.PROCESSES_ENV, "0")
    assert nvrtc_pool.run(SOURCES[0], "k.cu", []) is None and nvrtc_pool._pool is None
    assert b"flame_pool_k0" in nvrtc._compile(SOURCES[0], "sm_90", "k")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_process_starts_workers_of_its_own(pool):
    nvrtc._compile(SOURCES[0], "sm_90", "k")
    parent = list(nvrtc_pool._pool.all)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: compiles through workers of its own, then reports
        try:
            ok = b"flame_pool_k1" in nvrtc._compile(SOURCES[1], "sm_90", "k")
            ok = ok and not set(nvrtc_pool._pool.all) & set(parent)
            os.write(w, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"1"
    os.waitpid(pid, 0)
    assert nvrtc_pool._pool.all == parent


def test_a_worker_imports_nothing_of_flame():
    r = subprocess.run([sys.executable, "-X", "importtime", str(nvrtc_pool.WORKER)], input=b"", capture_output=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    imported = [line.split("|")[-1].strip() for line in r.stderr.decode().splitlines() if "|" in line]
    assert any(m.startswith(("cupy_backends", "cupy")) for m in imported)  # NVRTC's binding
    assert not [m for m in imported if m.startswith("flame")]


def test_ranks_on_one_host_share_the_default(monkeypatch):
    monkeypatch.delenv(nvrtc_pool.PROCESSES_ENV, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 32)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert nvrtc_pool.processes() == 16
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert nvrtc_pool.processes() == 2
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "64")
    assert nvrtc_pool.processes() == 1
    monkeypatch.setenv(nvrtc_pool.PROCESSES_ENV, "5")
    assert nvrtc_pool.processes() == 5


def test_a_bad_setting_says_so(monkeypatch):
    monkeypatch.setenv(nvrtc_pool.PROCESSES_ENV, "-2")
    with pytest.raises(Exception, match=nvrtc_pool.PROCESSES_ENV):
        nvrtc_pool.processes()


def test_closing_waits_for_busy_workers_within_one_bound(pool, monkeypatch, tmp_path):
    busy = tmp_path / "busy.py"  # reads a request, then works for a minute
    busy.write_text("import sys, time\nsys.stdin.buffer.read(1)\ntime.sleep(60)\n")
    monkeypatch.setattr(nvrtc_pool, "WORKER", busy)
    monkeypatch.setattr(nvrtc_pool, "WAIT_S", 0.2)
    monkeypatch.setattr(nvrtc_pool, "EXIT_WAIT_S", 1.0)
    workers = [nvrtc_pool._current().take(3, ("", "k.cu", [])) for _ in range(3)]
    for w in workers:
        w.proc.stdin.write(b"x")
        w.proc.stdin.flush()
    start = time.monotonic()
    nvrtc_pool._current().close()
    assert time.monotonic() - start < 3 * nvrtc_pool.EXIT_WAIT_S  # killed after one shared bound
    assert all(w.proc.poll() is not None for w in workers)
