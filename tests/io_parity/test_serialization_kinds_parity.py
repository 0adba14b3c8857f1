"""flame.save / flame.load against torch.save / torch.load for what the basic round trip does not
cover: the narrower dtypes (int16, the float8 formats) in files both libraries read, the same tensor
saved twice coming back as one tensor, views of one storage coming back sharing it (offsets, strides and
writes), namedtuples and dtypes, Parameters and requires_grad, OrderedDicts, and the errors of a missing
file and a map_location naming no device."""

from __future__ import annotations

import collections
import io

import ml_dtypes
import numpy as np
import pytest
import safetensors.torch
import torch

import flame

_NARROW = {"int16": np.int16, "float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}


def _torch_np(t: torch.Tensor) -> np.ndarray:
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):  # torch's .numpy() has no float8
        return t.view(torch.uint8).numpy().view(_NARROW[str(t.dtype).removeprefix("torch.")])
    return t.numpy()


def _round_trip(lib, obj):
    buf = io.BytesIO()
    lib.save(obj, buf)
    buf.seek(0)
    return lib.load(buf)


@pytest.mark.parametrize("dtype", list(_NARROW))
def test_narrow_dtypes_round_trip_and_cross_to_torch(dtype, tmp_path):
    values = [0.0, 1.5, -2.0, 448.0 if dtype != "int16" else -300.0]
    theirs = _round_trip(torch, {"t": torch.tensor(values).to(getattr(torch, dtype))})["t"]
    mine = _round_trip(flame, {"t": flame.tensor(values).to(getattr(flame, dtype))})["t"]
    assert mine.numpy().dtype == _torch_np(theirs).dtype
    np.testing.assert_array_equal(mine.numpy(), _torch_np(theirs))
    flame.save({"t": mine}, tmp_path / "f.safetensors")  # flame's file read by torch's safetensors
    read = safetensors.torch.load_file(tmp_path / "f.safetensors")["t"]
    assert read.dtype == theirs.dtype
    np.testing.assert_array_equal(_torch_np(read), _torch_np(theirs))
    safetensors.torch.save_file({"t": theirs}, tmp_path / "t.safetensors")  # and torch's read by flame
    np.testing.assert_array_equal(flame.load(tmp_path / "t.safetensors")["t"].numpy(), _torch_np(theirs))


def _shared(lib):
    x, y = lib.tensor([1.0, 2.0]), lib.tensor([3.0])
    return {
        "flat dict": {"x": x, "y": x, "z": y},
        "nested": {"a": [x, (x, y)], "b": {"c": y}, "n": 3},
        "list": [x, y, x],
    }


def _tensors(obj) -> list:
    """The tensors in obj (nested dicts, lists and tuples), in order."""
    if isinstance(obj, (torch.Tensor, flame.Tensor)):
        return [obj]
    items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
    return [t for o in items for t in _tensors(o)]


def _identity_pattern(obj) -> list[int]:
    """For each tensor in obj (in order), the index of the first tensor that is the same object."""
    found = _tensors(obj)
    return [next(i for i, f in enumerate(found) if f is t) for t in found]


@pytest.mark.parametrize("what", list(_shared(torch)))
def test_a_tensor_saved_twice_loads_as_one_tensor_as_torch(what, tmp_path):
    theirs = _round_trip(torch, _shared(torch)[what])
    mine = _round_trip(flame, _shared(flame)[what])
    assert _identity_pattern(mine) == _identity_pattern(theirs)
    flame.save(_shared(flame)[what], tmp_path / "f.safetensors")  # through a path too
    assert _identity_pattern(flame.load(tmp_path / "f.safetensors")) == _identity_pattern(theirs)


def test_a_flat_file_with_a_tensor_twice_keeps_every_name_for_plain_readers(tmp_path):
    x = flame.tensor([1.0, 2.0])
    flame.save({"x": x, "y": x}, tmp_path / "f.safetensors")
    read = safetensors.torch.load_file(tmp_path / "f.safetensors")
    assert sorted(read) == ["x", "y"] and read["y"].tolist() == [1.0, 2.0]


@pytest.mark.parametrize("same", ['{"y": "nope"}', '{"y": "x"}', '["y"]'])
def test_a_malformed_tie_raises_checkpoint_error_naming_the_file(same, tmp_path):
    tensors = {"x": torch.zeros(2), "y": torch.zeros(3)}  # "y" -> "x": not equal shapes
    safetensors.torch.save_file(tensors, tmp_path / "f.safetensors", metadata={"flame.same": same})
    with pytest.raises(flame.CheckpointError, match="f.safetensors.*flame.same"):
        flame.load(tmp_path / "f.safetensors")


