"""flame.utils.data against torch.utils.data on the rules a user can see without reading a batch's
values: random_split's reading of lengths and fractions, and the attributes of a DataLoader."""

import warnings

import pytest
import torch.utils.data as tud

from flame.utils.data import BatchSampler, DataLoader, SequentialSampler, random_split


class _Range:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


@pytest.mark.parametrize("n", [0, 5, 10, 11])
@pytest.mark.parametrize("lengths", [[1, 0], [0, 1], [0.3, 0.3, 0.4], [0.1, 0.9], [1.0], [0.5, 0.5, 0.0]])
def test_random_split_sizes_match_torch(n, lengths):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = [len(s) for s in tud.random_split(_Range(n), lengths)]
        got = random_split(_Range(n), lengths)
    assert [len(s) for s in got] == want
    assert sorted(i for s in got for i in s) == list(range(n))


def test_random_split_rejects_fractions_outside_0_1_as_torch():
    with pytest.raises(ValueError, match="Fraction at index 0 is not between 0 and 1"):
        tud.random_split(_Range(3), [1.5, -0.5])
    with pytest.raises(ValueError, match="Fraction at index 0 is not between 0 and 1"):
        random_split(_Range(3), [1.5, -0.5])


def test_loader_with_batch_sampler_has_no_batch_size_as_torch():
    ours = DataLoader(_Range(10), batch_sampler=BatchSampler(SequentialSampler(range(10)), 4, False))
    theirs = tud.DataLoader(_Range(10), batch_sampler=tud.BatchSampler(tud.SequentialSampler(range(10)), 4, False))
    assert (ours.batch_size, ours.drop_last) == (theirs.batch_size, theirs.drop_last) == (None, False)
    assert [b.tolist() for b in ours] == [b.tolist() for b in theirs]
