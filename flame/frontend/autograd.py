"""Ways to ask for gradients — loss.backward(), flame.grad, flame.value_and_grad — all through the
one autodiff pass (passes/autodiff.py). Eager backward rebuilds the graph from the tensors that
produced the loss (their Node records), so there is no global tape.

With create_graph=True the gradient part of that graph (the ops autodiff added) runs as eager ops
(`gradient_tensors`) instead of as one compiled plan: each gradient is then an eager tensor whose
history is the gradient computation, reading the forward's tensors (and so their histories), and can
be differentiated again as torch's can."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar

from flame.compiler import compile_graph
from flame.errors import AutogradError, FlameError
from flame.frontend import anomaly
from flame.frontend.autocast import autocast
from flame.frontend.compile import Compiled
from flame.frontend.context import current_trace, no_grad, user_location
from flame.frontend.counted_writes import as_of, node_name, refuse, saved_modified_error
from flame.frontend.data_writes import (
    composite_vjp,
    follow_writes,
    live_reads,
    now_value,
    through_data,
    uncounted_since,
    written_through,
)
from flame.frontend.dispatch import apply, freed_graph_error, overwritten
from flame.frontend.hooks import accumulate_and_notify, is_hooked, run_grad_reducers, run_unit, unit_of
from flame.frontend.saved import reads, saved_inputs, saved_reads, saves, torch_saved, unpack_saves
from flame.frontend.tensor import Tensor
from flame.frontend.views import moved_since, stale
from flame.ir.builder import Builder
from flame.ir.dtypes import DType, f32
from flame.ir.graph import Graph, Value, is_backward
from flame.passes.autodiff import autodiff


def _inputs(node) -> list:
    got = [as_of(x, v) for x, v in zip(node.inputs, node.versions)]
    if node.olds:  # leaves written since with no gradient recorded: their values then (leaf_writes.py)
        got = [node.olds.get(i, x) for i, x in enumerate(got)]
    if any(x is None for x in got):
        raise modified_error(node)
    return got


def modified_error(node) -> FlameError:
    """A value the recomputing backward needs that a write kept nothing of (torch's node may have saved
    nothing: a limit of flame's eager backward, not torch's error)."""
    return FlameError(f"a tensor needed to compute gradients was modified in place after it was used by "
                      f"{node.name}\n  at {node.loc}")


def _data_source(x, version: int | None):
    """x, a node's input reached through `.data` of a tensor with a gradient history whose storage a write
    changed since the node read it (at `version`): the stand-in of the base's history then, of which x's
    value then is x's view (_data_then); None for any other input."""
    if not through_data(x) or x._node is not None or version is None or x._version == version:
        return None
    src = as_of(x._base, version)
    return src if src is not None and src is not x._base and src._node is not None else None


def _data_sources(node) -> list:
    return [s for s in map(_data_source, node.inputs, node.versions) if s is not None]


def _data_then(node, inputs: list, b, vals: dict, now: dict) -> dict[int, Value]:
    """{position: the value then} of node's inputs reached through `.data` whose storage a write changed
    since (_data_source): the op computes from it (the recomputing backward would read the new values
    from the buffer), while its VJP reads the storage as it is now (data_writes.live_reads: `now`)."""
    then = {}
    for k, (x, version) in enumerate(zip(inputs, node.versions)):
        src = _data_source(x, version)
        if src is not None and id(src) in vals:
            v = vals[id(src)]
            for opdef, attrs, _ in x._chain:  # (.data's link, then the views taken of it)
                v = b.emit(opdef.name, v, **attrs)
            then[k], now[id(x)] = v, vals[id(x)]
    return then


def _topo(root: Tensor) -> list[Tensor]:
    """Every tensor root was computed from (root included), each after the tensors it was made from."""
    import networkx as nx  # (imported when an eager backward first runs: a traced one, or none, needs it not)

    g = nx.DiGraph()
    g.add_node(id(root))
    tensors, todo = {id(root): root}, [root]
    while todo:
        t = todo.pop()
        for x in [*_inputs(t._node), *_data_sources(t._node)] if t._node is not None else ():
            if isinstance(x, Tensor):
                if id(x) not in tensors:
                    tensors[id(x)] = x
                    todo.append(x)
                g.add_edge(id(x), id(t))
    return [tensors[i] for i in nx.topological_sort(g)]


