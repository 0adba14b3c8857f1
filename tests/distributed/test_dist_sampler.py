"""DistributedSampler against torch.utils.data.DistributedSampler (the oracle): the same indices in
order without shuffling, padding by wrap-around and drop_last; with shuffling, every epoch's shards are
disjoint, cover the data set and depend only on seed + epoch."""

from __future__ import annotations

import pytest

from flame.utils.data import DistributedSampler


@pytest.mark.parametrize("n,replicas,drop_last", [(10, 3, False), (10, 3, True), (12, 4, False), (2, 4, False)])
def test_unshuffled_shards_equal_torchs(n, replicas, drop_last):
    torch_data = pytest.importorskip("torch.utils.data")
    for rank in range(replicas):
        ours = DistributedSampler(n, replicas, rank, shuffle=False, drop_last=drop_last)
        theirs = torch_data.DistributedSampler(range(n), replicas, rank, shuffle=False, drop_last=drop_last)
        assert list(ours) == list(theirs) and len(ours) == len(theirs)


def test_shuffled_shards_partition_each_epoch():
    n, replicas = 103, 4
    epochs = []
    for epoch in (0, 1):
        shards = []
        for rank in range(replicas):
            s = DistributedSampler(list(range(n)), replicas, rank, shuffle=True, seed=7)
            s.set_epoch(epoch)
            shards.append(list(s))
        assert {len(x) for x in shards} == {26}
        flat = sum(shards, [])
        assert set(flat) == set(range(n)) and len(flat) == 104  # one index repeated to even the shards
        epochs.append(shards)
    assert epochs[0] != epochs[1]
    again = DistributedSampler(n, replicas, 2, shuffle=True, seed=7)
    again.set_epoch(1)
    assert list(again) == epochs[1][2]


def test_defaults_to_the_process_group():
    s = DistributedSampler(5)
    assert (s.num_replicas, s.rank, list(DistributedSampler(5, shuffle=False))) == (1, 0, [0, 1, 2, 3, 4])
    with pytest.raises(ValueError, match=r"Invalid rank 2, rank should be in the interval \[0, 1\]"):
        DistributedSampler(5, 2, 2)
