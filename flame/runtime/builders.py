"""Worker processes that run build jobs beside the compiler: a cold compile hands its library graphs
(cuDNN's, runtime/cudnn_builders.py) to them, so that graphs whose building is mostly the library
compiling its own kernels are built side by side, while the compiler goes on with its passes.

    pool = Pool(4, init=("flame.runtime.cudnn_builders:init_worker", (0,)))
    job = pool.submit("flame.runtime.cudnn_builders:build", request)   # a Job; workers start as needed
    job.result(timeout=60)     # the function's return value; BuildFailed when the worker could not
    pool.close()               # workers leave; jobs not yet done fail

A worker is a new interpreter running `serve()`, that imports nothing of the user's
program (multiprocessing's spawn would import the user's main module again in each worker, running a
script's unguarded top level once more), fed pickled (function name, arguments) pairs on its stdin
and answering on its stdout; a job names a module-level function "package.module:function". Each worker
first runs the pool's `init` job. Jobs go to the first idle worker, in the order submitted. A job whose
function raises, or whose worker dies, fails with BuildFailed naming why; the other jobs go on (a dead
worker's later jobs go to the others; when none is left, every waiting job fails). Every wait is
bounded: `result(timeout)` raises BuildFailed when the job is not done in time, and close() waits for
each worker at most a few seconds before killing it. A dead worker's place is not filled again.
"""

from __future__ import annotations

import importlib
import logging
import os
import pickle
import queue
import subprocess
import sys
import threading
from collections.abc import Callable

log = logging.getLogger("flame")

EXIT_WAIT = 5.0  # seconds close() gives a worker to leave before it is killed


class BuildFailed(RuntimeError):
    """A job gave no result: its function raised, its worker died, or it took longer than the wait."""


class Job:
    """One submitted call: its result once a worker ran it."""

    def __init__(self, name: str, args: tuple):
        self.name, self.args = name, args
        self._done = threading.Event()
        self._value: object = None
        self._error: str | None = None

    def _finish(self, value: object = None, error: str | None = None) -> None:
        if not self._done.is_set():
            self._value, self._error = value, error
            self._done.set()

    def done(self) -> bool:
        return self._done.is_set()

    def result(self, timeout: float) -> object:
        """The function's return value; BuildFailed when it raised, its worker died or `timeout`
        seconds passed first."""
        if not self._done.wait(timeout):
            raise BuildFailed(f"{self.name} gave no result within {timeout:g} s")
        if self._error is not None:
            raise BuildFailed(self._error)
        return self._value


def _resolve(name: str) -> Callable:
    module, _, attr = name.partition(":")
    return getattr(importlib.import_module(module), attr)


class Pool:
    """Up to `size` worker processes, started as jobs need them (submit), each running `init` (a
    function name and its arguments) first. `env`: variables set in the workers beside this process's."""

    def __init__(self, size: int, init: tuple[str, tuple] | None = None, env: dict[str, str] | None = None):
        if size < 1:
            raise ValueError(f"a build pool needs at least one worker, got {size}")
        self.size, self.init = size, init
        self._env = {**os.environ, **(env or {})}
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._lock = threading.Lock()
        self._procs: list[subprocess.Popen] = []
        self._alive = 0
        self._idle = 0  # workers waiting for a job
        self._closed = False

    @property
    def workers(self) -> int:
        """Workers started and not dead."""
        return self._alive

    def submit(self, name: str, *args) -> Job:
        """Queue a call of the module-level function `name` ("package.module:function") on `args`
        (picklable); a worker is started for it when every started one is busy and fewer than `size` are."""
        job = Job(name, args)
        with self._lock:
            if self._closed:
                job._finish(error="the build pool is closed")
                return job
            self._jobs.put(job)
            if self._jobs.qsize() > self._idle and len(self._procs) < self.size:
                self._start()
        return job

    def _start(self) -> None:
        """Start one worker and the thread that feeds it (under the lock)."""
        proc = subprocess.Popen(
            [sys.executable, "-c", "from flame.runtime.builders import serve; serve()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=self._env,
        )
        self._procs.append(proc)
        self._alive += 1
        threading.Thread(target=self._feed, args=(proc,), name="flame-builder", daemon=True).start()

    def _feed(self, proc: subprocess.Popen) -> None:
        """Give `proc` the init job, then queued jobs one at a time, until the pool closes or it dies."""
        job = None
        try:
            if self.init is not None:
                _send(proc, self.init)
                ok, answer = pickle.load(proc.stdout)
                if not ok:
                    raise BuildFailed(f"a build worker could not start: {answer}")
            while True:
                with self._lock:
                    self._idle += 1
                job = self._jobs.get()
                with self._lock:
                    self._idle -= 1
                if job is None:
                    return
                _send(proc, (job.name, job.args))
                ok, answer = pickle.load(proc.stdout)
                job._finish(answer) if ok else job._finish(error=answer)
                job = None
        except (OSError, EOFError, pickle.UnpicklingError, BuildFailed) as e:
            why = str(e) if isinstance(e, BuildFailed) else f"a build worker died (exit status {proc.poll()}: {e!r})"
            log.debug("flame: %s", why)
            if job is not None:
                job._finish(error=why)
            with self._lock:
                self._alive -= 1
                last = self._alive == 0
                if last:  # no worker left to run what waits: fail it rather than let it wait out its bound
                    self._closed = True
            if last:
                self._drain(why)

    def _drain(self, why: str) -> None:
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return
            if job is not None:
                job._finish(error=why)

    def close(self) -> None:
        """Stop the workers: jobs not yet started fail; a worker busy with a job leaves when it ends it,
        and is killed after EXIT_WAIT seconds (waited for on a background thread)."""
        with self._lock:
            if self._closed and not self._procs:
                return
            self._closed = True
            procs, self._procs = self._procs, []
        self._drain("the build pool was closed before the job started")
        for _ in procs:
            self._jobs.put(None)
        if procs:
            threading.Thread(target=_reap, args=(procs,), name="flame-builder-reaper", daemon=True).start()

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _send(proc: subprocess.Popen, message: object) -> None:
    pickle.dump(message, proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
    proc.stdin.flush()


def _reap(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        try:
            proc.wait(timeout=EXIT_WAIT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=EXIT_WAIT)
        for f in (proc.stdin, proc.stdout):
            try:
                f.close()
            except OSError:
                pass


def serve() -> None:
    """A worker's loop: run each (function name, arguments) read from stdin, answer (True, value) or
    (False, why) on stdout; leave at end of input or on None. What the functions print goes to stderr,
    not into the answers."""
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    requests = sys.stdin.buffer
    while True:
        try:
            message = pickle.load(requests)
        except EOFError:
            return
        if message is None:
            return
        name, args = message
        try:
            answer = (True, _resolve(name)(*args))
        except Exception as e:  # noqa: BLE001 - whatever the job raises is its answer
            answer = (False, f"{name} raised {type(e).__name__}: {e}")
        pickle.dump(answer, answers, protocol=pickle.HIGHEST_PROTOCOL)
        answers.flush()

