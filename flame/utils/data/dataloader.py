"""DataLoader with torch.utils.data.DataLoader's interface and semantics.

Batches come from a batch sampler over a map-style data set (or from an IterableDataset's stream)
and are collated by `collate_fn` (default_collate: tensors and NumPy arrays stacked, numbers made
tensors, dicts, tuples and lists collated field by field, as torch's). A TensorDataset with the
default collation is gathered with one indexed read per tensor.

num_workers > 0 fetches and collates batches in worker processes (started with fork where the
platform has it). Workers run flame on the NumPy reference executor and send host arrays back;
the main process puts them on its device, in order, through pinned host buffers and an
asynchronous copy on a side stream when pin_memory=True and flame runs on a GPU. Every wait on a
worker is bounded: a worker that dies raises at once, naming it, and `timeout` (seconds, 0: none)
bounds the wait for one batch. Workers shut down when the iterator is exhausted, fails or is
garbage-collected."""

from __future__ import annotations

import collections.abc
import multiprocessing
import queue
import time
import traceback
import weakref
from typing import Any

import numpy as np

from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import stack
from flame.utils.data.dataset import IterableDataset, TensorDataset
from flame.utils.data.sampler import BatchSampler, RandomSampler, SequentialSampler

__all__ = ["DataLoader", "default_collate", "get_worker_info"]

_POLL_S = 0.5  # how often a waiting main process checks that its workers are alive


