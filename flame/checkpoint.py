"""Checkpoints as safetensors files. `save`/`load` move a flat name -> tensor dict; `save_checkpoint`
/ `load_checkpoint` store a model (under its state_dict names, so a file written by PyTorch's
`safetensors.torch.save_file` loads) and optionally an optimizer (under `optimizer/...` names, with
its hyperparameters as JSON metadata). Saving is atomic: the bytes go to a temporary file in the same
directory, are fsync'ed, and os.replace() puts the file in place, so a crash mid-save leaves the
previous checkpoint intact."""

from __future__ import annotations

import collections
import inspect
import json
import math
import os
import re
import reprlib
import struct
import sys
import tempfile
from typing import Any

import ml_dtypes
import numpy as np
import safetensors.numpy
from safetensors import deserialize

from flame._tempfiles import remove_dead_temps, temp_prefix
from flame.errors import CheckpointError, DTypeError
from flame.frontend.context import no_grad
from flame.frontend.creation import as_tensor as share_tensor
from flame.frontend.dispatch import apply
from flame.frontend.parameter import Parameter
from flame.frontend.tensor import Tensor
from flame.frontend.views import positions
from flame.ir.dtypes import ALL_DTYPES, FP8_DTYPES, DType, dtype_of
from flame.ir.registry import REGISTRY

__all__ = ["load", "load_checkpoint", "load_metadata", "save", "save_checkpoint"]

_OPT = "optimizer/"
_GROUPS_KEY = "flame.optimizer.param_groups"
_JSON_KEY = "flame.metadata.json"  # the metadata keys whose values were not strings, stored as JSON text
_NP_DTYPES = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "BF16": ml_dtypes.bfloat16,
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U8": np.uint8,
    "BOOL": np.bool_,
    "F8_E4M3": ml_dtypes.float8_e4m3fn,
    "F8_E5M2": ml_dtypes.float8_e5m2,
}  # the dtypes flame has
_ST_DTYPES = {np.dtype(v): k for k, v in _NP_DTYPES.items()}
_DTYPE_NAMES = frozenset(d.name for d in ALL_DTYPES + FP8_DTYPES)  # a saved dtype (flame.float32) is one of these
_CHUNK = 1 << 24
_MAX_DEPTH = 64  # the most nested lists / tuples / dicts flame.save stores ...
_MAX_JSON_DEPTH = 3 * _MAX_DEPTH + 1  # ... as JSON (a dict is 3 levels: {"__dict__": [[key, value]]}); a header
# nested deeper is refused before it is parsed (Python's parser would raise RecursionError)
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_STATE_INDEX = re.compile(r"[0-9]{1,18}")
_REPR = reprlib.Repr()  # a value quoted in an error, shortened
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 3, 60, 60, 40
_UMASK = os.umask(0o022)
os.umask(_UMASK)  # read once, so a saved file gets the usual permissions (mkstemp's are 0600)


class MissingCheckpointError(CheckpointError, FileNotFoundError):
    """The file to load does not exist: a FileNotFoundError, as torch.load raises."""


def as_tensor(value: Any) -> Tensor:
    """A flame Tensor from a flame Tensor, a NumPy array or anything NumPy can read (a CPU torch tensor)."""
    if isinstance(value, Tensor):
        return value
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor: no torch import needed
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":  # NumPy has no bf16: reinterpret the bits
            import ml_dtypes
            import torch

            value = value.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        else:
            value = value.numpy()
    arr = np.asarray(value)
    try:
        dt = dtype_of(arr.dtype)
    except Exception:
        raise CheckpointError(f"cannot make a flame tensor from an array of dtype {arr.dtype}") from None
    return share_tensor(arr, dt)


def copy_pairs(pairs: list[tuple[Tensor, Tensor]]) -> None:
    """dst.copy_(src) for each pair, recording no gradient history."""
    with no_grad():
        for dst, src in pairs:
            dst.copy_(src)


def _to_numpy(name: str, value: Any) -> np.ndarray:
    if isinstance(value, Tensor):
        arr = value.numpy()
    else:
        arr = as_tensor(value).numpy()
    if arr.dtype not in _ST_DTYPES:
        raise CheckpointError(f"cannot save {name!r}: dtype {arr.dtype} has no safetensors equivalent")
    return arr if arr.flags.c_contiguous else arr.copy(order="C")  # (ascontiguousarray makes 0-d 1-d)


