"""Data loading helpers. DistributedSampler shards a data set's indices over the ranks of a process
group as torch.utils.data.DistributedSampler does: each rank gets every world_size-th index of one
(optionally shuffled, per epoch) permutation, padded by wrapping around (or the tail dropped) so that
every rank gets the same number of indices and the ranks step in lockstep. The shuffled permutation
is torch's own for the same seed and epoch (torch.randperm on the CPU from a torch.Generator seeded
with seed + epoch: a Mersenne Twister and a Fisher-Yates shuffle, reproduced here), so a flame run
and a torch run of the same sampler give each rank the same indices."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from flame.utils.data.sampler import Sampler

__all__ = ["DistributedSampler"]


def torch_randperm(n: int, seed: int) -> np.ndarray:
    """torch.randperm(n, generator=torch.Generator().manual_seed(seed)) on the CPU: torch's Mersenne
    Twister (std::mt19937 seeded with the seed's low 32 bits) drives a Fisher-Yates shuffle that swaps
    position i with i + (draw % (n - i))."""
    if n >= (1 << 32) // 20:
        raise ValueError(f"DistributedSampler: {n} items is more than torch's randperm draws with 32-bit numbers")
    bits = np.random.MT19937(0)
    bits._legacy_seeding(int(seed) & 0xFFFFFFFF)  # init_genrand, as std::mt19937(seed)
    draws = bits.random_raw(n - 1).tolist() if n > 1 else []
    order = list(range(n))
    for i, d in enumerate(draws):
        j = i + d % (n - i)
        order[i], order[j] = order[j], order[i]
    return np.asarray(order, np.int64)


class DistributedSampler(Sampler):
    """Indices of a data set of len(dataset) items (or `dataset` itself, an int) for one rank.
    num_replicas / rank default to the process group's (a ValueError without one, as torch's); call
    set_epoch(e) before each epoch to reshuffle (the permutation depends on seed + epoch only, so every
    rank draws the same one)."""

    def __init__(
        self,
        dataset,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ):
        from flame.distributed import get_rank, get_world_size, is_initialized

        if (num_replicas is None or rank is None) and not is_initialized():  # torch's: no group, no default
            raise ValueError(
                "Default process group has not been initialized, please make sure to call init_process_group. "
                f"(DistributedSampler: num_replicas={num_replicas}, rank={rank}; without a process group, "
                "pass both)"
            )
        self.dataset = dataset
        self.n = dataset if isinstance(dataset, int) else len(dataset)
        self.num_replicas = get_world_size() if num_replicas is None else int(num_replicas)
        self.rank = get_rank() if rank is None else int(rank)
        if not 0 <= self.rank < self.num_replicas:
            raise ValueError(f"Invalid rank {self.rank}, rank should be in the interval [0, {self.num_replicas - 1}]")
        self.shuffle, self.seed, self.drop_last, self.epoch = shuffle, int(seed), drop_last, 0
        if drop_last and self.n % self.num_replicas:
            self.num_samples = self.n // self.num_replicas
        else:
            self.num_samples = math.ceil(self.n / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def indices(self) -> np.ndarray:
        """This rank's indices for the current epoch, as an int64 array."""
        order = torch_randperm(self.n, self.seed + self.epoch) if self.shuffle else np.arange(self.n)
        if self.total_size <= len(order):
            order = order[: self.total_size]
        elif len(order):
            order = np.resize(order, self.total_size)  # wraps around, as torch pads
        return order[self.rank : self.total_size : self.num_replicas].astype(np.int64)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices().tolist())

    def __len__(self) -> int:
        return self.num_samples