def saving_nodes(
    g: Graph, vals: dict[int, Value], order: list[Tensor], cut: dict | None = None, runs: set | None = None,
    formulas: dict | None = None,
) -> list:
    """The nodes of `order` whose saved tensors the backward autodiff appended to g (a rebuilt graph,
    `vals` its tensors' values, `cut` as _rebuild's) reads (saved.saves). A backward frees these, as
    torch frees the saved tensors of the nodes it runs; a node that saves none (a view, a cat, a sum, an
    add) can be passed again, as in torch. `runs`: the ids of the tensors whose nodes the backward runs
    (_running; None: all): a gradient with respect to an intermediate runs none of the nodes before it.
    `formulas`: autodiff's `composites` (_rebuild's): a composite whose gradient torch's formula gave ran
    torch's node, which saved what its declaration says, whatever of its own ops' values the formula read."""
    read = reads(g.ops)
    found = []
    for t in order:
        v = (cut or {}).get(id(t)) or vals.get(id(t))
        if t._node is not None and v is not None and (runs is None or id(t) in runs) \
                and (t._node.packed or saves(v.producer, read) or v.producer in (formulas or ())):
            found.append(t._node)
    return found


def _rebuild(
    loss: Tensor, cut: dict | None = None, order: list | None = None, runs: set | None = None
) -> tuple[Graph, dict[int, Value], list[Tensor], list, dict]:
    """The graph of the ops that made loss, from its leaves (graph inputs). A tensor in `cut` passes no
    gradient to what it was made from (its uses read it through stop_gradient); cut[id] is set to its
    own value, where a hooked backward seeds the gradient its hooks made (_hooked_backward). Returns
    (the graph, id -> value, the tensors its inputs hold, autodiff's `composites`: torch's formulas of the
    composites whose saved values a write through .data changed, autodiff's `unpacked`: the tensors
    saved-tensor hooks unpacked, each an input of its own unless the graph holds it). A freed node is an
    error where its backward runs (`runs`: the ids of the tensors whose nodes run, _running; None: all)."""
    g = Graph("backward")
    b = Builder(g)
    vals: dict[int, Value] = {}
    leaves: list[Tensor] = []
    composites: dict = {}
    unpacked: dict = {}
    seen: dict = {}  # id(packed) -> its tensors unpacked (a call of a Function: its results share them)
    consts: dict = {}  # id(buffer) -> (its tensor, its input): buffers written through .data the VJPs read
    now: dict = {}  # id(view) -> its value taken again from a source written through .data (data_writes.py)
    newer: set = set()  # ids of the tensors recomputed here from a leaf a .data write changed since (_note_recomputed)
    pending: dict = {}  # id(a composite's node) -> _note_recomputed's error of an op of it, unless torch's formula runs
    for t in order if order is not None else _topo(loss):
        node = t._node
        if node is None:
            vals[id(t)] = g.add_input(t._type(), "param" if t.requires_grad else "const")
            leaves.append(t)
            continue
        if node.freed and (runs is None or id(t) in runs):  # a node not run only recomputes its value
            raise freed_graph_error(node.name, node.loc)
        inputs = _inputs(node)
        b.loc = node.loc
        then = _data_then(node, inputs, b, vals, now)
        fresh = False  # a leaf read as it is now, changed since by writes through .data (_note_recomputed)
        counted = []  # the positions of those changed by writes torch's version counter counts
        for k, (x, orig, ver) in enumerate(zip(inputs, node.inputs, node.versions)):
            # its history is the same; only a leaf's values can have changed under it
            if x is orig and isinstance(x, Tensor) and ver is not None and x._node is None and x._version != ver \
                    and k not in then:
                if written_through(x, ver) if through_data(x) else moved_since(x, ver):  # (.data's: its own counter)
                    counted.append(k)
                fresh = True
        vals[id(t)] = b.emit(node.name, *[then[k] if k in then else vals[id(x)] if isinstance(x, Tensor) else x
                                          for k, x in enumerate(inputs)], **node.attrs)
        if counted:
            _refuse_moved(vals[id(t)].producer, node, inputs, counted)
        if node.olds:
            _read_written_leaves(node, vals[id(t)], g, vals, leaves, unpacked)
        if node.packed:
            _unpack(node, vals[id(t)], g, vals, leaves, unpacked, seen)
        follow_writes(node, t, inputs, b, vals, leaves, consts, now)
        op = vals[id(t)].producer
        live = live_reads(op, t, inputs, g, leaves, consts, now) if op is not None and op.name == node.name else None
        if op is not None and op.name == node.name and (runs is None or id(t) in runs):
            refuse(op, node, t, inputs)  # a saved value a counted write changed
            error = _note_recomputed(op, node, t, inputs, fresh, newer)
            if error is not None:
                outer = _composite_node(node)
                if outer is None:
                    raise error
                pending.setdefault(id(outer), error)
        if live:  # what a write through .data changed: the VJP reads the buffer as it is now (data_writes.py)
            unpacked[op] = {**live, **unpacked.get(op, {})}
        formula = node.torch_saves.formula if node.torch_saves is not None else None
        if formula is not None and op is not None and op.name == node.name:
            vjp = _torch_formula(op, formula, t, g, vals, leaves, consts, now)
            if vjp is not None:
                composites[op] = vjp
        error = pending.pop(id(node), None)
        if error is not None and op not in composites:
            raise error
        if cut is not None and id(t) in cut:
            cut[id(t)] = vals[id(t)]
            vals[id(t)] = b.emit("stop_gradient", vals[id(t)])
    if pending:
        raise next(iter(pending.values()))
    return g, vals, leaves, composites, unpacked


