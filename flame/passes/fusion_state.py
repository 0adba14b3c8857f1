"""The fusion pass's working state (passes/fuse.py): the kernels (groups) while they form, and the
checks every rule shares: whether ops form one kernel (`fit`: one iteration domain, phases kept apart,
no hoisted backward work) and merging two kernels."""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from flame.ir.graph import Graph, Kind, Op, RecomputeLoc, Value, is_backward
from flame.ir.indexmap import (
    IndexMap,
    Layouts,
    contiguous_strides,
    domains,
    is_reduction,
    is_view,
    row_segments,
    trailing_reduced,
)
from flame.ir.ops.fp8 import SCALED_CAST
from flame.ir.registry import axis_order, get
from flame.passes import remat
from flame.passes.prepare_fusion import is_free
from flame.target import Target

PHASES = "recomputed in the backward (remat): kept out of forward kernels"
HOISTED = "backward work of full size kept out of forward kernels (its result would live until the backward)"


@dataclass(eq=False)
class Group:
    ops: list[Op]
    kind: Kind
    reason: str = ""
    domain: tuple[int, ...] | None = None
    n_red: int = 0
    epilogue: str = "none"
    merged: list[Group] = field(default_factory=list)


class Kernels(Sequence):
    """The kernels while they form, in the order they were made (a kernel put back goes last): a list's
    iteration, append and remove, with membership and removal in constant time (a model of many blocks
    has thousands of kernels, and merges remove one each); indexing other than [-1] walks them."""

    def __init__(self, groups: Iterable[Group] = ()):
        self._at: dict[Group, int] = {k: i for i, k in enumerate(groups)}  # kernel -> when it went last
        self._next = len(self._at)

    def __iter__(self) -> Iterator[Group]:
        return iter(self._at)

    def __reversed__(self) -> Iterator[Group]:
        return reversed(self._at)

    def __len__(self) -> int:
        return len(self._at)

    def __contains__(self, k) -> bool:
        return k in self._at

    def __getitem__(self, i):
        if i == -1:
            return next(reversed(self._at))
        return list(self._at)[i]

    def append(self, k: Group) -> None:
        """k goes last (it is not here: a list would hold it twice)."""
        assert k not in self._at
        self._at[k] = self._next
        self._next += 1

    def among(self, ks: Iterable[Group]) -> list[Group]:
        """The kernels of ks that are here, in order (`[k for k in self if k in ks]` for a set ks,
        without a walk of every kernel)."""
        at = self._at
        return sorted((k for k in set(ks) if k in at), key=at.__getitem__)

    def remove(self, k: Group) -> None:
        del self._at[k]


