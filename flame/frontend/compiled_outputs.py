"""How gradients flow back through a compiled function called eagerly: `model = flame.compile(model)`
with loss.backward() and opt.step() outside, as torch.compile's module trains.

A function under @flame.compile that computes no gradient itself (a model's forward) runs its plan and
hands back plain values: what the plan computed in between is not kept. When the body made a result
that torch would say requires grad (it depends on a tensor that requires grad, with gradients on) and
the call is made eagerly with gradients on, the result gets requires_grad and one Node of the
`compiled_output` op (ir/ops/user.py define_function, trait `call_result`: the identity of the result),
whose inputs are the tensors the traced graph read, one per graph input: the call's arguments and the
captured tensors (parameters, buffers) themselves, so gradients reach them and their histories; a copy,
taken before the run, of each one the call updated in place (a dropout's RNG offset, a BatchNorm's
running statistics), and of a `.grad` or a scalar (a learning rate) it read.

The op's VJP recomputes the forward: once per trace and per set of results that have a cotangent, the
traced graph is copied and differentiated (passes/autodiff.py) into a graph from (graph inputs,
cotangents) to the gradients of its floating-point inputs, and each backward() through a call inlines
that graph into the graph it differentiates (the forward's ops marked as recomputation, RecomputeLoc);
what no input needs is dropped there. So the backward costs one more forward (activation checkpointing
of the whole compiled call) and keeps no activation between the call and backward(); the random draws
read the call's seed and offset, so the recomputed dropout masks are the forward's. Gradients then
accumulate into `.grad` as in any eager backward(): hooks, retain_graph (a second backward() without
it raises, as in PyTorch), flame.autograd.grad. Values, `.item()`, `.numpy()` and uses under no_grad
are unchanged."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from flame.errors import AutogradError
from flame.frontend.context import TRACING_HOOKS, current_trace, grad_enabled, user_location
from flame.frontend.counted_writes import saved_modified_error
from flame.frontend.custom_function import claim
from flame.frontend.data_writes import at_positions, traced_live_reads
from flame.frontend.dispatch import Node, freed_graph_error, record_versions
from flame.frontend.tensor import Tensor
from flame.ir.builder import Builder
from flame.ir.dtypes import f32
from flame.ir.graph import BackwardLoc, Graph, RecomputeLoc
from flame.ir.ops.user import define_function
from flame.passes.autodiff import autodiff
from flame.passes.dce import eliminate_dead_code


class Recompute:
    """The backward of one compiled trace: its traced forward graph (made when first needed, by
    `forward()`), its marked results `needs` (output indices), and the gradient graphs made from it,
    one per set of marked results that have a cotangent."""

    def __init__(self, name: str, forward, needs: tuple[int, ...], data_written: tuple = (), refused: tuple = ()):
        self.name = name
        self._forward = forward  # () -> the traced Graph
        self.needs = needs
        self.data_written = data_written  # the body's writes through .data (data_writes.written_positions)
        # (result, op name, location, freed): an op autograd.grad() freed in the body, or that saved a value the
        # body wrote since (Trace.refused_by_outputs)
        self.refused = refused
        self._graphs: dict[tuple, tuple[Graph, list[bool]]] = {}

    def graph(self, present: tuple[int, ...]) -> tuple[Graph, list[bool]]:
        """(a graph from the forward's inputs and then the cotangents of the results at `present` to
        the gradient of each floating-point input that has one, which inputs those are). A backward from
        a result whose history runs an op that saved a value a counted write changed after, or one that an
        autograd.grad() in the body freed, raises torch's error (frontend/counted_writes.py)."""
        for k, name, loc, freed in self.refused:
            if k in present:
                raise (freed_graph_error if freed else saved_modified_error)(name, loc)
        got = self._graphs.get(present)
        if got is None:
            got = self._graphs[present] = _gradient_graph(self._forward(), present, f"{self.name}_backward",
                                                          self.data_written)
        return got