def _composite_node(node):
    """The node of the declared composite (torch_saves.py) that node's op is one of (node itself where it
    carries the declaration and torch's formula), whose formula, where it runs, replaces the VJPs of its
    ops; None for any other node."""
    declared = node.torch_saves
    if declared is None:
        return None
    return declared.outer if declared.outer is not None else node if declared.formula is not None else None


def _torch_formula(op, formula, t: Tensor, g: Graph, vals: dict, leaves: list, consts: dict, now: dict):
    """data_writes.composite_vjp of op, the rebuilt op of t's node, which made a composite's result: its
    arguments' values as the composite read them, and each of them and its result as the storage holds it
    now (a leaf the composite read a stand-in of, its version unchanged, so written through .data since:
    the leaf; another tensor: data_writes.now_value), of which the formula reads what torch's node saved.
    An argument no op recording a gradient read (a pos_weight converted with no gradient) is read as it is
    now."""
    args, written = {}, {}
    for name, (x, version, reader, k) in formula.args:
        read = x if reader is None else _inputs(reader)[k]  # (no reader: a tensor the ops read no gradient of)
        if reader is None and id(x) not in vals:
            vals[id(x)] = g.add_input(x._type(), "const")
            leaves.append(x.detach())
        if id(read) not in vals:
            return None
        args[name] = vals[id(read)]
        if reader is not None and reader.olds and k in reader.olds and uncounted_since(x, version):  # (.data's write)
            if id(x) not in vals:  # (a leaf that takes no gradient, which no other op reads)
                vals[id(x)] = g.add_input(x._type(), "const")
                leaves.append(x)
            written[args[name]] = vals[id(x)]
        else:
            v = now_value(read, g, leaves, consts, now)
            if v is not None:
                written[args[name]] = v
    v = now_value(t, g, leaves, consts, now)
    if v is not None:
        written[op.out] = v
    return composite_vjp(op, formula, args, written)


