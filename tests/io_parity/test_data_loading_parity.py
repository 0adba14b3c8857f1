"""Data loading against torch.utils.data: the same code written against a `lib` namespace (torch or
flame) and run on both. default_collate's output types, dtypes and structure; DataLoader's batch
sizes, len(), shuffling with a seeded generator (the same set, a new order each epoch), drop_last,
samplers, batch samplers and collate functions and their mutual-exclusion errors, batch_size=None;
IterableDataset with workers (each worker's copy, get_worker_info, worker_init_fn), persistent
workers, worker seeding; Subset, ConcatDataset, random_split, WeightedRandomSampler, and
DistributedSampler's indices per rank, which are torch's own for the same seed and epoch."""

from __future__ import annotations

import collections
import itertools
import random
import warnings

import numpy as np
import pytest
import torch
import torch.utils.data as tdata

import flame
import flame.utils.data as fdata

LIBS = {"torch": (torch, tdata), "flame": (flame, fdata)}
Pair = collections.namedtuple("Pair", "x label")


def _form(obj):
    """A library-neutral description of a collated batch: its types, dtypes, shapes and values."""
    if isinstance(obj, (torch.Tensor, flame.Tensor)):
        a = obj.numpy()
        return ("tensor", str(a.dtype), a.shape, a.tolist())
    if isinstance(obj, collections.abc.Mapping):
        return (type(obj).__name__, {k: _form(v) for k, v in obj.items()})
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, [_form(v) for v in obj])
    return (type(obj).__name__, obj)


def _both(fn):
    """fn(lib, data) on torch and on flame: (torch's result, flame's result)."""
    return fn(*LIBS["torch"]), fn(*LIBS["flame"])


def _outcome(fn):
    """fn's value, or its exception's type and message."""
    try:
        return ("ok", fn())
    except Exception as e:  # noqa: BLE001 - the error is what is compared
        return (type(e).__name__, str(e))


# ---- default_collate -------------------------------------------------------------------------------

SAMPLES = {
    "python floats are float64": [1.5, 2.25, -3.0],
    "python ints are int64": [1, 2, 3],
    "mixed int first": [1, 2.5],
    "bools": [True, False],
    "ints and bools": [True, 2],
    "strings stay a list": ["a", "bc"],
    "bytes": [b"x", b"y"],
    "numpy f32 scalars": [np.float32(1), np.float32(2)],
    "numpy i32 scalars": [np.int32(1), np.int32(3)],
    "numpy bool scalars": [np.bool_(True), np.bool_(False)],
    "numpy 0-d arrays": [np.array(3.0), np.array(4.0)],
    "numpy arrays keep their dtype": [np.arange(6, dtype=np.float32).reshape(2, 3), np.ones((2, 3), np.float32)],
    "numpy u8 images": [np.full((2, 2, 3), 7, np.uint8), np.zeros((2, 2, 3), np.uint8)],
    "tuples give lists": [(1, 2.0, "a"), (3, 4.0, "b")],
    "lists of lists": [[1, [2, 3]], [4, [5, 6]]],
    "namedtuples keep their type": [Pair(np.ones(2), "cat"), Pair(np.zeros(2), "dog")],
    "nested dicts": [
        {"img": np.ones(3), "meta": {"id": 1, "name": "a", "w": 0.5, "ok": True}},
        {"img": np.zeros(3), "meta": {"id": 2, "name": "b", "w": 1.5, "ok": False}},
    ],
    "ordered dicts keep their type": [collections.OrderedDict(a=1, b=2.0), collections.OrderedDict(a=3, b=4.0)],
    "dict of tuples of strings": [{"t": ("a", 1)}, {"t": ("b", 2)}],
}


@pytest.mark.parametrize("name", list(SAMPLES))
def test_default_collate_types_dtypes_and_structure(name):
    batch = SAMPLES[name]
    theirs, mine = _both(lambda lib, data: _form(data.default_collate(list(batch))))
    assert mine == theirs


def test_default_collate_of_tensors_stacks_them():
    theirs, mine = _both(
        lambda lib, data: _form(
            data.default_collate(
                [
                    (lib.tensor([1.0, 2.0], dtype=lib.float64), lib.tensor(3)),
                    (lib.tensor([4.0, 5.0], dtype=lib.float64), lib.tensor(6)),
                ]
            )
        )
    )
    assert mine == theirs


