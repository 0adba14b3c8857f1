"""NVRTC compiles in worker processes (codegen/nvrtc_worker.py), so that a plan's kernels compile side by
side. The threads codegen/nvrtc.py compiles from (compile_ahead, compile_many) may not: with CuPy for
CUDA 13 and its NVRTC on an H100 host, a U-Net step's 92 compiles on 16 threads ran one at a time (5 s
of CPU over 68 s of the threads' clocks, the executor waiting 2.8 s for them); in processes they do not
wait for each other, whatever serializes them within one.

    answer = run(source, "fused_add.cu", options)   # ("cubin", bytes) / ("error", what, log); None: compile here

Up to FLAME_NVRTC_PROCESSES workers (default: the CPU count, at most 16, divided among the ranks a
launcher started on the host, LOCAL_WORLD_SIZE; 0 compiles in the calling process), all started at the
process's first compile and kept for its life: a worker is a Python interpreter running nvrtc_worker.py by
its path, with NVRTC's binding and no GPU context. A new worker's first compile takes about a second
(the interpreter, NVRTC's libraries, NVRTC's first program) where later ones take tens of milliseconds,
and a plan renders its largest kernels in a burst at its end: started together at the first compile,
each warming up on an empty kernel (WARM_UP) while the plan is still being built, the workers are ready
for that burst instead of starting one by one as it arrives. A call waits for an idle
worker, then for its answer, at most WAIT_S seconds each; a worker that dies or does not answer in time
is stopped, and run() returns None with a warning (once per process), so that the kernel is compiled in
the calling process instead. A process forked from this one starts workers of its own (the pipes
belong to the parent).
"""

from __future__ import annotations

import atexit
import os
import pickle
import select
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

from flame._env import env_int

PROCESSES_ENV = "FLAME_NVRTC_PROCESSES"
WAIT_S = 600.0  # seconds a compile waits for an idle worker, and then for the worker's answer
EXIT_WAIT_S = 5.0  # seconds the workers get, together, to leave at exit before they are killed
WORKER = Path(__file__).with_name("nvrtc_worker.py")
_HEADER = 8  # nvrtc_worker.HEADER: an 8-byte little-endian length before each pickle
WARM_UP = 'extern "C" __global__ void flame_warm_up() {}'  # a new worker's first compile (module doc)


