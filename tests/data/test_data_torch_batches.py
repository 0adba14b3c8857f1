"""flame.utils.data against torch.utils.data on the batches themselves, where a shortcut or a
conversion could give other values or types than torch's: a TensorDataset subclass that reads its
items its own way, default_convert keeping a sequence's type, and default_collate of NumPy values of
several dtypes, of NumPy strings and of Python ints beyond int64."""

import collections

import numpy as np
import pytest
import torch
import torch.utils.data as tud

import flame
import flame.utils.data as fud


def _values(batch):
    if isinstance(batch, (list, tuple)):
        return [_values(b) for b in batch]
    return np.asarray(batch.numpy()).tolist()


def _subclass(mod, new):
    class Scaled(mod.TensorDataset):
        def __getitem__(self, i):
            x, y = super().__getitem__(i)
            return x * 10, y

    class Batched(mod.TensorDataset):
        def __getitems__(self, indices):
            return [(self.tensors[0][i] + 1, self.tensors[1][i]) for i in indices]

    data = (new([1, 2, 3]), new([4, 5, 6]))
    return [Scaled(*data), Batched(*data)]


def test_tensor_dataset_subclass_items_are_read_through_its_own_methods_as_torch():
    for theirs, ours in zip(_subclass(tud, torch.tensor), _subclass(fud, flame.tensor)):
        expect = [_values(b) for b in tud.DataLoader(theirs, batch_size=2)]
        assert [_values(b) for b in fud.DataLoader(ours, batch_size=2)] == expect


def test_default_convert_keeps_a_mutable_sequence_type_as_torch():
    theirs = tud.default_convert(collections.deque([np.ones(1), np.zeros(2)]))
    ours = fud.default_convert(collections.deque([np.ones(1), np.zeros(2)]))
    assert type(ours) is type(theirs) is collections.deque
    assert [o.numpy().tolist() for o in ours] == [t.tolist() for t in theirs]


def _form(obj):
    """A batch's structure, types, dtypes and values, the same for torch's and flame's."""
    if isinstance(obj, (torch.Tensor, flame.Tensor)):
        a = obj.numpy()
        return ("tensor", a.dtype.name, a.shape, a.tolist())
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, [_form(o) for o in obj])
    return (type(obj).__name__, obj)


def _outcome(collate, batch):
    try:
        return _form(collate(batch))
    except Exception as e:  # noqa: BLE001 - whether it raised a ValueError is what is compared
        return ("raised", isinstance(e, ValueError))


MIXED_DTYPES = {
    "numpy f32 and i64 scalars": [np.float32(1.5), np.int64(2)],
    "numpy i32 and f16 scalars": [np.int32(1), np.float16(2.5)],
    "numpy i64 and f32 arrays": [np.arange(2), np.ones(2, np.float32)],
    "numpy f16 and i16 arrays": [np.ones(2, np.float16), np.arange(2, dtype=np.int16)],
    "numpy 0-d i32 and f32 arrays": [np.array(3, np.int32), np.array(0.5, np.float32)],
    "numpy u8 and i8 arrays": [np.ones(2, np.uint8), np.full(2, -1, np.int8)],
}


@pytest.mark.parametrize("name", list(MIXED_DTYPES))
def test_collate_of_numpy_values_of_several_dtypes_promotes_as_torch(name):
    batch = MIXED_DTYPES[name]
    assert _form(fud.default_collate(list(batch))) == _form(tud.default_collate(list(batch)))


def test_collate_of_numpy_strings_and_bytes_gives_them_as_a_list_as_torch():
    for batch in ([np.str_("a"), np.str_("bc")], [np.bytes_(b"x"), np.bytes_(b"yz")], [{"k": np.str_("a")}] * 2):
        assert _form(fud.default_collate(list(batch))) == _form(tud.default_collate(list(batch)))


@pytest.mark.parametrize("batch", [[2**63, 1], [1, -(2**63) - 1], [True, 2**64], [2**63, 2.5], [1, 2**63, 0.5]])
def test_collate_of_python_ints_beyond_int64_as_torch(batch):
    ours, theirs = _outcome(fud.default_collate, list(batch)), _outcome(tud.default_collate, list(batch))
    assert ours == theirs


def _subset_reads(mod):
    data = list(range(10, 20))
    out = []
    for indices in (range(2, 5), [1.5, 2], np.array([3, 1])):
        subset = mod.Subset(data, indices)
        try:
            out.append((type(subset.indices).__name__, [subset[i] for i in range(len(subset))]))
        except TypeError:
            out.append((type(subset.indices).__name__, "TypeError"))
    return out


def test_subset_keeps_its_indices_as_given_as_torch():
    """torch reads dataset[indices[i]] with the indices as given: a float index is an error, not truncated."""
    assert _subset_reads(fud) == _subset_reads(tud)