def default_collate(batch: list) -> Any:
    """Stack a list of samples into a batch, as torch's default_collate: flame tensors and NumPy
    arrays are stacked along a new first dimension, Python floats become a float64 tensor and ints
    an int64 one, strings stay a list, and mappings, named tuples and sequences are collated per
    field (a tuple gives a list, as in torch)."""
    elem = batch[0]
    if isinstance(elem, Tensor):
        return stack(list(batch))
    if isinstance(elem, np.ndarray) and elem.dtype.kind not in "OSUV":
        return Tensor(np.stack(batch))
    if isinstance(elem, np.generic) and elem.dtype.kind not in "OSUV":
        return Tensor(np.asarray(batch))
    if isinstance(elem, float):
        return Tensor(np.asarray(batch, np.float64))
    if isinstance(elem, (bool, int)):
        return Tensor(np.asarray(batch))
    if isinstance(elem, (str, bytes)):
        return list(batch)
    if isinstance(elem, collections.abc.Mapping):
        return {key: default_collate([d[key] for d in batch]) for key in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return type(elem)(*(default_collate(list(s)) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        if any(len(e) != len(elem) for e in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        return [default_collate(list(s)) for s in zip(*batch)]
    raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found "
                    f"{type(elem)}")


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


class _DeviceCopier:
    """Puts host arrays on flame's device: directly, or (pin_memory on a GPU) through a pinned
    buffer and an asynchronous copy on a side stream that the current stream waits for."""

    def __init__(self, pin_memory: bool):
        from flame.runtime.device import get_device

        self.async_copy = pin_memory and get_device() == "cuda"
        self._stream, self._held = None, []

    def tensor(self, array: np.ndarray, dtype: str | None = None):
        from flame.ir.dtypes import dtype_of

        if not self.async_copy:
            return Tensor(array, dtype_of(dtype) if dtype else None)
        import cupy

        if self._stream is None:
            self._stream = cupy.cuda.Stream(non_blocking=True)
        array = np.ascontiguousarray(array)
        mem = cupy.cuda.alloc_pinned_memory(max(array.nbytes, 1))
        host = np.frombuffer(mem, array.dtype, array.size).reshape(array.shape)
        host[...] = array
        dev = cupy.empty(array.shape, array.dtype)
        dev.set(host, stream=self._stream)
        done = self._stream.record()
        cupy.cuda.get_current_stream().wait_event(done)
        self._held = [(e, m) for e, m in self._held if not e.done] + [(done, mem)]  # pinned until copied
        return Tensor._concrete(dev, dtype_of(dtype) if dtype else dtype_of(array.dtype))

    def place(self, obj):
        """obj with every host array and _Host turned into a tensor on the device."""
        if isinstance(obj, _Host):
            return self.tensor(obj.array, obj.dtype)
        if isinstance(obj, dict):
            return {k: self.place(v) for k, v in obj.items()}
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):
            return type(obj)(*(self.place(v) for v in obj))
        if isinstance(obj, (list, tuple)):
            return type(obj)(self.place(v) for v in obj)
        return obj


# ---- worker processes ------------------------------------------------------------------------------

class WorkerInfo:
    """What get_worker_info() returns inside a worker: id, num_workers, seed and dataset."""

    def __init__(self, id: int, num_workers: int, seed: int, dataset):  # noqa: A002
        self.id, self.num_workers, self.seed, self.dataset = id, num_workers, seed, dataset


_worker_info: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """Inside a DataLoader worker: its WorkerInfo (shard an IterableDataset by it); else None."""
    return _worker_info


def _worker_loop(dataset, fetch, index_q, result_q, worker_id, num_workers, seed, init_fn):
    """A worker: fetch each (batch number, indices) it is sent, or for an IterableDataset stream its
    own batches, and send back (batch number, host batch or error text)."""
    global _worker_info
    from flame.runtime.device import set_device

    set_device("reference")  # the GPU belongs to the main process
    _worker_info = WorkerInfo(worker_id, num_workers, seed, dataset)
    np.random.seed(seed % (1 << 32))
    try:
        if init_fn is not None:
            init_fn(worker_id)
        if isinstance(dataset, IterableDataset):
            for n, batch in enumerate(fetch.stream()):
                result_q.put(((worker_id, n), _to_host(batch), None))
            result_q.put(((worker_id, None), None, None))
            return
        while True:
            task = index_q.get()
            if task is None:
                return
            n, indices = task
            try:
                result_q.put((n, _to_host(fetch(indices)), None))
            except Exception:
                result_q.put((n, None, f"Caught an exception in DataLoader worker process {worker_id}:\n"
                                       + traceback.format_exc()))
    except Exception:
        result_q.put(((worker_id, None), None, f"Caught an exception in DataLoader worker process {worker_id}:\n"
                                                + traceback.format_exc()))


class _Fetcher:
    """Turns a batch of indices (or, for an IterableDataset, the stream) into a collated batch."""

    def __init__(self, loader: DataLoader):
        self.dataset, self.collate, self.batch_size = loader.dataset, loader.collate_fn, loader.batch_size
        self.drop_last, self.auto_collation = loader.drop_last, loader.batch_size is not None
        self.fast = isinstance(loader.dataset, TensorDataset) and loader.collate_fn is default_collate

    def __call__(self, indices):
        if not self.auto_collation:
            return self.collate(self.dataset[indices])
        if self.fast:  # one gather per tensor
            idx = Tensor(np.asarray(indices, np.int64))
            return [t[idx] for t in self.dataset.tensors]
        return self.collate([self.dataset[i] for i in indices])

    def stream(self):
        if not self.auto_collation:
            for item in self.dataset:
                yield self.collate(item)
            return
        batch = []
        for item in self.dataset:
            batch.append(item)
            if len(batch) == self.batch_size:
                yield self.collate(batch)
                batch = []
        if batch and not self.drop_last:
            yield self.collate(batch)


def _no_batching(x):
    """collate_fn of batch_size=None: items as they are (tensors stay tensors, arrays become tensors)."""
    if isinstance(x, np.ndarray) and x.dtype.kind not in "OSUV":
        return Tensor(x)
    return x


class DataLoader:
    """Batches of `dataset`, as torch.utils.data.DataLoader (same arguments and checks). Iterating
    gives one epoch; `len()` is the number of batches of a map-style data set."""

    def __init__(self, dataset, batch_size: int | None = 1, shuffle: bool | None = None, sampler=None,
                 batch_sampler=None, num_workers: int = 0, collate_fn=None, pin_memory: bool = False,
                 drop_last: bool = False, timeout: float = 0, worker_init_fn=None, multiprocessing_context=None,
                 generator=None, *, prefetch_factor: int | None = None, persistent_workers: bool = False,
                 pin_memory_device: str = ""):
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable "
                             "multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in multiprocessing. Let num_workers > 0 "
                             "to enable multiprocessing, otherwise set prefetch_factor to None.")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        if isinstance(dataset, IterableDataset):
            if shuffle not in (None, False):
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified shuffle option, but got "
                                 f"shuffle={shuffle}")
            if sampler is not None or batch_sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified sampler and batch_sampler "
                                 "options")
        elif batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and "
                                 "drop_last")
            batch_size, drop_last = None, False
        elif sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_size is not None and (not isinstance(batch_size, int) or isinstance(batch_size, bool)
                                       or batch_size <= 0):
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        self.dataset, self.num_workers, self.pin_memory, self.timeout = dataset, num_workers, pin_memory, timeout
        self.worker_init_fn, self.generator, self.prefetch_factor = worker_init_fn, generator, prefetch_factor or 2
        self.persistent_workers, self.multiprocessing_context = persistent_workers, multiprocessing_context
        self.drop_last = drop_last
        if not isinstance(dataset, IterableDataset) and sampler is None:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        if batch_sampler is None and batch_size is not None and not isinstance(dataset, IterableDataset):
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size = batch_size if batch_sampler is None or batch_size is not None else None
        if batch_sampler is not None and self.batch_size is None:
            self.batch_size = getattr(batch_sampler, "batch_size", None)
        self.sampler, self.batch_sampler = sampler, batch_sampler
        self._auto = batch_sampler is not None or (isinstance(dataset, IterableDataset) and batch_size is not None)
        self.collate_fn = collate_fn or (default_collate if self._auto else _no_batching)

    def __len__(self) -> int:
        if isinstance(self.dataset, IterableDataset):
            n = len(self.dataset)  # TypeError when the stream has no length, as in torch
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        return len(self.batch_sampler if self.batch_sampler is not None else self.sampler)

    def _tasks(self):
        return iter(self.batch_sampler) if self.batch_sampler is not None else iter(self.sampler)

    def __iter__(self):
        fetch = _Fetcher(self)
        if not self._auto:
            fetch.auto_collation = False
        copier = _DeviceCopier(self.pin_memory)
        if self.num_workers == 0:
            batches = fetch.stream() if isinstance(self.dataset, IterableDataset) else map(fetch, self._tasks())
            return (copier.place(b) if self.pin_memory else b for b in batches)
        return _WorkerIterator(self, fetch, copier)


