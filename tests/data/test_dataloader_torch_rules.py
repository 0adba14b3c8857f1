"""flame.utils.data against torch.utils.data on the rules a user can see without reading a batch's
values: random_split's reading of lengths and fractions, the attributes of a DataLoader, a data set's
__getitems__ (asked for a whole batch), StackDataset and ChainDataset."""

import warnings

import numpy as np
import pytest
import torch
import torch.utils.data as tud

import flame
import flame.utils.data as fud
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


def _plain(x):
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return np.asarray(x).tolist()


def _batches(loader):
    return [_plain(b) for b in loader]


def _batched_reader(base):
    class Batched(base):
        """Reads a batch at once, and says so in what it gives (as a data set whose __getitems__ decodes
        a whole batch does)."""

        def __len__(self):
            return 7

        def __getitem__(self, i):
            return (i, 0)

        def __getitems__(self, indices):
            return [(i, len(indices)) for i in indices]

    return Batched()


@pytest.mark.parametrize("wrap", ["plain", "subset", "stack"])
def test_loader_reads_a_batch_through_getitems_as_torch(wrap):
    def make(m):
        ds = _batched_reader(m.Dataset)
        if wrap == "subset":
            ds = m.Subset(ds, [6, 0, 3, 2, 5])
        elif wrap == "stack":
            ds = m.StackDataset(ds, ds)
        return m.DataLoader(ds, batch_size=3)

    assert _batches(make(fud)) == _batches(make(tud))


@pytest.mark.parametrize("named", [False, True])
def test_stack_dataset_matches_torch(named):
    def make(m, lib):
        a, b = m.TensorDataset(lib.arange(5.0)), list(range(10, 15))
        return m.StackDataset(x=a, y=b) if named else m.StackDataset(a, b)

    ours, theirs = make(fud, flame), make(tud, torch)
    assert len(ours) == len(theirs) == 5
    item, want = ours[2], theirs[2]
    assert type(item) is type(want) and len(item) == len(want)
    first, second = (item["x"], item["y"]) if named else item
    assert first[0].item() == 2.0 and second == 12
    assert _batches(DataLoader(ours, batch_size=2)) == _batches(tud.DataLoader(theirs, batch_size=2))


@pytest.mark.parametrize(
    "args,kwargs,message",
    [((), {}, "At least one dataset"), (([1],), {"b": [1]}, "both types"), (([1], [1, 2]), {}, "Size mismatch")],
)
def test_stack_dataset_errors_as_torch(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        tud.StackDataset(*args, **kwargs)
    with pytest.raises(ValueError, match=message):
        fud.StackDataset(*args, **kwargs)


def _stream(m, lo, hi):
    class Stream(m.IterableDataset):
        def __iter__(self):
            return iter(range(lo, hi))

        def __len__(self):
            return hi - lo

    return Stream()


def test_chain_dataset_and_iterable_add_match_torch():
    for m in (tud, fud):
        chained, added = m.ChainDataset([_stream(m, 0, 3), _stream(m, 5, 7)]), _stream(m, 0, 3) + _stream(m, 5, 7)
        assert isinstance(added, m.ChainDataset)
        assert list(chained) == list(added) == [0, 1, 2, 5, 6] and len(chained) == 5
        assert [b.tolist() for b in m.DataLoader(added, batch_size=2)] == [[0, 1], [2, 5], [6]]
        with pytest.raises(AssertionError, match="ChainDataset only supports IterableDataset"):
            list(m.ChainDataset([[1, 2]]))