def _write(f, data: bytes) -> None:
    """Write all of data (in chunks; a test makes this fail midway to check atomicity)."""
    view = memoryview(data)
    for i in range(0, len(view), _CHUNK):
        f.write(view[i : i + _CHUNK])


def _atomic_write(path: str | os.PathLike, data: bytes) -> None:
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    # temp files of saves to the same path killed midway (their process is gone) would pile up
    remove_dead_temps(folder, f".{os.path.basename(path)}.", ".tmp")
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(f".{os.path.basename(path)}."), suffix=".tmp", dir=folder)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)
        with os.fdopen(fd, "wb") as f:
            _write(f, data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:  # make the rename itself durable
        dfd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def _json_default(x):
    if isinstance(x, np.generic):  # NumPy scalars (an np.int64 epoch, an np.float32 loss)
        return x.item()
    raise TypeError(f"{type(x).__name__} is not JSON serialisable")


def _encode_metadata(metadata: dict[str, Any] | None) -> dict[str, str]:
    """safetensors stores string -> string: strings are kept as they are (other tools read them),
    any other value JSON-serialisable (numbers, bools, None, lists, dicts) is stored as JSON text and
    its key listed under _JSON_KEY, so load_metadata gives the value back."""
    out: dict[str, str] = {}
    encoded = []
    for k, v in (metadata or {}).items():
        if not isinstance(k, str):
            raise CheckpointError(f"metadata keys must be strings, got {k!r} ({type(k).__name__})")
        if k == _JSON_KEY:
            raise CheckpointError(f"metadata key {k!r} is reserved by flame")
        if isinstance(v, str):
            out[k] = v
            continue
        try:
            out[k] = json.dumps(v, default=_json_default, allow_nan=True)
        except (TypeError, ValueError, RecursionError) as e:
            raise CheckpointError(
                f"metadata {k!r}: a {type(v).__name__} cannot be stored (metadata values "
                f"must be strings or JSON-serialisable: numbers, bools, None, lists, dicts; "
                f"{e})"
            ) from None
        if _json_depth(out[k]) > _MAX_JSON_DEPTH:
            raise CheckpointError(f"metadata {k!r}: nested deeper than {_MAX_JSON_DEPTH} levels")
        encoded.append(k)
    if encoded:
        out[_JSON_KEY] = json.dumps(encoded)
    return out


_ORDER_KEY = "flame.order"  # header metadata of a flat name -> tensor file: the names in the order saved
_ORDERED_KEY = "flame.ordered_dict"  # header metadata of a flat file: "true" when an OrderedDict was saved
_SAME_KEY = "flame.same"  # header metadata of a flat file: name -> the earlier name it was saved as the same tensor as
_GRAD_KEY = "flame.grad"  # header metadata: name -> how a tensor saved as a Parameter / needing gradients loads
_OBJECT_KEY = "flame.object"  # header metadata: the saved object's structure, tensors as {"__tensor__": name}
# header metadata: the tensors that were views of one storage, [[base shape, {name: its view chain}, the name
# of the storage's other elements or null], ...]
_VIEWS_KEY = "flame.views"
_REST_NAME = "flame.storage."  # (+ a number) the elements of a storage no saved view holds, in storage order
_SPARSE_STORAGE = 4  # views of a storage more than this many times their elements (plus a little) load apart


def _view_groups(raw: dict[str, Any]) -> tuple[list, dict[str, np.ndarray]]:
    """The saved flame tensors that share a storage (views of one base, the base among them or not; a view
    saved alone too), as [base shape, {name: the view ops from the base, [op, attrs, shape] each}, rest]
    per storage, which load makes views of one storage again, as torch.load's tensors share the storage
    torch.save wrote once. Each name still holds its own elements (plain safetensors readers see them);
    the elements of the storage no saved tensor holds are saved too, as torch saves the whole storage,
    in an entry of their own named `rest` (None where there are none), returned beside the groups. A
    storage far larger than what its saved views show (two rows of an embedding table) is not rebuilt:
    those views load as tensors of their own."""
    groups: dict[int, tuple[Tensor, dict]] = {}
    for name, t in raw.items():
        if not isinstance(t, Tensor) or t._value is not None:
            continue
        base = t._base if t._base is not None else t
        if t is base or np.may_share_memory(t._data, base._data):
            groups.setdefault(id(base), (base, {}))[1][name] = t
    out, rests = [], {}
    for base, members in groups.values():
        if all(t is base for t in members.values()):
            continue  # the base alone (saved under several names: _SAME_KEY / _skeleton's names)
        shown = sum(t.numel() for t in members.values())
        if base.numel() > _SPARSE_STORAGE * shown + 4096:
            continue
        chains = {}
        for name, t in members.items():
            chain = [] if t is base else [[op.name, dict(attrs), list(shape)] for op, attrs, shape in t._chain
                                         if op.view is not None]
            chains[name] = chain
        try:
            json.dumps(chains)
        except (TypeError, ValueError):
            continue
        rest = None
        if all(t is not base for t in members.values()):
            held = np.zeros(base.numel(), dtype=bool)
            for t in members.values():
                held[positions(t).reshape(-1)] = True
            if not held.all():
                rest = next(f"{_REST_NAME}{k}" for k in range(len(raw) + len(out) + 1)
                            if f"{_REST_NAME}{k}" not in raw and f"{_REST_NAME}{k}" not in rests)
                rests[rest] = _to_numpy(rest, base).reshape(-1)[~held]
        out.append([list(base.shape), chains, rest])
    return out, rests


def _share_views(path: Any, tensors: dict[str, Tensor], groups: Any) -> None:
    """Make the tensors _view_groups recorded views of one storage again (rebuilt from their elements)."""
    where = _where(path)

    def bad(what: str) -> CheckpointError:
        return CheckpointError(f"{where!r}: {_VIEWS_KEY} is malformed: {what}")

    if not isinstance(groups, list):
        raise bad("not a list")
    rests = set()
    for group in groups:
        if not (isinstance(group, list) and len(group) in (2, 3) and isinstance(group[1], dict)):
            raise bad(f"{_REPR.repr(group)} is not [base shape, {{name: view ops}}, rest]")
        shape, chains, rest = (*group, None) if len(group) == 2 else group
        if rest is not None and (not isinstance(rest, str) or rest not in tensors or rest in chains):
            raise bad(f"the storage's other elements {_REPR.repr(rest)}, which the file does not hold")
        if not (isinstance(shape, list) and len(shape) <= _MAX_DEPTH
                and all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n for n in shape)):
            raise bad(f"base shape {_REPR.repr(shape)}")
        if any(name not in tensors for name in chains):
            raise bad(f"names {sorted(set(chains) - set(tensors))[:3]}, which the file does not hold")
        dtypes = {tensors[name].dtype for name in chains}
        if len(dtypes) != 1 or math.prod(shape) > _SPARSE_STORAGE * sum(tensors[n].numel() for n in chains) + 4096:
            raise bad(f"views of a {shape} storage that are not of one dtype, or far fewer elements than it")
        for name, chain in chains.items():
            if not isinstance(chain, list) or not all(
                isinstance(c, list) and len(c) == 3 and isinstance(c[0], str) and isinstance(c[1], dict)
                and isinstance(c[2], list) and REGISTRY.get(c[0]) is not None and REGISTRY[c[0]].view is not None
                and REGISTRY[c[0]].view.strided is not None
                for c in chain
            ):
                raise bad(f"{name!r}: {_REPR.repr(chain)} is not a list of [view op, attributes, shape]")
        storage = np.zeros(math.prod(shape), dtype=tensors[next(iter(chains))].numpy().dtype)
        held = np.zeros(storage.size, dtype=bool)
        for name, chain in chains.items():
            pos = np.arange(storage.size, dtype=np.int64).reshape(shape)
            try:
                for op, attrs, out in chain:
                    pos = REGISTRY[op].view.strided(pos, tuple(out), **attrs)
            except Exception as e:  # (the attributes are the file's: any error of the op's is its)
                raise bad(f"{name!r}: its view ops do not apply to a {shape} storage ({e})") from None
            if tuple(pos.shape) != tuple(tensors[name].shape):
                raise bad(f"{name!r}: its view ops give shape {list(pos.shape)}, not its {list(tensors[name].shape)}")
            storage[pos], held[pos] = tensors[name].numpy(), True
        if rest is not None:
            others = tensors[rest].numpy()
            if others.dtype != storage.dtype or others.shape != (storage.size - int(held.sum()),):
                raise bad(f"{rest!r} does not hold the {storage.size - int(held.sum())} {storage.dtype} elements "
                          f"of the storage no view holds")
            storage[~held] = others
            rests.add(rest)
        base = as_tensor(storage.reshape(shape))
        for name, chain in chains.items():
            t = base
            for op, attrs, _ in chain:
                t = apply(op, t, **attrs)
            tensors[name] = t
    for rest in rests:
        del tensors[rest]


