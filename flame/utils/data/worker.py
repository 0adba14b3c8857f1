"""DataLoader worker processes: what a batch becomes to cross a process boundary (flame tensors as
NumPy arrays), the loop a worker runs, its errors (raised again in the main process in their own
type, in their batch's turn, as torch's ExceptionWrapper), the checks on the worker count and start
method, and the main process's side: batches handed out ahead and given back in order, every wait
on a worker bounded (a worker that dies raises at once, naming it; `timeout` bounds the wait for
one batch), the workers stopped when the iterator is exhausted, fails or is garbage-collected."""

from __future__ import annotations

import dataclasses
import multiprocessing
import pickle
import queue
import time
import traceback
import warnings
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from flame.frontend.tensor import Tensor
from flame.utils.data.dataset import IterableDataset

if TYPE_CHECKING:
    from flame.utils.data.dataloader import DataLoader, _DeviceCopier, _Fetcher

__all__ = ["WorkerInfo", "get_worker_info"]

_POLL_S = 0.5  # how often a waiting main process checks that its workers are alive


# ---- host form: what crosses a process boundary (flame tensors as NumPy arrays) ------------------


class _Host:
    """A flame tensor's values on the host, on its way to the main process's device."""

    __slots__ = ("array", "dtype")

    def __init__(self, array: np.ndarray, dtype: str):
        self.array, self.dtype = array, dtype


def _to_host(obj):
    if isinstance(obj, Tensor):
        return _Host(obj.numpy(), obj.dtype.name)
    if isinstance(obj, dict):
        return {k: _to_host(v) for k, v in obj.items()}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_to_host(v) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_host(v) for v in obj)
    return obj


# ---- worker processes ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerInfo:
    """What get_worker_info() returns inside a worker, a frozen record as torch's: id, num_workers,
    seed, dataset (the worker's copy), rng (None) and worker_method."""

    id: int
    num_workers: int
    seed: int
    dataset: Any
    rng: Any = None
    worker_method: str | None = "multiprocessing"


_worker_info: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """Inside a DataLoader worker: its WorkerInfo (shard an IterableDataset by it); else None."""
    return _worker_info


def _base_seed(generator) -> int:
    """The seed a loader's iterator draws from its generator (flame's default one when None) as
    torch's draws it: once per iterator, with or without workers (a persistent loader's later epochs
    reuse theirs), so a shuffled epoch's order does not depend on num_workers. Worker w is seeded
    with it + w."""
    from flame.utils.data.sampler import host_rng

    return int(host_rng(generator).integers(1 << 62))


def _seed_worker(seed: int) -> None:
    """Seed a worker's random streams from its seed (the loader's base seed + worker id), as torch
    seeds `random`, its own generator and NumPy's: flame's default generator, `random` and NumPy's
    global generator, so workers draw different numbers and a seeded run repeats."""
    import random

    from flame.frontend.creation import manual_seed

    random.seed(seed)
    manual_seed(seed % (1 << 63))
    np.random.seed(seed % (1 << 32))


def _worker_loop(dataset, fetch, index_q, result_q, worker_id, num_workers, seed, init_fn):
    """A worker: serve tasks until a None task. A (batch number, indices) task is fetched and sent
    back as (batch number, host batch, error text); for an IterableDataset, a ("stream", epoch) task
    streams its own batches keyed (epoch, worker id, n), then its end (epoch, worker id, None)."""
    global _worker_info
    from flame.runtime.device import set_device

    set_device("reference")  # the GPU belongs to the main process
    _worker_info = WorkerInfo(worker_id, num_workers, seed, dataset)
    _seed_worker(seed)
    where = f"in DataLoader worker process {worker_id}"
    try:
        if init_fn is not None:
            init_fn(worker_id)
    except Exception as e:
        result_q.put((None, None, _WorkerError(e, where)))
        return
    while True:
        task = index_q.get()
        if task is None:
            return
        key, work = task
        n = 0
        try:
            if key == "stream":
                for batch in fetch.stream():
                    result_q.put(((work, worker_id, n), _to_host(batch), None))
                    n += 1
                result_q.put(((work, worker_id, None), None, None))
            else:
                result_q.put((key, _to_host(fetch(work)), None))
        except Exception as e:  # keyed as the batch it stands for: raised in that batch's turn
            result_q.put(((work, worker_id, n) if key == "stream" else key, None, _WorkerError(e, where)))


