"""Rematerialisation: the backward recomputes some forward values instead of keeping them alive from
the forward to the backward (ARCHITECTURE.md "Planned memory").

A joint graph (autodiff appended the backward) splits at its first backward op: the ops before it are
the forward; everything from it on (backward, optimizer update) reads forward values that must then
be kept, "saved". Which forward values are recomputed is a minimum cut (networkx) over the forward
ops that saved values depend on, as AOTAutograd's partitioner does: each such value v is an edge
v_in -> v_out whose capacity is v's bytes (keeping v; 1/TAIL less for a value alive at the forward's
end anyway, `_tail`), data edges u_out -> v_in are uncuttable, values read later are tied to the
sink (needed in the backward), and values whose op may not be recomputed are tied to the source
(computed in the forward only). A cut keeps the values whose edge it cuts and recomputes those on
the sink side; its capacity is the bytes kept.

Every plan recomputes the free ops (`free`): elementwise work computed from values kept anyway
whose recomputation lands in a backward kernel that runs anyway (no launch, no matmul). What else
may be recomputed is the caller's choice (`allow(op)`), by tiers (`tier`): 0, cheap work (elementwise,
views, gather/concat and friends); 1, reductions; 2, matmuls; 3, library calls (attention); 4, random
draws (exact to recompute: counter-based, but never without need); within a tier, by flops per byte
kept. Ops recorded inside flame.utils.checkpoint (their
loc is an ir.graph.CheckpointLoc) are always recomputed when the backward needs them, whatever their
tier: only the region's inputs and the results it hands on (read outside the region) are kept, as
torch.utils.checkpoint does. Graph outputs are kept.

The rewrite clones each recomputed op right before the first later op that needs it (after the
saved values it reads), marked with a RecomputeLoc (a BackwardLoc, so the memory report sees the
clone as backward work and the values it reads as saved). Runs after SIMPLIFY (CSE would merge the
clones back) and before fusion, which keeps clones out of forward kernels (`mixes_phases`)."""

from __future__ import annotations

from collections.abc import Callable, Collection

from flame.ir.graph import BackwardLoc, CheckpointLoc, Graph, Op, RecomputeLoc, Value, is_backward, is_recompute
from flame.ir.ops.host import OFFLOAD, RELOAD
from flame.ir.registry import REGISTRY, flops, is_fill, is_relabel
from flame.passes.dce import eliminate_dead_code

_SRC, _SINK = "source", "sink"


def mixes_phases(ops: Collection[Op]) -> bool:
    """The ops hold a recomputation and a forward op: one kernel of them would compute the
    recomputed value in the forward and keep it alive again (the fusion pass refuses it)."""
    return any(is_recompute(o) for o in ops) and any(not is_backward(o) for o in ops)


def never(op: Op) -> bool:
    """The default `allow`: recompute nothing but checkpoint regions."""
    return False


TIERS = ("elementwise and movement", "reductions (norms, softmax statistics)", "matmuls", "attention and other "
         "library calls", "random draws")


def tier(op: Op) -> int:
    """What recomputing op costs, cheapest first (TIERS): 0 elementwise work and views, 1 reductions,
    2 matmuls, 3 library calls (attention), 4 random draws (exact, but never without need)."""
    opdef = REGISTRY[op.name]
    if opdef.random:
        return 4
    return {"reduction": 1, "matmul": 2, "library": 3}.get(opdef.category, 0)


def nbytes(v: Value) -> int:
    return v.type.numel * v.dtype.itemsize


def split(g: Graph) -> int:
    """Index of the first backward op (len(g.ops) when there is none): the forward ends there."""
    for i, op in enumerate(g.ops):
        if isinstance(op.loc, BackwardLoc):  # (is_backward, inline)
            return i
    return len(g.ops)


def saved(g: Graph) -> set[Value]:
    """Forward values read by an op of the backward part (backward, then the optimizer update)."""
    s = split(g)
    forward = {op.out for op in g.ops[:s]}
    return {v for op in g.ops[s:] for v in op.inputs if v in forward}


