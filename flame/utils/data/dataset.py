"""Datasets with torch.utils.data's interface: a map-style `Dataset` (`__getitem__`, `__len__`, and
optionally `__getitems__`, which a DataLoader then asks for a whole batch), an `IterableDataset`
(`__iter__`), `TensorDataset`, `StackDataset`, `Subset`, `ConcatDataset`, `ChainDataset` and
`random_split`."""

from __future__ import annotations

import bisect
import math
import warnings
from collections.abc import Iterable, Sequence

import numpy as np

__all__ = [
    "ChainDataset",
    "ConcatDataset",
    "Dataset",
    "IterableDataset",
    "StackDataset",
    "Subset",
    "TensorDataset",
    "random_split",
]


class Dataset:
    """A map-style data set: `dataset[i]` for i in range(len(dataset)). `a + b` concatenates."""

    def __getitem__(self, index):
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __add__(self, other: Dataset) -> ConcatDataset:
        return ConcatDataset([self, other])


class IterableDataset(Dataset, Iterable):
    """A data set read as a stream (`__iter__`); a DataLoader batches what it yields, in order. A
    subclass without `__iter__` cannot be built (it is abstract, as torch's)."""

    def __add__(self, other: Dataset) -> ChainDataset:
        return ChainDataset([self, other])


class TensorDataset(Dataset):
    """Items are the i-th rows of the given tensors (which share their first dimension). A DataLoader
    over it gathers each batch with one indexed read per tensor rather than one per item."""

    def __init__(self, *tensors):
        sizes = [t.shape[0] if t.ndim else None for t in tensors]
        if tensors[0].ndim == 0 or any(not t.ndim for t in tensors):  # IndexError on no tensors, as torch
            raise IndexError("Dimension specified as 0 but tensor has no dimensions")
        if any(k != sizes[0] for k in sizes):
            raise AssertionError("Size mismatch between tensors")
        self.tensors = tuple(tensors)

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


class Subset(Dataset):
    """The items of `dataset` at `indices`, in that order; `indices` is kept as given (a range, a list,
    an array), each read as it is, as torch's."""

    def __init__(self, dataset: Dataset, indices: Sequence[int]):
        self.dataset, self.indices = dataset, indices

    def __getitem__(self, index):
        if isinstance(index, list):
            return self.dataset[[self.indices[i] for i in index]]
        return self.dataset[self.indices[index]]

    def __getitems__(self, indices: list[int]) -> list:
        picked = [self.indices[i] for i in indices]
        if callable(getattr(self.dataset, "__getitems__", None)):
            return self.dataset.__getitems__(picked)
        return [self.dataset[i] for i in picked]

    def __len__(self) -> int:
        return len(self.indices)


class StackDataset(Dataset):
    """Items that gather the same index of several data sets of one length: a tuple (datasets given
    positionally) or a dict (given by keyword)."""

    def __init__(self, *args: Dataset, **kwargs: Dataset):
        if args and kwargs:
            raise ValueError(
                "Supported either ``tuple``- (via ``args``) or``dict``- (via ``kwargs``) like input/output, "
                "but both types are given."
            )
        if not args and not kwargs:
            raise ValueError("At least one dataset should be passed")
        given = list(args or kwargs.values())
        self._length = len(given[0])
        if any(self._length != len(d) for d in given):
            raise ValueError("Size mismatch between datasets")
        self.datasets = args or kwargs

    def __getitem__(self, index):
        if isinstance(self.datasets, dict):
            return {k: d[index] for k, d in self.datasets.items()}
        return tuple(d[index] for d in self.datasets)

    def __getitems__(self, indices: list) -> list:
        named = self.datasets.items() if isinstance(self.datasets, dict) else enumerate(self.datasets)
        columns = {}
        for k, d in named:
            if callable(getattr(d, "__getitems__", None)):
                items = d.__getitems__(indices)
                if len(items) != len(indices):
                    raise ValueError(
                        f"Nested dataset's output size mismatch. Expected {len(indices)}, got {len(items)}"
                    )
                columns[k] = list(items)
            else:
                columns[k] = [d[i] for i in indices]
        if isinstance(self.datasets, dict):
            return [{k: c[n] for k, c in columns.items()} for n in range(len(indices))]
        return [tuple(c[n] for c in columns.values()) for n in range(len(indices))]

    def __len__(self) -> int:
        return self._length


class ConcatDataset(Dataset):
    """The items of several map-style data sets one after another."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise AssertionError("datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise AssertionError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes = np.cumsum([len(d) for d in self.datasets]).tolist()

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, index: int):
        if index < 0:
            if -index > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            index += len(self)
        which = bisect.bisect_right(self.cumulative_sizes, index)
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][index - start]


class ChainDataset(IterableDataset):
    """The streams of several IterableDatasets one after another."""

    def __init__(self, datasets):
        self.datasets = datasets

    def __iter__(self):
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise AssertionError("ChainDataset only supports IterableDataset")
            yield from d

    def __len__(self) -> int:
        total = 0
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise AssertionError("ChainDataset only supports IterableDataset")
            total += len(d)
        return total


def random_split(dataset: Dataset, lengths: Sequence[int | float], generator=None) -> list[Subset]:
    """Split `dataset` into non-overlapping Subsets of the given lengths, in a random order drawn from
    `generator` (a flame.Generator; default: flame's default generator). Lengths summing to 1 (ints
    too, as torch reads them) are fractions, each in [0, 1]: a split gets floor(n * fraction) items
    and the remainder is spread one by one from the first split, as torch does."""
    n = len(dataset)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        sizes = []
        for i, frac in enumerate(lengths):
            if frac < 0 or frac > 1:
                raise ValueError(f"Fraction at index {i} is not between 0 and 1")
            sizes.append(int(math.floor(n * frac)))
        for i in range(n - sum(sizes)):
            sizes[i % len(sizes)] += 1
        for i, k in enumerate(sizes):
            if k == 0:
                warnings.warn(
                    f"Length of split at index {i} is 0. This might result in an empty dataset.", stacklevel=2
                )
        lengths = sizes
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    if any(not isinstance(k, (int, np.integer)) for k in lengths):  # torch.randperm takes no float
        raise TypeError(f"random_split: lengths must be ints or fractions that sum to 1, got {list(lengths)}")
    from flame.utils.data.sampler import host_rng

    order = host_rng(generator).permutation(n).tolist()
    out, at = [], 0
    for k in lengths:
        out.append(Subset(dataset, order[at : at + int(k)]))
        at += int(k)
    return out