def _grads(lib):
    p = lib.nn.Parameter(lib.tensor([1.0, 2.0]))
    frozen = lib.nn.Parameter(lib.tensor([3.0]), requires_grad=False)
    leaf = lib.tensor([4.0], requires_grad=True)
    return {
        "flat dict": {"p": p, "frozen": frozen, "leaf": leaf, "plain": lib.tensor([5.0])},
        "nested": {"params": [p, frozen], "leaf": (leaf, 1), "p again": p},
        "state_dict": lib.nn.Linear(2, 1).state_dict(),
        "keep_vars state_dict": dict(lib.nn.Linear(2, 1).state_dict(keep_vars=True)),
    }


def _grad_form(obj) -> list:
    """Each tensor's class name and requires_grad, in order."""
    return [(type(t).__name__, t.requires_grad) for t in _tensors(obj)]


@pytest.mark.parametrize("what", list(_grads(torch)))
def test_parameters_and_requires_grad_round_trip_as_torch(what, tmp_path):
    theirs = _round_trip(torch, _grads(torch)[what])
    mine = _round_trip(flame, _grads(flame)[what])
    assert _grad_form(mine) == _grad_form(theirs)
    assert _identity_pattern(mine) == _identity_pattern(theirs)


def test_a_missing_file_raises_file_not_found_naming_it_as_torch(tmp_path):
    path = tmp_path / "absent.safetensors"
    with pytest.raises(FileNotFoundError):
        torch.load(path)
    with pytest.raises(FileNotFoundError, match="absent.safetensors"):
        flame.load(path)
    with pytest.raises(FileNotFoundError, match="absent.safetensors"):
        flame.load(str(path), map_location="cpu")


def _ordered(lib):
    x = lib.tensor([1.0])
    return {
        "flat": collections.OrderedDict([("b", x), ("a", lib.tensor([2.0]))]),
        "state_dict": lib.nn.Linear(2, 1).state_dict(),
        "nested": {"model": collections.OrderedDict(w=x), "opt": {"lr": 0.1}, "l": [collections.OrderedDict()]},
        "plain flat dict": {"b": x},
    }


def _types(obj) -> list:
    """The container types in obj, depth first, with their keys."""
    if isinstance(obj, dict):
        return [(type(obj).__name__, list(obj))] + [t for v in obj.values() for t in _types(v)]
    if isinstance(obj, (list, tuple)):
        return [type(obj).__name__] + [t for v in obj for t in _types(v)]
    return []


@pytest.mark.parametrize("what", list(_ordered(torch)))
def test_ordered_dicts_round_trip_as_torch(what, tmp_path):
    theirs = _round_trip(torch, _ordered(torch)[what])
    assert _types(_round_trip(flame, _ordered(flame)[what])) == _types(theirs)
    flame.save(_ordered(flame)[what], tmp_path / "f.safetensors")
    assert _types(flame.load(tmp_path / "f.safetensors")) == _types(theirs)


# ---- views of one storage ------------------------------------------------------------------------------


def _views(lib):
    base = lib.arange(12, dtype=lib.float32).reshape(3, 4)
    flat = lib.arange(6, dtype=lib.float64)
    return {
        "two slices of a vector": [flat[:3], flat[2:]],
        "base and transpose (flat dict)": {"a": base, "b": base.t()},
        "strided slice and row": {"x": (base[1:, ::2], base[0]), "n": 1},
        "column and reshape": [base[:, 1], base.reshape(2, 6)[1]],
        "a view alone": flat[1:5],
        "unrelated tensors": [lib.ones(2), lib.zeros(3)],
    }


def _layout(obj) -> list:
    """Each tensor's storage (the index of the first tensor sharing it), offset, shape, strides and values."""
    found = _tensors(obj)
    ptrs = [t.untyped_storage().data_ptr() for t in found]
    return [
        (ptrs.index(p), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.tolist()) for p, t in zip(ptrs, found)
    ]


@pytest.mark.parametrize("what", list(_views(torch)))
def test_views_of_one_storage_load_sharing_it_as_torch(what, tmp_path):
    theirs = _round_trip(torch, _views(torch)[what])
    flame.save(_views(flame)[what], tmp_path / "f.safetensors")
    for mine in (_round_trip(flame, _views(flame)[what]), flame.load(tmp_path / "f.safetensors")):
        assert _layout(mine) == _layout(theirs)
        _tensors(mine)[0].fill_(-1.0)  # a write through one is seen through the others, as torch's
        _tensors(theirs)[0].fill_(-1.0)
        assert _layout(mine) == _layout(theirs)
        theirs = _round_trip(torch, _views(torch)[what])