def processes() -> int:
    """How many compile processes may run: FLAME_NVRTC_PROCESSES, by default the CPU count (at most 16)
    shared among the ranks a launcher started on this host (LOCAL_WORLD_SIZE: torchrun's, flame's)."""
    ranks = os.environ.get("LOCAL_WORLD_SIZE", "")
    ranks = int(ranks) if ranks.isdigit() and int(ranks) > 0 else 1
    return env_int(PROCESSES_ENV, max(1, min(16, os.cpu_count() or 1) // ranks), minimum=0)


class WorkerFailed(Exception):
    """A worker died, said something unreadable, or took longer than WAIT_S."""


class _Worker:
    def __init__(self, warm_up: tuple | None = None):
        """A new worker; with a `warm_up` request, which it compiles at once (its answer is dropped)."""
        self.proc = subprocess.Popen([sys.executable, str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.unread = 0  # answers to requests sent ahead (the warm-up) that the next call reads and drops
        if warm_up is not None:
            try:
                self._send(warm_up)
                self.unread = 1
            except WorkerFailed:  # gone at once: its first call finds out, and the pool drops it
                pass

    def _send(self, request: tuple) -> None:
        data = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self.proc.stdin.write(len(data).to_bytes(_HEADER, "little") + data)
            self.proc.stdin.flush()
        except OSError as e:
            raise WorkerFailed(f"the compile process is gone ({e})") from None

    def call(self, request: tuple, timeout: float) -> tuple:
        self._send(request)
        while self.unread:
            self._answer(timeout)
            self.unread -= 1
        return self._answer(timeout)

    def _answer(self, timeout: float) -> tuple:
        head = self._read(_HEADER, timeout)
        return pickle.loads(self._read(int.from_bytes(head, "little"), timeout))

    def _read(self, n: int, timeout: float) -> bytes:
        fd, out = self.proc.stdout.fileno(), bytearray()
        while len(out) < n:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                raise WorkerFailed(f"the compile process gave no answer within {timeout:g} s")
            chunk = os.read(fd, n - len(out))
            if not chunk:
                raise WorkerFailed(f"the compile process exited (status {self.proc.poll()})")
            out += chunk
        return bytes(out)

    def end_input(self) -> None:
        """Close its input: it leaves once its compile, if any, is done."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass

    def stop(self, wait: float = 0.0) -> None:
        """End its input, wait at most `wait` seconds for it to leave, else kill it."""
        self.end_input()
        try:
            self.proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


class _Pool:
    def __init__(self):
        self.pid = os.getpid()
        self.idle: list[_Worker] = []
        self.all: list[_Worker] = []
        self.ready = threading.Condition()

    def take(self, limit: int, warm_up: tuple) -> _Worker:
        """An idle worker, a new one while fewer than `limit` run, or the first to become idle (at most WAIT_S).
        The first take starts the other limit - 1 workers too, each compiling `warm_up` (module doc)."""
        with self.ready:
            if not self.all:
                first = _Worker()
                self.all.append(first)
                for _ in range(limit - 1):
                    try:
                        warming = _Worker(warm_up)
                    except OSError:  # fewer then: more are started when all are busy
                        break
                    self.all.append(warming)
                    self.idle.append(warming)
                return first
            while not self.idle and len(self.all) >= limit:
                if not self.ready.wait(WAIT_S):
                    raise WorkerFailed(f"no compile process became free within {WAIT_S:g} s")
            if self.idle:
                return self.idle.pop()
            worker = _Worker()
            self.all.append(worker)
            return worker

    def give_back(self, worker: _Worker) -> None:
        with self.ready:
            self.idle.append(worker)
            self.ready.notify()

    def drop(self, worker: _Worker) -> None:
        with self.ready:
            if worker in self.all:
                self.all.remove(worker)
            self.ready.notify()
        worker.stop()

    def close(self) -> None:
        with self.ready:
            workers, self.all, self.idle = self.all, [], []
        for w in workers:
            w.end_input()
        deadline = time.monotonic() + EXIT_WAIT_S  # one bound for them all, not one each
        for w in workers:
            w.stop(max(0.0, deadline - time.monotonic()))


_pool: _Pool | None = None
_pool_lock = threading.Lock()
_warned = [False]


def _current() -> _Pool:
    global _pool
    with _pool_lock:
        if _pool is None or _pool.pid != os.getpid():  # none yet, or the parent's (this process was forked)
            _pool = _Pool()
        return _pool


def run(source: str, name: str, options: list[str]) -> tuple | None:
    """Compile `source` (file name `name`, NVRTC `options`) in a worker process: ("cubin", bytes) or
    ("error", what NVRTC said, its log); None when workers are off (FLAME_NVRTC_PROCESSES=0) or failed
    (warned once): the caller compiles in this process."""
    limit = processes()
    if limit == 0:
        return None
    pool = _current()
    try:
        worker = pool.take(limit, (WARM_UP, "flame_warm_up.cu", list(options)))
    except (OSError, WorkerFailed) as e:
        return _failed(e)
    try:
        answer = worker.call((source, name, list(options)), WAIT_S)
    except (WorkerFailed, OSError, pickle.UnpicklingError, EOFError) as e:
        pool.drop(worker)
        return _failed(e)
    pool.give_back(worker)
    return answer


def _failed(e: BaseException) -> None:
    if not _warned[0]:
        _warned[0] = True
        warnings.warn(f"flame: an NVRTC compile process failed ({e}); kernels it did not compile are compiled in "
                      f"this process", RuntimeWarning, stacklevel=4)
    return None


def _close() -> None:
    pool = _pool
    if pool is not None and pool.pid == os.getpid():
        pool.close()


atexit.register(_close)
