"""Fusion rules that run after partitioning (passes/fuse.py) and move work between kernels to cut
what the GPU does per element: broadcast work done once in a small kernel (hoist_broadcasts),
full-size values recomputed by their readers instead of written and read back (recompute_tails), and a
rows kernel's lone elementwise reader joined to it (absorb_readers)."""

from __future__ import annotations

import math

from flame.ir.graph import Kind, Op, RecomputeLoc, Value, is_backward
from flame.ir.indexmap import is_reduction, is_view
from flame.ir.registry import get, is_costly
from flame.ir.symbolic import SymInt
from flame.passes.fusion_state import Group, State, carried_columns, fit, merge, one_row_segment
from flame.passes.prepare_fusion import is_free

# the kernel domain from which a costly op per element costs more than a launch of its own: ~30 instructions
# per element over 4M elements is ~4 us of an H100's issue slots, one launch in a CUDA graph ~2 us
HOIST_MIN = 1 << 22
TAIL_MIN = 1 << 16  # the smallest kernel whose written values recompute_tails considers (a launch's worth)
TAIL_MAX_OPS = 24  # the most ops (constants and views aside) a reader recomputes for one value


def _fixed(grp: Group) -> bool:
    return bool(grp.domain) and not any(isinstance(d, SymInt) for d in grp.domain)


def hoist_broadcasts(st: State) -> None:
    """The work of a big elementwise kernel on values it broadcasts (a BatchNorm's per-channel mean,
    rsqrt of the variance, running-statistics updates: [1, 1, 1, C] values over an [N, H, W, C] domain;
    the cos and sin of a rotary embedding's [T, D] tables, built from positions through a concat, over
    [B, H, T, D]) runs once per value in a small kernel of its own when it holds a costly op (the `cost`
    trait) or writes a result: fused, every element of the big domain recomputes it (an IEEE division and
    square root per element held a bf16 BatchNorm's normalising kernel to a quarter of the copy bandwidth)
    and writes the results under a guard. Kernels under HOIST_MIN elements keep it. Scalars (one element)
    stay: the loop-invariant code motion of the CUDA compiler computes them once per thread. A rows
    kernel's work on its row reductions' results is not broadcast work (it runs once per row); nor is the
    backward work a forward kernel holds (fusion_state.hoists_backward)."""
    for grp in [g for g in st.groups if g.kind in (Kind.ELEMENTWISE, Kind.ROWS) and _fixed(g)]:
        if math.prod(grp.domain) >= HOIST_MIN:
            while _hoist_one(st, grp):  # one broadcast shape at a time (per channel, per sample and channel)
                pass


def _hoist_one(st: State, grp: Group) -> bool:
    """Move one shape's worth of grp's broadcast work into a small kernel; False when none moves."""
    n = math.prod(grp.domain)
    cand: set[Op] = set()
    for op in grp.ops:  # in program order: an op's producers in grp come first
        m = op.out.type.numel
        broadcast = 1 < m and m * 8 <= n and not get(op.name).positional and (
            get(op.name).category in ("elementwise", "movement") or is_view(op))
        if (is_free(op) or broadcast) and all(
                v.producer is None or v.producer in cand or st.group_of.get(v.producer) is not grp for v in op.inputs):
            cand.add(op)
    forward = any(o in st.forward for o in grp.ops)
    seeds = [o for o in st.sorted_ops(cand) if not is_view(o) and not is_free(o) and not (forward and o in st.later)]
    for shape in dict.fromkeys(o.out.shape for o in seeds):
        mine = [o for o in seeds if o.out.shape == shape]
        if not any(is_costly(o) or o.out in st.outs
                   or any(st.group_of.get(u) is not grp for u in st.users[o.out]) for o in mine):
            continue
        needed = _closure(mine, cand)
        # a view or constant the rest also reads is copied for the small kernel (each computes its own)
        shared = {o for o in needed if (is_view(o) or is_free(o))
                  and any(st.group_of.get(u) is grp and u not in needed for u in st.users[o.out])}
        undo: list = []
        small, _ = _copies(st, st.sorted_ops(needed), shared, undo)
        rest = [o for o in grp.ops if o not in needed]
        got = fit(st, small, Kind.ELEMENTWISE, shape)
        if isinstance(got, str) or not rest or not _refit(st, grp, rest):
            for step in reversed(undo):
                step()
            continue
        grp.ops = rest
        st.new(small, Kind.ELEMENTWISE, domain=got[0],
               reason=f"work on broadcast values, done once for the {n} elements of a kernel that reads it")
        return True
    return False


