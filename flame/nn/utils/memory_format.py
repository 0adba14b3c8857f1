"""convert_conv2d_weight_memory_format / convert_conv3d_weight_memory_format (torch.nn.utils's) and
skip_init. flame chooses the layout of what it computes itself (flame.frontend.memory_format), so the
conversions check the format, give each convolution weight a fresh copy of its values as torch's do, and
change no values."""

from __future__ import annotations

import inspect
from typing import Any, TypeVar

from flame.frontend.memory_format import memory_format
from flame.nn.conv import Conv2d, Conv3d, ConvTranspose2d, ConvTranspose3d
from flame.nn.module import Module

__all__ = ["convert_conv2d_weight_memory_format", "convert_conv3d_weight_memory_format", "skip_init"]

_M = TypeVar("_M", bound=Module)


def _convert(module: _M, fmt: memory_format, kinds: tuple[type, ...]) -> _M:
    if isinstance(module, kinds):
        module.weight.data = module.weight.detach().clone(memory_format=fmt)
    for child in module.children():
        _convert(child, fmt, kinds)
    return module


def convert_conv2d_weight_memory_format(module: _M, memory_format: memory_format) -> _M:
    """The weight of every Conv2d / ConvTranspose2d in module (module itself included) in memory_format
    (flame.channels_last, ...); returns module."""
    return _convert(module, memory_format, (Conv2d, ConvTranspose2d))


def convert_conv3d_weight_memory_format(module: _M, memory_format: memory_format) -> _M:
    """The weight of every Conv3d / ConvTranspose3d in module (module itself included) in memory_format
    (flame.channels_last_3d, ...); returns module."""
    return _convert(module, memory_format, (Conv3d, ConvTranspose3d))


def skip_init(module_cls: type, *args: Any, **kwargs: Any) -> Module:
    """module_cls(*args, **kwargs), as torch.nn.utils.skip_init: the class must be a Module taking a
    `device` argument (torch's RuntimeErrors otherwise). torch leaves the parameters uninitialised;
    here they hold what the constructor drew, which a caller of skip_init overwrites."""
    if not (isinstance(module_cls, type) and issubclass(module_cls, Module)):
        raise RuntimeError(f"Expected a Module; got {module_cls}")
    if "device" not in inspect.signature(module_cls).parameters:
        raise RuntimeError("Module must support a 'device' arg to skip initialization")
    return module_cls(*args, **kwargs)