def _is_array(v: Any) -> bool:
    return isinstance(v, (Tensor, np.ndarray)) or (hasattr(v, "detach") and hasattr(v, "cpu"))


def _skeleton(obj: Any, path: str, arrays: dict[str, Any], depth: int = 0, names: dict[int, str] | None = None) -> Any:
    """obj as JSON, each tensor replaced by {"__tensor__": its name in the file} (named by the path
    where it first occurs: a tensor met again names the same entry, so it loads as one tensor, as
    torch's pickle memo keeps it); at most _MAX_DEPTH containers deep. `names`: id -> name of the
    tensors in `arrays`."""
    names = {id(v): k for k, v in arrays.items()} if names is None else names
    if isinstance(obj, (dict, list, tuple)) and depth == _MAX_DEPTH:
        raise CheckpointError(f"cannot save {path or 'the object'}: containers nested deeper than {_MAX_DEPTH} levels")
    if _is_array(obj):
        if id(obj) in names:  # (arrays keeps each saved object alive, so ids are not reused)
            return {"__tensor__": names[id(obj)]}
        name, n = path or "tensor", 1
        while name in arrays:
            name, n = f"{path or 'tensor'}#{n}", n + 1
        arrays[name] = obj
        names[id(obj)] = name
        return {"__tensor__": name}
    if isinstance(obj, dict):
        for k in obj:
            if not isinstance(k, (str, int, float, bool)) and k is not None:
                raise CheckpointError(f"cannot save a dict key of type {type(k).__name__} ({k!r})")
        return {
            "__ordered_dict__" if isinstance(obj, collections.OrderedDict) else "__dict__": [
                [k, _skeleton(v, f"{path}.{k}" if path else str(k), arrays, depth + 1, names)] for k, v in obj.items()
            ]
        }
    if isinstance(obj, (list, tuple)):
        items = [_skeleton(v, f"{path}.{i}" if path else str(i), arrays, depth + 1, names) for i, v in enumerate(obj)]
        if isinstance(obj, list):
            return items
        cls, fields = type(obj), getattr(type(obj), "_fields", None)
        # a namedtuple whose class its module holds: found again by module and name when loading
        # (_namedtuple); one no module holds (made inside a function) stays a plain tuple
        if isinstance(fields, tuple) and _find_namedtuple(cls.__module__, cls.__qualname__, fields) is cls:
            return {"__namedtuple__": [cls.__module__, cls.__qualname__, list(fields), items]}
        return {"__tuple__": items}
    if obj is None or isinstance(obj, (str, bool, int, float)):
        return obj
    if isinstance(obj, np.generic):
        return obj.item()
    dtype = _as_dtype(obj)
    if dtype is not None:
        return {"__dtype__": dtype.name}
    raise CheckpointError(
        f"cannot save {path or 'the object'} of type {type(obj).__name__}: flame.save stores "
        f"tensors, dtypes, numbers, strings, None and dicts / lists / tuples / namedtuples of them (no pickle)"
    )


