"""flame.utils.data against torch.utils.data on the order of shuffled batches: which loaders give
the same order for the same seed. flame's random numbers are not torch's, so the orders themselves
differ; what must agree is the pattern (the same order with and without worker processes, a
persistent loader's later epochs drawing differently from a fresh one's, a random sampler's iterator
drawing when first read)."""

import itertools

import pytest
import torch
import torch.utils.data as tud

import flame
import flame.utils.data as fud


class _Items:
    def __len__(self):
        return 10

    def __getitem__(self, i):
        return i


def _epochs(mod, workers, persistent, batch_size):
    generator = torch.Generator().manual_seed(3) if mod is tud else flame.Generator(3)
    loader = mod.DataLoader(_Items(), batch_size=batch_size, shuffle=True, generator=generator,
                            num_workers=workers, persistent_workers=persistent)
    return [[b.tolist() if batch_size else int(b) for b in loader] for _ in range(2)]


def _pattern(mod, batch_size):
    """Which (loader, epoch) pairs give the same order, over loaders with 0 and 2 workers, persistent or not."""
    runs = [(0, False), (2, False), (2, True)]
    orders = [epoch for w, p in runs for epoch in _epochs(mod, w, p, batch_size)]
    return [a == b for a, b in itertools.combinations(orders, 2)]


@pytest.mark.parametrize("batch_size", [4, None])
def test_worker_processes_give_the_shuffle_order_of_a_single_process_as_torch(batch_size):
    assert _pattern(fud, batch_size) == _pattern(tud, batch_size)


def _samplers(mod):
    return [
        lambda: mod.RandomSampler(range(8)),
        lambda: mod.RandomSampler(range(8), replacement=True),
        lambda: mod.RandomSampler(range(8), num_samples=12),
        lambda: mod.SubsetRandomSampler(list(range(8))),
        lambda: mod.WeightedRandomSampler([1.0] * 8, 8),
        lambda: mod.WeightedRandomSampler([1.0] * 8, 8, replacement=False),
    ]


def _drawn_when_read(lib, mod):
    """For each random sampler: whether an iterator made before a reseed gives the order of one made after
    it (it draws when first read, not when made)."""
    same = []
    for make in _samplers(mod):
        sampler = make()
        lib.manual_seed(5)
        early = iter(sampler)
        lib.manual_seed(0)
        first = list(early)
        lib.manual_seed(0)
        same.append(first == list(iter(sampler)))
    return same


def test_random_samplers_draw_when_first_read_as_torch():
    assert _drawn_when_read(flame, fud) == _drawn_when_read(torch, tud)