def _refuse_moved(op, node, inputs: list, counted: list[int]) -> None:
    """A node's inputs at `counted`, tensors with no history (a leaf, a detach()) that a write torch's version
    counter counts changed since it read them: torch's error where its node saved one; flame's where its VJP
    reads one torch's did not save (it would read the new values). One neither reads (add's) is no error,
    as torch's: the node's value, computed again from the new values, is refused where a VJP reads it
    (_note_recomputed)."""
    if op is None or op.name != node.name:  # (the rebuilt op folded away: what it saved is not known)
        raise saved_modified_error(node_name(node), node.loc)
    needs = tuple(isinstance(x, Tensor) and x.requires_grad for x in inputs)
    if any(k in torch_saved(op, needs)[0] for k in counted) or node.torch_saves is not None:
        raise saved_modified_error(node_name(node), node.loc)
    if any(k in saved_reads(op, needs)[0] for k in counted):
        raise AutogradError(f"backward: {node.name} reads a tensor written in place after it was used, which torch's "
                            f"node does not save; flame's backward would read its new values. Run the backward "
                            f"before the write, or write into a clone\n  at {node.loc}")


def _note_recomputed(op, node, t: Tensor, inputs: list, fresh: bool, newer: set) -> AutogradError | None:
    """Note t in `newer` where its value here is computed from a leaf whose storage a write changed since
    t's node read it (`fresh`: through .data, which torch does not count, or one that no node saved the
    leaf for: _refuse_moved), or from a tensor in `newer`; the error to raise where op's VJP reads such a
    value other than the leaf itself: torch's node saved it as it was, flame's backward would read it
    computed from the new values (unless torch's formula of a composite replaces that VJP: _rebuild)."""
    later = [k for k, x in enumerate(inputs) if isinstance(x, Tensor) and id(x) in newer]
    if not fresh and not later:
        return None
    newer.add(id(t))
    positions, reads_result = saved_reads(op, tuple(isinstance(x, Tensor) and x.requires_grad for x in inputs))
    if any(k in positions for k in later) or reads_result:
        return AutogradError(
            f"backward: {node_name(node)} saved a value computed from a tensor whose storage a write (through .data, "
            f"or into a tensor no node saved) changed after it was read (a detach() or another alias of the "
            f"written tensor); torch's backward "
            f"reads that value as it was, flame's would compute it again from the new values. Run the "
            f"backward before the write, or write after it\n  at {node.loc}")
    return None


def _read_written_leaves(node, out: Value, g: Graph, vals: dict, leaves: list, unpacked: dict) -> None:
    """For a node whose leaf inputs were written since with no gradient recorded (node.olds: it computes
    from their old values), what its VJP reads of them, as torch's saved tensors: the leaf as it is now
    where the write left its version (through .data); a write that bumped it raises, as torch's."""
    op = out.producer
    if op is None or op.name != node.name or node.torch_saves is not None:  # (a composite's op: refuse says)
        return
    # what the VJP of the gradients wanted reads itself (exp's reads its result, made of the old values)
    needs = tuple(isinstance(x, Tensor) and x.requires_grad for x in node.inputs)
    positions, kept = saved_inputs(op, needs), torch_saved(op, needs)[0]  # (what torch's node saved: kept)
    sub = {}
    for i in node.olds:
        orig = node.inputs[i]
        if i in kept and not uncounted_since(orig, node.versions[i]):
            raise saved_modified_error(node.name, node.loc)
        if i in positions and uncounted_since(orig, node.versions[i]):
            if id(orig) not in vals:  # (a leaf that takes no gradient, which no other op reads)
                vals[id(orig)] = g.add_input(orig._type(), "const")
                leaves.append(orig)
            sub[i] = vals[id(orig)]
    if sub:
        unpacked[op] = sub