def _as_dtype(obj: Any) -> DType | None:
    """obj as a flame DType where it is one (flame.float32) or torch's (torch.float32, saved as flame's)."""
    if isinstance(obj, DType):
        return obj
    if type(obj).__name__ == "dtype" and type(obj).__module__ == "torch":
        try:
            return dtype_of(str(obj).removeprefix("torch."))
        except DTypeError:
            raise CheckpointError(f"cannot save dtype {obj}: flame has no such dtype") from None
    return None


def _find_namedtuple(module: str, qualname: str, fields: tuple) -> type | None:
    """The namedtuple class `module`.`qualname` with these fields, in a module already imported (looked up
    through the module's and classes' own dictionaries: nothing is imported and no code runs); None."""
    cls = sys.modules.get(module)
    for part in qualname.split("."):
        cls = vars(cls).get(part) if hasattr(cls, "__dict__") else None
    if not (isinstance(cls, type) and issubclass(cls, tuple)):
        return None
    return cls if inspect.getattr_static(cls, "_fields", None) == tuple(fields) else None


def _namedtuple(where: str, at: str, body: list, items: tuple) -> tuple:
    """The namedtuple a file names (module, qualified name, fields) holding items: its class found in a
    module this process has already imported, looked up through the modules' and classes' own
    dictionaries, and built with tuple.__new__, so that loading imports nothing and runs no code of
    the class (as torch.load with the class importable gives it back)."""
    module, qualname, fields = body[0], body[1], body[2]
    cls = _find_namedtuple(module, qualname, tuple(fields))
    if cls is None or len(items) != len(fields):
        raise CheckpointError(
            f"{where!r}: {'the object' if not at else repr(at)} is a namedtuple {module}.{qualname}{tuple(fields)}, "
            f"which no imported module defines (flame.load imports nothing): import {module} first"
        )
    return tuple.__new__(cls, items)


