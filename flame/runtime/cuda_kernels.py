"""Kernel loading for the CUDA executor: each distinct kernel source compiled once by NVRTC (through
codegen.nvrtc's on-disk cache), its cubin loaded once per device, and the loaded functions looked up
by `source_key` (a kernel source's sha256) and kernel name.

CuPy is imported lazily: `import flame` works without a GPU.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from flame.plan.steps import KernelLaunch

_MAX_STATIC_SMEM = 48 * 1024


@dataclass
class _Loaded:
    """A loaded kernel: its cupy Function (which keeps its module) and the dynamic shared memory the
    function has been allowed (cuFuncSetAttribute, raised once to the largest a launch asked for). The
    allowance lives with the function it was set on: a function handle freed with its module may be
    reused by the driver for a newly loaded one, which has been allowed nothing."""

    fn: object
    smem: int = 0


_ATTR_MAX_DYNAMIC_SMEM = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
_LOADED: dict[tuple, _Loaded] = {}  # (sha256 of source, kernel name, device id) -> its loaded function


@functools.lru_cache(maxsize=8192)
def source_key(source: str) -> str:
    """sha256 of a kernel's source, once per source: every size of a dynamic dim plans the same
    source objects (flame.plan.instance), and a str keeps its hash, so a repeat costs a lookup."""
    return hashlib.sha256(source.encode()).hexdigest()


def _compile_cubins(kernels: Sequence) -> dict[str, bytes]:
    """Compile each distinct source once: sha256 -> cubin (through codegen.nvrtc's cache)."""
    from flame.codegen import nvrtc

    arch = nvrtc.device_arch()
    todo = {}
    for k in kernels:
        todo.setdefault(source_key(k.source), k)
    if len(todo) > 1:
        return dict(zip(todo, nvrtc.compile_many([k.source for k in todo.values()], arch)))
    return {key: nvrtc.compile_cubin(k.source, arch, name_hint=k.name) for key, k in todo.items()}


def load_kernels(kernels: Sequence[KernelLaunch]) -> dict[tuple[str, str], object]:
    """A loaded cupy Function per (source sha256, kernel name); compiles what is not loaded yet."""
    import cupy

    dev = cupy.cuda.Device().id
    missing = [k for k in kernels if (source_key(k.source), k.name, dev) not in _LOADED]
    cubins = _compile_cubins(missing) if missing else {}
    for k in missing:
        key = (source_key(k.source), k.name, dev)
        if key in _LOADED:
            continue
        mod = cupy.cuda.function.Module()
        mod.load(cubins[key[0]])
        _LOADED[key] = _Loaded(mod.get_function(k.name))
    out = {}
    for k in kernels:
        key = source_key(k.source)
        loaded = _LOADED[(key, k.name, dev)]
        if k.smem > _MAX_STATIC_SMEM and loaded.smem < k.smem:
            cupy.cuda.driver.funcSetAttribute(loaded.fn.ptr, _ATTR_MAX_DYNAMIC_SMEM, k.smem)
            loaded.smem = k.smem
        out[(key, k.name)] = loaded.fn
    return out