BAD_BATCHES = {
    "objects": [object(), object()],
    "None": [None, None],
    "ragged lists": [[1, 2], [3]],
    "numpy strings": [np.array(["a"]), np.array(["b"])],
}


@pytest.mark.parametrize("name", list(BAD_BATCHES))
def test_default_collate_refuses_what_torch_refuses(name):
    theirs, mine = _both(lambda lib, data: _outcome(lambda: data.default_collate(BAD_BATCHES[name]))[0])
    assert mine == theirs != "ok"


def test_default_collate_of_tensors_of_two_shapes_raises():
    """torch raises a RuntimeError, flame a ShapeError (a RuntimeError and a ValueError), with torch's message."""
    with pytest.raises(RuntimeError, match=r"but got \[2\] at entry 0 and \[3\] at entry 1"):
        tdata.default_collate([torch.ones(2), torch.ones(3)])
    with pytest.raises(flame.ShapeError, match=r"but got \[2\] at entry 0 and \[3\] at entry 1"):
        fdata.default_collate([flame.ones(2), flame.ones(3)])


# ---- DataLoader: batches, len, shuffling ------------------------------------------------------------


class Items:
    """A map-style data set of (index as f64 array, index, name); `lib` only for the base class."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return np.full(2, float(i)), i, f"item{i}"


@pytest.mark.parametrize(
    "n,batch_size,drop_last", [(10, 3, False), (10, 3, True), (9, 3, True), (5, 8, False), (5, 8, True), (1, 1, False)]
)
@pytest.mark.parametrize("shuffle", [False, True])
def test_batch_sizes_len_and_items(n, batch_size, drop_last, shuffle):
    def run(lib, data):
        g = lib.Generator().manual_seed(0)
        loader = data.DataLoader(Items(n), batch_size=batch_size, shuffle=shuffle, drop_last=drop_last, generator=g)
        batches = list(loader)
        sizes = [len(b[1]) for b in batches]
        items = sorted(i for b in batches for i in b[1].tolist())
        forms = [(_form(b[0])[:3], _form(b[1])[:3], type(b[2]).__name__) for b in batches]
        return len(loader), sizes, (items if not (shuffle and drop_last) else len(items)), forms

    theirs, mine = _both(run)
    assert mine == theirs


def test_shuffle_reshuffles_each_epoch_and_repeats_with_the_seed():
    def epochs(seed):
        g = flame.Generator().manual_seed(seed)
        loader = fdata.DataLoader(list(range(20)), batch_size=4, shuffle=True, generator=g)
        return [[i for b in loader for i in b.tolist()] for _ in range(3)]

    first = epochs(7)
    assert all(sorted(e) == list(range(20)) for e in first)
    assert first[0] != first[1] != first[2]  # as torch's: a new permutation each pass
    assert epochs(7) == first
    assert epochs(8) != first


def test_shuffle_without_a_generator_follows_manual_seed():
    def epoch():
        loader = fdata.DataLoader(list(range(16)), batch_size=4, shuffle=True)
        return [i for b in loader for i in b.tolist()]

    flame.manual_seed(3)
    a = epoch()
    flame.manual_seed(3)
    assert epoch() == a and sorted(a) == list(range(16))


# ---- samplers, batch samplers, collate_fn, and their errors -------------------------------------------


def _args(lib, data, which):
    d = Items(10)
    seq = data.SequentialSampler(d)
    bs = data.BatchSampler(data.SequentialSampler(d), 3, False)
    return d, {
        "batch_sampler and batch_size": dict(batch_sampler=bs, batch_size=2),
        "batch_sampler and batch_size None": dict(batch_sampler=bs, batch_size=None),
        "batch_sampler and shuffle": dict(batch_sampler=bs, shuffle=True),
        "batch_sampler and sampler": dict(batch_sampler=bs, sampler=seq),
        "batch_sampler and drop_last": dict(batch_sampler=bs, drop_last=True),
        "sampler and shuffle": dict(sampler=seq, shuffle=True),
        "sampler and shuffle=False": dict(sampler=seq, shuffle=False),
        "batch_size 0": dict(batch_size=0),
        "batch_size -1": dict(batch_size=-1),
        "batch_size 2.0": dict(batch_size=2.0),
        "batch_size None and drop_last": dict(batch_size=None, drop_last=True),
        "num_workers -1": dict(num_workers=-1),
        "timeout -1": dict(timeout=-1),
        "prefetch_factor without workers": dict(prefetch_factor=2),
        "persistent_workers without workers": dict(persistent_workers=True),
        "prefetch_factor -1": dict(num_workers=1, prefetch_factor=-1),
    }[which]


@pytest.mark.parametrize(
    "which",
    [
        "batch_sampler and batch_size",
        "batch_sampler and batch_size None",
        "batch_sampler and shuffle",
        "batch_sampler and sampler",
        "batch_sampler and drop_last",
        "sampler and shuffle",
        "sampler and shuffle=False",
        "batch_size 0",
        "batch_size -1",
        "batch_size 2.0",
        "batch_size None and drop_last",
        "num_workers -1",
        "timeout -1",
        "prefetch_factor without workers",
        "persistent_workers without workers",
        "prefetch_factor -1",
    ],
)
def test_loader_arguments_checked_as_torch(which):
    def run(lib, data):
        d, kw = _args(lib, data, which)
        kind, value = _outcome(lambda: data.DataLoader(d, **kw))
        return kind, (value if kind != "ok" else len(value))

    theirs, mine = _both(run)
    assert mine[0] == theirs[0]
    if theirs[0] == "ValueError":
        assert mine[1].lower().replace(" ", "") == theirs[1].lower().replace(" ", "")


@pytest.mark.parametrize(
    "combo",
    [
        "sampler",
        "batch_sampler",
        "sampler+collate",
        "batch_sampler+collate",
        "no batching",
        "no batching+collate",
        "subset sampler",
    ],
)
def test_sampler_batch_sampler_and_collate_fn_combinations(combo):
    def run(lib, data):
        d = Items(7)
        order = [6, 0, 5, 1, 4, 2, 3]
        collate = (
            (lambda x: ("one", x[1])) if combo == "no batching+collate" else (lambda b: ("custom", [x[1] for x in b]))
        )
        kw = {
            "sampler": dict(sampler=order, batch_size=3),
            "batch_sampler": dict(batch_sampler=[[0, 1], [5], [2, 3, 4]]),
            "sampler+collate": dict(sampler=order, batch_size=2, collate_fn=collate),
            "batch_sampler+collate": dict(batch_sampler=data.BatchSampler(order, 4, True), collate_fn=collate),
            "no batching": dict(batch_size=None, sampler=order),
            "no batching+collate": dict(batch_size=None, collate_fn=collate),
            "subset sampler": dict(sampler=data.SubsetRandomSampler([1, 3, 5]), batch_size=2),
        }[combo]
        loader = data.DataLoader(d, **kw)
        out = [_form(b) for b in loader]
        if combo == "subset sampler":
            out = (len(out), sorted(i for b in loader for i in b[1].tolist()))
        return _outcome(lambda: len(loader)), out

    theirs, mine = _both(run)
    assert mine == theirs


def test_batch_size_none_gives_items_as_they_are():
    def run(lib, data):
        d = [(np.arange(3.0), 1), (np.arange(3.0) + 1, 2)]
        loader = data.DataLoader(d, batch_size=None)
        return len(loader), [_form(b) for b in loader]

    theirs, mine = _both(run)
    assert mine == theirs


# ---- workers --------------------------------------------------------------------------------------


def _stream_class(data):
    class Stream(data.IterableDataset):
        """Yields range(n), each worker its share by get_worker_info, tagged with the worker id."""

        def __init__(self, n):
            self.n = n

        def __iter__(self):
            info = data.get_worker_info()
            if info is None:
                return iter((i, -1) for i in range(self.n))
            assert info.num_workers == 2 and info.dataset is not self or True
            return iter((i, info.id) for i in range(info.id, self.n, info.num_workers))

    return Stream


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("batch_size,drop_last", [(2, False), (3, True), (None, False)])
def test_iterable_dataset_with_workers_as_torch(num_workers, batch_size, drop_last):
    def run(lib, data):
        loader = data.DataLoader(
            _stream_class(data)(11),
            batch_size=batch_size,
            drop_last=drop_last,
            num_workers=num_workers,
            timeout=30 if num_workers else 0,
        )
        return [_form(b) for b in loader]

    theirs, mine = _both(run)
    assert mine == theirs


def _counting_class(data):
    class Counting(data.Dataset):
        """Each item is how many items this copy of the data set has served: a worker's own count."""

        def __init__(self):
            self.calls = 0

        def __len__(self):
            return 8

        def __getitem__(self, i):
            self.calls += 1
            info = data.get_worker_info()
            return self.calls, -1 if info is None else info.id

    return Counting


