"""flame.func, as torch.func: functional_call (a module called with other tensors in place of its
parameters and buffers), the autodiff transforms grad, grad_and_value, vjp, jvp, linearize, jacrev,
jacfwd and hessian (flame/func/_grad.py), vmap (run once per batch element, flame/func/_vmap.py),
stack_module_state and replace_all_batch_norm_modules_. Transforms compose and take pytrees (tuples,
lists, dicts) of tensors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flame.frontend.tensor import Tensor
from flame.func._grad import grad, grad_and_value, hessian, jacfwd, jacrev, jvp, linearize, vjp
from flame.func._vmap import stack_module_state, vmap
from flame.nn.batchnorm import _BatchNorm
from flame.nn.utils.stateless import _functional_call

__all__ = ["functional_call", "grad", "grad_and_value", "hessian", "jacfwd", "jacrev", "jvp", "linearize",
           "replace_all_batch_norm_modules_", "stack_module_state", "vjp", "vmap"]


def functional_call(
    module,
    parameter_and_buffer_dicts: dict[str, Tensor] | Sequence[dict[str, Tensor]],
    args: Any = None,
    kwargs: dict[str, Any] | None = None,
    *,
    tie_weights: bool = True,
    strict: bool = False,
) -> Any:
    """module(*args, **kwargs) (args not a tuple: one argument) with the tensors of
    `parameter_and_buffer_dicts` (a dict of dotted names, or a sequence of dicts with distinct keys) in
    place of the module's parameters and buffers, which are put back afterwards. Gradients reach the
    given tensors. tie_weights=True: a tensor the module holds under several names is replaced under
    all of them. strict=True: the names must be exactly the module's parameters and buffers."""
    if isinstance(parameter_and_buffer_dicts, dict):
        parameters_and_buffers = parameter_and_buffer_dicts
    elif isinstance(parameter_and_buffer_dicts, Sequence):
        if not all(isinstance(d, dict) for d in parameter_and_buffer_dicts):
            raise ValueError("Expected all elements of parameter_and_buffer_dicts to be dictionaries")
        counts: dict[str, int] = {}
        for d in parameter_and_buffer_dicts:
            for k in d:
                counts[k] = counts.get(k, 0) + 1
        repeated = [k for k, n in counts.items() if n > 1]
        if repeated:
            raise ValueError(f"{repeated} appeared in multiple dictionaries; behavior of functional call is ambiguous")
        parameters_and_buffers = {k: v for d in parameter_and_buffer_dicts for k, v in d.items()}
    else:
        raise ValueError(
            f"Expected parameter_and_buffer_dicts to be a dict, or a list/tuple of dicts, "
            f"but got {type(parameter_and_buffer_dicts)}"
        )
    return _functional_call(module, parameters_and_buffers, args, kwargs, tie_weights=tie_weights, strict=strict)


def replace_all_batch_norm_modules_(root):
    """torch.func.replace_all_batch_norm_modules_: every batch norm module in `root` (root included)
    that tracks running statistics stops, in place (running_mean, running_var and num_batches_tracked
    become None), so it always normalizes with the batch's statistics, as vmap over a batch needs;
    returns root."""
    for module in root.modules():
        if isinstance(module, _BatchNorm) and module.track_running_stats:
            module.running_mean = None
            module.running_var = None
            module.num_batches_tracked = None
            module.track_running_stats = False
    return root
