"""flame.autograd.graph: torch.autograd.graph's saved-tensor hooks. `saved_tensors_hooks(pack_hook,
unpack_hook)` runs pack_hook on each tensor an eager op saves for its backward and unpack_hook on what it
returned when a backward reads it, the unpacked tensor used in the saved one's place; `save_on_cpu`
keeps saved tensors in host memory; `disable_saved_tensors_hooks(message)` refuses them in its block
(frontend/saved.py). `Node` is what Tensor.grad_fn and its next_functions are instances of."""

from __future__ import annotations

from flame.frontend.hooks import Node
from flame.frontend.saved import disable_saved_tensors_hooks, save_on_cpu, saved_tensors_hooks

__all__ = ["Node", "disable_saved_tensors_hooks", "save_on_cpu", "saved_tensors_hooks"]