def _unpack(node, out: Value, g: Graph, vals: dict, leaves: list, unpacked: dict, seen: dict) -> None:
    """The unpack hooks of node's saved tensors run (once per packed set), their tensors read by the VJP
    of out's op: a tensor of the graph as its value, any other as a new input (a leaf that takes no
    gradient)."""
    op = out.producer
    if op is None or op.name != node.name:
        return
    if id(node.packed) in seen:
        unpacked[op] = seen[id(node.packed)]
        return
    once = _one_backward.get()
    if once is not None and id(node.packed) in once:
        got = once[id(node.packed)][1]
    else:
        types = [x.type for x in op.inputs]
        got = unpack_saves(node, lambda i: out.type if i < 0 else types[i])
        if once is not None:
            once[id(node.packed)] = (node.packed, got)  # (held: the id stays its own)
    sub = seen[id(node.packed)] = {}
    for i, u in got.items():
        if id(u) in vals and vals[id(u)].type == u._type():
            sub[i] = vals[id(u)]
        else:
            sub[i] = g.add_input(u._type(), "const")
            leaves.append(u.detach())
    unpacked[op] = sub


# while a backward runs in stages (_hooked_backward, hooked_grad): id(packed) -> (packed, the tensors its
# unpack hooks gave), so that each stage's graph reads them and the hooks run once, as torch's
_one_backward: ContextVar[dict | None] = ContextVar("flame_one_backward_unpacked", default=None)


@contextmanager
def unpacking_once():
    token = _one_backward.set({})
    try:
        yield
    finally:
        _one_backward.reset(token)


def backward(
    loss: Tensor, gradient: Tensor | None = None, retain_graph: bool | None = None, create_graph: bool = False
) -> None:
    """Fill .grad of the leaf tensors (requires_grad=True) that `loss` depends on; accumulates. Frees
    the graph (its nodes) unless retain_graph=True (its default is create_graph, as torch's); a later
    backward through a freed node raises flame.errors.AutogradError, as PyTorch raises. With
    create_graph=True the gradients carry their own history (module docstring)."""
    if gradient is not None:
        gradient = _check_gradient(loss, gradient)
    trace = current_trace.get()
    if trace is not None:
        trace.backward(loss, gradient, retain_graph, create_graph)
        return
    if not loss.requires_grad:
        raise AutogradError(
            f"backward(): element 0 of tensors does not require grad and does not have a grad_fn (no input had "
            f"requires_grad=True)\n  at {user_location()}"
        )
    if gradient is None and loss.numel() != 1:
        raise AutogradError(
            f"backward(): grad can be implicitly created only for scalar outputs; a non-scalar "
            f"{list(loss.shape)} tensor needs a gradient argument\n  at {user_location()}"
        )
    order = _topo(loss)
    if any(t._hooks or t._retains_grad for t in order):
        pairs, nodes = _hooked_backward(loss, gradient, order, create_graph)
    else:
        wrt, grads, nodes = _gradients(loss, gradient, {}, [], leaves=True, order=order, create=create_graph)
        pairs = [(t, gr) for t, gr in zip(wrt, grads) if gr is not None]
    with nullcontext() if create_graph else no_grad():  # a sum into a .grad with a history is recorded
        for t, new in pairs:
            accumulate_and_notify(t, new)
    run_grad_reducers(t for t, _ in pairs)
    free_graph(nodes, order, create_graph if retain_graph is None else retain_graph)



def free_graph(nodes: list, order: list, retain: bool) -> None:
    """After a backward without retain_graph: the nodes whose saved tensors it read are freed (a second
    backward through one raises), and every node it ran is spent (frontend/leaf_writes.py)."""
    if not retain:
        for node in nodes:
            node.freed = True
        for t in order:
            if t._node is not None:
                t._node.spent = True

def _check_gradient(loss: Tensor, gradient) -> Tensor:
    """backward(gradient)'s gradient, a tensor of loss's shape as torch requires (a mismatch is torch's
    RuntimeError "Mismatch in shape"), checked before anything runs; in loss's dtype, as torch casts it."""
    if not isinstance(gradient, Tensor):
        raise AutogradError(f"backward(): gradient must be a Tensor of the shape {list(loss.shape)} or None, got "
                            f"{type(gradient).__name__}\n  at {user_location()}")
    if tuple(gradient.shape) != tuple(loss.shape):
        raise AutogradError(f"backward(): Mismatch in shape: grad_output[0] has a shape of {list(gradient.shape)} "
                            f"and output[0] has a shape of {list(loss.shape)}\n  at {user_location()}")
    return gradient if gradient.dtype == loss.dtype else gradient.to(loss.dtype)