class State:
    """The groups while they form, with the graph's users and outputs for exposure and cycle checks."""

    def __init__(self, g: Graph, target: Target):
        self.g, self.target = g, target
        self.users = g.users()
        self.outs = set(g.outputs)
        self.group_of: dict[Op, Group] = {}
        self.groups = Kernels()
        self.index = {op: i for i, op in enumerate(g.ops)}
        # (op of a kernel, reader op) -> why the reader could not join that kernel (its last try)
        self.refused: dict[tuple[Op, Op], str] = {}
        self.forward, self.later = _phases(g)
        self.updated = g.updated()  # output updating an input in place -> that input
        self.layouts = Layouts()  # indexmap.derive, each answer kept for the groups alike that ask it again
        # while ops are placed in program order (keep_order): kernel -> its place in a topological order of
        # the kernels (every data edge from a lower place to a higher one); None: no order is kept
        self.pos: dict[Group, int] | None = None
        self._next = 0

    def release(self) -> None:
        """Drop everything the state holds, once the pass has recorded its kernels: its groups, indexes
        and answers refer to one another, so reference counting frees them now, not the cyclic collector."""
        self.__dict__.clear()

    def refuse(self, grp: Group, op: Op, why: str) -> bool:
        """Record why `op` could not join grp, against each op of grp it reads; False (no join)."""
        for v in op.inputs:
            if self.group_of.get(v.producer) is grp:
                self.refused[v.producer, op] = why
        return False

    def new(self, ops: list[Op], kind: Kind, **kw) -> Group:
        grp = Group(list(ops), kind, **kw)
        self.groups.append(grp)
        for op in ops:
            self.group_of[op] = grp
        if self.pos is not None:
            self.pos[grp] = self._next
            self._next += 1
            self.placed(grp, ops)
        return grp

    def keep_order(self, on: bool) -> None:
        """Keep `pos`, a topological order of the kernels, from now on (there are no kernels yet) or no
        longer. While kept, every change of a kernel's ops goes through `new`, `placed` or `merge` (the
        placement of ops in program order does so; later rules change kernels' ops in place), and a walk
        to some kernels skips the kernels placed after all of them (none of those reaches them)."""
        self.pos, self._next = ({}, 0) if on else (None, 0)

    def placed(self, grp: Group, ops) -> None:
        """ops just joined grp (group_of says so): keep `pos` a topological order over the edges they add
        (Pearce and Kelly's dynamic topological order: only the kernels between an edge's ends move)."""
        if self.pos is None:
            return
        for op in ops:
            for v in op.inputs:
                h = self.group_of.get(v.producer)
                if self.pos is not None and h is not None and h is not grp and self.pos[h] > self.pos[grp]:
                    self._reorder(h, grp)
            for u in self.users[op.out]:
                k = self.group_of.get(u)
                if self.pos is not None and k is not None and k is not grp and self.pos[grp] > self.pos[k]:
                    self._reorder(grp, k)

    def _reorder(self, x: Group, y: Group) -> None:
        """Renumber for a new edge x -> y where x is placed after y: the kernels y reaches up to x's place
        go after those that reach x down to y's place, each part in its own order, on the same places.
        A cycle (none should be) drops the order: walks are then unbounded."""
        pos = self.pos
        lo, hi = pos[y], pos[x]
        after = _region(y, self.succ, lambda k: pos[k] <= hi)
        before = _region(x, self.pred, lambda k: pos[k] >= lo)
        if not after.isdisjoint(before):
            self.pos = None
            return
        moved = sorted(before, key=pos.__getitem__) + sorted(after, key=pos.__getitem__)
        for k, p in zip(moved, sorted(pos[k] for k in moved)):
            pos[k] = p

    def exposed(self, ops: list[Op]) -> list[Value]:
        inside, outs, users = set(ops), self.outs, self.users
        return [v for v in [op.out for op in ops] if v in outs or not inside.issuperset(users[v])]

    def succ(self, grp: Group) -> set[Group]:
        group_of, users = self.group_of, self.users
        out = {group_of[u] for op in grp.ops for u in users[op.out] if u in group_of}
        out.discard(grp)
        return out

    def reaches(self, src: Group, dst: Group) -> bool:
        """A path of data edges src -> ... -> dst between kernels."""
        return self.reaches_any((src,), (dst,))

    def reaches_any(self, srcs, dsts) -> bool:
        """A path of data edges from a kernel of `srcs` to one of `dsts` (reaches for every pair, in one
        walk: the kernels downstream of several sources are mostly the same)."""
        dsts = set(dsts)
        if not dsts:
            return False
        if self.pos is not None:
            srcs = list(srcs)
            return bool(srcs) and self._meets(srcs, dsts)
        return any(h in dsts for h in self._walk_all(srcs, self.succ))

    def _meets(self, srcs: list[Group], dsts: set[Group]) -> bool:
        """reaches_any where `pos` is kept: a walk down from srcs and one up from dsts, a step of each in
        turn, over the kernels placed between them only (a path's places rise along it); a path exists
        where they meet, none where either ends first (the kernels it holds are closed under its edges)."""
        pos = self.pos
        hi, lo = max(pos[d] for d in dsts), min(pos[k] for k in srcs)
        down, up = [k for k in srcs if pos[k] < hi], [k for k in dsts if pos[k] > lo]
        below, above = set(down), set(up)  # reached from srcs (or one), reaching a dst (or one)
        while down and up:
            for s in self.succ(down.pop()):
                if s in above:
                    return True
                if s not in below and pos[s] < hi:
                    below.add(s)
                    down.append(s)
            for p in self.pred(up.pop()):
                if p in below:
                    return True
                if p not in above and pos[p] > lo:
                    above.add(p)
                    up.append(p)
        return False

    def downstream(self, src: Group) -> set[Group]:
        """The kernels src reaches (see reaches): one walk answers it for every kernel."""
        return set(self._walk(src))

    def pred(self, grp: Group) -> set[Group]:
        """The kernels grp reads (succ's edges the other way)."""
        group_of = self.group_of
        out = {group_of[v.producer] for op in grp.ops for v in op.inputs if v.producer in group_of}
        out.discard(grp)
        return out

    def upstream(self, dst: Group) -> set[Group]:
        """The kernels that reach dst (see reaches): one walk against the edges answers it for every kernel."""
        return set(self._walk(dst, self.pred))

    def _walk(self, src: Group, step=None) -> Iterator[Group]:
        """The kernels at the end of a path of data edges from src (of `step`'s edges: succ by default),
        each once."""
        return self._walk_all((src,), step or self.succ)

    @staticmethod
    def _walk_all(srcs, step) -> Iterator[Group]:
        """The kernels at the end of a path of `step`'s edges from a kernel of srcs, each once."""
        todo, seen = [h for src in srcs for h in step(src)], set()
        while todo:
            h = todo.pop()
            if h in seen:
                continue
            seen.add(h)
            yield h
            todo += [s for s in step(h) if s not in seen]

    def sorted_ops(self, ops) -> list[Op]:
        return sorted(ops, key=self.index.__getitem__)


