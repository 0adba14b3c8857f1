"""torch.autograd's functional entry points over the one autodiff pass (passes/autodiff.py): grad(outputs,
inputs, ...) returns the gradients and touches no .grad; backward(tensors, grad_tensors) accumulates into
the leaves' .grad as Tensor.backward() does. Several outputs are differentiated as one scalar,
sum_k <outputs[k], grad_outputs[k]>, whose gradient is their vector-Jacobian product. Eagerly the graph
is rebuilt from the outputs' Node records, as backward() rebuilds it; with create_graph=True its
gradient ops run as eager ops, so the gradients carry a history and can be differentiated again
(frontend/autograd.py gradient_tensors). Inside @flame.compile the gradients are values of the trace,
which can be differentiated again too."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from contextlib import nullcontext

from flame.errors import AutogradError
from flame.frontend import autograd
from flame.frontend.autograd import (
    _rebuild,
    _running,
    _topo,
    gradient_tensors,
    hooked_grad,
    known_tensors,
    saving_nodes,
)
from flame.frontend.context import current_trace, no_grad, user_location
from flame.frontend.creation import zeros
from flame.frontend.hooks import accumulate_and_notify
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import stack
from flame.ir import registry
from flame.ir.ops.elementwise import STOP_GRADIENT
from flame.passes.autodiff import autodiff


def _tensors(x, what: str) -> tuple:
    items = (x,) if isinstance(x, Tensor) else tuple(x)
    for i, t in enumerate(items):
        if not isinstance(t, Tensor):
            raise AutogradError(
                f"{what}: element {i} is a {type(t).__name__}, not a flame Tensor\n  at {user_location()}"
            )
    return items


def _seeds(grads, n: int, what: str) -> tuple:
    if grads is None:
        return (None,) * n
    items = (grads,) if isinstance(grads, Tensor) else tuple(grads)
    if len(items) != n:
        raise AutogradError(f"{what}: got {len(items)} gradients for {n} outputs\n  at {user_location()}")
    return items


def _root(outputs: Sequence[Tensor], seeds: Sequence, what: str, create: bool = False) -> Tensor:
    """sum_k <outputs[k], seeds[k]>: one scalar whose gradient is the outputs' vector-Jacobian product;
    with `create`, differentiable in the seeds too (as torch's, where grad_outputs require grad)."""
    total = None
    for k, (o, g) in enumerate(zip(outputs, seeds)):
        if g is None:
            if o.numel() != 1:
                raise AutogradError(
                    f"{what}: grad can be implicitly created only for scalar outputs (output {k} "
                    f"has shape {list(o.shape)})\n  at {user_location()}"
                )
            term = o.sum()
        else:
            if not isinstance(g, Tensor):
                raise AutogradError(
                    f"{what}: grad_outputs[{k}] is a {type(g).__name__}; expected a Tensor or "
                    f"None\n  at {user_location()}"
                )
            if tuple(g.shape) != tuple(o.shape):
                raise AutogradError(
                    f"{what}: Mismatch in shape: grad_output[{k}] has a shape of {list(g.shape)} "
                    f"and output[{k}] has a shape of {list(o.shape)}\n  at {user_location()}"
                )
            term = (o * (g if create else g.detach()).to(o.dtype)).sum()
        total = term if total is None else total + term
    return total


def grad(
    outputs,
    inputs,
    grad_outputs=None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    only_inputs: bool = True,
    allow_unused: bool | None = None,
    is_grads_batched: bool = False,
    materialize_grads: bool = False,
) -> tuple:
    """torch.autograd.grad: the gradients of `outputs` (weighted by grad_outputs; None: a scalar output's
    ones) with respect to `inputs` (leaves or intermediate tensors), as a tuple; .grad is not touched.
    An input the outputs do not depend on raises, unless allow_unused=True (then None; zeros with
    materialize_grads=True). The graph is freed unless retain_graph=True (its default is create_graph),
    eagerly and inside @flame.compile: a later backward through it raises, as torch's. create_graph=True
    gives gradients with a history of their own, which can be differentiated again (eagerly and inside
    @flame.compile). only_inputs is torch's deprecated argument, ignored (with torch's warning when
    False). is_grads_batched=True reads the first dimension of every grad_outputs tensor as a batch: each
    gradient gets that dimension first, one vector-Jacobian product per row (torch vmaps one; flame runs
    one grad call per row, the graph retained between them, so B rows cost B backward passes, inside
    @flame.compile B copies of the backward ops)."""
    if not only_inputs:
        warnings.warn("only_inputs argument is deprecated and is ignored now (defaults to True). To accumulate "
                      "gradient for other parts of the graph, please use torch.autograd.backward.", UserWarning,
                      stacklevel=2)
    if materialize_grads and allow_unused is False:
        raise ValueError("Expected allow_unused to be True or not passed when materialize_grads=True, but got: "
                         "allow_unused=False.")
    outs, ins = _tensors(outputs, "grad(outputs)"), _tensors(inputs, "grad(inputs)")
    if not ins:
        raise AutogradError(f"`inputs` argument to `grad()` cannot be empty.\n  at {user_location()}")
    seeds = _seeds(grad_outputs, len(outs), "grad(grad_outputs)")
    allow_unused = bool(allow_unused) or materialize_grads
    if is_grads_batched:
        return _batched(outs, ins, seeds, retain_graph, create_graph, allow_unused, materialize_grads)
    trace = current_trace.get()
    if trace is not None:
        root = _root(outs, seeds, "grad", create_graph)
        ws = [trace.wrt_value(t) for t in ins]
        trace.builder.loc = user_location()
        hooks = trace._grad_hooks(list(ins))  # the tensors' hooks and retain_grad(), as eagerly
        retain = create_graph if retain_graph is None else bool(retain_graph)
        gvals = trace.differentiate(trace.value_of(root), ws, hooks=hooks, retain=retain)
        if not create_graph:  # no history, as torch's: a loss reading one differentiates it as a constant
            gvals = [None if gv is None else trace.builder.emit(STOP_GRADIENT.name, gv) for gv in gvals]
        got = [None if gv is None else Tensor._traced(gv, trace) for gv in gvals]
        if create_graph:
            _mark_recorded(trace, ws, got)
        return _finish(ins, got, allow_unused, materialize_grads)
    return _eager_grad(outs, ins, seeds, retain_graph, create_graph, allow_unused, materialize_grads)


def _eager_grad(outs: list, ins: list, seeds: list, retain_graph, create_graph: bool, allow_unused: bool,
                materialize: bool, own: bool = False) -> tuple:
    """grad()'s gradients outside a trace. `own`: the inputs' own nodes run too (backward(inputs=...)
    with a non-leaf input runs its grad_fn, as torch's engine does)."""
    for k, o in enumerate(outs):
        if not o.requires_grad:
            raise AutogradError(
                f"element {k} of tensors does not require grad and does not have a grad_fn\n  at {user_location()}"
            )
    if not all(t.requires_grad for t in ins):
        raise AutogradError(f"One of the differentiated Tensors does not require grad\n  at {user_location()}")
    root = _root(outs, seeds, "grad", create_graph)
    retain = create_graph if retain_graph is None else bool(retain_graph)
    return _finish(ins, _eager(root, ins, retain, create_graph, own), allow_unused, materialize)


def _batched(outs, ins, seeds, retain_graph, create_graph: bool, allow_unused: bool, materialize: bool) -> tuple:
    """grad(..., is_grads_batched=True): the gradients for each row of the grad_outputs, stacked."""
    for k, (o, g) in enumerate(zip(outs, seeds)):
        if g is None:
            raise AutogradError(f"grad can be implicitly created only for scalar outputs\n  at {user_location()}")
        if not isinstance(g, Tensor):
            raise AutogradError(f"grad: grad_outputs[{k}] is a {type(g).__name__}; expected a Tensor\n"
                                f"  at {user_location()}")
        if g.dim() == 0 or tuple(g.shape[1:]) != tuple(o.shape):
            raise AutogradError(
                "If `is_grads_batched=True`, we interpret the first dimension of each grad_output as the batch "
                "dimension. The sizes of the remaining dimensions are expected to match the shape of "
                f"corresponding output, but a mismatch was detected: grad_output[{k}] has a shape of "
                f"{list(g.shape[1:])} and output[{k}] has a shape of {list(o.shape)}. If you only want some "
                f"tensors in `grad_output` to be considered batched, consider using vmap.\n  at {user_location()}"
            )
    sizes = [int(g.shape[0]) for g in seeds]
    if any(n != sizes[0] for n in sizes):
        raise ValueError(f"vmap: Expected all tensors to have the same size in the mapped dimension, got sizes "
                         f"{sizes} for the mapped dimension")
    n = sizes[0]
    retain = create_graph if retain_graph is None else bool(retain_graph)
    rows = [
        grad(outs, ins, [g[b] for g in seeds], retain_graph=retain or b < n - 1, create_graph=create_graph,
             allow_unused=True)
        for b in range(n)
    ]
    got = []
    for i, t in enumerate(ins):
        column = [row[i] for row in rows]
        if n and all(c is not None for c in column):
            got.append(stack(column))
        elif n == 0:
            with no_grad():
                got.append(zeros((0, *t.shape), dtype=t.dtype))
        else:
            got.append(None)
    return _finish(ins, got, allow_unused, materialize)  # (an unused input's zeros have no batch dimension, as torch's)


def _mark_recorded(trace, ws: list, got: list) -> None:
    """Traced gradients made with create_graph=True require grad as eagerly: those computed (through
    ops with a gradient, outside no_grad) from the inputs differentiated by or from a tensor that
    requires grad (Trace.requires_grad)."""
    marked = set(ws)
    for op in trace.graph.ops:
        if op.out not in trace.no_grad and registry.get(op.name).vjp is not None:
            if any(v in marked for v in op.inputs):
                marked.add(op.out)
    for t in got:
        if t is not None:
            t.requires_grad = t._value in marked or trace.requires_grad(t)


def _eager(root: Tensor, ins: Sequence[Tensor], retain: bool, create: bool, own: bool = False) -> list:
    """d root / d ins by rebuilding root's graph and running autodiff on it (None: not used); with
    `create`, gradients with a history (autograd.gradient_tensors). Through tensors with hooks or
    retain_grad(), in stages as backward() (autograd.hooked_grad). The nodes run (autograd._running; with
    `own`, the inputs' own nodes too) are freed unless `retain`, and are an error if already freed."""
    order = _topo(root)
    runs = _running(order, ins) | ({id(t) for t in ins if t._node is not None} if own else set())
    if any(t._hooks or t._retains_grad for t in order):
        got, nodes = hooked_grad(root, ins, order, create, runs)
        autograd.free_graph(nodes, [t for t in order if id(t) in runs], retain)
        return got
    g, vals, leaves, composites, unpacked = _rebuild(root, order=order, runs=runs)
    used = [t for t in ins if id(t) in vals]
    gvals = dict(zip(map(id, used), autodiff(g, vals[id(root)], [vals[id(t)] for t in used], unpacked=unpacked,
                                             composites=composites)))
    nodes = saving_nodes(g, vals, order, runs=runs, formulas=composites)
    grads = [gvals.get(id(t)) for t in ins]
    known = known_tensors(order, vals) if create else {}
    got = gradient_tensors(g, grads, list(leaves), known, [t.dtype for t in ins], create)
    autograd.free_graph(nodes, [t for t in order if id(t) in runs], retain)
    return got


def _finish(ins: Sequence[Tensor], got: list, allow_unused: bool, materialize: bool) -> tuple:
    for i, (t, gt) in enumerate(zip(ins, got)):
        if gt is None and not allow_unused:
            raise AutogradError(
                f"The differentiated Tensor at index {i} appears to not have been used in the graph. "
                f"Set allow_unused=True if this is the desired behavior.\n  at {user_location()}"
            )
        if gt is None and materialize:
            with no_grad():
                got[i] = zeros(t.shape, dtype=t.dtype)
    return tuple(got)


def backward(
    tensors,
    grad_tensors=None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    grad_variables=None,
    inputs=None,
) -> None:
    """torch.autograd.backward: accumulate into .grad the gradients of `tensors` (weighted by
    grad_tensors; None: a scalar's ones), into the leaves they depend on, or into `inputs` alone.
    grad_variables is torch's deprecated name of grad_tensors."""
    if grad_variables is not None:
        if grad_tensors is not None:
            raise RuntimeError("`grad_tensors` and `grad_variables` (deprecated) arguments both passed to "
                               "`backward()`. Please only use `grad_tensors`.")
        warnings.warn("`grad_variables` is deprecated. Use `grad_tensors` instead.", FutureWarning, stacklevel=2)
        grad_tensors = grad_variables
    ts = _tensors(tensors, "backward(tensors)")
    seeds = _seeds(grad_tensors, len(ts), "backward(grad_tensors)")
    eager = current_trace.get() is None
    if eager:
        for k, t in enumerate(ts):
            if not t.requires_grad:
                raise AutogradError(
                    f"element {k} of tensors does not require grad and does not have a grad_fn\n  at {user_location()}"
                )
    if eager and create_graph:
        warnings.warn(_CYCLE, UserWarning, stacklevel=2)
    if inputs is not None:
        wrt = _tensors(inputs, "backward(inputs)")
        for t in wrt:  # torch's engine makes a non-leaf input retain its grad: retain_grad() accumulates it
            if not t.is_leaf:
                t.retain_grad()
        got = grad(ts, wrt, seeds, retain_graph=retain_graph, create_graph=create_graph, allow_unused=True) \
            if not eager or not wrt else _eager_grad(ts, wrt, seeds, retain_graph, create_graph, True, False, own=True)
        with nullcontext() if create_graph else no_grad():  # torch's AccumulateGrad: in place unless recording
            for t, gt in zip(wrt, got):
                if gt is not None and not t.retains_grad:
                    accumulate_and_notify(t, gt)
        return
    if eager and create_graph:
        autograd.backward(_root(ts, seeds, "backward", True), None, retain_graph, create_graph=True)
        return
    if create_graph:  # traced: the gradients keep their history (Trace.backward)
        autograd.backward(_root(ts, seeds, "backward"), None, retain_graph, create_graph=True)
        return
    _root(ts, seeds, "backward").backward(retain_graph=retain_graph)


_CYCLE = (
    "Using backward() with create_graph=True will create a reference cycle between the parameter and its "
    "gradient which can cause a memory leak. We recommend using autograd.grad when creating the graph to avoid "
    "this. If you have to use this function, make sure to reset the .grad fields of your parameters to None "
    "after use to break the cycle and avoid the leak."
)


__all__ = ["backward", "grad"]