def recompute_tails(st: State) -> None:
    """A full-size value a kernel writes only for other fusible kernels (no graph output) is recomputed
    by each of them from what it is computed from (the kernel's inputs, values it writes anyway) when
    that reads fewer bytes than writing it and reading it back: a BatchNorm backward's f32 dy * scale,
    from the bf16 dy and ReLU output, 4 bytes per element read instead of 8 written and read."""
    for a in [g for g in st.groups if g.kind in (Kind.ELEMENTWISE, Kind.ROWS) and _fixed(g)]:
        n = math.prod(a.domain)
        if n < TAIL_MIN:
            continue
        for v in [x for x in st.exposed(a.ops) if x.type.numel == n and x not in st.outs]:
            if a not in st.groups or st.group_of.get(v.producer) is not a:
                continue
            readers = list(dict.fromkeys(st.group_of[u] for u in st.users[v] if st.group_of.get(u) not in (a, None)))
            if not readers or any(r.kind not in (Kind.ELEMENTWISE, Kind.ROWS) or not _fixed(r)
                                  or math.prod(r.domain) != n for r in readers):
                continue  # (a small kernel's results broadcast into a big one stay: hoist_broadcasts)
            cone = _cone(st, a, v)
            if cone is None or not _cheaper(st, a, v, cone, readers):
                continue
            undo: list = []
            if all(recompute_in(st, cone, v, r, undo) for r in readers) and _drop_dead(st, a, undo):
                continue
            for step in reversed(undo):
                step()


def _cone(st: State, a: Group, v: Value) -> list[Op] | None:
    """The ops of kernel a that compute v from values a reads and the values it writes anyway (in
    program order); None when that is not elementwise work of at most TAIL_MAX_OPS, or reads a result
    of a's reductions (a cross-entropy's gradient, recomputed from the logits and the per-row log-sum-exp
    in a kernel of its own, read the 512 MiB of logits twice: gpt_train 9.35 -> 9.77 ms on an H200)."""
    exposed = set(st.exposed(a.ops))
    ops: set[Op] = set()
    todo = [v.producer]
    while todo:
        o = todo.pop()
        if o in ops:
            continue
        if is_reduction(o) or get(o.name).positional and not is_free(o) \
                or not (get(o.name).category == "elementwise" or is_view(o)):
            return None  # (an arange is free: every kernel computes it from the index, a random draw is not)
        if any(st.group_of.get(x.producer) is a and is_reduction(x.producer) for x in o.inputs):
            return None  # a's own reductions' results: the readers would re-read what a reduced (a softmax's rows)
        ops.add(o)
        todo += [x.producer for x in o.inputs if st.group_of.get(x.producer) is a
                 and (x not in exposed or is_free(x.producer))]
    if sum(1 for o in ops if not is_free(o)) > TAIL_MAX_OPS:
        return None
    return st.sorted_ops(ops)


def _cheaper(st: State, a: Group, v: Value, cone: list[Op], readers: list[Group]) -> bool:
    """Recomputing v's cone in each reader moves fewer bytes than writing v and reading it back, and
    what the readers newly read (values that now live until they run) is no bigger than v (whose
    buffer no longer exists): the planned peak does not grow."""
    n, inside = v.type.numel, set(cone)
    leaves = list(dict.fromkeys(x for o in cone for x in o.inputs if x.producer not in inside and x.type.numel == n))
    exposed = set(st.exposed(a.ops))
    new = sum(x.dtype.itemsize for x in leaves if st.group_of.get(x.producer) is a and x not in exposed)
    reads = [{x for o in r.ops for x in o.inputs} for r in readers]
    kept = sum(x.dtype.itemsize for x in leaves if any(x not in got for got in reads))
    new += sum(x.dtype.itemsize for got in reads for x in leaves if x not in got)
    return new < v.dtype.itemsize * (1 + len(readers)) and kept <= v.dtype.itemsize


def recompute_in(st: State, cone: list[Op], v: Value, r: Group, undo: list) -> bool:
    """Give kernel r its own copy of cone, which computes v, for its ops that read v (a backward
    kernel's copy of forward ops is a recomputation: RecomputeLoc); False when r no longer fits
    (undo: how to take it back). Also fuse._recompute_conversions' step, with a conversion for cone."""
    backward_only = all(is_backward(o) for o in r.ops if not is_free(o))
    locs = {o: RecomputeLoc(o.loc or "") if backward_only and not is_backward(o) else o.loc for o in cone}
    copies, copy = _copies(st, cone, set(cone), undo, locs)
    for u in dict.fromkeys(u for u in st.users[v] if st.group_of.get(u) is r):  # once: x * x reads v twice
        new = tuple(copy[v] if x is v else x for x in u.inputs)
        _rewire(st, u, u.inputs, new)
        undo.append(lambda u=u, new=new: _rewire(st, u, new, tuple(v if x is copy[v] else x for x in new)))
    before = (list(r.ops), r.domain, r.n_red)
    for c in copies:
        st.group_of[c] = r

    def take_back():
        r.ops, r.domain, r.n_red = before
        for c in copies:
            st.group_of.pop(c, None)

    undo.append(take_back)
    ops = st.sorted_ops(r.ops + copies)
    if not _refit(st, r, ops):
        return False
    r.ops = ops
    return True


