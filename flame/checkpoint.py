"""Checkpoints as safetensors files. `save`/`load` move a flat name -> tensor dict; `save_checkpoint`
/ `load_checkpoint` store a model (under its state_dict names, so a file written by PyTorch's
`safetensors.torch.save_file` loads) and optionally an optimizer (under `optimizer/...` names, with
its hyperparameters as JSON metadata). Saving is atomic: the bytes go to a temporary file in the same
directory, are fsync'ed, and os.replace() puts the file in place, so a crash mid-save leaves the
previous checkpoint intact."""

from __future__ import annotations

import json
import os
import struct
import tempfile
from typing import Any

import ml_dtypes
import numpy as np
import safetensors.numpy
from safetensors import deserialize

from flame._tempfiles import remove_dead_temps, temp_prefix
from flame.errors import CheckpointError
from flame.frontend.tensor import Tensor
from flame.nn.module import as_tensor, copy_pairs

__all__ = ["load", "load_checkpoint", "load_metadata", "save", "save_checkpoint"]

_OPT = "optimizer/"
_GROUPS_KEY = "flame.optimizer.param_groups"
_JSON_KEY = "flame.metadata.json"  # the metadata keys whose values were not strings, stored as JSON text
_NP_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
              "I64": np.int64, "I32": np.int32, "BOOL": np.bool_}  # the dtypes flame has
_ST_DTYPES = {np.dtype(v): k for k, v in _NP_DTYPES.items()}
_CHUNK = 1 << 24
_UMASK = os.umask(0o022)
os.umask(_UMASK)  # read once, so a saved file gets the usual permissions (mkstemp's are 0600)


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
        f.write(view[i:i + _CHUNK])


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
        except (TypeError, ValueError) as e:
            raise CheckpointError(f"metadata {k!r}: a {type(v).__name__} cannot be stored (metadata values "
                                  f"must be strings or JSON-serialisable: numbers, bools, None, lists, dicts; "
                                  f"{e})") from None
        encoded.append(k)
    if encoded:
        out[_JSON_KEY] = json.dumps(encoded)
    return out


def save(state_dict: dict[str, Any], path: str | os.PathLike, metadata: dict[str, Any] | None = None) -> None:
    """Write name -> tensor (flame Tensors, NumPy arrays or torch tensors) to a safetensors file,
    atomically. `metadata` is extra information stored in the header: strings as they are, other
    JSON-serialisable values (numbers, lists, dicts ...) as JSON that load_metadata decodes again."""
    arrays = {str(k): _to_numpy(str(k), v) for k, v in state_dict.items()}
    meta = {"format": "pt", **_encode_metadata(metadata)}
    _atomic_write(path, safetensors.numpy.save(arrays, metadata=meta))


def _read(path: str | os.PathLike) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {os.fspath(path)!r} does not exist") from None


def load(path: str | os.PathLike) -> dict[str, Tensor]:
    """Read a safetensors file (flame's or one written by safetensors.torch.save_file) into a dict of
    flame Tensors on the current device."""
    try:
        items = deserialize(_read(path))
    except CheckpointError:
        raise
    except Exception as e:
        raise CheckpointError(f"{os.fspath(path)!r} is not a valid safetensors file: {e}") from None
    out = {}
    for name, info in items:
        if info["dtype"] not in _NP_DTYPES:
            raise CheckpointError(f"{os.fspath(path)!r}: tensor {name!r} has unsupported dtype {info['dtype']}")
        arr = np.frombuffer(info["data"], dtype=_NP_DTYPES[info["dtype"]]).reshape(info["shape"])
        out[name] = as_tensor(arr.copy())
    return out


