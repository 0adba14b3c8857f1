"""Built cuDNN graphs on disk, so that a new process loads the graphs of its convolutions and attention
calls instead of building them again (build_operation_graph, heuristics, check_support and build_plans
take milliseconds to seconds per graph; runtime/cudnn_conv.py and runtime/cudnn_attention.py).

    g = graph(cudnn, "conv ConvSpec(...) ...", "fprop convolution", build)   # loaded, or build() and stored

nvidia-cudnn-frontend serializes a built graph (`graph.serialize()`: its tensors, uids and the chosen
execution plan) and reads it back into an empty graph (`graph.deserialize(handle, data)`); the graph
then runs through the uids its tensors were given when it was built (CudnnConv and CudnnAttention give
every operand a fixed uid, so a loaded graph and a built one take the same variant pack).

An entry's name is the sha256 of the key text the caller makes of what decides the graph (the spec,
the direction, the build options), the GPU (name, compute capability, SM count), the cuDNN library's
and the frontend's versions and flame's version (its release and a digest of its files: a graph is
built by flame's code). Entries live in the kernel cache's directory under its rules (FLAME_CACHE_DIR;
signed with the per-user HMAC key and written atomically by flame.codegen.nvrtc.read_signed /
write_signed), with the suffix, the switch and the size limit of flame.plan.cache: FLAME_CACHE_SIZE=0
turns this off too, eviction counts these entries, and `flame cache` shows and clears them.

A graph the frontend cannot serialize (some engines have no serialized form), or whose serialized
form does not read back in the process that built it, is not stored (said at debug level). An entry
that fails its check (damaged, cut short, written without the key) or that cuDNN cannot read back
(deserialize raises) is deleted and its graph is built and stored again, with one RuntimeWarning.

COUNTS says what happened in this process, with the seconds spent building, loading and storing
graphs (a build that cuDNN refuses counted too): the share of a new process's start that is cuDNN's.
The CUDA executor makes a plan's graphs when it prepares the plan (runtime/cuda_steps.prepare), so
that share is part of the executor compile, not of the first step."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from flame.codegen import disk_cache, nvrtc
from flame.errors import FlameError
from flame.runtime.cudnn_graph import handle

log = logging.getLogger("flame")

MAGIC = b"FLAMECUDNN1\n"
SUFFIX = disk_cache.CUDNN_SUFFIX
_lock = threading.Lock()


@dataclass
class Counts:
    """What the cuDNN graph cache did in this process: graphs built (the cache missed or is off),
    loaded, stored, rebuilt (their entry failed its check or did not read back), not stored (no
    serialized form), and the seconds spent building, loading (looking for entries included) and
    storing them (serializing, the check that the form reads back, writing)."""

    built: int = 0
    loaded: int = 0
    stored: int = 0
    rebuilt: int = 0
    unstorable: int = 0
    build_seconds: float = 0.0
    load_seconds: float = 0.0
    store_seconds: float = 0.0

    @property
    def seconds(self) -> float:
        """Seconds spent on cuDNN graphs: building, loading and storing."""
        return self.build_seconds + self.load_seconds + self.store_seconds


COUNTS = Counts()


def _add(field: str, seconds: float) -> None:
    with _lock:
        setattr(COUNTS, field, getattr(COUNTS, field) + seconds)


@lru_cache(maxsize=16)
def _device_of(device_id: int) -> str:
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(device_id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    cc = cupy.cuda.Device(device_id).compute_capability
    return f"{name} sm_{cc} {props['multiProcessorCount']} SMs"


def _device() -> str:
    """The current GPU as a cuDNN plan depends on it: name, compute capability, SM count."""
    import cupy

    return _device_of(cupy.cuda.Device().id)


def entry_name(cudnn, key: str) -> str:
    """The file name of the entry for key text `key` on the current GPU with this cuDNN and frontend."""
    h = hashlib.sha256()
    for part in (
        "flame cudnn graph",
        disk_cache.flame_version(),
        key,
        _device(),
        f"cudnn {cudnn.backend_version()}",
        f"frontend {getattr(cudnn, '__version__', '?')}",
    ):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest() + SUFFIX


def graph(cudnn, key: str, label: str, build: Callable[[], object]):
    """The built graph for key text `key`: read back from its entry when there is one, else build()
    (which raises what cuDNN raises when it refuses) and stored. `label` names the graph in a warning
    ("fprop convolution"). Timed into COUNTS."""
    folder = _folder()
    path = None if folder is None else folder / entry_name(cudnn, key)
    if path is not None:
        t0 = time.perf_counter()
        g = _load(cudnn, path, label)
        _add("load_seconds", time.perf_counter() - t0)  # a miss or a bad entry's time included
        if g is not None:
            with _lock:
                COUNTS.loaded += 1
            return g
    t0 = time.perf_counter()
    try:
        g = build()
    finally:
        _add("build_seconds", time.perf_counter() - t0)
    with _lock:
        COUNTS.built += 1
    if path is not None:
        t0 = time.perf_counter()
        _store(cudnn, g, path, label)
        _add("store_seconds", time.perf_counter() - t0)
    return g


def _folder() -> Path | None:
    """The cache directory, or None when the cache is off (FLAME_CACHE_SIZE=0) or the directory
    cannot be used (nvrtc.usable_dir warns once)."""
    return nvrtc.usable_dir() if disk_cache.enabled() else None


def _warn(label: str, folder: Path, why: str) -> None:
    with _lock:
        COUNTS.rebuilt += 1
    warnings.warn(
        f"flame: the cached cuDNN graph of a {label} in {str(folder)!r} {why}; it is built again and stored anew",
        RuntimeWarning,
        stacklevel=4,
    )


def _deserialized(cudnn, payload: bytes):
    """A graph read back from serialized bytes (whatever the frontend raises when it cannot)."""
    g = cudnn.pygraph(handle=handle())
    g.deserialize(handle(), bytearray(payload))  # the binding takes a sequence of byte values, not bytes
    return g


def _load(cudnn, path: Path, label: str):
    """The graph of the entry at `path`, or None: none there, or the entry was bad (deleted, warned)."""
    try:
        payload = nvrtc.read_signed(path, MAGIC)
    except nvrtc.UnsignedEntry:
        _warn(label, path.parent, "failed its check (damaged, cut short or not written by flame with your key)")
        return None
    except (OSError, FlameError) as e:
        log.info("flame: cannot read the cuDNN graph cache %s (%s)", path.parent, e)
        return None
    if payload is None:
        return None
    try:
        return _deserialized(cudnn, payload)
    except Exception as e:  # noqa: BLE001 - whatever cuDNN raises for a graph it cannot read back
        path.unlink(missing_ok=True)
        _warn(label, path.parent, f"does not read back ({type(e).__name__}: {e})")
        return None


def _store(cudnn, g, path: Path, label: str) -> bool:
    """Write built graph `g` to `path` (best-effort: a graph without a serialized form, one that does
    not read back, or a directory that cannot be written is logged and skipped), then evict to the
    size limit where it may be exceeded (disk_cache.settle). Whether it was written."""
    try:
        payload = bytes(g.serialize())
        _deserialized(cudnn, payload)  # a form this process cannot read back would be rebuilt by every other
    except Exception as e:  # noqa: BLE001 - the frontend's refusal: engines without a serialized form
        with _lock:
            COUNTS.unstorable += 1
        log.debug(
            "flame: the %s's cuDNN graph is not stored: it has no serialized form that reads back (%s: %s)",
            label,
            type(e).__name__,
            e,
        )
        return False
    try:
        nvrtc.write_signed(path, payload, MAGIC)
    except (OSError, FlameError) as e:
        log.info("flame: cannot write to the cuDNN graph cache %s (%s)", path.parent, e)
        return False
    with _lock:
        COUNTS.stored += 1
    disk_cache.settle(path.parent, disk_cache.size_limit())
    return True