def _rebuild(skel: Any, tensors: dict[str, Tensor], where: str, at: str = "") -> Any:
    """The object _skeleton described (its nesting already bounded by _parse_json); CheckpointError
    naming the file and the place (`at`) where the description is not one _skeleton makes."""
    if isinstance(skel, list):
        return [_rebuild(v, tensors, where, f"{at}.{i}" if at else str(i)) for i, v in enumerate(skel)]
    if not isinstance(skel, dict):
        return skel  # JSON's scalars: what _skeleton stores as they are
    kind, body = next(iter(skel.items())) if len(skel) == 1 else (None, None)
    if kind == "__tensor__" and isinstance(body, str):
        if body not in tensors:
            raise _malformed(where, at, f"names tensor {body!r}, which the file does not hold")
        return tensors[body]
    if kind == "__tuple__" and isinstance(body, list):
        return tuple(_rebuild(v, tensors, where, f"{at}.{i}" if at else str(i)) for i, v in enumerate(body))
    if kind == "__dtype__" and isinstance(body, str) and body in _DTYPE_NAMES:
        return dtype_of(body)
    if (
        kind == "__namedtuple__"
        and isinstance(body, list)
        and len(body) == 4
        and all(isinstance(x, str) for x in body[:2])
        and isinstance(body[2], list)
        and all(isinstance(f, str) for f in body[2])
        and isinstance(body[3], list)
    ):
        items = tuple(_rebuild(v, tensors, where, f"{at}.{i}" if at else str(i)) for i, v in enumerate(body[3]))
        return _namedtuple(where, at, body, items)
    if (
        kind in ("__dict__", "__ordered_dict__")
        and isinstance(body, list)
        and all(
            isinstance(p, list) and len(p) == 2 and (p[0] is None or isinstance(p[0], (str, int, float))) for p in body
        )
    ):
        items = ((k, _rebuild(v, tensors, where, f"{at}.{k}" if at else str(k))) for k, v in body)
        return dict(items) if kind == "__dict__" else collections.OrderedDict(items)
    raise _malformed(where, at, f"is {_REPR.repr(skel)}, not a tensor, tuple or dict as flame.save writes them")


def _malformed(where: str, at: str, what: str) -> CheckpointError:
    return CheckpointError(
        f"{where!r}: the saved object ({_OBJECT_KEY}) is malformed: {'the object' if not at else repr(at)} {what}"
    )


def save(obj: Any, f: str | os.PathLike | Any, *, metadata: dict[str, Any] | None = None) -> None:
    """flame.save(obj, f): obj to a safetensors file (a path, written atomically, or a binary file
    object). A flat name -> tensor dict (a state_dict) is a plain safetensors file that
    safetensors.torch.load_file reads; a tensor, or dicts / lists / tuples of tensors, numbers and
    strings (an optimizer's state_dict, {"model": ..., "epoch": 3}) keep their structure as JSON in the
    header. Nothing is pickled, so loading never runs code. As torch's: tensors that are views of one
    storage load as views of one storage, with its elements no saved view holds (kept in an entry of their
    own, flame.storage.N: _view_groups), a namedtuple loads as its class (found in a
    module the loading process has imported, _namedtuple), a dtype (flame.float32, or torch's) as flame's.
    `metadata` is extra information for the header: strings as they are, other JSON-serialisable values
    as JSON that load_metadata decodes."""
    meta = {"format": "pt", **_encode_metadata(metadata)}
    flat = isinstance(obj, dict) and all(isinstance(k, str) and _is_array(v) for k, v in obj.items())
    if flat:
        raw = dict(obj)
        meta[_ORDER_KEY] = json.dumps(list(raw))  # safetensors sorts its names; load gives this order back
        if isinstance(obj, collections.OrderedDict):  # a state_dict: it loads as one again
            meta[_ORDERED_KEY] = "true"
        first: dict[int, str] = {}
        same = {k: first.setdefault(id(v), k) for k, v in raw.items() if first.setdefault(id(v), k) != k}
        if same:  # each name keeps its copy (plain safetensors readers see every name); load ties them again
            meta[_SAME_KEY] = json.dumps(same)
    else:
        raw = {}
        meta[_OBJECT_KEY] = json.dumps(_skeleton(obj, "", raw))
    shared, rests = _view_groups(raw)
    if shared:
        meta[_VIEWS_KEY] = json.dumps(shared)
    grad = {str(k): kind for k, v in raw.items() if (kind := _grad_kind(v))}
    if grad:
        meta[_GRAD_KEY] = json.dumps(grad)
    arrays = {**{str(k): _to_numpy(str(k), v) for k, v in raw.items()}, **rests}
    data = safetensors.numpy.save(arrays, metadata=meta)
    if hasattr(f, "write"):
        f.write(data)
    else:
        _atomic_write(f, data)