class _WorkerError:
    """An exception raised in a worker, sent to the main process, which raises it again in its own
    type with the worker's traceback in the message, as torch's ExceptionWrapper."""

    def __init__(self, error: BaseException, where: str):
        self.exc_type = type(error) if _picklable(type(error)) else RuntimeError
        self.message = f"Caught {type(error).__name__} {where}.\nOriginal {traceback.format_exc()}"

    def reraise(self):
        msg = self.message
        if self.exc_type is KeyError:  # KeyError quotes its message; torch keeps the lines readable
            msg = _KeyErrorMessage(msg)
        elif getattr(self.exc_type, "message", None):
            raise self.exc_type(message=msg)
        try:
            error = self.exc_type(msg)
        except Exception:  # an exception type that cannot be built from one message
            raise RuntimeError(msg) from None
        raise error


def _picklable(obj) -> bool:
    try:
        pickle.dumps(obj)
    except Exception:  # a class defined in a function, for one
        return False
    return True


class _KeyErrorMessage(str):
    def __repr__(self):
        return self


def _check_worker_count(num_workers: int) -> None:
    """torch's warning when a loader would start more workers than this process has CPUs."""
    import os

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if num_workers and (cpus is None or num_workers > cpus):
        suggestion = (
            "DataLoader is not able to compute a suggested max number of worker in current system."
            if cpus is None
            else f"Our suggested max number of worker in current system is {cpus}"
            + ("" if hasattr(os, "sched_getaffinity") else " (`cpuset` is not taken into account)")
            + ", which is smaller than what this DataLoader is going to create."
        )
        warnings.warn(
            f"This DataLoader will create {num_workers} worker processes in total. {suggestion} Please be aware "
            "that excessive worker creation might get DataLoader running slow or even freeze, lower the worker "
            "number to avoid potential slowness/freeze if necessary.",
            stacklevel=3,
        )


def _start_method(ctx, num_workers: int):
    """multiprocessing_context checked as torch checks it: only with workers, and a start method's
    name (or a context) the platform has."""
    if ctx is None:
        return None
    if num_workers == 0:
        raise ValueError(
            "multiprocessing_context can only be used with multi-process loading (num_workers > 0), but got "
            f"num_workers={num_workers}"
        )
    if isinstance(ctx, str):
        methods = multiprocessing.get_all_start_methods()
        if ctx not in methods:
            raise ValueError(
                "multiprocessing_context option should specify a valid start method in "
                f"{methods!r}, but got multiprocessing_context={ctx!r}"
            )
        return multiprocessing.get_context(ctx)
    if not isinstance(ctx, multiprocessing.context.BaseContext):
        raise TypeError(
            "multiprocessing_context option should be a valid context object or a string specifying the start "
            f"method, but got multiprocessing_context={ctx}"
        )
    return ctx


