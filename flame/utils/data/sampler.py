"""Samplers with torch.utils.data's interface: iterables of indices (or, for BatchSampler, of lists of
indices). Shuffling draws its permutation on the host from a NumPy generator seeded by one draw of a
flame.Generator (the default one unless given), so `flame.manual_seed` makes an epoch's order
repeatable and each epoch's differs. As torch's, a sampler's iterator draws when first read, not when
made."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

__all__ = [
    "BatchSampler",
    "RandomSampler",
    "Sampler",
    "SequentialSampler",
    "SubsetRandomSampler",
    "WeightedRandomSampler",
    "host_rng",
]


def host_rng(generator=None) -> np.random.Generator:
    """A NumPy generator seeded from one draw of a flame.Generator (the default one when None)."""
    from flame.frontend.creation import default_generator, rand

    bits = rand(2, generator=generator or default_generator()).numpy().astype(np.float64)
    return np.random.default_rng([int(b * (1 << 24)) for b in bits])


class Sampler:
    """Base of the samplers: an iterable of indices. It has no `__len__` (as torch's): a subclass
    that knows its length defines one, and code asking hasattr(sampler, "__len__") can tell."""

    def __iter__(self) -> Iterator:
        raise NotImplementedError


class SequentialSampler(Sampler):
    """0, 1, ..., len(data_source) - 1."""

    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """A random permutation of the indices (a new one each pass), or num_samples draws with
    replacement."""

    def __init__(self, data_source, replacement: bool = False, num_samples: int | None = None, generator=None):
        if not isinstance(replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got replacement={replacement}")
        self.data_source, self.replacement, self.generator = data_source, replacement, generator
        self._num_samples = num_samples
        if not isinstance(self.num_samples, int) or isinstance(self.num_samples, bool) or self.num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got num_samples={self.num_samples}")

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        n, rng = len(self.data_source), host_rng(self.generator)
        if self.replacement:
            if n == 0:
                raise RuntimeError("random_ expects 'from' to be less than 'to', but got from=0 >= to=0")
            yield from rng.integers(0, n, self.num_samples).tolist()
            return
        reps = [rng.permutation(n) for _ in range(-(-self.num_samples // n))]
        yield from np.concatenate(reps)[: self.num_samples].tolist()

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices in a random order (a new one each pass)."""

    def __init__(self, indices: Sequence[int], generator=None):
        self.indices, self.generator = list(indices), generator

    def __iter__(self) -> Iterator[int]:
        order = host_rng(self.generator).permutation(len(self.indices))
        yield from [self.indices[i] for i in order]

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """num_samples indices drawn with probabilities proportional to `weights` (kept as a float64
    tensor, as torch's). Weights are checked when drawn, as torch.multinomial checks them, with its
    RuntimeErrors. Without replacement, indices of zero weight come after all the others, in a
    random order, as torch's CPU draw gives them."""

    def __init__(self, weights, num_samples: int, replacement: bool = True, generator=None):
        from flame.frontend.creation import tensor

        w = np.asarray(weights.numpy() if hasattr(weights, "numpy") else weights, np.float64)
        if w.ndim != 1:
            raise ValueError(f"weights should be a 1d sequence but given weights have shape {tuple(w.shape)}")
        if not isinstance(replacement, bool):
            raise ValueError(f"replacement should be a boolean value, but got replacement={replacement}")
        if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got num_samples={num_samples}")
        self.weights = tensor(w, dtype="f64")
        self.num_samples, self.replacement, self.generator = num_samples, replacement, generator

    def __iter__(self) -> Iterator[int]:
        w = self.weights.numpy().astype(np.float64)
        if not self.replacement and self.num_samples > len(w):
            raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
        if (w < 0).any() or np.isnan(w).any():  # torch reads NaN as a negative entry
            raise RuntimeError("invalid multinomial distribution (encountering probability entry < 0)")
        if np.isinf(w).any():
            raise RuntimeError("invalid multinomial distribution (encountering probability entry = infinity or NaN)")
        if w.sum() <= 0:
            raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
        rng = host_rng(self.generator)
        if self.replacement:
            yield from rng.choice(len(w), self.num_samples, True, w / w.sum()).tolist()
            return
        positive = np.flatnonzero(w > 0)
        first = rng.choice(positive, min(self.num_samples, len(positive)), False, w[positive] / w[positive].sum())
        rest = rng.permutation(np.flatnonzero(w == 0))[: self.num_samples - len(first)]
        yield from np.concatenate([first, rest]).astype(np.int64).tolist()

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler):
    """Lists of batch_size indices from `sampler`; the last shorter list is kept unless drop_last."""

    def __init__(self, sampler, batch_size: int, drop_last: bool):
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self) -> Iterator[list[int]]:
        batch: list[int] = []
        for i in self.sampler:
            batch.append(i)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