def _ancestors(g: Graph, needed: set[Value]) -> list[Op]:
    """The forward ops that some needed value depends on (those included), in order."""
    s = split(g)
    anc = set(needed)  # (holds graph inputs too: only forward results are looked up in it)
    for op in reversed(g.ops[:s]):
        if op.out in anc:
            anc.update(op.inputs)
    return [op for op in g.ops[:s] if op.out in anc]


def candidates(g: Graph) -> list[Op]:
    """Forward ops of tier 1 and above that saved values depend on, by tier, then cheapest
    recomputation per byte kept first (the order a memory budget tries them in)."""
    forced = checkpointed(g)
    ops = [op for op in _ancestors(g, saved(g)) if tier(op) > 0 and op not in forced]
    return sorted(ops, key=lambda op: (tier(op), flops(op) / max(nbytes(op.out), 1)))


def _region(op: Op) -> int | None:
    return op.loc.region if isinstance(op.loc, CheckpointLoc) else None


def checkpointed(g: Graph) -> set[Op]:
    """The forward ops of checkpoint regions whose results do not leave their region (read by no
    forward op outside it, not returned) and that the region's policy does not save (CheckpointLoc.saved:
    flame.utils.checkpoint's `policy`): the backward must recompute them when it reads them."""
    s = split(g)
    leaves = set(g.outputs)
    for op in g.ops[:s]:
        leaves.update(v for v in op.inputs if v.producer is not None and _region(v.producer) is not None
                      and _region(v.producer) != _region(op))
    return {op for op in g.ops[:s] if _region(op) is not None and op.out not in leaves and not op.loc.saved}


def _elementwise(op: Op) -> bool:
    opdef = REGISTRY[op.name]
    return opdef.category == "elementwise" and not opdef.random and not is_fill(op)


def _chain(op: Op, allowed: set[Op]) -> tuple[set[Op], set[Value]]:
    """The allowed ops a clone of op recomputes (op included) and the values they read from outside."""
    ops, reads, todo = set(), set(), [op]
    while todo:
        o = todo.pop()
        if o in ops:
            continue
        ops.add(o)
        for u in o.inputs:
            if u.producer in allowed:
                todo.append(u.producer)
            else:
                reads.add(u)
    return ops, reads


SMALL = 16  # a forward value at most 1/SMALL of the elements of the op reading it is cheap to keep
TAIL = 8  # the capacity of a value alive at the forward's end is 1/TAIL lower (`_tail`)


def _small(u: Value, op: Op) -> bool:
    """u (read by op) is a per-sample statistic small enough to keep for op's recomputation: 1 in the
    last dim, the size of op's result in the first and in every dim it was not reduced over, at most
    1/SMALL of its elements. A LayerNorm's per-row mean and rstd ([rows, 1]) against the [rows, d]
    value computed from them, or a GroupNorm's ([N, 1, 1, G, 1] against [N, H, W, G, C/G]), which
    the row kernel of the norm's backward then recomputes. Not per-channel statistics (a BatchNorm's
    [1, 1, 1, C], shared by the batch): recomputing a BatchNorm + ReLU output from the convolution's
    result costs resnet_block_train 11 % more time and 89 MiB more planned
    (benchmarks/results/2026-11-29-H200-remat/), the recomputed outputs being written again for the
    weight gradients of the next convolutions."""
    shape, out = u.shape, op.out.shape
    return (u.type.numel * SMALL <= op.out.type.numel and len(shape) == len(out) and shape[-1] == 1
            and shape[0] == out[0] and all(a in (1, b) for a, b in zip(shape, out)))