class Closure:
    """Which kernels reach which (State.reaches for all pairs at once): bit matrices of the kernels each one
    reaches (`down`, a row per kernel) and is reached from (`up`), made from st.succ in one pass over the
    kernels in topological order, and kept exact through `merge`s that make no cycle (the horizontal
    rule's, of two kernels neither of which reaches the other; column_kernels', of a reduction into the
    kernel it reads with no third kernel between them). `Closure.of(st)` is None where the
    kernels' edges form a cycle (none should): the caller then walks the graph per question."""

    def __init__(self, st: State, order: list[Group], succ: dict[Group, set[Group]]):
        bit = {k: 1 << i for i, k in enumerate(order)}
        self.at = {k: i for i, k in enumerate(order)}  # kernel -> its row and column
        self.n = len(order)
        down: dict[Group, int] = {}
        up: dict[Group, int] = dict.fromkeys(order, 0)
        for k in reversed(order):  # successors first
            down[k] = _bits(bit, succ[k], down)
        for k in order:  # predecessors first
            for s in succ[k]:
                up[s] |= bit[k] | up[k]
        self.down, self.up = _matrix([down[k] for k in order], self.n), _matrix([up[k] for k in order], self.n)

    @staticmethod
    def of(st: State) -> Closure | None:
        succ = {k: st.succ(k) for k in st.groups}
        if any(s not in succ for ss in succ.values() for s in ss):
            return None
        order, state = [], dict.fromkeys(succ, 0)  # 0 unseen, 1 on the path, 2 done
        for root in succ:
            stack = [(root, iter(succ[root]))] if not state[root] else []
            state[root] = state[root] or 1
            while stack:
                k, it = stack[-1]
                nxt = next(it, None)
                if nxt is None:
                    stack.pop()
                    state[k] = 2
                    order.append(k)
                elif state[nxt] == 1:
                    return None  # a cycle
                elif not state[nxt]:
                    state[nxt] = 1
                    stack.append((nxt, iter(succ[nxt])))
        order.reverse()  # topological: every kernel before those it reaches
        return Closure(st, order, succ)

    def reaches(self, src: Group, dst: Group) -> bool:
        j = self.at[dst]
        return bool(self.down[self.at[src], j >> 3] >> (j & 7) & 1)

    def merge(self, a: Group, b: Group) -> None:
        """a takes b in (neither reaches the other, or one reaches the other only directly: no third
        kernel lies on a path between them, so the merge makes no cycle): what reached either reaches a
        and all the kernels either reached, which are reached from all that reached either."""
        i, j = self.at[a], self.at[b]
        down, up = self.down[i] | self.down[j], self.up[i] | self.up[j]
        for row in (down, up):
            row[i >> 3] &= ~(1 << (i & 7)) & 0xFF
            row[j >> 3] &= ~(1 << (j & 7)) & 0xFF
        now_down, now_up = down.copy(), up.copy()
        now_down[i >> 3] |= 1 << (i & 7)
        now_up[i >> 3] |= 1 << (i & 7)
        self.down[_rows(up, self.n)] |= now_down
        self.up[_rows(down, self.n)] |= now_up
        self.down[i], self.up[i] = down, up