def load_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """The metadata of a safetensors file's header (values saved as non-strings decoded from JSON
    again); CheckpointError if the header is malformed."""
    data = _read(path)
    try:
        (n,) = struct.unpack("<Q", data[:8])
        if n > len(data) - 8:
            raise ValueError(f"the header claims {n} bytes but the file has {len(data) - 8} after the length")
        header = json.loads(data[8:8 + n])
        meta = (header.get("__metadata__") or {}) if isinstance(header, dict) else None
        if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
            raise ValueError("the header's __metadata__ is not a string -> string map")
    except (struct.error, ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{os.fspath(path)!r} is not a valid safetensors file: {e}") from None
    return _decode_metadata(path, dict(meta))


def _decode_metadata(path, meta: dict[str, str]) -> dict[str, Any]:
    if _JSON_KEY not in meta:
        return meta
    try:
        keys = json.loads(meta.pop(_JSON_KEY))
        if not isinstance(keys, list) or not all(isinstance(k, str) and k in meta for k in keys):
            raise ValueError(f"{_JSON_KEY} does not list metadata keys")
        for k in keys:
            meta[k] = json.loads(meta[k])
    except ValueError as e:
        raise CheckpointError(f"{os.fspath(path)!r}: malformed metadata ({e})") from None
    return meta


def save_checkpoint(path: str | os.PathLike, model, optimizer=None, metadata: dict[str, Any] | None = None) -> None:
    """Save model.state_dict() (and optimizer.state_dict(), if given) to one safetensors file, atomically.
    metadata: extra values to keep with it (`{"epoch": 3, "note": "..."}`): strings, or anything JSON
    can hold; load_checkpoint returns them with their types."""
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
    save(tensors, path, meta)


def _optimizer_section(path, tensors: dict[str, Tensor], meta: dict[str, str]) -> dict:
    """The optimizer's state_dict stored in a checkpoint; CheckpointError naming the file if malformed."""
    where = os.fspath(path)
    if _GROUPS_KEY not in meta:
        raise CheckpointError(f"{where!r} holds no optimizer state (it was saved without one)")
    state: dict[int, dict[str, Tensor]] = {}
    for k, v in tensors.items():
        if k.startswith(_OPT + "state/"):
            i, _, name = k[len(_OPT + "state/"):].partition("/")
            if not i.isdigit() or not name:
                raise CheckpointError(f"{where!r}: optimizer tensor {k!r} is not named {_OPT}state/INDEX/NAME")
            state.setdefault(int(i), {})[name] = v
    try:
        groups = json.loads(meta[_GROUPS_KEY])
    except ValueError as e:
        raise CheckpointError(f"{where!r}: the optimizer's parameter groups are not valid JSON ({e})") from None
    if not isinstance(groups, list) or not all(
            isinstance(g, dict) and isinstance(g.get("params"), list)
            and all(isinstance(i, int) and not isinstance(i, bool) for i in g["params"]) for g in groups):
        raise CheckpointError(f"{where!r}: the optimizer's parameter groups are not a list of groups with "
                              f"integer 'params' lists")
    return {"state": state, "param_groups": groups}


def load_checkpoint(path: str | os.PathLike, model, optimizer=None, strict: bool = True) -> dict[str, Any]:
    """Load a checkpoint into model (and optimizer) in place; returns the file's metadata (as saved:
    `{"epoch": 3}` comes back as the int 3). Raises
    flame.CheckpointError listing every missing, unexpected and mis-shaped tensor."""
    tensors = load(path)
    meta = load_metadata(path)
    model_sd = {k: v for k, v in tensors.items() if not k.startswith(_OPT)}
    opt_sd = _optimizer_section(path, tensors, meta) if optimizer is not None else None
    try:  # check everything before changing anything
        model_pairs, _ = model.plan_load(model_sd, strict=strict)
        opt_pairs = optimizer.plan_load(opt_sd) if optimizer is not None else None
    except CheckpointError as e:
        raise CheckpointError(f"{os.fspath(path)!r}: {e}") from None
    copy_pairs(model_pairs)
    if optimizer is not None:
        optimizer.apply_load(opt_pairs, opt_sd)
    return meta