def _widening(u: Value, op: Op) -> bool:
    """op widens u, a value the forward computes: the same elements in more bytes (a cast of bf16 to
    f32). Keeping u and recomputing op never costs more bytes than keeping op's result, so op may be
    recomputed from u whether or not u is kept anyway: the minimum cut weighs u's bytes against those
    of what op feeds. So a LayerNorm or GroupNorm that computes its bf16 input in f32 keeps that input
    (often alive anyway: the residual stream) and its statistics, not its f32 centred copy. Not a
    graph input's view (a parameter reshaped per channel and widened): that would let a BatchNorm's
    affine output be recomputed for the next convolution, which `_small` keeps out."""
    return (u.type.numel == op.out.type.numel and u.dtype.itemsize < op.out.dtype.itemsize
            and _viewed(u).producer is not None)


def _computed_view(op: Op) -> bool:
    """op relabels (reshape, squeeze, unsqueeze) a value the forward computes: no work to recompute,
    so a recomputation may pass through it (a GroupNorm's [N, C, H, W] input viewed as its groups).
    It only joins a chain that an elementwise op starts (`free`)."""
    return is_relabel(op) and _viewed(op.out).producer is not None


def free(g: Graph) -> set[Op]:
    """The forward ops the backward recomputes by default, because it costs no launch and no matmul:
    elementwise ops (not random draws) computed from values that are kept anyway (saved values,
    graph inputs, constants), cheap to keep (a norm's row statistics, `_small`), alive at the
    forward's end anyway (`_tail`), narrower than the op's result (`_widening`) or from other such ops
    (relabelling views of computed values included, `_computed_view`); read in the backward by more than the
    work the loss's gradient does in the forward's kernels (`_early`); and whose recomputation
    lands in a backward kernel that runs anyway (`_landing`, `_Landing`). So the GELU output is recomputed from
    its saved input inside the GELU backward's kernel, and a LayerNorm's normalised output from its
    input and row statistics inside the LayerNorm backward's kernel (nothing of [rows, d] is kept
    when that input is a graph input or the residual stream the forward holds to its end). The
    minimum cut (`choose`) then decides which of these are recomputed."""
    s = split(g)
    needed, outputs, tail = saved(g), set(g.outputs), _tail(g)
    users = g.users()
    cand = {op for op in _ancestors(g, needed)  # checkpoint regions say for themselves what is kept
            if (_elementwise(op) or _computed_view(op)) and op.out not in outputs and _region(op) is None}
    changed = True
    while changed:  # drop ops that read a forward value that is neither kept nor recomputable
        changed = False
        for op in list(cand):
            if not all(u.producer is None or is_fill(u.producer) or u in needed or u.producer in cand
                       or u in tail or _small(u, op) or _widening(u, op) for u in op.inputs):
                cand.discard(op)
                changed = True
    early = _early(g)
    allowed: set[Op] = set()
    starts = [op for op in cand if _elementwise(op) and op.out in needed
              and any(r not in early for r in users[op.out] if is_backward(r))]
    beside = _Beside(g.ops[s:], starts, cand, users)
    todo = {op: _Landing(*_landing(op, cand, users, beside)) for op in starts}
    while True:  # a recomputation allowed lands in a kernel, which then reads what it reads too
        reads: dict[Op, set[Value]] = {}  # what _chain(op, allowed) reads, for this `allowed`
        took = [op for op, at in todo.items() if at.takes(allowed, reads)]
        if not took:
            return allowed
        for op in took:
            allowed |= _chain(op, cand)[0]
            del todo[op]


def _early(g: Graph) -> set[Op]:
    """Backward elementwise ops and reductions that read nothing a backward matmul or library call
    computed (a loss's gradient, a norm's backward right after its forward): fusion can run them in
    the forward's kernels, so a value only they read is not really kept for the backward, and
    recomputing it would split those kernels."""
    s = split(g)
    late: set[Value] = set()
    early = set()
    for op in g.ops[s:]:
        category = REGISTRY[op.name].category
        if category in ("matmul", "library") or any(u in late for u in op.inputs):
            late.add(op.out)
        elif category in ("elementwise", "reduction"):  # a view feeding a matmul is no kernel's work
            early.add(op)
    return early