class _WorkerIterator:
    """One epoch through worker processes: batches handed out ahead (prefetch_factor per worker) and
    given back in order; every wait bounded (dead workers, `timeout`); workers stopped at the end."""

    def __init__(self, loader: DataLoader, fetch: _Fetcher, copier: _DeviceCopier):
        ctx = loader.multiprocessing_context
        if ctx is None or isinstance(ctx, str):
            methods = multiprocessing.get_all_start_methods()
            ctx = multiprocessing.get_context(ctx or ("fork" if "fork" in methods else "spawn"))
        self.loader, self.copier, self.timeout = loader, copier, loader.timeout
        self.iterable = isinstance(loader.dataset, IterableDataset)
        self.result_q = ctx.Queue()
        self.index_qs, self.workers = [], []
        base_seed = int(np.random.default_rng().integers(1 << 62))
        for w in range(loader.num_workers):
            q = ctx.Queue()
            p = ctx.Process(target=_worker_loop, daemon=True,
                            args=(loader.dataset, fetch, q, self.result_q, w, loader.num_workers, base_seed + w,
                                  loader.worker_init_fn))
            p.start()
            self.index_qs.append(q)
            self.workers.append(p)
        self._finalizer = weakref.finalize(self, _shutdown, self.workers, self.index_qs, self.result_q)
        self.pending: dict = {}
        self.sent = self.next = 0
        self.tasks = None if self.iterable else loader._tasks()
        self.live = set(range(loader.num_workers))  # IterableDataset: workers still streaming
        self.turn, self.counts = 0, {}
        if not self.iterable:
            for _ in range(loader.prefetch_factor * loader.num_workers):
                self._send()

    def _send(self) -> None:
        task = next(self.tasks, None)
        if task is not None:
            self.index_qs[self.sent % len(self.index_qs)].put((self.sent, task))
            self.sent += 1

    def __iter__(self):
        return self

    def _receive(self, *keys):
        """Wait (bounded) until one of `keys` has arrived; (key, batch)."""
        start = time.monotonic()
        while not any(k in self.pending for k in keys):
            if self.timeout and time.monotonic() - start > self.timeout:
                self.close()
                raise RuntimeError(f"DataLoader timed out after {self.timeout} seconds")
            try:
                k, batch, error = self.result_q.get(timeout=_POLL_S)
            except queue.Empty:
                dead = [p for p in self.workers if p.exitcode is not None and p.exitcode != 0]
                if dead:
                    self.close()
                    raise RuntimeError("DataLoader worker (pid(s) " + ", ".join(str(p.pid) for p in dead)
                                       + ") exited unexpectedly (exit code "
                                       + ", ".join(str(p.exitcode) for p in dead) + ")") from None
                continue
            if error is not None:
                self.close()
                raise RuntimeError(error)
            self.pending[k] = batch
        key = next(k for k in keys if k in self.pending)
        return key, self.pending.pop(key)

    def __next__(self):
        if self.iterable:
            return self._next_streamed()
        if self.next >= self.sent:
            self.close()
            raise StopIteration
        _, batch = self._receive(self.next)
        self.next += 1
        self._send()
        return self.copier.place(batch)

    def _next_streamed(self):
        """Round robin over the workers' streams (worker w's n-th batch is keyed (w, n), its end
        (w, None)), skipping the ones that ended, as torch orders them."""
        while self.live:
            w = sorted(self.live)[self.turn % len(self.live)]
            n = self.counts.get(w, 0)
            key, batch = self._receive((w, n), (w, None))
            if key[1] is None:
                self.live.discard(w)
                continue
            self.counts[w] = n + 1
            self.turn += 1
            return self.copier.place(batch)
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

