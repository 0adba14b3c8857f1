"""flame.utils.data against torch.utils.data (the oracle): batches, orders, collation, errors, worker
processes (order, errors, a dying worker, timeouts), and a compiled step fed by a DataLoader."""

import logging
import os
import time
import warnings

import numpy as np
import pytest
import torch
import torch.utils.data as tud

import flame
import flame.nn as nn
from flame.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    TensorDataset,
    default_collate,
    random_split,
)
from flame.utils.data.dataloader import get_worker_info

X = np.arange(40, dtype=np.float32).reshape(10, 4)
Y = np.arange(10, dtype=np.int64)


def _np(batch):
    return [b.numpy() for b in batch]


@pytest.mark.parametrize("batch_size,drop_last", [(1, False), (3, False), (3, True), (10, False), (16, False)])
def test_sequential_batches_match_torch(batch_size, drop_last):
    ours = DataLoader(TensorDataset(flame.tensor(X), flame.tensor(Y)), batch_size=batch_size, drop_last=drop_last)
    theirs = tud.DataLoader(tud.TensorDataset(torch.from_numpy(X), torch.from_numpy(Y)), batch_size=batch_size,
                            drop_last=drop_last)
    assert len(ours) == len(theirs)
    got, want = list(ours), list(theirs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert isinstance(g, list) and isinstance(w, list)
        for a, b in zip(_np(g), w):
            np.testing.assert_array_equal(a, b.numpy())
            assert a.dtype == b.numpy().dtype


def test_shuffle_is_a_permutation_repeatable_by_seed_and_new_each_epoch():
    ds = TensorDataset(flame.tensor(Y))

    def epoch(loader):
        return np.concatenate([b[0].numpy() for b in loader]).tolist()

    loader = DataLoader(ds, batch_size=4, shuffle=True, generator=flame.Generator(7))
    first, second = epoch(loader), epoch(loader)
    assert sorted(first) == sorted(second) == list(range(10))
    assert first != second
    assert epoch(DataLoader(ds, batch_size=4, shuffle=True, generator=flame.Generator(7))) == first
    flame.manual_seed(3)
    a = epoch(DataLoader(ds, batch_size=4, shuffle=True))
    flame.manual_seed(3)
    assert epoch(DataLoader(ds, batch_size=4, shuffle=True)) == a


class _Pairs(Dataset):
    def __len__(self):
        return 5

    def __getitem__(self, i):
        return {"x": np.full(3, i, np.float32), "n": i, "f": i / 2, "name": f"item{i}", "pair": (i, np.int32(i))}


class _TorchPairs(tud.Dataset):
    def __len__(self):
        return 5

    def __getitem__(self, i):
        return _Pairs()[i]


def _same(a, b):
    if isinstance(b, torch.Tensor):
        assert isinstance(a, flame.Tensor)
        np.testing.assert_array_equal(a.numpy(), b.numpy())
        assert a.numpy().dtype == b.numpy().dtype
    elif isinstance(b, dict):
        assert a.keys() == b.keys()
        for k in b:
            _same(a[k], b[k])
    elif isinstance(b, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert a == b


def test_default_collate_matches_torch_for_dicts_numbers_strings_and_tuples():
    for ours, theirs in zip(DataLoader(_Pairs(), batch_size=2), tud.DataLoader(_TorchPairs(), batch_size=2)):
        _same(ours, theirs)
    with pytest.raises(RuntimeError, match="equal size"):
        default_collate([[1, 2], [1]])
    with pytest.raises(TypeError, match="default_collate"):
        default_collate([object(), object()])


def test_samplers_and_batch_samplers_as_torch():
    assert list(SequentialSampler(range(4))) == [0, 1, 2, 3]
    assert list(BatchSampler(range(7), 3, False)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(BatchSampler(range(7), 3, True)) == [[0, 1, 2], [3, 4, 5]]
    assert len(list(RandomSampler(range(5), replacement=True, num_samples=12))) == 12
    loader = DataLoader(TensorDataset(flame.tensor(Y)), batch_sampler=[[9, 0], [3]])
    assert [b[0].numpy().tolist() for b in loader] == [[9, 0], [3]]
    collated = DataLoader(TensorDataset(flame.tensor(Y)), batch_size=4, collate_fn=lambda items: len(items))
    assert list(collated) == [4, 4, 2]
    parts = random_split(TensorDataset(flame.tensor(Y)), [0.7, 0.3], generator=flame.Generator(1))
    assert [len(p) for p in parts] == [7, 3]
    assert sorted(int(p[i][0].item()) for p in parts for i in range(len(p))) == list(range(10))


@pytest.mark.parametrize("kwargs,message", [
    (dict(batch_sampler=[[0]], batch_size=2), "mutually exclusive"),
    (dict(sampler=[0, 1], shuffle=True), "mutually exclusive with shuffle"),
    (dict(num_workers=-1), "non-negative"),
    (dict(prefetch_factor=2), "prefetch_factor"),
    (dict(batch_size=0), "positive integer"),
    (dict(timeout=-1), "non-negative"),
])
def test_bad_arguments_raise_torchs_errors(kwargs, message):
    ds = TensorDataset(flame.tensor(Y))
    with pytest.raises(ValueError, match=message):
        DataLoader(ds, **kwargs)
    with pytest.raises(ValueError):
        tud.DataLoader(tud.TensorDataset(torch.from_numpy(Y)), **kwargs)


class _Squares(Dataset):
    def __len__(self):
        return 23

    def __getitem__(self, i):
        if i == 13 and os.environ.get("FLAME_TEST_FAIL_AT_13") == "raise":
            raise KeyError("no item 13")
        if i == 13 and os.environ.get("FLAME_TEST_FAIL_AT_13") == "exit":
            os._exit(3)
        return np.array([i, i * i], np.float32), i


def test_worker_processes_give_the_same_batches_in_order():
    want = [_np(b) for b in DataLoader(_Squares(), batch_size=4)]
    for workers in (1, 3):
        got = [_np(b) for b in DataLoader(_Squares(), batch_size=4, num_workers=workers, prefetch_factor=2)]
        assert len(got) == len(want)
        for g, w in zip(got, want):
            for a, b in zip(g, w):
                np.testing.assert_array_equal(a, b)


def test_a_worker_error_is_raised_with_its_traceback(monkeypatch):
    monkeypatch.setenv("FLAME_TEST_FAIL_AT_13", "raise")
    with pytest.raises(KeyError, match=r"(?s)Caught KeyError in DataLoader worker process.*no item 13"):
        list(DataLoader(_Squares(), batch_size=4, num_workers=2))


def test_a_dying_worker_is_reported_at_once(monkeypatch):
    monkeypatch.setenv("FLAME_TEST_FAIL_AT_13", "exit")
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="exited unexpectedly"):
        list(DataLoader(_Squares(), batch_size=4, num_workers=2))
    assert time.monotonic() - start < 20


class _Slow(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        time.sleep(3)
        return np.float32(i)


def test_timeout_bounds_the_wait_for_a_batch():
    with pytest.raises(RuntimeError, match="timed out after 0.5 seconds"):
        list(DataLoader(_Slow(), batch_size=2, num_workers=1, timeout=0.5))


class _Stream(IterableDataset):
    def __iter__(self):
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(start, 12, step))


def test_an_iterable_dataset_is_batched_and_sharded_by_worker_info():
    single = [b.numpy().tolist() for b in DataLoader(_Stream(), batch_size=5)]
    assert single == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11]]
    sharded = [b.numpy().tolist() for b in DataLoader(_Stream(), batch_size=3, num_workers=2)]
    theirs = [b.numpy().tolist() for b in tud.DataLoader(_TorchStream(), batch_size=3, num_workers=2)]
    assert sharded == theirs


