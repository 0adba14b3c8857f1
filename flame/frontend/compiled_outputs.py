"""What a compiled function's results say to a backward() outside it.

A function under @flame.compile that computes no gradient itself (a model's forward, as
`model = flame.compile(model)`) hands back plain values: their history is inside the compiled plan,
not in eager Nodes, so gradients cannot flow back through them to the parameters. torch.compile's
module differentiates through such a call; flame says so instead of training nothing. When the body
made a result that torch would say requires grad (it depends on a tensor that requires grad, with
gradients on) and the call is made eagerly with gradients on, the result gets requires_grad and one
Node of the `compiled_output` op, whose inputs are the tensors it depends on; a backward() that reaches
it raises an AutogradError naming the compiled function, the user's line of the call and what to do
instead. Values, `.item()`, `.numpy()` and uses under no_grad are unchanged."""

from __future__ import annotations

from functools import cache

from flame.errors import AutogradError
from flame.frontend.context import grad_enabled, user_location
from flame.frontend.dispatch import Node, record_versions
from flame.frontend.tensor import Tensor
from flame.ir.ops.user import define_function

_NAMES: dict[int, str] = {}  # call attribute -> the compiled function's name


def _vjp(b, gouts: dict, *inputs, call: int, index: int):
    """The gradient of a compiled function's result: none can be given; say why and what to do."""
    name = _NAMES.get(call, "a compiled function")
    raise AutogradError(
        f"backward() reached a result of flame.compile({name}) called outside a compiled step: a compiled "
        f"function that runs no backward() itself returns values without autograd history, so no gradient "
        f"can flow back through it to its parameters (torch.compile(model) would differentiate through it). "
        f"Compile the whole training step instead (the forward, loss.backward() and optimizer.step() in one "
        f"@flame.compile function), or call the function uncompiled\n  called at {b.loc}"
    )


@cache
def _op():
    """The op, registered at the first result it marks (not at import: the registry lists only the ops a
    program can meet, and a user function's op is registered when the user defines it)."""
    return define_function("compiled_output", _vjp, None)


def attach(name: str, outputs: list, needs: tuple[int, ...], inputs: list) -> list:
    """outputs with those at positions `needs` marked as depending on `inputs` (the call's tensors that
    require grad) through the compiled_output op, when gradients are on; otherwise outputs as they are."""
    if not needs or not grad_enabled.get() or not inputs:
        return outputs
    key = next((k for k, v in _NAMES.items() if v == name), len(_NAMES))
    _NAMES[key] = name
    loc = user_location()
    out = list(outputs)
    for k in needs:
        t = outputs[k]
        ins = (*inputs, t)
        marked = Tensor._concrete(t._data, t.dtype)
        marked.requires_grad = True
        marked._node = Node(_op().name, {"call": key, "index": k}, ins, record_versions(ins), loc)
        out[k] = marked
    return out
