"""nn.Module's conversions, as PyTorch's: every one (to, cpu, cuda, float, double, half, bfloat16, type,
share_memory, to_empty) is `_apply(fn)`, which gives fn each parameter, each .grad and each buffer. A
parameter keeps its object and takes fn's result as its data (optimizers holding it keep working), and
so does its .grad; a buffer is replaced by fn's result, as torch's. A subclass that overrides `_apply`
(to convert a tensor it keeps outside the registries) is seen by all of them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flame.frontend.context import no_grad
from flame.frontend.creation import zeros
from flame.frontend.memory_format import check as check_memory_format
from flame.frontend.parameter import is_lazy
from flame.frontend.tensor import Tensor
from flame.ir.dtypes import dtype_of
from flame.runtime.device import is_device


def _take_data(t: Tensor, new: Any) -> None:
    """t holds `new`'s data from now on (torch's `t.data = new`: a TypeError for a non-tensor, a
    RuntimeError for a non-float one while t requires grad)."""
    if new is not t:
        t.data = new


class ModuleConversion:
    """The conversions of nn.Module (mixed into flame.nn.Module)."""

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True):
        """torch's: fn on every parameter (under no_grad; the Parameter object stays, holding fn's result),
        on every .grad (the same), and on every buffer (replaced by fn's result), below this module first
        when recurse. Returns self. `m._apply(lambda t: t.half())` converts integer tensors too."""
        if recurse:
            for m in self.children():
                m._apply(fn)
        for p in self._parameters.values():
            if p is None:
                continue
            with no_grad():
                _take_data(p, fn(p))
            if p.grad is not None:
                with no_grad():
                    _take_data(p.grad, fn(p.grad))
        for key, b in self._buffers.items():
            if b is None:
                continue
            new = fn(b)
            if is_lazy(b):  # a lazy module's placeholder stays itself (torch's returns a placeholder too)
                _take_data(b, new)
                continue
            if isinstance(new, Tensor) and new._role is None:
                new._role = "state"  # as register_buffer marks it
            self._buffers[key] = new
        return self

    def to(self, *args: Any, **kwargs: Any):
        """PyTorch's forms: `to(dtype)`, `to(device)`, `to(device, dtype)`, `to(tensor)`,
        `to(device=..., dtype=...)`. A dtype converts the floating-point parameters (in place: the objects
        stay the same, so optimizers holding them keep working; compiled functions re-trace on the new
        type), their .grad and the floating-point buffers. A device ("cpu", "cuda", "cuda:0") must be the
        device this process runs on (flame runs one executor per process, see Tensor.to), so it moves
        nothing; another raises a FlameError saying how to choose the device."""
        device, dtype = kwargs.pop("device", None), kwargs.pop("dtype", None)
        non_blocking = kwargs.pop("non_blocking", False)
        check_memory_format("Module.to", kwargs.pop("memory_format", None))  # changes nothing (as Tensor.to)
        if kwargs:
            raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
        for a in args:
            if isinstance(a, Tensor):
                dtype = a.dtype
            elif device is None and is_device(a):
                device = a
            else:
                dtype = a
        dt = None if dtype is None else dtype_of(dtype)
        if dt is not None and not dt.is_floating_point:  # torch's: an integer model is never made by a cast
            raise TypeError(f"nn.Module.to only accepts floating point dtypes, but got desired dtype={dt} "
                            f"(its floating-point parameters and buffers would be cast to it)")

        def convert(t: Tensor) -> Tensor:
            floating = dt if t.dtype.is_floating_point else None
            return t.to(device=device, dtype=floating, non_blocking=non_blocking)

        return self._apply(convert)

    def to_empty(self, *, device: Any, recurse: bool = True):
        """torch's: every parameter and buffer (of this module alone with recurse=False) given new storage of
        its shape and dtype on `device` (which must be the device this process runs on, as for `to`), a
        parameter staying the same object; a .grad too. torch leaves the new storage uninitialized; flame's
        holds zeros. For a module whose values are then loaded (load_state_dict) or reset (reset_parameters)."""

        def empty(t: Tensor) -> Tensor:
            if device is not None:
                t._to_device(device)  # raises for a device this process does not run on
            return zeros(*t.shape, dtype=t.dtype)

        return self._apply(empty, recurse=recurse)

    def _place(self, device: Any) -> None:
        """A constructor's `device=`, as torch's: None, or the device this process runs on (nothing moves);
        another device raises as `to` does, and a value that names no device is a TypeError."""
        if device is None:
            return
        if not is_device(device):
            raise TypeError(
                f"{type(self).__name__}: device must name a device ('cpu', 'cuda', 'cuda:0'), got {device!r}"
            )
        self.to(device)

    def cpu(self):
        return self._apply(lambda t: t.cpu())

    def cuda(self, device: Any = None):
        return self._apply(lambda t: t.cuda(device))

    def type(self, dst_type: Any):
        """torch's: every parameter, .grad and buffer, integer ones included, as `t.type(dst_type)` (a
        dtype, or a tensor type's name such as "flame.DoubleTensor" / "torch.DoubleTensor"). Returns self."""
        return self._apply(lambda t: t.type(dst_type))

    def share_memory(self):
        """torch's: share_memory_() on every parameter and buffer (for flame, which has no storage shared
        between processes, that leaves each as it is). Returns self."""
        return self._apply(lambda t: t.share_memory_())

    def _floats_to(self, dtype: str):
        return self._apply(lambda t: t.to(dtype_of(dtype)) if t.dtype.is_floating_point else t)

    def float(self):
        """Floating-point parameters, grads and buffers to f32 (integer ones stay as they are)."""
        return self._floats_to("f32")

    def double(self):
        """Floating-point parameters, grads and buffers to f64."""
        return self._floats_to("f64")

    def half(self):
        """Floating-point parameters, grads and buffers to f16, parameters in place (as to(flame.float16))."""
        return self._floats_to("f16")

    def bfloat16(self):
        """Floating-point parameters, grads and buffers to bf16, parameters in place (as to(flame.bfloat16))."""
        return self._floats_to("bf16")