def _matrix(rows: list[int], n: int) -> np.ndarray:
    """Bitsets of n bits as the rows of a matrix of bytes, bit i of a row in bit i % 8 of byte i // 8."""
    width = (n + 7) // 8
    return np.frombuffer(b"".join(x.to_bytes(width, "little") for x in rows), np.uint8).reshape(len(rows), width).copy()


def _rows(row: np.ndarray, n: int) -> np.ndarray:
    """The positions of the bits set in a row of _matrix."""
    return np.flatnonzero(np.unpackbits(row, bitorder="little")[:n])


class Peers:
    """Kernels by a key (the horizontal rule's: their signature), each key's in the order of the
    kernels list they were taken from, kept so as kernels merge: the kernels one kernel may merge with
    without a scan of every kernel. `key(k)` must stay what it was while k is here (moved says when
    it changed)."""

    def __init__(self, groups: list[Group], key):
        self.key = key
        self.pos = {k: i for i, k in enumerate(groups)}
        self._of: dict = {}
        self._key: dict[Group, object] = {}
        for k in groups:
            self._key[k] = key(k)
            self._of.setdefault(self._key[k], []).append(k)

    def of(self, key) -> list[Group]:
        """The kernels with this key now, in order (a copy: merging may go on while it is read)."""
        return list(self._of.get(key, ()))

    def drop(self, k: Group) -> None:
        """k left (merged into another kernel)."""
        self._of[self._key.pop(k)].remove(k)

    def moved(self, k: Group, old) -> None:
        """k's key changed from `old` (it took other kernels in): it moves to its new key's kernels."""
        self._of[old].remove(k)
        new = self._key[k] = self.key(k)
        at = self._of.setdefault(new, [])
        at.insert(bisect.bisect([self.pos[x] for x in at], self.pos[k]), k)


class Buffers:
    """The buffers a kernel takes (one pointer each): what it reads from outside, and how many values it
    writes, per kernel, kept through the horizontal rule's merges. Of two kernels neither of which
    reaches the other (no data edge between them), the merged kernel reads what either reads and
    writes what each writes."""

    def __init__(self, st: State):
        self.st = st
        self.io: dict[Group, tuple[set[Value], int]] = {}

    def _of(self, k: Group) -> tuple[set[Value], int]:
        if k not in self.io:
            inside = set(k.ops)
            reads = {v for op in k.ops for v in op.inputs if v.producer not in inside}
            self.io[k] = (reads, len(self.st.exposed(k.ops)))
        return self.io[k]

    def joined(self, a: Group, b: Group) -> int:
        """The pointers of a kernel of a's and b's ops (neither reaches the other)."""
        (ra, wa), (rb, wb) = self._of(a), self._of(b)
        return len(ra | rb) + wa + wb

    def merge(self, a: Group, b: Group) -> None:
        """a takes b in."""
        (ra, wa), (rb, wb) = self._of(a), self._of(b)
        self.io[a] = (ra | rb, wa + wb)
        del self.io[b]


def _region(start: Group, step, inside) -> set[Group]:
    """start and the kernels `inside` says yes to that paths of step's edges through such kernels reach."""
    seen, todo = {start}, [start]
    while todo:
        for k in step(todo.pop()):
            if k not in seen and inside(k):
                seen.add(k)
                todo.append(k)
    return seen


def _bits(bit: dict[Group, int], groups, down: dict[Group, int]) -> int:
    out = 0
    for s in groups:
        out |= bit[s] | down[s]
    return out


