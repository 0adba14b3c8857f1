"""torch.backends.cudnn: `allow_tf32` is flame's runtime.cudnn_conv.allow_tf32; `deterministic` has cuDNN
choose deterministic engines (runtime/determinism.py); `benchmark` and `enabled` are kept and change
nothing (flame/backends/__init__.py)."""

from __future__ import annotations

import sys
import types

from flame.runtime import determinism
from flame.runtime import device as _device


class _Cudnn(types.ModuleType):
    """The module's switches as properties (torch's torch.backends.cudnn is such a module)."""

    benchmark = False
    enabled = True
    benchmark_limit = 10

    @property
    def deterministic(self) -> bool:
        """cuDNN's convolutions leave out engines that add in a varying order, and its attention backward
        takes its deterministic algorithm (read when a step is compiled)."""
        return determinism.cudnn_set()

    @deterministic.setter
    def deterministic(self, value: bool) -> None:
        determinism.set_cudnn(value)

    @property
    def allow_tf32(self) -> bool:
        from flame.runtime import cudnn_conv

        return cudnn_conv.allow_tf32

    @allow_tf32.setter
    def allow_tf32(self, value: bool) -> None:
        from flame.runtime import cudnn_conv

        cudnn_conv.allow_tf32 = bool(value)


def is_available() -> bool:
    """Whether flame can call cuDNN here (a GPU and its cuDNN)."""
    if not _device.cuda_available():
        return False
    try:
        from flame.runtime.cudnn_graph import cudnn_module

        cudnn_module("flame.backends.cudnn")
    except NotImplementedError:
        return False
    return True


def version() -> int | None:
    """cuDNN's version as torch reports it (e.g. 91000), or None without cuDNN."""
    if not is_available():
        return None
    from flame.runtime.cudnn_graph import cudnn_module

    return int(cudnn_module("flame.backends.cudnn").backend_version())


sys.modules[__name__].__class__ = _Cudnn