def _gradient_graph(forward: Graph, present: tuple[int, ...], name: str, data_written: tuple = ()
                    ) -> tuple[Graph, list[bool]]:
    g = forward.copy()
    b = Builder(g, BackwardLoc(""))
    written, declared, links, copies = at_positions(g, data_written)  # (positions taken before cotangent inputs)
    live, composites = traced_live_reads(g, written, b, declared, links, copies)
    g.name, g.aliases, g.groups = name, {}, None
    n = len(g.inputs)
    outs = [g.outputs[k] for k in present]
    cts = [g.add_input(o.type, "data") for o in outs]
    wrt = [v for v in g.inputs[:n] if v.dtype.is_float]
    if len(outs) == 1:
        root, seed = outs[0], cts[0]
    else:  # one scalar whose gradient is every result's cotangent: sum_k <out_k, ct_k>
        root, seed = None, None
        for o, ct in zip(outs, cts):
            term = b.sum_to(b.mul(o, ct), ())
            term = term if term.dtype == f32 else b.cast(term, dtype=f32)
            root = term if root is None else b.add(root, term)
    grads = iter(autodiff(g, root, wrt, seed, unpacked=live, composites=composites))
    per_input = [next(grads) if v.dtype.is_float else None for v in g.inputs[:n]]
    g.outputs = [gv for gv in per_input if gv is not None]
    return eliminate_dead_code(g), [gv is not None for gv in per_input]


@dataclass(eq=False)
class Call:
    """One eager call's record for its VJP (what `call=N` of its results' ops finds)."""

    recompute: Recompute
    n_inputs: int
    key: int = -1
    __weakref__: Any = field(default=None, init=False, repr=False, compare=False)


@dataclass(eq=False)
class CompiledNode(Node):
    """The Node of a compiled call's result: it keeps the call's record alive for backward()."""

    call: Call | None = None


_CALLS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # call number -> Call


def _vjp(b, gouts: dict, *inputs, call: int, index: int):
    """The gradient of a compiled call's results (autodiff hands the call's first op every result's
    cotangent): the recomputing gradient graph, inlined into the graph being differentiated."""
    c = _CALLS.get(call)
    if c is None:
        raise AutogradError(f"a compiled call's results have no record left (call {call})\n  at {b.loc}")
    present = tuple(k for k in sorted(gouts) if gouts[k] is not None)
    g, has = c.recompute.graph(present)
    env = dict(zip(g.inputs, (*inputs[: c.n_inputs], *(gouts[k] for k in present))))
    loc = b.loc
    try:
        for op in g.ops:
            b.loc = op.loc if isinstance(op.loc, BackwardLoc) else RecomputeLoc(op.loc or "")
            env[op.out] = b.emit(op.name, *(env[v] for v in op.inputs), **op.attrs)
    finally:
        b.loc = loc
    outs = iter(env[v] for v in g.outputs)
    return (*(next(outs) if h else None for h in has), *([None] * (len(inputs) - c.n_inputs)))


@cache
def _op():
    """The op, registered at the first result it marks (not at import: the registry lists only the ops a
    program can meet, and a user function's op is registered when the user defines it)."""
    return define_function("compiled_output", _vjp, None)


def recording() -> bool:
    """Whether a call made now records gradients through its results (gradients are on)."""
    return grad_enabled.get()


def _traced_without_gradients(tracing: bool) -> None:
    """Installed in frontend.context.TRACING_HOOKS: a body traced with gradients off (a first call under
    no_grad: an evaluation or a warm-up before training) made no result that requires grad, so its trace
    must not serve a call with them on, whose results a backward() differentiates (the parameters got no
    gradient at all): gradients being off is then a guard, and such a call traces again, as torch.compile
    guards the grad mode. A trace made with them on serves a call under no_grad (recording() is False)."""
    trace = current_trace.get()
    if tracing and trace is not None and not grad_enabled.get():
        trace.guard(grad_enabled.get, "gradients on (the trace was made under no_grad)")


TRACING_HOOKS.append(_traced_without_gradients)


def attach(recompute: Recompute, outputs: list, inputs: list) -> list:
    """outputs with those at `recompute.needs` marked as depending on `inputs` (one tensor per graph
    input of the call, see the module's docstring) through the compiled_output op."""
    call = Call(recompute, len(inputs))
    claim(_CALLS, call)
    loc = user_location()
    out = list(outputs)
    made: dict[int, Tensor] = {}  # a result returned twice (`return y, y`) is marked once: one tensor, as torch's
    for k in recompute.needs:
        t = outputs[k]
        if id(t) in made:
            out[k] = made[id(t)]
            continue
        ins = (*inputs, t)
        marked = Tensor._concrete(t._data, t.dtype)
        marked.requires_grad = True
        marked._node = CompiledNode(
            _op().name, {"call": call.key, "index": k}, ins, record_versions(ins), loc, call=call
        )
        out[k] = made[id(t)] = marked
    return out
