"""flame.utils.data against torch.utils.data on the order of shuffled batches: which loaders give
the same order for the same seed. flame's random numbers are not torch's, so the orders themselves
differ; what must agree is the pattern (the same order with and without worker processes, a
persistent loader's later epochs drawing differently from a fresh one's)."""

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
