"""flame.utils.data against torch.utils.data on errors, warnings and attributes: the exception type
and message each misuse raises (and when: construction or iteration), a worker's exception re-raised
in its own type, and the DataLoader attributes torch fixes after construction."""

import collections
import time
import warnings

import numpy as np
import pytest
import torch
import torch.utils.data as tud

import flame
import flame.utils.data as fud


def _outcome(fn):
    """(exception type name, message) or ('ok', repr of the result), with the warnings raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = ("ok", fn())
        except Exception as e:  # noqa: BLE001 - the type is what is compared
            result = (type(e).__name__, str(e))
    return result, [str(w.message) for w in caught if "GPU" not in str(w.message)]


def _same(torch_fn, flame_fn):
    theirs, ours = _outcome(torch_fn), _outcome(flame_fn)
    assert ours == theirs


def _tensor(mod, values):
    return torch.tensor(values) if mod is tud else flame.tensor(values)


class _Items:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


def _both(build):
    _same(lambda: build(tud), lambda: build(fud))


# ---- default_collate ------------------------------------------------------------------------------


def _same_runtime_error(build):
    """torch's RuntimeError and message; flame's error is a RuntimeError (a ShapeError) with that message."""
    with pytest.raises(RuntimeError) as theirs:
        build(tud)
    with pytest.raises(RuntimeError) as ours:
        build(fud)
    assert str(ours.value) == str(theirs.value)


def test_collate_of_arrays_of_different_shapes_raises_torchs_runtime_error():
    _same_runtime_error(lambda m: m.default_collate([np.ones(2), np.ones(3)]))


# ---- samplers -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "weights", [[1.0, -1.0], [0.0, 0.0], [1.0, float("inf")], [1.0, float("nan")]], ids=["neg", "zero", "inf", "nan"]
)
def test_weighted_sampler_bad_weights_raise_on_iteration_as_torch(weights):
    _both(lambda m: m.WeightedRandomSampler(weights, 3) and None)  # constructs
    _both(lambda m: list(m.WeightedRandomSampler(weights, 3)))


def test_weighted_sampler_without_replacement_draws_zero_weights_last_as_torch():
    _both(lambda m: m.WeightedRandomSampler([1, 1, 0], 3, replacement=False) and None)
    for seed in range(5):
        flame.manual_seed(seed)
        drawn = list(fud.WeightedRandomSampler([1, 1, 0], 3, replacement=False))
        assert sorted(drawn[:2]) == [0, 1] and drawn[2] == 2
    _both(lambda m: list(m.WeightedRandomSampler([1, 1, 0], 4, replacement=False)))


def test_weighted_sampler_weights_are_a_float64_tensor_as_torch():
    s = fud.WeightedRandomSampler([1, 2], 5)
    assert isinstance(s.weights, flame.Tensor) and s.weights.dtype == flame.float64
    assert s.weights.numpy().tolist() == [1.0, 2.0]


def test_random_sampler_with_replacement_over_nothing_raises_runtime_error_as_torch():
    with pytest.raises(RuntimeError):
        list(tud.RandomSampler(range(0), replacement=True, num_samples=3))
    with pytest.raises(RuntimeError):
        list(fud.RandomSampler(range(0), replacement=True, num_samples=3))


@pytest.mark.parametrize("rank", [2, -1])
def test_distributed_sampler_rank_message_as_torch(rank):
    _same(
        lambda: tud.DistributedSampler(range(10), num_replicas=2, rank=rank),
        lambda: fud.DistributedSampler(range(10), num_replicas=2, rank=rank),
    )


def test_distributed_sampler_is_a_sampler_with_its_dataset_as_torch():
    data = range(10)
    s = fud.DistributedSampler(data, num_replicas=3, rank=1)
    assert isinstance(s, fud.Sampler) and s.dataset is data


# ---- datasets -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shapes", [[(3,), (1,)], [()], []], ids=["mismatch", "zero-dim", "none"]
)
def test_tensor_dataset_errors_as_torch(shapes):
    _both(lambda m: m.TensorDataset(*[_tensor(m, np.zeros(s).tolist()) for s in shapes]) and None)


def test_concat_dataset_errors_as_torch():
    _both(lambda m: m.ConcatDataset([]))

    class Stream(tud.IterableDataset):
        def __iter__(self):
            return iter(())

    class FlameStream(fud.IterableDataset):
        def __iter__(self):
            return iter(())

    _same(lambda: tud.ConcatDataset([range(2), Stream()]), lambda: fud.ConcatDataset([range(2), FlameStream()]))


def test_base_datasets_errors_as_torch():
    _both(lambda m: m.Dataset()[0])
    _both(lambda m: m.IterableDataset())


@pytest.mark.parametrize("lengths", [[3, 6], [0.5, 0.6], [3.0, 7.0]])
def test_random_split_bad_lengths_raise_as_torch(lengths):
    theirs, ours = _outcome(lambda: tud.random_split(range(10), lengths)), _outcome(
        lambda: fud.random_split(range(10), lengths)
    )
    assert ours[0][0] == theirs[0][0]
    if theirs[0][0] == "ValueError":
        assert ours == theirs


# ---- DataLoader -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(prefetch_factor=2),
        dict(multiprocessing_context="spawn"),
        dict(num_workers=1, multiprocessing_context="bogus"),
        dict(num_workers=1, prefetch_factor=-1),
    ],
)
def test_loader_option_errors_as_torch(kwargs):
    _both(lambda m: m.DataLoader(_Items(4), **kwargs) and None)


@pytest.mark.parametrize("option", ["sampler", "batch_sampler"])
def test_loader_over_a_stream_names_the_option_as_torch(option):
    class Stream(tud.IterableDataset):
        def __iter__(self):
            return iter(range(3))

    class FlameStream(fud.IterableDataset):
        def __iter__(self):
            return iter(range(3))

    value = [0] if option == "sampler" else [[0]]
    _same(lambda: tud.DataLoader(Stream(), **{option: value}), lambda: fud.DataLoader(FlameStream(), **{option: value}))


def test_loader_timeout_needs_workers_on_iteration_as_torch():
    _both(lambda m: list(m.DataLoader(_Items(2), timeout=1)))


def test_loader_accepts_in_order_and_integral_float_workers_as_torch():
    assert [int(b) for b in fud.DataLoader(_Items(3), in_order=False)] == [0, 1, 2]
    _both(lambda m: m.DataLoader(_Items(3), num_workers=1.0) and None)


@pytest.mark.parametrize("name", ["batch_size", "batch_sampler", "sampler", "drop_last", "dataset",
                                  "persistent_workers"])
def test_loader_attributes_are_fixed_after_construction_as_torch(name):
    _both(lambda m: setattr(m.DataLoader(_Items(4)), name, None))


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_prefetch_factor_attribute_as_torch(workers):
    assert fud.DataLoader(_Items(4), num_workers=workers).prefetch_factor == tud.DataLoader(
        _Items(4), num_workers=workers
    ).prefetch_factor


def test_loader_pin_memory_without_a_gpu_warns_as_torch():
    flame.set_device("reference")
    theirs = _outcome(lambda: len(list(tud.DataLoader(_Items(3), pin_memory=True))))
    ours = _outcome(lambda: len(list(fud.DataLoader(_Items(3), pin_memory=True))))
    assert ours == theirs


class _KeyErrors:
    def __len__(self):
        return 2

    def __getitem__(self, i):
        raise KeyError("boom")


Pair = collections.namedtuple("Pair", "a b")


def test_worker_exception_is_reraised_in_its_type_as_torch():
    with pytest.raises(KeyError) as theirs:
        list(tud.DataLoader(_KeyErrors(), num_workers=1, timeout=30))
    with pytest.raises(KeyError) as ours:
        list(fud.DataLoader(_KeyErrors(), num_workers=1, timeout=30))
    head = "Caught KeyError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):"
    assert str(theirs.value).startswith(head) and str(ours.value).startswith(head)
    assert "KeyError: 'boom'" in str(ours.value)


class _Items7:
    def __init__(self, mod, length):
        class Stream(mod.IterableDataset):
            def __iter__(self):
                return iter(range(7))

            def __len__(self):
                return length

            def __repr__(self):
                return "Stream"

        self.dataset = Stream()


@pytest.mark.parametrize("batch_size", [None, 2])
@pytest.mark.parametrize("workers", [0, 2])
def test_loader_warns_when_a_stream_yields_more_than_its_len_as_torch(batch_size, workers):
    def run(mod):
        loader = mod.DataLoader(_Items7(mod, 5).dataset, batch_size=batch_size, num_workers=workers,
                                timeout=30 if workers else 0)
        n = len(loader)
        return n, len(list(loader))

    theirs, ours = _outcome(lambda: run(tud)), _outcome(lambda: run(fud))
    theirs = theirs[0], [w for w in theirs[1] if "worker processes in total" not in w]
    ours = ours[0], [w for w in ours[1] if "worker processes in total" not in w]
    assert ours == theirs


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_iterator_has_a_len_as_torch(workers):
    assert len(iter(fud.DataLoader(_Items(5), batch_size=2, num_workers=workers, timeout=30 if workers else 0))) == 3
    for batch_size in (None, 2):
        _both(lambda m: len(iter(m.DataLoader(_Items7(m, 5).dataset, batch_size=batch_size))))  # noqa: B023


def test_loader_warns_of_more_workers_than_cpus_as_torch(monkeypatch):
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    _both(lambda m: m.DataLoader(_Items(4), num_workers=3) and None)


@pytest.mark.parametrize("batch_size, drop_last", [(2, 1), (0, False), (2.0, False)])
def test_loader_over_a_stream_checks_batching_options_as_torch(batch_size, drop_last):
    def build(mod):
        class Stream(mod.IterableDataset):
            def __iter__(self):
                return iter(range(3))

        return mod.DataLoader(Stream(), batch_size=batch_size, drop_last=drop_last) and None

    _both(build)


def test_sampler_base_has_no_len_as_torch():
    class Once(fud.Sampler):
        def __iter__(self):
            return iter([0])

    assert hasattr(fud.Sampler, "__len__") == hasattr(tud.Sampler, "__len__") is False
    with pytest.raises(TypeError, match="has no len"):
        len(Once())
    _both(lambda m: next(iter(m.Sampler())))


class _BrokenStream(fud.IterableDataset):
    def __iter__(self):
        yield 1
        raise ValueError("stream broke")


class _TorchBrokenStream(tud.IterableDataset):
    def __iter__(self):
        yield 1
        raise ValueError("stream broke")


def test_a_stream_error_in_a_worker_is_reraised_in_its_type_as_torch():
    with pytest.raises(ValueError, match="(?s)Caught ValueError in DataLoader worker process 0.*stream broke"):
        list(tud.DataLoader(_TorchBrokenStream(), num_workers=1, timeout=30))
    with pytest.raises(ValueError, match="(?s)Caught ValueError in DataLoader worker process 0.*stream broke"):
        list(fud.DataLoader(_BrokenStream(), num_workers=1, timeout=30))


def test_collate_of_tensors_that_do_not_stack_raises_as_torch():
    _same_runtime_error(lambda m: m.default_collate([_tensor(m, [1, 2]), _tensor(m, [3])]))
    _both(lambda m: m.default_collate([_tensor(m, [1, 2]), np.ones(2)]))


@pytest.mark.parametrize("batch_size", [None, 3])
def test_loader_over_a_stream_has_torchs_sampler_attributes(batch_size):
    def attributes(mod):
        class Stream(mod.IterableDataset):
            def __iter__(self):
                return iter(range(3))

        loader = mod.DataLoader(Stream(), batch_size=batch_size, drop_last=batch_size is not None)
        kinds = type(loader.sampler).__name__, type(loader.batch_sampler).__name__
        sizes = (loader.batch_sampler.batch_size, loader.batch_sampler.drop_last) if loader.batch_sampler else None
        return kinds, sizes, [next(iter(loader.sampler)) for _ in range(2)]

    _both(attributes)


class _FailsAt3:
    def __len__(self):
        return 6

    def __getitem__(self, i):
        if i == 3:
            raise ValueError("no item 3")
        if i == 2:
            time.sleep(0.5)  # the error of item 3 (the other worker's) arrives first
        return i


def _until_error(loader):
    got = []
    try:
        for b in loader:
            got.append(int(b))
    except ValueError as e:
        return got, type(e).__name__
    return got, None


def test_a_worker_error_comes_after_the_batches_before_it_as_torch():
    theirs = _until_error(tud.DataLoader(_FailsAt3(), num_workers=2, timeout=30))
    ours = _until_error(fud.DataLoader(_FailsAt3(), num_workers=2, timeout=30))
    assert ours == theirs == ([0, 1, 2], "ValueError")


def test_loader_with_workers_and_no_prefetch_fails_on_iteration_as_torch():
    """torch builds the loader and raises this AssertionError when iterating (its iterator's __del__
    then fails, which pytest reports, so torch's side is not run here)."""
    _both(lambda m: m.DataLoader(_Items(4), num_workers=1, prefetch_factor=0, timeout=30) and None)
    loader = fud.DataLoader(_Items(4), num_workers=1, prefetch_factor=0, timeout=30)
    message = "^prefetch_factor must be greater than 0 for MultiProcessingDataLoaderIter$"
    with pytest.raises(AssertionError, match=message):
        list(loader)


def test_worker_info_is_a_frozen_record_as_torch():
    from torch.utils.data._utils.worker import WorkerInfo as TorchInfo

    from flame.utils.data.dataloader import WorkerInfo

    theirs, ours = TorchInfo(id=0, num_workers=2, seed=3, dataset=None), WorkerInfo(id=0, num_workers=2, seed=3,
                                                                                   dataset=None)
    assert repr(ours) == repr(theirs)
    assert _outcome(lambda: setattr(ours, "id", 1)) == _outcome(lambda: setattr(theirs, "id", 1))