def updates_only(kind: Kind, ops, outputs, g: Graph, updated: dict[Value, Value], users: dict[Value, list[Op]]) -> bool:
    """A kernel whose results are parameters or optimizer state updated in place, and maybe values
    the step returns (a gradient it keeps), that nothing else in the step reads: an optimizer's
    update of one or more parameters. With Target.side_stream the fusion pass launches it as soon as
    its gradient is final and the plan issues it on the side stream; `outputs`: what it writes;
    `updated`: g.updated(); `users`: g.users()."""
    inside = set(ops)
    return (kind == Kind.ELEMENTWISE and any(v in updated for v in outputs)
            and all(v.shape and (v in updated or v in g.outputs) and inside.issuperset(users[v]) for v in outputs))


def fit(st: State, ops: list[Op], kind: Kind, domain=None, n_red: int = 0) -> tuple | str:
    """(domain, n_red) under which `ops` form one kernel, or why they cannot."""
    if mixes_phases(ops):
        return PHASES
    exposed = st.exposed(ops)
    if hoists_backward(st, ops, exposed):
        return HOISTED
    if kind == Kind.ROWS:
        # column reductions a rows kernel carries are outside its row layout, which stores their inputs
        cols = carried_columns(ops)
        if cols:
            ops = [o for o in ops if o not in cols]
            exposed = list(dict.fromkeys([v for v in exposed if v.producer not in cols]
                                         + [c.inputs[0] for c in cols if is_reduction(c)]))
        got = st.layouts.reordered(ops, exposed, domain, n_red)
        got = _copied_view(st, ops, exposed, got, domain) or got
        return got if isinstance(got, str) else (domain, n_red)
    why, big = "no common iteration domain", None
    for shape in domains(ops):
        got = st.layouts.reordered(ops, exposed, shape, 0)
        got = _copied_view(st, ops, exposed, got, shape) or got
        if not isinstance(got, str):
            return shape, 0
        big = math.prod(shape) if big is None else big
        if math.prod(shape) == big:  # the reason the largest domains give (smaller ones are a last resort)
            why = got
    return why


def carried_columns(ops: list[Op]) -> list[Op]:
    """The column reductions among a rows kernel's ops, and the conversions of their results it holds
    (fuse_columns.store_conversions: the fold stores the converted result): it carries them outside
    its row layout."""
    cols = [o for o in ops if is_reduction(o) and trailing_reduced(o) is None]
    if not cols:
        return cols
    results = {c.out for c in cols}
    return cols + [o for o in ops if get(o.name).conversion and o.inputs[0] in results]


def one_row_segment(ops: list[Op]) -> bool:
    """A rows kernel's ops, column reductions aside, are one row segment: codegen (fused.prepare)
    carries column sums in such a kernel only."""
    cols = carried_columns(ops)
    return len(row_segments([o for o in ops if o not in cols])) == 1


def _copied_view(st: State, ops: list[Op], exposed: list[Value], reordered: list[tuple[Value, IndexMap]] | str,
                 domain: tuple[int, ...]) -> str:
    """Why a layout over domain that stores `exposed`, those of `reordered` at the maps it gives in
    another order than their shapes' (indexmap._onto; Layouts.reordered), is not taken: a matmul reads a
    permuted or reshaped operand as it is (so no value it reads is stored so), and a view's result is
    not copied beside its stored input, nor by a group of views alone (the plan has none of these
    copies)."""
    if isinstance(reordered, str) or not reordered:
        return ""
    views = {op.out: op for op in ops if is_view(op)}
    for v, m in reordered:
        if v not in views and _row_major(st, m, v, domain, ops):
            continue
        if _feeds_matmul(st, v) or (v in views and (len(views) == len(ops) or views[v].inputs[0] in exposed)):
            return f"a view's result would be copied (result {v.type})"
    return ""


