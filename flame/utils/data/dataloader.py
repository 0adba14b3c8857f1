"""DataLoader with torch.utils.data.DataLoader's interface and semantics.

Batches come from a batch sampler over a map-style data set (or from an IterableDataset's stream)
and are collated by `collate_fn` (default_collate: tensors and NumPy arrays stacked, numbers made
tensors, dicts, tuples and lists collated field by field, as torch's). A TensorDataset with the
default collation is gathered with one indexed read per tensor.

num_workers > 0 fetches and collates batches in worker processes (started with fork where the
platform has it; flame.utils.data.worker). Workers run flame on the NumPy reference executor and
send host arrays back; the main process puts them on its device, in order, through pinned host
buffers and an asynchronous copy on a side stream when pin_memory=True and flame runs on a GPU."""

from __future__ import annotations

import collections.abc
import copy
import functools
import warnings
from typing import Any

import numpy as np

from flame.errors import ShapeError
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import stack
from flame.utils.data.dataset import IterableDataset, TensorDataset
from flame.utils.data.sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler
from flame.utils.data.worker import (
    WorkerInfo,
    _base_seed,
    _check_worker_count,
    _Host,
    _start_method,
    _WorkerIterator,
    get_worker_info,
)

__all__ = ["DataLoader", "WorkerInfo", "default_collate", "default_convert", "get_worker_info"]

_COLLATE_ERR = "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}"