class _TorchStream(tud.IterableDataset):
    def __iter__(self):
        info = tud.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(start, 12, step))


def test_a_distributed_sampler_feeds_a_loader():
    sampler = DistributedSampler(10, num_replicas=2, rank=1, shuffle=False)
    batches = [b[0].numpy().tolist() for b in DataLoader(TensorDataset(flame.tensor(Y)), batch_size=2,
                                                              sampler=sampler)]
    assert batches == [[1, 3], [5, 7], [9]]


def test_a_compiled_step_takes_the_smaller_last_batch_without_a_warning(caplog):
    model = nn.Linear(4, 2)
    opt = flame.optim.SGD(model.parameters(), lr=0.01)

    @flame.compile
    def step(x, y):
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    data = TensorDataset(flame.tensor(X), flame.tensor(np.ones((10, 2), np.float32)))
    with warnings.catch_warnings(record=True) as seen, caplog.at_level(logging.INFO, logger="flame"):
        warnings.simplefilter("always")
        losses = [step(x, y).item() for _ in range(3) for x, y in DataLoader(data, batch_size=4, shuffle=True)]
    assert [w for w in seen if issubclass(w.category, flame.RecompileWarning)] == []
    assert any("now dynamic" in r.getMessage() for r in caplog.records)
    assert step.stats().traces == 2 and len(losses) == 9 and all(np.isfinite(losses))


@pytest.mark.gpu
def test_pinned_asynchronous_copies_give_the_same_batches_on_the_gpu():
    flame.set_device("cuda")
    data = _Squares()
    plain = [_np(b) for b in DataLoader(data, batch_size=4)]
    pinned = DataLoader(data, batch_size=4, pin_memory=True, num_workers=2)
    for got, want in zip(pinned, plain):
        assert got[0].device.type == "cuda"
        for a, b in zip(_np(got), want):
            np.testing.assert_array_equal(a, b)