def known_tensors(order: list[Tensor], vals: dict[int, Value], cut: dict | None = None) -> dict:
    """Value -> tensor for the values of a rebuilt graph (_rebuild) that eager tensors hold: every tensor
    of `order`, under its value and, where cut, under the value before its stop_gradient (a second
    derivative flows through the history of a tensor the first one was cut at). A tensor whose buffer an
    in-place write has changed since (dispatch.history_only, or a view written through its base or another
    view) is left out: its op runs again."""
    known = {vals[id(t)]: t for t in order if not (overwritten(t) or stale(t))}
    for i, v in (cut or {}).items():
        if v is not None and vals[i] in known:
            known[v] = known[vals[i]]
    return known


def gradient_tensors(g: Graph, grads: list, inputs: list[Tensor], known: dict, dtypes: list, create: bool) -> list:
    """The values `grads` of g (None stays None) as tensors of `dtypes`, g's inputs holding `inputs`.
    Without create: g compiled and run, concrete tensors. With create: the ops making them run as eager
    ops, which record histories, from the tensors already there (`known`: Value -> the tensor holding
    it, the forward's values; and the inputs), so the gradients can be differentiated again."""
    outs = [v for v in grads if v is not None]
    if not outs:
        return [None] * len(grads)
    if not create:
        g.outputs = outs
        c = compile_graph(g)
        with anomaly.watching(c.plan):  # nothing unless anomaly detection is on
            arrays = iter(c.run([t._data for t in inputs]))
        return [None if v is None else Tensor._concrete(next(arrays), dt) for v, dt in zip(grads, dtypes)]
    env = {**known, **dict(zip(g.inputs, inputs))}
    needed, todo = set(), list(outs)
    while todo:
        v = todo.pop()
        if v not in env and v not in needed:
            needed.add(v)
            todo.extend(v.producer.inputs)
    with autocast(enabled=False):  # the gradient's ops take the forward's dtypes, as torch's
        for op in g.ops:
            if op.out in needed:
                env[op.out] = apply(op.name, *(env[v] for v in op.inputs), **op.attrs)
                if is_backward(op):
                    anomaly.check_eager_gradient(op, env[op.out])
    return [None if v is None else _as_dtype(env[v], dt) for v, dt in zip(grads, dtypes)]


def _as_dtype(t: Tensor, dtype: DType) -> Tensor:
    return t if t.dtype == dtype else t.to(dtype)


def _gradients(
    loss: Tensor, gradient: Tensor | None, seeds: dict, want: list[Tensor], leaves: bool, order: list,
    create: bool = False, runs: set | None = None,
):
    """The gradients of loss (seeded with `gradient`) with respect to the tensors `want` and, if
    `leaves`, every leaf that requires grad: (those tensors, their gradients or None, the nodes whose
    saved tensors the backward read: saving_nodes).
    `order`: the tensors loss was computed from (_topo).
    `seeds`: id -> (tensor, gradient) of hooked tensors whose gradients are known: nothing flows back
    through them from loss, their own gradient flows on from them instead. `create`: the gradients
    carry histories (gradient_tensors). `runs`: as _rebuild's."""
    cut = dict.fromkeys(seeds)
    g, vals, graph_leaves, composites, unpacked = _rebuild(loss, cut, order, runs)
    wrt = [t for t in graph_leaves if t.requires_grad and leaves] + want
    inputs = list(graph_leaves)
    terms = [] if id(loss) in seeds else [(vals[id(loss)], gradient)]
    terms += [(cut[i], gr) for i, (_, gr) in seeds.items() if gr is not None]
    if not seeds:
        out = vals[id(loss)]
        seed = g.add_input(loss._type(), "data") if gradient is not None else None
    else:  # one scalar whose gradient is every seed: sum(value * seed) over the seeded values
        b, out, seed = Builder(g), None, None
        for v, gr in terms:
            term = b.sum_to(v if gr is None else b.mul(v, g.add_input(gr._type(), "data")), ())
            term = term if term.dtype == f32 else b.cast(term, dtype=f32)
            out = term if out is None else b.add(out, term)
    inputs += [gr for _, gr in terms if gr is not None]
    grads = [None] * len(wrt) if out is None else \
        autodiff(g, out, [vals[id(t)] for t in wrt], seed, unpacked=unpacked, composites=composites)
    nodes = saving_nodes(g, vals, order, cut, runs, composites)
    known = known_tensors(order, vals, cut) if create else {}
    return wrt, gradient_tensors(g, grads, inputs, known, [t.dtype for t in wrt], create), nodes


