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


def save(state_dict: dict[str, Any], path: str | os.PathLike, metadata: dict[str, str] | None = None) -> None:
    """Write name -> tensor (flame Tensors, NumPy arrays or torch tensors) to a safetensors file,
    atomically. `metadata` is extra text stored in the header."""
    arrays = {str(k): _to_numpy(str(k), v) for k, v in state_dict.items()}
    meta = {"format": "pt", **(metadata or {})}
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


def load_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The text metadata of a safetensors file's header; CheckpointError if the header is malformed."""
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
    return dict(meta)


def _rank_and_barrier():
    from flame.distributed import barrier, get_rank

    return get_rank(), barrier


def save_checkpoint(path: str | os.PathLike, model, optimizer=None, metadata: dict[str, str] | None = None) -> None:
    """Save model.state_dict() (and optimizer.state_dict(), if given) to one safetensors file, atomically.
    In a process group every rank calls it (a sharded ZeRO optimizer gathers its state), rank 0 alone
    writes — the file a single-GPU run writes: a DistributedDataParallel model is saved as the module it
    wraps — and every rank returns once the file is in place."""
    from flame.nn.parallel import unwrap

    model = unwrap(model)
    tensors: dict[str, Any] = dict(model.state_dict())
    meta = dict(metadata or {})
    if optimizer is not None:
        sd = optimizer.state_dict()
        for i, st in sd["state"].items():
            for k, t in st.items():
                tensors[f"{_OPT}state/{i}/{k}"] = t
        meta[_GROUPS_KEY] = json.dumps(sd["param_groups"])
    rank, barrier = _rank_and_barrier()
    if rank == 0:
        save(tensors, path, meta)
    barrier()


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


def load_checkpoint(path: str | os.PathLike, model, optimizer=None, strict: bool = True) -> dict[str, str]:
    """Load a checkpoint into model (and optimizer) in place; returns the file's metadata. Raises
    flame.CheckpointError listing every missing, unexpected and mis-shaped tensor. Every rank of a
    process group may load the same file (a ZeRO optimizer keeps its part of the state)."""
    from flame.nn.parallel import unwrap

    model = unwrap(model)
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