def _landing(op: Op, cand: set[Op], users, beside: _Beside) -> tuple[bool, set[Value], list[Op]]:
    """Where recomputing op (with the chain of cand ops it needs) may land in a backward kernel that
    runs anyway: (a kernel reads op's value elementwise: vertical, the values of op's domain the
    chain reads, the backward elementwise ops and reductions that op does not feed which may read
    one of them or a cand op's value), for `_Landing`."""
    n = op.out.type.numel
    if any(_elementwise(r) and r.out.type.numel == n for r in users[op.out] if is_backward(r)):
        return True, set(), []
    _, reads = _chain(op, cand)
    shared = {u for u in reads if not is_fill(u.producer) and u.type.numel == n}
    return False, shared, beside.readers(op, shared)


class _Beside:
    """The backward elementwise ops and reductions (`back`, in order) beside which the recomputation of
    one of `starts` may land (`_Landing`), for all of them in one pass over the backward: per op, the
    starts it depends on through backward ops (a bitset; a kernel these feed cannot also compute the
    start). Of those, `_Landing` can only accept the readers of a computed value a start's chain reads
    or of a cand op's value (what a recomputation allowed there computes)."""

    def __init__(self, back: list[Op], starts: list[Op], cand: set[Op], users):
        self.users = users
        dep = {op.out: 1 << i for i, op in enumerate(starts)}  # value -> the starts it depends on
        self.bit = dict(dep)
        self.dep: dict[Op, int] = {}  # elementwise op or reduction of the backward -> its starts
        self.pos: dict[Op, int] = {}
        for i, r in enumerate(back):
            d = 0
            for u in r.inputs:
                d |= dep.get(u, 0)
            if d:
                dep[r.out] = d
            if REGISTRY[r.name].category in ("elementwise", "reduction"):
                self.dep[r], self.pos[r] = d, i
        outs = {op.out for op in cand}
        self.of_cand = [r for r in self.dep if any(u in outs for u in r.inputs)]

    def readers(self, op: Op, shared: set[Value]) -> list[Op]:
        """The backward elementwise ops and reductions that op does not feed and that read a computed
        value in `shared` or a cand op's value, in order."""
        bit, dep = self.bit[op.out], self.dep
        found = {r for r in self.of_cand if not dep[r] & bit}
        found.update(r for u in shared if u.producer is not None for r in self.users.get(u, ())
                     if r in dep and not dep[r] & bit)
        return sorted(found, key=self.pos.__getitem__)


class _Landing:
    """Whether the recomputation of one start lands in a backward kernel (`takes`), from `_landing`'s
    answer: a kernel reads its value elementwise (vertical), or it lands beside a sibling: one of
    `readers` reads, over the same domain, a computed forward value in `shared`, or a graph input in
    it that a recomputation already allowed there reads. A graph input read directly does not count:
    the optimizer reads every parameter, after everything that needs a parameter's cast. Asked again
    as `allowed` grows: what does not depend on it is found once, and each time only the readers'
    producers that are allowed now are looked at."""

    def __init__(self, vertical: bool, shared: set[Value], readers: list[Op]):
        self.shared = shared
        self.now = vertical or any(u in shared and u.producer is not None for r in readers for u in r.inputs)
        self.producers = set() if self.now else {v.producer for r in readers for v in r.inputs}

    def takes(self, allowed: set[Op], reads: dict[Op, set[Value]]) -> bool:
        """The recomputation lands in a kernel with this `allowed`; `reads`:
        _chain(p, allowed)[1] per op p asked so far for this `allowed`."""
        if self.now:
            return True
        for p in self.producers & allowed:
            got = reads.get(p)
            if got is None:
                got = reads[p] = _chain(p, allowed)[1]
            if not self.shared.isdisjoint(got):
                return True
        return False