def _storages(obj) -> list:
    """Each tensor's whole storage, read through as_strided (the elements no tensor shows included)."""
    return [t.as_strided((t.untyped_storage().nbytes() // t.element_size(),), (1,), 0).tolist() for t in _tensors(obj)]


STORAGE_VIEWS = {
    **{name: (lambda lib, name=name: _views(lib)[name]) for name in ("two slices of a vector", "a view alone",
                                                                    "strided slice and row", "column and reshape")},
    "two views with a gap between (flat dict)": lambda lib: (lambda b: {"a": b[:3], "b": b[5:7]})(lib.arange(10.0)),
    "a row of a matrix": lambda lib: [lib.arange(12, dtype=lib.int64).reshape(3, 4)[1]],
    "every other element": lambda lib: {"e": lib.arange(8, dtype=lib.float16)[::2]},
}


@pytest.mark.parametrize("what", list(STORAGE_VIEWS))
def test_views_load_with_the_whole_storage_they_were_views_of_as_torch(what, tmp_path):
    """torch.save writes a view's whole storage: the elements no saved view holds load too."""
    theirs = _storages(_round_trip(torch, STORAGE_VIEWS[what](torch)))
    assert _storages(_round_trip(flame, STORAGE_VIEWS[what](flame))) == theirs
    flame.save(STORAGE_VIEWS[what](flame), tmp_path / "f.safetensors")
    loaded = flame.load(tmp_path / "f.safetensors")
    assert _storages(loaded) == theirs
    if isinstance(loaded, dict):  # the storage's other elements are no name of the loaded dict
        assert list(loaded) == list(STORAGE_VIEWS[what](flame))


def test_a_flat_file_of_views_keeps_each_names_elements_for_plain_readers(tmp_path):
    base = flame.arange(12, dtype=flame.float32).reshape(3, 4)
    flame.save({"a": base[1:, ::2], "b": base.t()}, tmp_path / "f.safetensors")
    read = safetensors.torch.load_file(tmp_path / "f.safetensors")
    tbase = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    assert read["a"].tolist() == tbase[1:, ::2].tolist() and read["b"].tolist() == tbase.t().tolist()


# ---- namedtuples and dtypes ----------------------------------------------------------------------------

Point = collections.namedtuple("Point", ["x", "y"])


def _with_types(lib):
    return {
        "namedtuple": Point(lib.tensor([1.0, 2.0]), 3),
        "nested namedtuple": {"p": [Point(Point(1, "a"), lib.ones(2))], "q": (Point(None, 2.5),)},
        "dtypes": {"f": lib.float32, "all": [lib.float64, lib.float16, lib.bfloat16, lib.int64, lib.int32, lib.int16,
                                              lib.int8, lib.uint8, lib.bool]},
        "dtype alone": lib.bfloat16,
        "dtypes beside tensors": (lib.ones(2, dtype=lib.float64), lib.float64),
    }


def _typed_form(obj):
    """Container types (namedtuples by class), dtypes by torch's name, tensors by dtype and values."""
    if isinstance(obj, (torch.Tensor, flame.Tensor)):
        return ("tensor", str(obj.numpy().dtype), obj.tolist())
    if isinstance(obj, torch.dtype):
        return ("dtype", str(obj).removeprefix("torch."))
    if isinstance(obj, flame.dtype):
        name = next(n for n in ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8",
                                "uint8", "bool") if getattr(flame, n) is obj)
        return ("dtype", name)
    if isinstance(obj, dict):
        return ("dict", [(k, _typed_form(v)) for k, v in obj.items()])
    if isinstance(obj, (list, tuple)):
        return (type(obj), [_typed_form(v) for v in obj])
    return (type(obj).__name__, obj)


@pytest.mark.parametrize("what", list(_with_types(torch)))
def test_namedtuples_and_dtypes_round_trip_as_torch(what, tmp_path):
    with torch.serialization.safe_globals([Point]):  # torch's weights_only load takes an allowlisted class
        theirs = _round_trip(torch, _with_types(torch)[what])
    assert _typed_form(_round_trip(flame, _with_types(flame)[what])) == _typed_form(theirs)
    flame.save(_with_types(flame)[what], tmp_path / "f.safetensors")
    assert _typed_form(flame.load(tmp_path / "f.safetensors")) == _typed_form(theirs)


def test_a_torch_dtype_saved_by_flame_loads_as_flames():
    back = _round_trip(flame, {"d": torch.float16, "t": torch.int8})
    assert back == {"d": flame.float16, "t": flame.int8}


def test_a_namedtuple_no_imported_module_holds_raises_naming_it(tmp_path):
    flame.save({"p": Point(1, 2)}, tmp_path / "f.safetensors")
    data = (tmp_path / "f.safetensors").read_bytes().replace(b"Point", b"Pnint")
    (tmp_path / "f.safetensors").write_bytes(data)
    with pytest.raises(flame.CheckpointError, match=r"f\.safetensors.*namedtuple .*Pnint.*import"):
        flame.load(tmp_path / "f.safetensors")