def _refit(st: State, grp: Group, ops: list[Op]) -> bool:
    """ops still form kernel grp (a rows kernel keeps its domain, and one row segment when it
    carries column sums: codegen.fused.prepare); sets grp's domain."""
    got = fit(st, ops, grp.kind, grp.domain, grp.n_red)
    if isinstance(got, str) or (grp.kind == Kind.ROWS and got != (grp.domain, grp.n_red)):
        return False
    if carried_columns(ops) and not one_row_segment(ops):
        return False
    grp.domain, grp.n_red = got
    return True


def _drop_dead(st: State, a: Group, undo: list) -> bool:
    """Take out of kernel a the ops nothing reads any more; False when a no longer fits."""
    before = (list(a.ops), a.domain, a.n_red)
    dead = []
    changed = True
    while changed:
        changed = False
        for o in a.ops:
            if o not in dead and o.out not in st.outs and not st.users[o.out]:
                dead.append(o)
                for x in o.inputs:
                    st.users[x].remove(o)
                a.ops = [p for p in a.ops if p is not o]
                changed = True

    def take_back():
        a.ops, a.domain, a.n_red = before
        for o in dead:
            st.group_of[o] = a
            for x in o.inputs:
                st.users[x].append(o)
        if a not in st.groups:
            st.groups.append(a)

    undo.append(take_back)
    for o in dead:
        st.group_of.pop(o, None)
    if not a.ops:
        st.groups.remove(a)
        return True
    return _refit(st, a, a.ops)


def _closure(seeds: list[Op], within: set[Op]) -> set[Op]:
    """seeds and the ops of `within` they read, directly or not."""
    out, todo = set(), list(seeds)
    while todo:
        o = todo.pop()
        if o not in out:
            out.add(o)
            todo += [v.producer for v in o.inputs if v.producer in within]
    return out


def _copies(st: State, ops: list[Op], shared: set[Op], undo: list, locs: dict | None = None
            ) -> tuple[list[Op], dict[Value, Value]]:
    """ops (in program order) for a kernel of their own, each op of `shared` replaced by a copy that
    the others read (the original stays for its other readers; locs: the copies' source locations);
    undo: how to take it back. Returns the ops and the map from an original's result to its copy's."""
    copy: dict[Value, Value] = {}
    out = []
    for o in ops:
        old = o.inputs
        ins = tuple(copy.get(x, x) for x in old)
        if o in shared:
            c = Op(o.name, ins, o.attrs, o.out.type, (locs or {}).get(o, o.loc))
            copy[o.out] = c.out
            st.users[c.out], st.index[c] = [], st.index[o]
            for x in ins:
                st.users[x].append(c)
            undo.append(lambda c=c: ([st.users[x].remove(c) for x in c.inputs], st.users.pop(c.out), st.index.pop(c)))
            out.append(c)
            continue
        if ins != old:
            _rewire(st, o, old, ins)
            undo.append(lambda o=o, old=old, ins=ins: _rewire(st, o, ins, old))
        out.append(o)
    return out, copy


def _rewire(st: State, o: Op, old: tuple, new: tuple) -> None:
    for x, y in zip(old, new):
        if x is not y:
            st.users[x].remove(o)
            st.users[y].append(o)
    o.inputs = new


def absorb_readers(st: State) -> None:
    """An elementwise kernel whose only input kernel is a rows kernel (directly, or through kernels of
    views alone that only it reads), and which alone reads what it reads of that kernel, joins it with
    those views where they fit one layout: the rows kernel stores the reader's results instead. An FP8
    cast with a stored scale, through the reshape a Linear reads its input by, so joins the kernel
    computing a SwiGLU product and its amax: the bf16 product is neither written nor read back. Such a
    reader is left in a kernel of its own when its view is placed before the rows kernel's other
    readers (the value is still exposed then)."""
    for c in [grp for grp in st.groups if grp.kind == Kind.ELEMENTWISE and not _views_only(grp)]:
        chain, p = [c], _only_pred(st, c)
        while p is not None and p.kind == Kind.ELEMENTWISE and _views_only(p) and st.succ(p) == {chain[-1]}:
            chain.append(p)
            p = _only_pred(st, p)
        if p is None or p.kind != Kind.ROWS or not _fixed(p) or not _fixed(c):
            continue
        mine = {op for k in chain for op in k.ops}
        read = {v for op in mine for v in op.inputs if st.group_of.get(v.producer) is p}
        if any(v in st.outs or any(u not in mine and st.group_of.get(u) is not p for u in st.users[v]) for v in read):
            continue
        # (no third kernel lies between p and c: every kernel of the chain reads p or the next one alone)
        got = fit(st, st.sorted_ops(p.ops + list(mine)), Kind.ROWS, p.domain, p.n_red)
        if not isinstance(got, str):
            for k in reversed(chain):
                merge(st, p, k, in_order=False)
            p.ops = st.sorted_ops(p.ops)
            p.domain, p.n_red = got


def _views_only(grp: Group) -> bool:
    return all(is_view(op) for op in grp.ops)


def _only_pred(st: State, grp: Group) -> Group | None:
    preds = st.pred(grp)
    return next(iter(preds)) if len(preds) == 1 else None