@pytest.mark.parametrize("persistent", [False, True])
def test_each_worker_has_its_copy_and_persistent_workers_keep_it(persistent):
    def run(lib, data):
        loader = data.DataLoader(
            _counting_class(data)(), batch_size=2, num_workers=2, persistent_workers=persistent, timeout=30
        )
        out = [[_form(b) for b in loader] for _ in range(2)]
        return out, loader.dataset.calls  # the main process's copy is never touched

    theirs, mine = _both(run)
    assert mine == theirs


def test_persistent_workers_restart_an_iterable_dataset_each_epoch():
    def run(lib, data):
        loader = data.DataLoader(
            _stream_class(data)(5), batch_size=2, num_workers=2, persistent_workers=True, timeout=30
        )
        return [[_form(b) for b in loader] for _ in range(2)]

    theirs, mine = _both(run)
    assert mine == theirs


def test_a_persistent_loader_started_again_mid_epoch_starts_a_new_epoch():
    loader = fdata.DataLoader(list(range(12)), batch_size=2, num_workers=2, persistent_workers=True, timeout=30)
    it = iter(loader)
    assert next(it).tolist() == [0, 1]
    assert [b.tolist() for b in loader] == [[2 * k, 2 * k + 1] for k in range(6)]


def _random_items(lib, data):
    class RandomItems(data.Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return float(lib.rand(1).item()), float(np.random.rand()), random.random()

    return RandomItems()


def test_workers_draw_different_random_numbers_repeatably():
    """torch seeds each worker's generators from a base seed drawn from the loader's generator:
    workers differ from each other, and the same manual_seed repeats them."""

    def draws(seed):
        flame.manual_seed(seed)
        loader = fdata.DataLoader(_random_items(flame, fdata), batch_size=2, num_workers=2, timeout=30)
        return [[c.tolist() for c in b] for b in loader]

    a = draws(0)
    for k in range(3):  # batch 0 and 1 come from the two workers: none of their streams agree
        assert a[0][k] != a[1][k]
    assert draws(0) == a
    assert draws(1) != a


def test_worker_init_fn_runs_in_each_worker_with_its_id():
    def run(lib, data):
        def init(worker_id):
            np.random.seed(100 + worker_id)

        loader = data.DataLoader(_random_items(lib, data), batch_size=2, num_workers=2, worker_init_fn=init, timeout=30)
        return [b[1].tolist() for b in loader]

    theirs, mine = _both(run)
    assert mine == theirs


def test_a_worker_init_error_is_raised_in_the_main_process():
    def init(worker_id):
        raise ValueError(f"bad init {worker_id}")

    loader = fdata.DataLoader(list(range(4)), batch_size=2, num_workers=2, worker_init_fn=init, timeout=30)
    with pytest.raises(ValueError, match="(?s)Caught ValueError in DataLoader worker process.*bad init"):
        list(loader)


# ---- datasets --------------------------------------------------------------------------------------


def test_subset_and_concat_dataset_as_torch():
    def run(lib, data):
        s = data.Subset(Items(6), [4, 0, 2])
        c = data.ConcatDataset([Items(3), data.Subset(Items(5), [1, 2])])
        return (
            len(s),
            [s[i][1] for i in range(3)],
            _outcome(lambda: s[3])[0],
            len(c),
            c.cumulative_sizes,
            [c[i][1] for i in range(len(c))],
            c[-1][1],
            _outcome(lambda: c[5])[0],
            _outcome(lambda: c[-6])[0],
            [_form(b) for b in data.DataLoader(c, batch_size=2)],
        )

    theirs, mine = _both(run)
    assert mine == theirs


@pytest.mark.parametrize(
    "n,lengths",
    [
        (10, [0.3, 0.3, 0.4]),
        (11, [0.5, 0.5]),
        (7, [0.1, 0.1, 0.8]),
        (10, [0.0, 1.0]),
        (10, [3, 7]),
        (10, [0.5, 0.6]),
        (10, [3, 3]),
        (5, [0.25, 0.25, 0.25, 0.25]),
    ],
)
def test_random_split_lengths_as_torch(n, lengths):
    def run(lib, data):
        def split():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                parts = data.random_split(Items(n), lengths, generator=lib.Generator().manual_seed(0))
            every = sorted(p[i][1] for p in parts for i in range(len(p)))
            return [len(p) for p in parts], every == list(range(n)), [str(w.message) for w in caught]

        return _outcome(split)

    theirs, mine = _both(run)
    assert mine[0] == theirs[0] and (theirs[0] != "ok" or mine == theirs)


@pytest.mark.parametrize("replacement", [True, False])
def test_weighted_random_sampler(replacement):
    w = [0.0, 1.0, 3.0, 0.0, 6.0]
    s = fdata.WeightedRandomSampler(
        w, 3 if not replacement else 4000, replacement=replacement, generator=flame.Generator().manual_seed(0)
    )
    draws = list(s)
    assert len(s) == len(draws)
    assert set(draws) <= {1, 2, 4}  # zero weights are never drawn
    if replacement:
        counts = np.bincount(draws, minlength=5) / len(draws)
        np.testing.assert_allclose(counts, np.array(w) / sum(w), atol=0.03)
    else:
        assert sorted(draws) == [1, 2, 4]
    assert list(s) != draws or not replacement  # a new draw each pass


@pytest.mark.parametrize(
    "args",
    [
        dict(weights=[[1.0, 2.0]], num_samples=2),
        dict(weights=[1.0], num_samples=0),
        dict(weights=[1.0, 2.0], num_samples=2, replacement=1),
    ],
)
def test_weighted_random_sampler_errors_as_torch(args):
    theirs, mine = _both(lambda lib, data: _outcome(lambda: data.WeightedRandomSampler(**args)))
    assert mine[0] == theirs[0] == "ValueError" and mine[1] == theirs[1]


def test_random_sampler_checks_as_torch():
    for kw in [dict(replacement=1), dict(num_samples=0), dict(num_samples=7, replacement=True)]:
        theirs, mine = _both(lambda lib, data, kw=kw: _outcome(lambda: len(list(data.RandomSampler(Items(3), **kw)))))
        assert mine == theirs


@pytest.mark.parametrize(
    "n,replicas,drop_last,shuffle",
    [(n, r, d, s) for n, r, d, s in itertools.product([1, 7, 10, 13], [1, 3, 4], [False, True], [False, True])],
)
def test_distributed_sampler_gives_each_rank_torchs_indices(n, replicas, drop_last, shuffle):
    for seed, epoch in [(0, 0), (0, 3), (1234, 1)]:
        for rank in range(replicas):
            t = tdata.DistributedSampler(Items(n), replicas, rank, shuffle=shuffle, seed=seed, drop_last=drop_last)
            f = fdata.DistributedSampler(Items(n), replicas, rank, shuffle=shuffle, seed=seed, drop_last=drop_last)
            t.set_epoch(epoch)
            f.set_epoch(epoch)
            assert (len(f), list(f)) == (len(t), list(t)), (seed, epoch, rank)


def test_distributed_sampler_feeds_a_loader_as_torch():
    def run(lib, data):
        s = data.DistributedSampler(Items(11), num_replicas=2, rank=1, seed=5)
        loader = data.DataLoader(Items(11), batch_size=4, sampler=s)
        out = []
        for epoch in range(2):
            s.set_epoch(epoch)
            out.append([b[1].tolist() for b in loader])
        return len(loader), out

    theirs, mine = _both(run)
    assert mine == theirs