def _row_major(st: State, m, v: Value, domain: tuple[int, ...], ops: list[Op]) -> bool:
    """Map m stores v, which only matmuls read as it is, in v's own row-major order: v is a reshape of
    the domain (an FP8 cast of a row kernel's result, read as [rows, k]), so the bytes are the ones its
    canonical store writes. A cast with a scale made before the kernel (delayed scaling's stored scale)
    may also be read by its transposed copy: a 1-byte transpose of the cast, instead of a tiled kernel
    reading the wider source again to write both layouts."""
    if math.prod(v.shape) != math.prod(domain) or not all(_as_stored(st, u, v, ops) for u in st.users[v]):
        return False
    base, strides = m.flat(v.shape)
    return base == 0 and all(s == c for s, c, n in zip(strides, contiguous_strides(domain), domain) if n != 1)


def _as_stored(st: State, u: Op, v: Value, ops: list[Op]) -> bool:
    """u reads v as it is stored: a matmul, or the transposed copy only matmuls read of a cast whose
    scale is not computed among ops."""
    if get(u.name).library == "matmul":
        return True
    cast = v.producer
    return (axis_order(u) is not None and cast is not None and cast.name == SCALED_CAST.name
            and cast.inputs[1].producer not in ops and all(get(w.name).library == "matmul" for w in st.users[u.out]))


def _feeds_matmul(st: State, v: Value) -> bool:
    """A matmul reads v, directly or through views (it takes permuted, reshaped operands as they are)."""
    users = st.users.get(v, ())
    return any(get(u.name).library == "matmul" or (is_view(u) and _feeds_matmul(st, u.out)) for u in users)


def mixes_phases(ops) -> bool:
    """A recomputation and a forward op in one kernel (constants and input views, which every
    kernel computes for itself, aside)."""
    if not any(isinstance(o.loc, RecomputeLoc) for o in ops):  # (remat.is_recompute, inline: asked per join)
        return False  # the common case, found without sorting out the free ops
    return remat.mixes_phases([o for o in ops if not is_free(o)])


def _phases(g: Graph) -> tuple[set[Op], set[Op]]:
    """The forward ops (before the backward; not the optimizer update after it) and the backward ops
    after the backward's first op no kernel fuses (a matmul, a convolution, attention, a gather): those
    run well after the forward (what comes before, a loss's gradient, right after it)."""
    start = remat.split(g)
    heavy = next((i for i in range(start, len(g.ops))
                  if get(g.ops[i].name).category not in ("elementwise", "reduction") and not is_view(g.ops[i])
                  and get(g.ops[i].name).pieces is None),
                 len(g.ops))
    return set(g.ops[:start]), {op for op in g.ops[heavy:] if is_backward(op)}


def hoists_backward(st: State, ops: list[Op], exposed: list[Value] | None = None) -> bool:
    """A kernel of forward ops and backward ops that writes a backward result of its full size which
    elementwise backward work of that size reads, well into the backward (the phases rule): the
    kernel would run in the forward and keep that result alive until then, while the kernel of its
    readers computes it for free. `exposed`: st.exposed(ops), where the caller has it."""
    if st.later.isdisjoint(ops) or st.forward.isdisjoint(ops):
        return False  # the common case, found without sorting out the free ops
    work = [o for o in ops if not is_free(o)]
    if st.forward.isdisjoint(work) or st.later.isdisjoint(work):
        return False
    big = max(o.out.type.numel for o in work)
    exposed = st.exposed(ops) if exposed is None else exposed
    return any(v.producer in st.later and v.type.numel == big and all(_rides_along(u, big) for u in st.users[v])
               for v in exposed)


def _rides_along(op: Op, n: int) -> bool:
    return get(op.name).category == "elementwise" and not is_view(op) and op.out.type.numel == n


def merge(st: State, a: Group, b: Group, in_order: bool = True) -> None:
    """a takes b in. in_order=False: b's ops are appended to a's, and the caller puts a's ops in
    program order (st.sorted_ops) once it has merged several kernels into a."""
    a.ops = st.sorted_ops(a.ops + b.ops) if in_order else a.ops + b.ops
    a.merged.append(b)
    for op in b.ops:
        st.group_of[op] = a
    st.groups.remove(b)
    st.placed(a, b.ops)


def rows_shape(grp: Group) -> tuple[int, int]:
    """(rows, row length) of a rows group's reductions."""
    n_kept = len(grp.domain) - grp.n_red
    return math.prod(grp.domain[:n_kept]), math.prod(grp.domain[n_kept:])