def _tail(g: Graph) -> set[Value]:
    """Values the forward reads after its last matmul or library call: alive at the forward's end,
    where its allocations peak, whether kept for the backward or not. Of two ways to keep equal
    bytes, the cut takes the one that keeps these (a residual stream rather than the centred copy a
    LayerNorm made of it, with the row means): their capacity is 1/TAIL lower."""
    s = split(g)
    last = max((i for i, op in enumerate(g.ops[:s]) if REGISTRY[op.name].category in ("matmul", "library")),
               default=s)
    return {v for op in g.ops[last + 1:s] for v in op.inputs}


def choose(g: Graph, allow: Callable[[Op], bool] = never) -> set[Value]:
    """The forward values the backward should recompute: a minimum cut (module docstring)."""
    needed = saved(g)
    if not needed:
        return set()
    outputs = set(g.outputs)
    forced = checkpointed(g)
    import networkx as nx  # (imported at the first cut: a plan loaded from the plan cache needs none)
    from networkx.algorithms.flow import preflow_push

    net = nx.DiGraph()
    net.add_nodes_from((_SRC, _SINK))
    ops = _ancestors(g, needed)
    inside = {op.out for op in ops}
    tail = _tail(g)
    for op in ops:
        v = op.out
        vin, vout = ("in", id(v)), ("out", id(v))
        keep = nbytes(v) * TAIL - (nbytes(v) if v in tail else 0)
        net.add_edge(vin, vout, capacity=keep + 1)  # +1: of equal bytes, keep fewer values
        for u in op.inputs:
            if u in inside:
                net.add_edge(("out", id(u)), vin)  # no capacity: uncuttable
        if v in outputs or not (op in forced or allow(op)):
            net.add_edge(_SRC, vin)  # computed in the forward
        elif op in forced:
            net.add_edge(vin, _SINK)  # recomputed: inside a checkpoint region
        if v in needed:
            net.add_edge(vout, _SINK)
    residual: list[nx.DiGraph] = []

    def flow(*args, **kwargs):  # networkx's default flow function, its residual network kept to free
        residual.append(preflow_push(*args, **kwargs))
        return residual[-1]

    _, (_, sink_side) = nx.minimum_cut(net, _SRC, _SINK, flow_func=flow)
    for h in (net, *residual):  # a networkx graph refers to itself (its cached views): emptied, its
        h.clear()  # nodes and edges are freed now, not by the cyclic collector
    return {op.out for op in ops if ("in", id(op.out)) in sink_side}


def rewrite(g: Graph, recompute: set[Value], offload: Collection[Value] = ()) -> Graph:
    """g where every later read of a value in `recompute` reads a clone computed right before it, and
    every backward read of a value in `offload` reads it back from host memory: an `offload` op right
    after its last forward use, a `reload` op (a backward op) before the backward library call that
    precedes its first backward use, so the copy overlaps that call (ir/ops/host.py).

    A backward op reads a recomputation (RecomputeLoc clones, shared by the backward). An op after
    the backward that autodiff did not append (the optimizer update) reads a copy of its own, with
    the forward op's loc, computed right before it: a clone made early for the backward and read by
    the update too would be a kernel of its own, since no kernel holds a recomputation and an op of
    another phase (`mixes_phases`). So an optimizer's f32 cast of a parameter, which CSE merged with
    the forward's (a GroupNorm widening its weight), is again computed inside the update's kernel."""
    if not recompute and not offload:
        return g
    s = split(g)
    new = Graph(g.name)
    m: dict[Value, Value] = {v: new.add_input(v.type, r) for v, r in zip(g.inputs, g.roles)}
    clones: dict[Value, Value] = {}
    copies: dict[Value, Value] = {}  # the update's own copies (not recomputations)
    hosted: dict[Value, Value] = {}
    reloaded: dict[Value, Value] = {}
    last_use = _last_forward_use(g, offload)

    def emit(op: Op, inputs: tuple[Value, ...], loc) -> Value:
        out = Op(op.name, inputs, op.attrs, op.out.type, loc)
        new.ops.append(out)
        return out.out

    def read(u: Value) -> Value:
        if u in hosted:
            if u not in reloaded:
                op = Op(RELOAD.name, (hosted[u],), {}, u.type, BackwardLoc(u.producer.loc or ""))
                new.ops.append(op)
                reloaded[u] = op.out
            return reloaded[u]
        return m[u]

    def clone(v: Value, made: dict[Value, Value], backward: bool) -> Value:
        stack = [v]
        while stack:  # inputs first, without recursion (chains can be long)
            x = stack[-1]
            todo = [u for u in x.producer.inputs if u in recompute and u not in made]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            if x not in made:
                op = x.producer
                ins = tuple(made[u] if u in made else read(u) for u in op.inputs)
                made[x] = emit(op, ins, RecomputeLoc(op.loc or "") if backward else op.loc)
        return made[v]

    for i, op in enumerate(g.ops):
        if i < s:
            m[op.out] = emit(op, tuple(m[u] for u in op.inputs), op.loc)
            for v in last_use.get(i, ()):
                hosted[v] = emit(Op(OFFLOAD.name, (v,), {}, v.type, op.loc), (m[v],), op.loc)
            continue
        made, backward = (clones, True) if is_backward(op) else (copies, False)
        ins = tuple(clone(u, made, backward) if u in recompute else read(u) for u in op.inputs)
        m[op.out] = emit(op, ins, op.loc)
    new.ops = _prefetch(new.ops, set(reloaded.values()), split(new))
    new.outputs = [m[v] for v in g.outputs]
    new.aliases = dict(g.aliases)
    return eliminate_dead_code(new)