def default_collate(batch: list) -> Any:
    """Stack a list of samples into a batch, as torch's default_collate: flame tensors and NumPy
    arrays (and another framework's tensors, such as the torch tensors a torchvision transform
    returns, read as arrays of their values) are stacked along a new first dimension, NumPy scalars
    keep their dtype, Python floats become a float64 tensor and ints (and bools) a tensor of the dtype
    `flame.tensor` infers, strings and bytes stay the sequence they came in, and mappings, named tuples
    and sequences are collated per field, keeping their type where it can be rebuilt (a tuple gives a
    list, as in torch)."""
    from flame.frontend.creation import tensor

    elem = batch[0]
    if isinstance(elem, Tensor):
        for i, b in enumerate(batch):
            if not isinstance(b, Tensor):
                kind = type(b).__name__
                kind = kind if type(b).__module__ == "builtins" else f"{type(b).__module__}.{kind}"
                raise TypeError(f"expected Tensor as element {i} in argument 0, but got {kind}")
        _check_same_shape([b.shape for b in batch])
        return stack(list(batch))
    if _foreign(elem):  # another framework's tensors: torchvision's transforms.ToTensor() gives torch's
        return Tensor(np.stack([_host(b) for b in batch]))
    if isinstance(elem, (str, bytes)):  # NumPy's str_ and bytes_ too, as torch's
        return batch
    if isinstance(elem, (np.ndarray, np.generic)):
        if elem.dtype.kind in "OSUV":
            raise TypeError(_COLLATE_ERR.format(elem.dtype))
        batch = _torch_promoted(batch)
        if isinstance(elem, np.ndarray):
            _check_same_shape([b.shape for b in batch])
            return Tensor(np.stack(batch))
        return Tensor(np.asarray(batch))
    if isinstance(elem, float):
        return tensor(list(batch), dtype="f64")
    if isinstance(elem, (bool, int)):
        return tensor(list(batch))
    if isinstance(elem, collections.abc.Mapping):
        return _collate_mapping(elem, batch)
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return type(elem)(*(default_collate(s) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        if any(len(e) != len(elem) for e in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        fields = [default_collate(s) for s in zip(*batch)]
        if isinstance(elem, tuple):
            return fields
        return _same_sequence(elem, fields)
    raise TypeError(_COLLATE_ERR.format(type(elem)))


def _torch_promoted(batch: list) -> list:
    """NumPy values of several dtypes cast to the one torch.stack gives them (an int64 and a float32
    array make float32, where NumPy would make float64); values of one dtype as they are."""
    dtypes = {b.dtype for b in batch}
    if len(dtypes) == 1:
        return batch
    from flame.frontend.promotion import promote_types
    from flame.ir.dtypes import dtype_of

    target = functools.reduce(promote_types, [dtype_of(d) for d in dtypes]).np_dtype
    return [np.asarray(b, target) for b in batch]


def _check_same_shape(shapes: list) -> None:
    """torch.stack's message for the first item whose shape differs from the first's, in a ShapeError
    (a RuntimeError, as torch raises, and a ValueError)."""
    for i, shape in enumerate(shapes):
        if tuple(shape) != tuple(shapes[0]):
            raise ShapeError(
                f"stack expects each tensor to be equal size, but got {list(shapes[0])} at entry 0 and "
                f"{list(shape)} at entry {i}"
            )


def _foreign(x) -> bool:
    """x is another framework's array (a torch tensor, a JAX or CuPy array: it offers __dlpack__ or
    __array__), which default_collate stacks as a NumPy array of its values."""
    return not isinstance(x, (np.ndarray, np.generic, str, bytes)) and (
        hasattr(x, "__dlpack__") or hasattr(x, "__array__"))


def _host(x) -> np.ndarray:
    """x's values as a NumPy array: through __array__ (a torch CPU tensor, a JAX array), else through
    DLPack (a CuPy array, a torch GPU tensor: copied to the host); a torch tensor's gradient history is
    left behind (detach), as a batch holds values."""
    if callable(getattr(x, "detach", None)):
        x = x.detach()
    errors = []
    if hasattr(x, "__array__"):
        try:
            return np.asarray(x)
        except (TypeError, RuntimeError) as e:  # torch: a GPU tensor; NumPy has no bf16
            errors.append(e)
    if hasattr(x, "__dlpack__"):
        from flame.frontend.creation import from_dlpack

        try:
            return from_dlpack(x).numpy()
        except (TypeError, RuntimeError, BufferError) as e:
            errors.append(e)
    raise TypeError(f"default_collate: cannot read the values of a {type(x).__module__}.{type(x).__name__} of "
                    f"dtype {getattr(x, 'dtype', '?')} ({errors[-1] if errors else 'no __array__ or __dlpack__'}); "
                    f"convert it in the dataset (e.g. x.float())")


def _collate_mapping(elem, batch):
    """A batch of mappings collated per key, in the first one's type where it can be rebuilt."""
    return _same_mapping(elem, {key: default_collate([d[key] for d in batch]) for key in elem})


def _same_mapping(like, fields: dict):
    """fields in the mapping type of `like` (a copy of it updated, or its type built from them), as
    torch's collate and convert keep it; a plain dict where that type cannot be rebuilt."""
    try:
        if isinstance(like, collections.abc.MutableMapping):
            clone = copy.copy(like)
            clone.update(fields)
            return clone
        return type(like)(fields)
    except TypeError:
        return fields


def _same_sequence(like, fields: list):
    """fields in the sequence type of `like` (a copy of it with each item replaced, or its type built from
    them), as torch's collate and convert keep it; a plain list where that type cannot be rebuilt."""
    try:
        if isinstance(like, collections.abc.MutableSequence):
            clone = copy.copy(like)
            for i, f in enumerate(fields):
                clone[i] = f
            return clone
        return type(like)(fields)
    except TypeError:
        return fields


class _DeviceCopier:
    """Puts host arrays on flame's device: directly, or (pin_memory on a GPU) through a pinned
    buffer and an asynchronous copy on a side stream that the current stream waits for."""

    def __init__(self, pin_memory: bool):
        from flame.runtime.device import get_device

        self.on_gpu = get_device() == "cuda"
        self.async_copy = pin_memory and self.on_gpu
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


def _reads_rows(dataset) -> bool:
    """dataset is a TensorDataset whose items are the rows of its tensors: a subclass that reads its
    items (or batches) its own way is asked for them, as torch asks it."""
    kind = type(dataset)
    return (
        isinstance(dataset, TensorDataset)
        and kind.__getitem__ is TensorDataset.__getitem__
        and getattr(kind, "__getitems__", None) is None
    )


class _Fetcher:
    """Turns a batch of indices (or, for an IterableDataset, the stream) into a collated batch."""

    def __init__(self, loader: DataLoader):
        self.dataset, self.collate, self.batch_size = loader.dataset, loader.collate_fn, loader.batch_size
        self.drop_last, self.auto_collation = loader.drop_last, loader._auto
        self.fast = _reads_rows(loader.dataset) and loader.collate_fn is default_collate

    def __call__(self, indices):
        if not self.auto_collation:
            return self.collate(self.dataset[indices])
        if self.fast:  # one gather per tensor
            idx = Tensor(np.asarray(indices, np.int64))
            return [t[idx] for t in self.dataset.tensors]
        if callable(getattr(self.dataset, "__getitems__", None)):  # the data set reads a batch at once
            return self.collate(self.dataset.__getitems__(indices))
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


def default_convert(data: Any) -> Any:
    """collate_fn of batch_size=None, as torch's default_convert: NumPy arrays (but not arrays of
    strings or objects) and NumPy scalars become tensors, tuples become lists, and mappings, named
    tuples and other sequences are converted per field, keeping their type where it can be rebuilt."""
    if isinstance(data, Tensor):
        return data
    if isinstance(data, (np.ndarray, np.generic)):
        return data if data.dtype.kind in "OSUV" else Tensor(np.asarray(data))
    if _foreign(data):
        return Tensor(_host(data))
    if isinstance(data, collections.abc.Mapping):
        return _same_mapping(data, {k: default_convert(v) for k, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        return _same_sequence(data, [default_convert(d) for d in data])
    return data


class DataLoader:
    """Batches of `dataset`, as torch.utils.data.DataLoader (same arguments and checks). Iterating
    gives one epoch; `len()` is the number of batches of a map-style data set."""

    def __init__(
        self,
        dataset,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler=None,
        batch_sampler=None,
        num_workers: int = 0,
        collate_fn=None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn=None,
        multiprocessing_context=None,
        generator=None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
    ):
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable multiprocessing.")
        num_workers = int(num_workers)
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError(
                "prefetch_factor option could only be specified in multiprocessing.let num_workers > 0 "
                "to enable multiprocessing, otherwise set prefetch_factor to None."
            )
        if num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        if prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError("prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        if isinstance(dataset, IterableDataset):
            if shuffle not in (None, False):
                raise ValueError(
                    f"DataLoader with IterableDataset: expected unspecified shuffle option, but got shuffle={shuffle}"
                )
            if sampler is not None:
                raise ValueError(
                    f"DataLoader with IterableDataset: expected unspecified sampler option, but got sampler={sampler}"
                )
            if batch_sampler is not None:
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified batch_sampler option, but got "
                    f"batch_sampler={batch_sampler}"
                )
        elif batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError(
                    "batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last"
                )
            batch_size, drop_last = None, False
        elif sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_size is None and drop_last and batch_sampler is None:
            raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with drop_last")
        if batch_size is not None and (
            not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0
        ):
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        if batch_size is not None and not isinstance(drop_last, bool):  # torch's BatchSampler checks it
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last}")
        self.dataset, self.num_workers, self.pin_memory, self.timeout = dataset, num_workers, pin_memory, timeout
        self.worker_init_fn, self.generator, self.prefetch_factor = worker_init_fn, generator, prefetch_factor
        self.persistent_workers, self.in_order, self.pin_memory_device = persistent_workers, in_order, pin_memory_device
        self.multiprocessing_context = _start_method(multiprocessing_context, num_workers)
        self.drop_last, self._workers = drop_last, None
        if not isinstance(dataset, IterableDataset) and sampler is None:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        if isinstance(dataset, IterableDataset):  # samplers with nothing to say, as torch's
            sampler = _InfiniteConstantSampler()
        if batch_sampler is None and batch_size is not None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size = batch_size  # None with a batch_sampler, as torch's
        self.sampler, self.batch_sampler = sampler, batch_sampler
        self._auto = batch_sampler is not None
        self.collate_fn = collate_fn or (default_collate if self._auto else default_convert)
        self._stream_len = None  # what len(dataset) said when len(loader) asked, for the warning on more
        self._initialized = True
        _check_worker_count(num_workers)

    def __setattr__(self, name: str, value) -> None:
        if getattr(self, "_initialized", False) and name in _FIXED:
            raise ValueError(f"{name} attribute should not be set after {type(self).__name__} is initialized")
        super().__setattr__(name, value)

    def __len__(self) -> int:
        if isinstance(self.dataset, IterableDataset):
            n = self._stream_len = len(self.dataset)  # TypeError when the stream has no length, as in torch
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        return len(self.batch_sampler if self.batch_sampler is not None else self.sampler)

    def _tasks(self):
        return iter(self.batch_sampler) if self.batch_sampler is not None else iter(self.sampler)

    def __iter__(self):
        fetch = _Fetcher(self)
        copier = _DeviceCopier(self.pin_memory)
        if self.pin_memory and self.pin_memory_device:
            warnings.warn(
                "pin_memory_device is deprecated, the current accelerator will be used as the device,"
                f"ignore pin_memory_device='{self.pin_memory_device}'.",
                stacklevel=2,
            )
        if self.pin_memory and not copier.on_gpu:
            warnings.warn(
                "'pin_memory' argument is set as true but no accelerator is found, then device pinned memory "
                "won't be used.",
                stacklevel=2,
            )
        if self.num_workers == 0:
            if self.timeout != 0:
                raise AssertionError("_SingleProcessDataLoaderIter requires timeout == 0")
            _base_seed(self.generator)  # unused without workers, but drawn: the shuffle follows the same draws
            batches = fetch.stream() if isinstance(self.dataset, IterableDataset) else map(fetch, self._tasks())
            return _LoaderIterator(self, (copier.place(b) if self.pin_memory else b for b in batches))
        if self.prefetch_factor <= 0:  # no batch would ever be asked for
            raise AssertionError("prefetch_factor must be greater than 0 for MultiProcessingDataLoaderIter")
        if not self.persistent_workers:
            _check_worker_count(self.num_workers)
            return _LoaderIterator(self, _WorkerIterator(self, fetch, copier))
        if self._workers is None:  # started once, kept for the next epochs (and their state), as torch's
            _check_worker_count(self.num_workers)
            self._workers = _WorkerIterator(self, fetch, copier)
        else:
            self._workers.reset(self, copier)
        return _LoaderIterator(self, self._workers)


class _LoaderIterator:
    """One epoch's batches, with torch's iterator's len() (that of the loader's batch sampler or
    sampler; a stream's has none) and its warning when a stream yields more than the len() it gave
    the loader."""

    def __init__(self, loader: DataLoader, batches):
        self._batches, self._yielded, self._stream_len = batches, 0, loader._stream_len
        self._dataset, self._workers = loader.dataset, loader.num_workers
        self._sizer = loader.batch_sampler if loader.batch_sampler is not None else loader.sampler

    def __iter__(self):
        return self

    def __next__(self):
        batch = next(self._batches)
        self._yielded += 1
        if self._stream_len is not None and self._yielded > self._stream_len:
            message = (
                f"Length of IterableDataset {self._dataset} was reported to be {self._stream_len}"
                f"(when accessing len(dataloader)), but {self._yielded} samples have been fetched. "
            )
            if self._workers > 0:
                message += (
                    "For multiprocessing data-loading, this could be caused by not properly configuring the "
                    "IterableDataset replica at each worker. Please see "
                    "https://pytorch.org/docs/stable/data.html#torch.utils.data.IterableDataset for examples."
                )
            warnings.warn(message, stacklevel=2)
        return batch

    def __len__(self) -> int:
        return len(self._sizer)  # the stream's sampler has none: TypeError, as torch's


class _InfiniteConstantSampler(Sampler):
    """The sampler of a loader over an IterableDataset, as torch's: None forever (the stream, not
    an index, says what comes next)."""

    def __iter__(self):
        while True:
            yield None


_FIXED = ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset", "persistent_workers")