def _read(path: str | os.PathLike | Any) -> bytes:
    if hasattr(path, "read"):
        return path.read()
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise MissingCheckpointError(f"checkpoint {_where(path)!r} does not exist") from None


def load(f: str | os.PathLike | Any, map_location: Any = None, *, weights_only: bool | None = None) -> Any:
    """flame.load(f): what flame.save wrote (its structure back), or a dict of flame Tensors on the
    current device for any other safetensors file (safetensors.torch.save_file's). Tensors always load
    onto the device this process runs on (flame has one executor per process): map_location is checked
    to name a device and otherwise ignored; weights_only is accepted for PyTorch compatibility (nothing
    is ever unpickled)."""
    if map_location is not None and not callable(map_location) and not isinstance(map_location, dict):
        from flame.runtime.device import Device

        Device(map_location)
    path = f
    data = _read(path)
    tensors = _load_tensors(path, data)
    meta = _header_metadata(path, data)
    if _VIEWS_KEY in meta:
        _share_views(path, tensors, _parse_json(_where(path), f"the views ({_VIEWS_KEY})", meta[_VIEWS_KEY]))
    if _GRAD_KEY in meta:
        _regrad(path, tensors, _parse_json(_where(path), f"the tensors' gradient flags ({_GRAD_KEY})", meta[_GRAD_KEY]))
    if _OBJECT_KEY in meta:
        where = _where(path)
        return _rebuild(_parse_json(where, f"the saved object ({_OBJECT_KEY})", meta[_OBJECT_KEY]), tensors, where)
    order = []
    if _ORDER_KEY in meta:
        order = _parse_json(_where(path), f"the names' order ({_ORDER_KEY})", meta[_ORDER_KEY])
    if _SAME_KEY in meta:
        _tie(path, tensors, _parse_json(_where(path), f"the tied names ({_SAME_KEY})", meta[_SAME_KEY]))
    if isinstance(order, list) and sorted(map(str, order)) == sorted(tensors):
        tensors = {k: tensors[k] for k in order}
    return collections.OrderedDict(tensors) if meta.get(_ORDERED_KEY) == "true" else tensors


def _grad_kind(v: Any) -> str | None:
    """How a saved tensor comes back: "parameter" (a Parameter, as torch.nn.Parameter pickles),
    "frozen parameter" (one with requires_grad=False), "requires_grad" (a leaf needing gradients), or
    None (a plain tensor)."""
    rg = bool(getattr(v, "requires_grad", False))
    if type(v).__name__ == "Parameter":  # flame's or torch's
        return "parameter" if rg else "frozen parameter"
    return "requires_grad" if rg else None


def _regrad(path: Any, tensors: dict[str, Tensor], grad: Any) -> None:
    """Make the tensors that were saved as Parameters, or needing gradients, so again."""
    kinds = ("parameter", "frozen parameter", "requires_grad")
    if not isinstance(grad, dict) or not all(k in tensors and v in kinds for k, v in grad.items()):
        raise CheckpointError(f"{_where(path)!r}: {_GRAD_KEY} does not map tensor names to one of {kinds}")
    for k, kind in grad.items():
        if kind == "requires_grad":
            tensors[k].requires_grad_(True)
        else:
            tensors[k] = Parameter(tensors[k], requires_grad=kind == "parameter")