def _last_forward_use(g: Graph, offload: Collection[Value]) -> dict[int, list[Value]]:
    """Forward op index -> the offloaded values whose last forward use (or making) it is."""
    s = split(g)
    last = {v: i for i, op in enumerate(g.ops[:s]) for v in (op.out, *op.inputs) if v in offload}
    out: dict[int, list[Value]] = {}
    for v, i in last.items():
        out.setdefault(i, []).append(v)
    return out


def _prefetch(ops: list[Op], reloads: set[Value], start: int) -> list[Op]:
    """ops with each reload moved before the backward library call (matmul, attention, convolution)
    that precedes the op reading it, so its copy runs while that call does (a reload reads only its
    host value, made in the forward)."""
    out = [op for op in ops if op.out not in reloads]
    for r in (op for op in ops if op.out in reloads):
        reader = next(i for i, op in enumerate(out) if r.out in op.inputs)
        before = [i for i in range(start, reader) if REGISTRY[out[i].name].category in ("matmul", "library")]
        out.insert(before[-1] if before else reader, r)
    return out


def rematerialize(g: Graph, allow: Callable[[Op], bool] = never) -> Graph:
    """Recompute in the backward what the minimum cut says (module docstring), letting `allow(op)`
    say which ops outside checkpoint regions may be recomputed (default: none). An `allow` with an
    `offload` attribute (passes/activation_budget.Decision) also names kept values that the backward
    reads back from host memory (`rewrite`); the relabelling views of those it reads are recomputed
    from the reloaded value.

    Before: a verified joint graph, simplified (no CSE may run after this pass). After: the same
    function; forward values the backward reads are either kept or recomputed by RecomputeLoc clones
    placed before their first later reader; dead forward ops are gone. Without a backward, or with
    nothing to recompute, g itself is returned. g is not modified."""
    if split(g) == len(g.ops):
        return g
    cheap = free(g)
    if allow is never and not cheap and not any(isinstance(op.loc, CheckpointLoc) for op in g.ops):
        return g
    offload = frozenset(getattr(allow, "offload", ()))
    recompute = choose(g, lambda op: op in cheap or allow(op))
    views = {op.out for op in g.ops[:split(g)] if is_relabel(op) and _viewed(op.out) in offload}
    return rewrite(g, (recompute | views) - offload, offload)


def _viewed(v: Value) -> Value:
    """The value whose bytes v is (itself, or what a chain of relabelling views views)."""
    while v.producer is not None and is_relabel(v.producer):
        v = v.producer.inputs[0]
    return v
