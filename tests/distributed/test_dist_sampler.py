"""DistributedSampler against torch.utils.data.DistributedSampler (the oracle): the same indices in
order without shuffling, padding by wrap-around and drop_last; with shuffling, every epoch's shards are
disjoint, cover the data set and depend only on seed + epoch; without a process group, num_replicas and
rank must be given, as torch's."""

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


@pytest.mark.parametrize("kwargs", [{}, {"num_replicas": 2}, {"rank": 0}])
def test_without_a_process_group_num_replicas_and_rank_are_needed_as_torch(kwargs):
    """torch raises ValueError rather than taking one rank: each process of a launch that forgot
    init_process_group would otherwise read every index."""
    torch_data = pytest.importorskip("torch.utils.data")
    with pytest.raises(ValueError) as theirs:
        torch_data.DistributedSampler(range(5), **kwargs)
    with pytest.raises(ValueError) as ours:
        DistributedSampler(5, **kwargs)
    assert str(ours.value).startswith(str(theirs.value))
    assert list(DistributedSampler(5, 1, 0, shuffle=False)) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match=r"Invalid rank 2, rank should be in the interval \[0, 1\]"):
        DistributedSampler(5, 2, 2)