def _hook_stages(
    loss: Tensor, gradient: Tensor | None, order: list[Tensor], create: bool, needed: set | None = None,
    runs: set | None = None,
) -> tuple[dict, list]:
    """The gradients of the hooked non-leaf tensors, each group's hooks run on them, latest first, the
    ones known seeding the next stage: (id -> (tensor, its hooked gradient), the nodes whose saved
    tensors the stages read). `needed`: the ids of the tensors the backward passes (all when None);
    `runs`: as _rebuild's."""
    inner = {id(t): t for t in order if t._node is not None and (needed is None or id(t) in needed)}
    seeds: dict[int, tuple] = {}
    nodes: list = []
    for t in reversed(order):
        if id(t) in inner and is_hooked(t) and id(t) not in seeds:
            unit = [u for u in unit_of(t) if id(u) in inner]
            _, grads, read = _gradients(loss, gradient, seeds, unit, leaves=False, order=order, create=create,
                                        runs=runs)
            nodes += read
            with nullcontext() if create else no_grad():
                grads = run_unit(unit, grads)
            seeds.update((id(u), (u, gr)) for u, gr in zip(unit, grads))
    return seeds, nodes


def _hooked_backward(
    loss: Tensor, gradient: Tensor | None, order: list[Tensor], create: bool = False
) -> tuple[list, list]:
    """backward() through tensors with hooks or retain_grad(), PyTorch's semantics with concrete
    gradients: in stages, latest hooked tensors first, each stage computing the complete gradients of
    one group of them (frontend/hooks.py `unit_of`) with the gradients already hooked as seeds, its
    hooks then run on them; a last stage gives the leaves (whose hooks run before accumulation) and the
    non-leaves that retain their grad. Returns ((leaf, gradient) pairs, the nodes whose saved tensors it
    read). `create`: the gradients carry histories and the hooks run recording theirs."""
    with unpacking_once():
        seeds, staged = _hook_stages(loss, gradient, order, create)
        retained = [t for t in order if t._node is not None and t._retains_grad and id(t) not in seeds]
        wrt, grads, nodes = _gradients(loss, gradient, seeds, retained, leaves=True, order=order, create=create)
    nodes += staged
    pairs = []
    with nullcontext() if create else no_grad():
        run_unit(retained, grads[len(wrt) - len(retained) :])
        for t, gr in sorted(zip(wrt[: len(wrt) - len(retained)], grads), key=_last_use(order)):
            if gr is not None:
                gr = run_unit([t], [gr])[0] if is_hooked(t) else gr
            if gr is not None:
                pairs.append((t, gr))
    return pairs, nodes


def hooked_grad(
    root: Tensor, ins: Sequence[Tensor], order: list[Tensor], create: bool, runs: set
) -> tuple[list, list]:
    """flame.autograd.grad's gradients of root with respect to `ins` through tensors with hooks or
    retain_grad(), as torch's: the hooks of the tensors passed run (in _hooked_backward's stages), those
    of the inputs too, and the non-leaves that retain their grad get it; no leaf's .grad is touched.
    `runs`: the ids of the tensors whose nodes it runs (_running). Returns (the gradients or None, the
    nodes whose saved tensors it read)."""
    needed = _passed(order, ins)
    with unpacking_once():
        seeds, staged = _hook_stages(root, None, order, create, needed, runs)
        retained = [t for t in order
                    if t._node is not None and t._retains_grad and id(t) not in seeds and id(t) in needed]
        taken = {id(t) for t in retained} | set(seeds)
        passed = {id(t) for t in order}
        free = list({id(t): t for t in ins if id(t) not in taken and id(t) in passed}.values())
        _, grads, nodes = _gradients(root, None, seeds, retained + free, leaves=False, order=order, create=create,
                                     runs=runs)
    nodes += staged
    known = {id(t): gr for t, gr in zip(retained + free, grads)}
    known.update((i, gr) for i, (_, gr) in seeds.items())
    got = []
    with nullcontext() if create else no_grad():
        run_unit(retained, grads[: len(retained)])
        for t in ins:
            gr = known.get(id(t))
            if gr is not None and t._node is None and is_hooked(t):
                gr = run_unit([t], [gr])[0]
            got.append(gr)
    return got, nodes