class _WorkerIterator:
    """Epochs through worker processes: batches handed out ahead (prefetch_factor per worker) and
    given back in order; every wait bounded (dead workers, `timeout`). The workers stop at the end of
    the epoch, or, for persistent workers, when the loader is collected or the process exits."""

    def __init__(self, loader: DataLoader, fetch: _Fetcher, copier: _DeviceCopier):
        ctx = loader.multiprocessing_context
        if ctx is None or isinstance(ctx, str):
            methods = multiprocessing.get_all_start_methods()
            ctx = multiprocessing.get_context(ctx or ("fork" if "fork" in methods else "spawn"))
        self.timeout, self.persistent = loader.timeout, loader.persistent_workers
        self.iterable = isinstance(loader.dataset, IterableDataset)
        self.result_q = ctx.Queue()
        self.index_qs, self.workers = [], []
        base_seed = _base_seed(loader.generator)  # repeatable under flame.manual_seed
        for w in range(loader.num_workers):
            q = ctx.Queue()
            p = ctx.Process(
                target=_worker_loop,
                daemon=True,
                args=(
                    loader.dataset,
                    fetch,
                    q,
                    self.result_q,
                    w,
                    loader.num_workers,
                    base_seed + w,
                    loader.worker_init_fn,
                ),
            )
            p.start()
            self.index_qs.append(q)
            self.workers.append(p)
        self._finalizer = weakref.finalize(self, _shutdown, self.workers, self.index_qs, self.result_q)
        self.pending: dict = {}
        self.sent = self.next = 0
        self.epoch = -1
        self.reset(loader, copier)

    def reset(self, loader: DataLoader, copier: _DeviceCopier) -> None:
        """Start an epoch on the running workers; what an unfinished earlier epoch still sends is dropped."""
        self.copier, self.epoch = copier, self.epoch + 1
        self.pending.clear()
        self.first = self.next = self.sent  # batch numbers below `first` belong to an earlier epoch
        if self.iterable:
            self.live = set(range(len(self.workers)))  # workers still streaming this epoch
            self.turn, self.counts = 0, {}
            for q in self.index_qs:
                q.put(("stream", self.epoch))
            return
        self.tasks = loader._tasks()
        for _ in range(loader.prefetch_factor * len(self.workers)):
            self._send()

    def _send(self) -> None:
        task = next(self.tasks, None)
        if task is not None:
            self.index_qs[self.sent % len(self.index_qs)].put((self.sent, task))
            self.sent += 1

    def __iter__(self):
        return self

    def _stale(self, key) -> bool:
        return key[0] != self.epoch if isinstance(key, tuple) else key is not None and key < self.first

    def _receive(self, *keys):
        """Wait (bounded) until one of `keys` has arrived; (key, batch). A worker's error waits, like a
        batch, for its batch's turn (the batches before it are given first, as torch gives them); one
        that stands for no batch (worker_init_fn's) is raised at once."""
        start = time.monotonic()
        while not any(k in self.pending for k in keys):
            if self.timeout and time.monotonic() - start > self.timeout:
                self.close()
                raise RuntimeError(f"DataLoader timed out after {self.timeout} seconds")
            try:
                k, batch, error = self.result_q.get(timeout=_POLL_S)
            except queue.Empty:
                self._check_alive()
                continue
            if self._stale(k):
                continue
            if error is not None and k is None:
                self.close()
                error.reraise()
            self.pending[k] = error or batch
        key = next(k for k in keys if k in self.pending)
        batch = self.pending.pop(key)
        if isinstance(batch, _WorkerError):
            self.close()
            batch.reraise()
        return key, batch

    def _check_alive(self) -> None:
        dead = [p for p in self.workers if p.exitcode is not None]
        if dead:
            self.close()
            raise RuntimeError(
                "DataLoader worker (pid(s) "
                + ", ".join(str(p.pid) for p in dead)
                + ") exited unexpectedly (exit code "
                + ", ".join(str(p.exitcode) for p in dead)
                + ")"
            ) from None

    def __next__(self):
        if self.iterable:
            return self._next_streamed()
        if self.next >= self.sent:
            self._end()
        _, batch = self._receive(self.next)
        self.next += 1
        self._send()
        return self.copier.place(batch)

    def _next_streamed(self):
        """Round robin over the workers' streams (worker w's n-th batch of the epoch is keyed
        (epoch, w, n), its end (epoch, w, None)), skipping the ones that ended, as torch orders them."""
        while self.live:
            w = sorted(self.live)[self.turn % len(self.live)]
            n = self.counts.get(w, 0)
            key, batch = self._receive((self.epoch, w, n), (self.epoch, w, None))
            if key[2] is None:
                self.live.discard(w)
                continue
            self.counts[w] = n + 1
            self.turn += 1
            return self.copier.place(batch)
        self._end()

    def _end(self):
        if not self.persistent:
            self.close()
        raise StopIteration

    def close(self) -> None:
        self._finalizer()


def _shutdown(workers, index_qs, result_q) -> None:
    """Stop the workers: a None task each, a bounded join, then terminate what is left."""
    for q in index_qs:
        try:
            q.put(None)
        except (ValueError, OSError):
            pass
    deadline = time.monotonic() + 5.0
    for p in workers:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
    for p in workers:
        if p.is_alive():
            p.terminate()
            p.join(timeout=1.0)
    for q in [*index_qs, result_q]:
        q.cancel_join_thread()
        q.close()
