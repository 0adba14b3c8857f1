"""Reverse-mode autodiff over the IR: appends the backward ops to the same graph (a joint graph), so
later passes fuse and plan forward and backward together. The one autodiff of flame: loss.backward(),
flame.grad and the compiled training step all come here.

Gradient conventions (declared per op in the registry):
- a broadcast input's gradient is summed back to the input's shape;
- integer and bool values get no gradient;
- a value used several times accumulates the gradients of every use;
- only values on a path from `wrt` get gradients: parameters with requires_grad=False (frozen) and
  data get no gradient work at all (a VJP's unneeded parts are dropped as it is applied);
- ops with `nondiff` (comparisons, argmax, floor/ceil/round/sign, random draws, creation) pass no
  gradient: their inputs get none through them, i.e. zero;
- the results of one call of a user's autograd Function (`call_result`) differentiate together: the
  user's backward runs once, given every result's cotangent."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from flame.errors import FlameError
from flame.ir.builder import Builder
from flame.ir.graph import BackwardLoc, Graph, Op, Value, is_backward  # noqa: F401 (is_backward: callers)
from flame.ir.ops.attention import float_extras
from flame.ir.registry import REGISTRY
from flame.passes.dce import eliminate_dead_code
from flame.passes.rewrite_attention import rewrite_attention_in_place


def _depends_on(g: Graph, wrt: Sequence[Value]) -> set[Value]:
    """Every value that has a data path from one of `wrt` (those included)."""
    seen = set(wrt)
    for op in g.ops:
        if not seen.isdisjoint(op.inputs):
            seen.add(op.out)
    return seen


def _drop_unused_since(g: Graph, start: int, keep: list[Value]) -> None:
    """Remove the ops appended since index `start` that feed none of `keep`. A VJP rule builds the
    gradient of every input; those of inputs that need none (a frozen parameter's weight gradient,
    the data's) are dropped here, so the joint graph never holds work nobody asked for."""
    live = set(keep)
    kept = []
    for op in reversed(g.ops[start:]):
        if op.out in live:
            kept.append(op)
            live.update(op.inputs)
    g.ops[start:] = kept[::-1]


def _emit_residuals(g: Graph, out: Value, end: int, needed: set[Value]) -> dict:
    """The residuals (OpDef.residuals) of each op up to g.ops[end] that `out` depends on and that
    reads a value gradients flow through, emitted right after that op with the op's own loc: they are
    forward work (the memory report counts them as saved for backward, a checkpoint region recomputes
    them with the op), and the op's library call can compute them alongside its result (the fusion
    pass joins attention's stats to its forward). Returns op -> its residual Values."""
    saved, ops, live = {}, g.ops[: end + 1], {out}
    for op in reversed(ops):
        if op.out in live:
            live.update(op.inputs)
    for op in ops:
        make = REGISTRY[op.name].residuals
        if make is None or op.out not in live or needed.isdisjoint(op.inputs):
            continue
        start = len(g.ops)
        saved[op] = tuple(make(Builder(g, op.loc), *op.inputs, op.out, **op.attrs))
        new = g.ops[start:]
        del g.ops[start:]
        at = g.ops.index(op) + 1
        g.ops[at:at] = new
    return saved


def _calls(ops: Sequence[Op]) -> dict[Op, dict[int, Op]]:
    """The ops of each call of a user's autograd Function (OpDef.call_result), by `index`, under the
    call's first op in graph order; its other ops map to {} (the first one's VJP serves them all: by
    then every result's cotangent is complete, whatever order the results were used in)."""
    first: dict[tuple, Op] = {}
    out: dict[Op, dict[int, Op]] = {}
    for op in ops:
        if REGISTRY[op.name].call_result:
            head = first.setdefault((op.name, op.attrs["call"]), op)
            out.setdefault(head, {})[op.attrs["index"]] = op
            if head is not op:
                out[op] = {}
    return out


def _call_cotangents(members: dict[int, Op], ct: dict[Value, Value]) -> dict[int, Value | None] | None:
    """{index: cotangent or None} of a call's results, or None where no result has one."""
    got = {k: ct.get(op.out) for k, op in members.items()}
    return got if any(v is not None for v in got.values()) else None



GradHook = tuple[tuple[Value, ...], Callable[[Builder, tuple], tuple]]


def _hook_points(forward: list, hooks: Sequence[GradHook], end: int) -> tuple[dict[int, list], list]:
    """Where each gradient hook runs: right before the VJP of the last op producing one of its values
    (every use of them comes later, so their gradients are complete there), or after the last VJP when
    they are all graph inputs (in the order of _last_use). A hook on values out does not depend on
    never runs."""
    index = {op.out: i for i, op in enumerate(forward)}
    at: dict[int, list] = {}
    last = []
    for hook in hooks:
        values = hook[0]
        i = max(index.get(v, -1) for v in values)
        if i > end:
            continue
        first = min(index.get(v, -1) for v in values)
        if any(v in values for op in forward[first + 1 : i + 1] for v in op.inputs):
            raise FlameError("a gradient hook's values must not use one another (their gradients are "
                             "transformed together)")
        (at.setdefault(i, []) if i >= 0 else last).append(hook)
    return at, sorted(last, key=lambda hook: _last_use(forward[: end + 1], hook[0]))


def _last_use(forward: list, values: tuple) -> tuple[int, int]:
    """Hooks on graph inputs run in the order their gradients are complete: the input the latest op
    reads first (PyTorch's engine accumulates a leaf as soon as its gradient is), ties by position."""
    for i in range(len(forward) - 1, -1, -1):
        for k, v in enumerate(forward[i].inputs):
            if v in values:
                return -i, k
    return 1, 0


def _run_hook(b: Builder, ct: dict, hook: GradHook, loc: str | None = None) -> None:
    """Replace the gradients of a hook's values with what its function makes of them (None: none).
    The ops the function appends are backward ops (of the op at `loc`)."""
    values, fn = hook
    b.loc = BackwardLoc(loc or "")
    grads = tuple(ct.get(v) for v in values)
    if all(gv is None for gv in grads):
        return
    start = len(b.graph.ops)
    new = fn(b, grads)
    for op in b.graph.ops[start:]:
        if not isinstance(op.loc, BackwardLoc):
            op.loc = BackwardLoc(op.loc or "")
    for v, gv in zip(values, new):
        if gv is None:
            ct.pop(v, None)
        else:
            ct[v] = gv


def autodiff(g: Graph, out: Value, wrt: Sequence[Value], seed: Value | None = None,
             hooks: Sequence[GradHook] = (), unpacked: dict | None = None,
             composites: dict | None = None) -> list[Value | None]:
    """Append to g the ops that compute d(out)/d(w) for each w in wrt, given cotangent `seed` for out
    (default: ones, so `out` is usually a scalar loss). Returns one Value per w, or None where out
    does not depend on w. `hooks` (values, fn): once the gradients of `values` are complete,
    fn(builder, those gradients) -> the gradients that flow on (Tensor.register_hook, module backward
    hooks). `unpacked`: op -> {input position (-1: its result): a value its VJP reads in that one's place}
    (saved-tensor hooks' unpacked tensors, frontend/saved.py). `composites`: op -> (values, vjp): op made
    the result of a composite whose backward is vjp(b, cotangent) -> one gradient (or None) per value in
    `values` (torch's formula on what its node saved, frontend/torch_saves.py), in place of the VJPs of
    the composite's own ops, which then get no cotangent. Before: a verified graph containing out
    and wrt. After: the same graph with hand-written attention rewritten in place
    (passes/rewrite_attention.py) and backward ops appended (outputs unchanged; the caller decides what
    to return)."""
    if not out.dtype.is_float:
        raise FlameError(f"cannot differentiate a {out.type} result: it is not floating point")
    for w in wrt:
        if not w.dtype.is_float:
            raise FlameError(f"cannot take a gradient with respect to a {w.type} value: only floating-point "
                             f"values have gradients")
    # hand-written attention becomes one op first, so its backward is the fused attention backward
    rewrite_attention_in_place(g, keep=[out, *wrt], differentiate=score_mod_vjp)
    needed = _depends_on(g, wrt)
    end = next((i for i, op in enumerate(g.ops) if op.out is out), -1)
    saved = _emit_residuals(g, out, end, needed)
    b = Builder(g, BackwardLoc(""))
    forward = list(g.ops)
    ct: dict[Value, Value] = {out: seed if seed is not None else b.const(1.0, out.dtype, out.shape)}
    end = next((i for i, op in enumerate(forward) if op.out is out), -1)
    calls = _calls(forward[: end + 1])
    at, last = _hook_points(forward, hooks, end)
    for i in range(end, -1, -1):
        op = forward[i]
        for hook in at.get(i, ()):
            _run_hook(b, ct, hook, op.loc)
        gout = ct.get(op.out)
        opdef = REGISTRY[op.name]
        if opdef.call_result:
            gout = _call_cotangents(calls[op], ct)
        composite = composites.get(op) if composites else None
        targets = op.inputs if composite is None else composite[0]
        if gout is None or opdef.vjp is None and composite is None or needed.isdisjoint(targets):
            continue
        b.loc = BackwardLoc(op.loc or "")
        start = len(g.ops)
        if composite is not None:
            got = composite[1](b, gout)
        else:
            ins, res = op.inputs, op.out
            if unpacked and op in unpacked:
                sub = unpacked[op]
                ins, res = [sub.get(k, x) for k, x in enumerate(ins)], sub.get(-1, res)
            got = opdef.vjp(b, gout, *ins, res, *saved.get(op, ()), **op.attrs)
        grads = [gx if gx is not None and x in needed and x.dtype.is_float else None
                 for x, gx in zip(targets, got)]
        _drop_unused_since(g, start, [gx for gx in grads if gx is not None])
        for x, gx in zip(targets, grads):
            if gx is None:
                continue
            gx = b.sum_to(gx, x.shape)
            if gx.shape != x.shape:
                gx = b.broadcast_to(gx, shape=x.shape)
            if gx.dtype != x.dtype:
                gx = b.cast(gx, dtype=x.dtype)
            ct[x] = b.add(ct[x], gx) if x in ct else gx
    for hook in last:
        _run_hook(b, ct, hook)
    return [ct.get(w) for w in wrt]


def score_mod_vjp(sub: Graph) -> Graph:
    """The VJP graph of an attention's score modification (flame/ir/ops/attention.py): inputs (s,
    *extras, g), outputs (ds, *gradient of each float extra; zeros where the score does not depend on
    it), made by this pass from the registry's VJPs."""
    g = sub.copy()
    g.name = "score_mod_grad"
    seed = g.add_input(g.outputs[0].type)
    wrt = [g.inputs[0], *float_extras(g.inputs[1:-1])]
    grads = autodiff(g, g.outputs[0], wrt, seed=seed)
    b = Builder(g)
    g.outputs = [gx if gx is not None else b.zeros_like(w) for gx, w in zip(grads, wrt)]
    g.outputs = [b.cast(gx, dtype=w.dtype) if gx.dtype != w.dtype else gx for gx, w in zip(g.outputs, wrt)]
    return eliminate_dead_code(g)