def _passed(order: list[Tensor], ins: Sequence[Tensor]) -> set[int]:
    """The ids of the tensors of `order` a gradient with respect to `ins` passes (ins, and what was
    computed from them): torch's engine runs only their nodes, so only their hooks and retain_grad()."""
    passed = {id(t) for t in ins}
    for t in order:
        if t._node is not None and any(id(x) in passed for x in _inputs(t._node) if isinstance(x, Tensor)):
            passed.add(id(t))
    return passed


def _running(order: list[Tensor], ins: Sequence[Tensor]) -> set[int]:
    """The ids of the tensors of `order` whose nodes a gradient with respect to `ins` runs: those made
    from a tensor it passes (_passed). An input's own node runs only when it was made from another."""
    passed = _passed(order, ins)
    return {id(t) for t in order
            if t._node is not None and any(id(x) in passed for x in _inputs(t._node) if isinstance(x, Tensor))}


def _last_use(order: list[Tensor]):
    """The order leaves' hooks run in: the leaf the latest op reads first (PyTorch's engine accumulates
    a leaf as soon as its gradient is complete), ties by the input's position (passes/autodiff.py)."""
    last: dict[int, tuple[int, int]] = {}
    for i, t in enumerate(order):
        for k, x in enumerate(_inputs(t._node) if t._node is not None else ()):
            last[id(x)] = (-i, k)
    return lambda pair: last.get(id(pair[0]), (1, 0))


def value_and_grad(f: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """f -> (x... -> (f(x...), df/dx)) for the arguments at argnums (f must return a scalar).
    Works eagerly and inside @flame.compile; gradients that do not depend on f are zeros. Tensor hooks
    run as in backward() (torch.autograd.grad runs them too)."""
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)

    def traced(*args):
        trace = current_trace.get()
        for i in nums:
            if not isinstance(args[i], Tensor) or not args[i].dtype.is_float:
                raise FlameError(f"grad: argument {i} must be a floating-point flame.Tensor")
        before = trace.differentiated
        trace.differentiated = (*before, *(args[i] for i in nums))  # they require grad inside f, as torch.func's
        try:
            out = f(*args)
        finally:
            trace.differentiated = before
        if not isinstance(out, Tensor) or out.numel() != 1:
            raise FlameError(
                f"grad: the function must return a scalar Tensor, got {getattr(out, 'shape', type(out).__name__)}"
            )
        ws = [trace.value_of(args[i]) for i in nums]
        trace.builder.loc = user_location()
        gvals = trace.gradients(trace.value_of(out), ws, hooks=trace._grad_hooks([args[i] for i in nums]))
        grads = tuple(
            Tensor._traced(gv if gv is not None else trace.builder.zeros_like(w), trace) for gv, w in zip(gvals, ws)
        )
        return out, grads[0] if isinstance(argnums, int) else grads

    eager = Compiled(traced, name=f"grad_{getattr(f, '__name__', 'fn').strip('<>')}", warn=False)

    def wrapper(*args):
        return traced(*args) if current_trace.get() is not None else eager(*args)

    return wrapper


def grad(f: Callable, argnums: int | Sequence[int] = 0) -> Callable:
    """f -> (x... -> df/dx) for the arguments at argnums; f must return a scalar."""
    vg = value_and_grad(f, argnums)
    return lambda *args: vg(*args)[1]