def _tie(path: Any, tensors: dict[str, Tensor], same: Any) -> None:
    """tensors[name] = tensors[first] for each name saved as the same tensor as an earlier one."""
    if not isinstance(same, dict) or not all(
        isinstance(v, str)
        and k in tensors
        and v in tensors
        and tensors[k].shape == tensors[v].shape
        and tensors[k].dtype == tensors[v].dtype
        for k, v in same.items()
    ):
        raise CheckpointError(f"{_where(path)!r}: {_SAME_KEY} does not map names to names of equal tensors")
    for k, v in same.items():
        tensors[k] = tensors[v]


def _where(f: Any) -> str:
    """How an error names the file: its path, a file object's name, or its type."""
    name = getattr(f, "name", f)
    try:
        return os.fsdecode(name)
    except TypeError:
        return f"<{type(f).__name__}>"


def _json_depth(text: str | bytes) -> int:
    """The deepest nesting of [ and { in JSON text, outside its strings, counted without parsing it."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    bare = np.frombuffer(_JSON_STRING.sub(b"", data), np.uint8)
    step = np.isin(bare, (ord("["), ord("{"))).astype(np.int64) - np.isin(bare, (ord("]"), ord("}")))
    return int(np.cumsum(step).max(initial=0))


def _parse_json(where: str, what: str, text: str | bytes) -> Any:
    """JSON text of a file's header (`what` names it); CheckpointError naming the file when it is not
    JSON, or is nested deeper than _MAX_JSON_DEPTH (refused before parsing)."""
    depth = _json_depth(text)
    if depth > _MAX_JSON_DEPTH:
        raise CheckpointError(f"{where!r}: {what}: JSON nested {depth} levels deep (at most {_MAX_JSON_DEPTH})")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError and too long an integer are ValueErrors
        raise CheckpointError(f"{where!r}: {what}: not valid JSON ({e})") from None


def _load_tensors(path: Any, data: bytes) -> dict[str, Tensor]:
    path = _where(path)
    try:
        items = deserialize(data)
    except CheckpointError:
        raise
    except Exception as e:
        raise CheckpointError(f"{path!r} is not a valid safetensors file: {e}{_torch_format_hint(data)}") from None
    out = {}
    for name, info in items:
        if info["dtype"] not in _NP_DTYPES:
            raise CheckpointError(f"{path!r}: tensor {name!r} has unsupported dtype {info['dtype']}")
        arr = np.frombuffer(info["data"], dtype=_NP_DTYPES[info["dtype"]]).reshape(info["shape"])
        out[name] = as_tensor(arr.copy())
    return out


def _torch_format_hint(data: bytes) -> str:
    """What to do with a file torch.save wrote (a zip archive, or a pickle of the legacy format):
    flame reads safetensors and never unpickles."""
    if not (data[:4] == b"PK\x03\x04" or data[:1] == b"\x80"):
        return ""
    return (
        "; it looks like a file torch.save wrote (a pickle), which flame does not read (loading a pickle can "
        "run code). Convert it once with PyTorch: `import torch, safetensors.torch; "
        "safetensors.torch.save_file(torch.load(path, map_location='cpu'), 'model.safetensors')` (for a "
        "state_dict of tensors; save_file needs contiguous tensors that share no memory), then "
        "flame.load('model.safetensors')"
    )


def load_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """The metadata of a safetensors file's header (values saved as non-strings decoded from JSON
    again); CheckpointError if the header is malformed."""
    return _decode_metadata(path, _header_metadata(path, _read(path)))


def _header_metadata(path: Any, data: bytes) -> dict[str, str]:
    path = _where(path)
    try:
        (n,) = struct.unpack("<Q", data[:8])
        if n > len(data) - 8:
            raise ValueError(f"the header claims {n} bytes but the file has {len(data) - 8} after the length")
    except (struct.error, ValueError) as e:
        raise CheckpointError(f"{path!r} is not a valid safetensors file: {e}") from None
    header = _parse_json(path, "the safetensors header", data[8 : 8 + n])
    meta = (header.get("__metadata__") or {}) if isinstance(header, dict) else None
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise CheckpointError(
            f"{path!r} is not a valid safetensors file: the header's __metadata__ is not a string -> string map"
        )
    return dict(meta)


def _decode_metadata(path, meta: dict[str, str]) -> dict[str, Any]:
    if _JSON_KEY not in meta:
        return meta
    where = _where(path)
    keys = _parse_json(where, f"the metadata key {_JSON_KEY!r}", meta.pop(_JSON_KEY))
    if not isinstance(keys, list) or not all(isinstance(k, str) and k in meta for k in keys):
        raise CheckpointError(f"{where!r}: malformed metadata ({_JSON_KEY} does not list metadata keys)")
    for k in keys:
        meta[k] = _parse_json(where, f"metadata {k!r}", meta[k])
    return meta


def _rank_and_barrier():
    from flame.distributed import barrier, get_rank

    return get_rank(), barrier


def save_checkpoint(path: str | os.PathLike, model, optimizer=None, metadata: dict[str, Any] | None = None) -> None:
    """Save model.state_dict() (and optimizer.state_dict(), if given) to one safetensors file, atomically.
    metadata: extra values to keep with it (`{"epoch": 3, "note": "..."}`): strings, or anything JSON
    can hold; load_checkpoint returns them with their types. In a process group every rank calls it (a
    sharded ZeRO optimizer gathers its state), rank 0 alone writes — the file a single-GPU run writes: a
    DistributedDataParallel model is saved as the module it wraps — and every rank returns once the
    file is in place."""
    from flame.distributed.buckets import unwrap

    model = unwrap(model)
    tensors: dict[str, Any] = dict(model.state_dict())
    meta = dict(metadata or {})
    if _GROUPS_KEY in meta:
        raise CheckpointError(f"metadata key {_GROUPS_KEY!r} is reserved by flame")
    if optimizer is not None:
        sd = optimizer.state_dict()
        for i, st in sd["state"].items():
            for k, t in st.items():
                tensors[f"{_OPT}state/{i}/{k}"] = t
        meta[_GROUPS_KEY] = json.dumps(sd["param_groups"])
    rank, barrier = _rank_and_barrier()
    if rank == 0:
        save(tensors, path, metadata=meta)
    barrier()


def _optimizer_section(path, tensors: dict[str, Tensor], meta: dict[str, str]) -> dict:
    """The optimizer's state_dict stored in a checkpoint; CheckpointError naming the file if malformed."""
    where = _where(path)
    if _GROUPS_KEY not in meta:
        raise CheckpointError(f"{where!r} holds no optimizer state (it was saved without one)")
    state: dict[int, dict[str, Tensor]] = {}
    for k, v in tensors.items():
        if k.startswith(_OPT + "state/"):
            i, _, name = k[len(_OPT + "state/") :].partition("/")
            if not _STATE_INDEX.fullmatch(i) or not name:
                raise CheckpointError(f"{where!r}: optimizer tensor {k!r} is not named {_OPT}state/INDEX/NAME")
            state.setdefault(int(i), {})[name] = v
    groups = _parse_json(where, "the optimizer's parameter groups", meta[_GROUPS_KEY])
    if not isinstance(groups, list) or not all(
        isinstance(g, dict)
        and isinstance(g.get("params"), list)
        and all(isinstance(i, int) and not isinstance(i, bool) for i in g["params"])
        for g in groups
    ):
        raise CheckpointError(
            f"{where!r}: the optimizer's parameter groups are not a list of groups with integer 'params' lists"
        )
    return {"state": state, "param_groups": groups}


def load_checkpoint(path: str | os.PathLike, model, optimizer=None, strict: bool = True) -> dict[str, Any]:
    """Load a checkpoint into model (and optimizer) in place; returns the file's metadata (as saved:
    `{"epoch": 3}` comes back as the int 3). Raises flame.CheckpointError listing every missing,
    unexpected and mis-shaped tensor. Every rank of a process group may load the same file (a ZeRO
    optimizer keeps its part of the state)."""
    from flame.distributed.buckets import unwrap

    model = unwrap(model)
    tensors = load(path)
    meta = load_metadata(path)
    model_sd = {k: v for k, v in tensors.items() if not k.startswith(_OPT)}
    opt_sd = _optimizer_section(path, tensors, meta) if optimizer is not None else None
    try:  # check everything before changing anything
        model_pairs, _ = model.plan_load(model_sd, strict=strict)
        opt_pairs = optimizer.plan_load(opt_sd) if optimizer is not None else None
    except CheckpointError as e:
        raise CheckpointError(f"{_where(path)!r}: {e}") from None
    copy_pairs(model_pairs)
    if optimizer is not None:
        optimizer.apply_load(opt_pairs, opt_sd)
    return meta
