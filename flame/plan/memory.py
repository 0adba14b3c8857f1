"""The memory plan of a Plan (ARCHITECTURE.md "Pure IR", "Plans are data", "Planned memory"):
this module owns liveness, in-place updates,
arena placement, the plan checker and the memory report. `plan_memory` is a pass over the Plan, not
the Graph: it sees the steps as they will run (fused kernels, library calls, copies, views), through
each step's own `reads` / `writes` / `touches`.

1. In-place updates. An output aliased to an input (g.aliases: a parameter or optimizer state after a
   step) is written straight into that input's buffer when the input has no reader after the first
   write of the output (a reader at that very step is fine when the step is elementwise and reads it
   with the output's shape). Otherwise the output is computed in the arena and copied into the input
   at the end of the plan. Either way the plan's output IS the input buffer: the executor returns
   the bound input array, and nothing is written back after the call.
2. Elementwise reuse. A temporary written by an elementwise step may take the exact bytes of a
   temporary input of the same size that dies at that step (chains of such steps share one slot).
3. Best fit. Every temporary and scratch buffer gets an arena offset: blocks (after 2) are placed
   one by one, each into the smallest gap between the blocks already placed that are live at the same
   time, or on top of them when no gap fits; largest first, then (while the arena is larger than the
   most bytes live at one step, which no placement beats) longest-lived first and in step order, the
   smallest arena kept (gpt_block_train: 312.6, 296.6 and 305.5 MiB, with 288.5 live at its busiest
   step; unet_train 756.4, 780.2 and 736.9).

`check_plan(plan)` verifies the placement; `memory_report(plan)` tells, before anything runs, the
planned peak and what is live then.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from flame.errors import FlameError
from flame.ir.graph import is_backward, is_recompute
from flame.ir.printer import format_op
from flame.ir.registry import REGISTRY, flops
from flame.plan.steps import (
    ActivationBudget,
    Buffer,
    Copy,
    KernelLaunch,
    MemoryBudget,
    Plan,
    Step,
    aligned,
    root,
    with_fields,
)

BOUND_ROLES = ("input", "param", "state", "scalar", "const", "output")


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


# ---------------------------------------------------------------------------------------------
# liveness


def live_ranges(buffers: dict[int, Buffer], steps: list[Step]) -> dict[int, tuple[int, int]]:
    """For each root buffer: (first step that touches it, last step that touches it). A view
    counts as its root."""
    ranges: dict[int, tuple[int, int]] = {}
    for i, s in enumerate(steps):
        for bid in s.touches:
            r = root(buffers, bid)
            lo, _ = ranges.get(r, (i, i))
            ranges[r] = (lo, i)
    return ranges


def elementwise_step(s: Step) -> bool:
    """A one-part kernel made only of elementwise ops: element i of each output depends on element
    i of each input of the output's shape, so such an input's bytes may be overwritten by the output
    in the same launch (every thread reads its elements before it writes them)."""
    return (isinstance(s, KernelLaunch) and s.part == (0, 1)
            and all(REGISTRY[o.name].category == "elementwise" for o in s.ops))


def _read_pointwise(s: Step, dead_args: set[int], born_args: set[int], buffer_of: dict | None,
                    values_of: dict | None = None) -> bool:
    """Every op of kernel s that depends on a value read from dead_args is elementwise (other ops,
    e.g. a fused transpose of a gradient, may read other buffers freely), and every value s writes to
    born_args depends on one read from dead_args: a thread computing it has loaded its dead element
    first (a fused kernel's element loop loads an input where a stored value first needs it, so an
    output computed without it could be stored over an element another output has yet to load).
    Without buffer_of: every op is elementwise."""
    if not isinstance(s, KernelLaunch) or s.part != (0, 1):
        return False
    if buffer_of is None:
        return elementwise_step(s)
    flow = _dataflow(tuple(s.ops))
    tainted = _held_in(dead_args, flow.external, buffer_of, values_of)
    seen: set[int] = set()
    while tainted:  # the ops that depend on those values, through the kernel's own values
        for i in flow.readers[tainted.pop()]:
            if i not in seen:
                if not flow.elementwise[i]:
                    return False
                seen.add(i)
                tainted.append(s.ops[i].out)
    return all(flow.written_at[v] in seen for v in _held_in(born_args, flow.written_at, buffer_of, values_of))


def shares_in_place(buffers: dict[int, Buffer], steps: list[Step], ranges: dict, dead: int, born: int,
                    buffer_of: dict | None = None, values_of: dict | None = None,
                    owned: dict[int, set[int]] | None = None, index: tuple[dict, dict] | None = None) -> bool:
    """Root buffers `dead` (last touched at step i) and `born` (first touched at step i) may occupy
    the same bytes: step i is one kernel that reads dead (through a buffer of born's shape) only with
    elementwise ops (all its ops, without buffer_of) and writes born. values_of (buffer id -> the
    values held in it: buffer_of inverted) and owned (root id -> the ids whose bytes it owns: itself
    and its views), when the caller keeps them, only save time; so does index (with owned: buffer id
    -> the positions of the steps that read it, and of those that write it)."""
    (_, last), (first, _) = ranges.get(dead, (0, -1)), ranges.get(born, (-1, -1))
    if last != first or first < 0 or buffers[dead].nbytes != buffers[born].nbytes:
        return False
    s = steps[first]
    if owned is None:
        outs = [a for a in s.writes if root(buffers, a) == born]
        ins = [a for a in s.reads if root(buffers, a) == dead]
    elif index is None:  # the same ids (order and repeats do not matter below), without a walk to each root
        writes, reads = s.writes, s.reads
        outs = [a for a in owned.get(born, ()) if a in writes]
        ins = [a for a in owned.get(dead, ()) if a in reads]
    else:  # the same again, without a search of the step's arguments (a horizontal kernel names hundreds)
        reading, writing = index
        outs = [a for a in owned.get(born, ()) if first in writing.get(a, ())]
        ins = [a for a in owned.get(dead, ()) if first in reading.get(a, ())]
    return (bool(outs and ins) and all(buffers[a].shape == buffers[o].shape for a in ins for o in outs)
            and _read_pointwise(s, set(ins), set(outs), buffer_of, values_of)
            and _one_segment(s, set(ins), set(outs), buffer_of, values_of))


def _one_segment(s: Step, ins: set[int], outs: set[int], buffer_of: dict | None,
                 values_of: dict | None = None) -> bool:
    """What reads the dying buffer and what writes the new one are one segment of the kernel: the
    segments of a horizontal kernel run on different blocks with their own index maps, so one
    segment's writes would overwrite bytes another segment has not read yet."""
    flow = _dataflow(tuple(s.ops))
    if flow.n_segments == 1 or (flow.maps_only and s.in_place_safe):
        return True  # the second: parts reading a value in common, which lower_map ran as one segment
    if buffer_of is None:
        return False
    touching = {flow.written_in[v] for v in _held_in(outs, flow.written_in, buffer_of, values_of)}
    touching.update(i for v in _held_in(ins, flow.read_in, buffer_of, values_of) for i in flow.read_in[v])
    return len(touching) <= 1


def _held_in(bids: set[int], values, buffer_of: dict, values_of: dict | None) -> list:
    """The values among `values` (a kernel's: a collection) held in one of buffer ids bids: through
    values_of (buffer_of inverted) when the caller keeps one, else by asking buffer_of about each."""
    if values_of is None:
        return [v for v in values if buffer_of.get(v) in bids]
    return [v for b in bids for v in values_of.get(b, ()) if v in values]


@dataclass(frozen=True)
class _Dataflow:
    """What the in-place questions about one kernel need from its ops, which depend on the ops
    alone: readers (value -> the positions of the ops that read it), external (the values read but
    made elsewhere), elementwise (per op), and per segment (flame.ir.graph.segments) the values it
    writes (written_in: value -> segment) and reads (read_in: value -> segments)."""

    readers: dict
    external: frozenset
    elementwise: tuple[bool, ...]
    n_segments: int
    written_in: dict
    read_in: dict
    written_at: dict  # value -> the position of the op computing it
    maps_only: bool  # no reductions: a kernel of codegen.fused.lower_map, whose in_place_safe says it
    # ran as one segment (its parts reading a value in common are one: indexmap.row_segments)


_LAST_FLOWS: list = [()]  # [((ops, its _Dataflow), ...)] of the kernels asked about last, most recent first
_KEPT_FLOWS = 4


def _dataflow(ops: tuple) -> _Dataflow:
    """The _Dataflow of a kernel's ops, once per kernel: the donation of every parameter that a
    horizontally fused optimizer kernel updates asks about the same few kernels, whose ops tuples are
    then the same objects (found without hashing their thousands of ops again)."""
    kept = _LAST_FLOWS[0]  # one read: another thread may replace the entries meanwhile
    for last_ops, last in kept:
        if last_ops is ops:
            return last
    flow = _dataflow_of(ops)
    _LAST_FLOWS[0] = ((ops, flow), *kept[: _KEPT_FLOWS - 1])
    return flow


@lru_cache(maxsize=64)
def _dataflow_of(ops: tuple) -> _Dataflow:
    readers: dict = {op.out: [] for op in ops}
    written_at = {op.out: i for i, op in enumerate(ops)}
    parent = list(range(len(ops)))  # the segments (flame.ir.graph.segments), by the ops' positions

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, op in enumerate(ops):
        for v in dict.fromkeys(op.inputs):
            readers.setdefault(v, []).append(i)
            j = written_at.get(v)
            if j is not None:
                parent[find(i)] = find(j)
    part: dict[int, int] = {}  # a segment's root -> its number, in the order of its first op
    written_in, read_in = {}, {}
    for i, op in enumerate(ops):
        k = part.setdefault(find(i), len(part))
        written_in[op.out] = k
        for v in op.inputs:
            read_in.setdefault(v, set()).add(k)
    categories = [REGISTRY[op.name].category for op in ops]
    return _Dataflow(readers, frozenset(v for v in readers if v not in written_at),
                     tuple(c == "elementwise" for c in categories), len(part), written_in, read_in,
                     written_at, all(c in ("elementwise", "movement") for c in categories))


# ---------------------------------------------------------------------------------------------
# 1. in-place updates of aliased inputs


class _InPlace:
    """The plan being rewritten by the in-place updates (module doc, 1), with an index kept up to
    date through every rewrite: which steps read, write and touch each buffer id, the values held
    in each buffer, and the ids whose bytes each root owns (itself and its views). Each donation
    then looks at its own two buffers instead of scanning every step and value. A dropped step
    leaves a hole (None) until the end, so step positions stay put. A buffer substituted by another
    keeps its id in the steps until the end (`renamed`: old id -> the id that took its place; the
    indexes name the new one), where every step is renamed once: a horizontal kernel that names
    hundreds of buffers is not copied at each of their donations."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.renamed: dict[int, int] = {}
        self.buffers, self.steps, self.outputs = dict(plan.buffers), list(plan.steps), list(plan.outputs)
        self.output_at: dict[int, set[int]] = {}  # buffer id -> its positions in outputs
        for i, b in enumerate(self.outputs):
            self.output_at.setdefault(b, set()).add(i)
        self.buffer_of = dict(plan.buffer_of)
        self.values_of: dict[int, list] = {}
        for v, b in self.buffer_of.items():
            self.values_of.setdefault(b, []).append(v)
        self.owned: dict[int, set[int]] = {}
        for b in self.buffers:
            self.owned.setdefault(root(self.buffers, b), set()).add(b)
        self.reading: dict[int, set[int]] = {}
        self.writing: dict[int, set[int]] = {}
        self.touching: dict[int, set[int]] = {}
        for i, s in enumerate(self.steps):
            self._index(i, s)

    def _indexes(self, s: Step):
        return (self.reading, s.reads), (self.writing, s.writes), (self.touching, s.touches)

    def _index(self, i: int, s: Step) -> None:
        for index, bids in self._indexes(s):
            for b in bids:
                index.setdefault(b, set()).add(i)

    def _at(self, index: dict, r: int) -> list[int]:
        """The positions of the steps whose ids in `index` include one of root r's bytes, in order."""
        return sorted(set().union(*(index.get(b, ()) for b in self.owned.get(r, ()))))

    def result(self) -> tuple[dict, list, list, dict]:
        steps = [s for s in self.steps if s is not None]
        if self.renamed:
            final = {old: self._current(old) for old in self.renamed}
            steps = [s.remapped(final) for s in steps]
        return self.buffers, steps, self.outputs, self.buffer_of

    def _current(self, b: int) -> int:
        """The id buffer id `b` of a step is now (the id that took its place, where one did)."""
        while b in self.renamed:
            b = self.renamed[b]
        return b

    def _set_output(self, out: int, bid: int) -> None:
        """Output position `out` is buffer id `bid`."""
        self.output_at[self.outputs[out]].discard(out)
        self.outputs[out] = bid
        self.output_at.setdefault(bid, set()).add(out)

    def _move_values(self, old: int, new: int) -> None:
        """Every value held in buffer id `old` is held in `new`."""
        moved = self.values_of.pop(old, [])
        for v in moved:
            self.buffer_of[v] = new
        if moved:
            self.values_of.setdefault(new, []).extend(moved)

    def _substitute(self, old: int, new: int) -> None:
        """Every use of root buffer `old` (step arguments, view bases, values' buffers) becomes root
        `new`; old disappears. The steps are renamed at the end (result: Step.remapped renames old in
        a step's reads, writes and touches alike)."""
        self.renamed[old] = new
        for index in (self.reading, self.writing, self.touching):
            if old in index:
                index.setdefault(new, set()).update(index.pop(old))
        self._move_values(old, new)
        mine = self.owned.pop(old)
        for k in mine:
            if self.buffers[k].base == old:
                self.buffers[k] = dataclasses.replace(self.buffers[k], base=new)
        del self.buffers[old]
        self.owned[new].update(mine - {old})

    def donate(self, out: int, inp: int) -> None:
        """Make output `out` (aliased to input `inp`) live in the input's buffer; see the module doc."""
        buffers, steps = self.buffers, self.steps
        p = self.plan.inputs[inp]
        x = self.outputs[out]
        xr = root(buffers, x)
        if xr == p or buffers[xr].role != "output" or buffers[xr].nbytes != buffers[p].nbytes:
            return  # the output is the input itself, or shares another output's bytes
        writes = self._at(self.writing, xr)
        reads = self._at(self.reading, p)
        if not writes:
            return
        first = writes[0]
        ranges = {p: (min(reads + [first]), first), xr: (first, writes[-1])}
        ok = all(r < first for r in reads) or (
            all(r <= first for r in reads) and buffers[xr].shape == buffers[p].shape
            and shares_in_place(buffers, steps, ranges, p, xr, self.buffer_of, self.values_of, self.owned,
                                (self.reading, self.writing)))
        only_copy = all(isinstance(steps[i], Copy) for i in writes)
        if ok and only_copy and len(writes) == 1 and root(buffers, self._current(steps[first].src)) == p:
            for index, bids in self._indexes(steps[first]):  # copying the input onto itself
                for b in bids:
                    index[self._current(b)].discard(first)
            steps[first] = None
            del buffers[xr]
            self.owned.pop(xr)
            self._move_values(xr, p)
            self._set_output(out, p)
        elif ok and buffers[xr].shape == buffers[p].shape and buffers[xr].dtype == buffers[p].dtype:
            self._substitute(xr, p)
            # x (xr or a view of it) has p's shape: the same bytes; so has every output that was xr (the
            # updated tensor returned as well)
            for i in self.output_at.pop(xr, ()):
                self.outputs[i] = p
                self.output_at.setdefault(p, set()).add(i)
            self._set_output(out, p)
        elif not only_copy:  # (only copies: a returned input or view read after the update: keep it)
            old = buffers[xr]
            buffers[xr] = Buffer(old.id, old.nbytes, old.dtype, old.shape, "temporary")
            steps.append(Copy(x, p))  # reads only the arena: later copies into other inputs are unaffected
            self._index(len(steps) - 1, steps[-1])
            self._set_output(out, p)


def _promote_donations(plan: Plan) -> tuple[dict, list, list, dict]:
    state = _InPlace(plan)
    done: set[int] = set()
    for out, inp in sorted(plan.graph.aliases.items()):
        if inp in done or out >= len(state.outputs) or inp >= len(plan.inputs):
            continue
        done.add(inp)
        state.donate(out, inp)
    return state.result()


# ---------------------------------------------------------------------------------------------
# 2. + 3. elementwise reuse and best fit


def _blocks(buffers: dict, steps: list, ranges: dict, temps: list[Buffer],
            buffer_of: dict | None) -> dict[int, list[int]]:
    """Group temporaries that share one slot: an elementwise step's output joins the block of a
    temporary input that dies there (same size). Returns block head -> member ids in order."""
    is_temp = {b.id for b in temps if b.role == "temporary"}
    head: dict[int, int] = {}
    members: dict[int, list[int]] = {}
    claimed: set[int] = set()
    dying: dict[int, list[int]] = {}  # step -> the temporaries it reads that die there (their roots, in order)
    for b in sorted(temps, key=lambda b: (ranges.get(b.id, (len(steps), 0))[0], b.id)):
        first = ranges.get(b.id, (-1, -1))[0]
        donor = None
        if b.id in is_temp and 0 <= first < len(steps):
            if first not in dying:
                dying[first] = _dying_at(buffers, steps[first], ranges, is_temp, first)
            for r in dying[first]:
                if r not in claimed and r != b.id and shares_in_place(buffers, steps, ranges, r, b.id, buffer_of):
                    donor = r
                    break
        if donor is None:
            head[b.id] = b.id
            members[b.id] = [b.id]
        else:
            claimed.add(donor)
            head[b.id] = head[donor]
            members[head[donor]].append(b.id)
    return members


def _dying_at(buffers: dict, s: Step, ranges: dict, is_temp: set[int], i: int) -> list[int]:
    """The roots of the temporaries step s (at position i) reads that are last touched there, once
    each, in the order of its reads: the only buffers an output first written there may share bytes
    with (shares_in_place), found once per step, not once per buffer the step writes."""
    out: dict[int, None] = {}
    for a in s.reads:
        r = root(buffers, a)
        if r in is_temp and ranges.get(r, (0, -1))[1] == i:
            out[r] = None
    return list(out)


def assign_offsets(buffers: dict[int, Buffer], steps: list[Step],
                   buffer_of: dict | None = None) -> tuple[dict[int, Buffer], int]:
    """Best fit by size and lifetime (module doc, 2 and 3). Returns new buffers and the arena size."""
    return place(buffers, arena_blocks(buffers, steps, buffer_of))


def arena_blocks(buffers: dict[int, Buffer], steps: list[Step],
                 buffer_of: dict | None = None) -> list[tuple[tuple[int, ...], int, int]]:
    """The arena's blocks (module doc, 2): (member ids, first step, last step) each; which
    temporaries share a slot depends on the steps and on which sizes are equal, not on the sizes."""
    ranges = live_ranges(buffers, steps)
    temps = [b for b in buffers.values() if b.role in ("temporary", "scratch")]
    never = (len(steps), len(steps))
    return [(tuple(ids), min(ranges.get(i, never)[0] for i in ids), max(ranges.get(i, never)[1] for i in ids))
            for ids in _blocks(buffers, steps, ranges, temps, buffer_of).values()]


_ORDERS = (  # orders in which best fit places the blocks (need, first step, last step, ids): tried in turn
    lambda b: (-b[0], b[1], b[3][0]),  # largest first
    lambda b: (b[1] - b[2], -b[0], b[1], b[3][0]),  # longest-lived first (then largest)
    lambda b: (b[1], -b[0], b[3][0]),  # in the order the steps first touch them
)


def place(buffers: dict[int, Buffer], blocks: list[tuple[tuple[int, ...], int, int]]) -> tuple[dict[int, Buffer], int]:
    """Best fit (module doc, 3) of `blocks` (arena_blocks) at the buffers' sizes: new buffers with
    offsets, and the arena size. Sizes are taken as plain numbers: where blocks go is decided at
    every size anew (flame.plan.instance places an instantiated plan with it)."""
    sized = [(aligned(int(buffers[ids[0]].nbytes) if len(ids) == 1 else max(int(buffers[i].nbytes) for i in ids)),
              lo, hi, ids) for ids, lo, hi in blocks]
    bound = _most_live(sized)
    best: tuple[list, int] | None = None
    for order in _ORDERS:
        got = _best_fit(sorted(sized, key=order), None if best is None else best[1])
        if got is None:  # as large as the best so far before its last block: not kept
            continue
        offsets, size = got
        if best is None or size < best[1]:
            best = (offsets, size)
        if size <= bound:  # no placement holds less than what one step has live
            break
    out = dict(buffers)
    for offset, (_, _, _, ids) in best[0]:
        for i in ids:
            out[i] = with_fields(buffers[i], {"offset": offset})
    return out, best[1]


def _most_live(sized: list[tuple[int, int, int, tuple]]) -> int:
    """The most bytes the blocks hold live at one step (a lower bound of any placement's size)."""
    events = sorted([(lo, need) for need, lo, _, _ in sized] + [(hi + 1, -need) for need, _, hi, _ in sized])
    live = most = 0
    for _, change in events:  # at one step, the blocks that end free their bytes before those that start
        live += change
        most = max(most, live)
    return most


def _best_fit(sized: list[tuple[int, int, int, tuple]],
              limit: int | None = None) -> tuple[list[tuple[int, tuple]], int] | None:
    """Each block, in the given order, into the smallest gap between the blocks placed before it that
    are live at the same time, or on top of them: ([(offset, block)], arena size); None as soon as the
    arena reaches `limit` (the size of a placement found before: this one cannot be smaller). (The blocks placed
    so far are kept in arrays: finding those live with a block, and the gaps between them, are
    vectorised, not a walk: the gap before each live block, in order of offset, runs from the highest
    end of those before it; the smallest gap that fits wins, the lowest such on a tie.)"""
    n = len(sized)
    starts, ends = np.zeros(n, np.int64), np.zeros(n, np.int64)  # placed blocks' offsets and ends
    firsts, lasts = np.zeros(n, np.int64), np.zeros(n, np.int64)  # and the steps they live over
    offsets, size = [], 0
    for k, block in enumerate(sized):
        need, lo, hi, _ = block
        live = ((firsts[:k] <= hi) & (lasts[:k] >= lo)).nonzero()[0]  # (flatnonzero's, without its wrappers)
        offset = 0
        if live.size:
            os_, es = starts[live], ends[live]
            order = np.lexsort((es, os_))
            os_, es = os_[order], es[order]
            at = np.empty_like(es)  # where the gap before each block starts: the highest end before it
            at[0] = 0
            np.maximum.accumulate(es[:-1], out=at[1:])
            np.maximum(at, 0, out=at)
            gaps = os_ - at
            fits = (gaps >= need).nonzero()[0]
            offset = int(at[fits[np.argmin(gaps[fits])]]) if fits.size else max(int(es.max()), 0)
        starts[k], ends[k], firsts[k], lasts[k] = offset, offset + need, lo, hi
        offsets.append((offset, block))
        size = max(size, offset + need)
        if limit is not None and size >= limit:
            return None
    return offsets, size


def plan_memory(plan: Plan) -> Plan:
    """The plan with aliased outputs written in place and arena offsets by best fit.
    Before: a Plan from build_plan (offsets unset). After: check_plan holds; plan.outputs[o] is the
    input buffer itself for every output o aliased to an input (the executor returns the bound
    array); the steps compute the same values."""
    buffers, steps, outputs, buffer_of = _promote_donations(plan)
    buffers, size = assign_offsets(buffers, steps, buffer_of)
    return dataclasses.replace(plan, buffers=buffers, steps=steps, outputs=outputs, arena_size=size,
                               buffer_of=buffer_of)


def check_plan(plan: Plan) -> None:
    """Raise FlameError if two arena buffers that are live at the same time share bytes (an
    elementwise step's output may take the exact bytes of an input that dies there: shares_in_place)."""
    ranges = live_ranges(plan.buffers, plan.steps)
    temps = [b for b in plan.buffers.values() if b.offset is not None and b.nbytes]
    bufs, steps = plan.buffers, plan.steps
    for i, a in enumerate(temps):
        for b in temps[i + 1:]:
            (fa, la), (fb, lb) = ranges.get(a.id, (0, -1)), ranges.get(b.id, (0, -1))
            same = a.offset == b.offset and a.nbytes == b.nbytes
            if same and (shares_in_place(bufs, steps, ranges, a.id, b.id, plan.buffer_of)
                         or shares_in_place(bufs, steps, ranges, b.id, a.id, plan.buffer_of)):
                continue
            if fa <= lb and fb <= la and a.offset < b.offset + b.nbytes and b.offset < a.offset + a.nbytes:
                raise FlameError(f"plan {plan.name}: b{a.id} and b{b.id} are live together and overlap "
                                 f"in the arena")
        if a.offset + a.nbytes > plan.arena_size:
            raise FlameError(f"plan {plan.name}: b{a.id} ends past the arena ({plan.arena_size} bytes)")


# ---------------------------------------------------------------------------------------------
# the report


def bound_bytes(plan: Plan) -> dict[str, int]:
    """Bytes of the buffers bound to the call, per role (inputs, parameters, state, fresh outputs)."""
    return {r: sum(b.nbytes for b in plan.buffers.values() if b.role == r and b.base is None) for r in BOUND_ROLES}


def planned_peak(plan: Plan) -> int:
    """The plan's peak device memory: its arena plus every bound buffer (MemoryReport.peak)."""
    return plan.arena_size + sum(bound_bytes(plan).values())


@dataclass
class MemoryReport:
    """What a plan will hold on the device, known before it runs. Bytes throughout.
    peak: arena + bound buffers (inputs, parameters, state, fresh outputs); live_at_peak: (buffer,
    type, role, bytes, producing IR op line) of the temporaries live at the arena's busiest step;
    saved: forward values read by backward ops (activations kept for the backward pass:
    saved_for_backward, the measure an activation budget bounds);
    recomputed: (op line, type, bytes) of what the backward recomputes instead (rematerialisation:
    flame.utils.checkpoint regions, memory budgets, and the free elementwise recomputations every plan
    makes); budget: the memory budget the plan was fitted to, with the peak it had without it;
    recomputed_flops: the estimated work those recomputations add; offloaded: (op line, type, bytes)
    of the values kept in host memory between the forward and the backward (offloading);
    activation: the activation budget the plan was fitted to, with each choice and its cost."""

    name: str
    arena: int
    bound: dict[str, int]
    peak_step: int
    live_bytes: int
    live_at_peak: list[tuple[str, str, str, int, str]] = field(default_factory=list)
    saved: list[tuple[str, str, int]] = field(default_factory=list)
    recomputed: list[tuple[str, str, int]] = field(default_factory=list)
    budget: MemoryBudget | None = None
    recomputed_flops: int = 0  # a rough count (ir.registry.flops) of the work the recomputations add
    offloaded: list[tuple[str, str, int]] = field(default_factory=list)
    activation: ActivationBudget | None = None

    @property
    def peak(self) -> int:
        return self.arena + sum(self.bound.values())

    @property
    def saved_bytes(self) -> int:
        return sum(n for _, _, n in self.saved)

    @property
    def recomputed_bytes(self) -> int:
        return sum(n for _, _, n in self.recomputed)

    def __str__(self) -> str:
        lines = [f"memory plan of {self.name}: peak {human_bytes(self.peak)} = arena {human_bytes(self.arena)} + bound "
                 + ", ".join(f"{r} {human_bytes(n)}" for r, n in self.bound.items() if n)]
        if self.budget is not None:
            b = self.budget
            asked = f"{b.requested:g} of the unconstrained peak" if 0 < b.requested <= 1 else "bytes"
            lines.append(f"memory budget: {human_bytes(b.bytes)} ({asked}); planned peak {human_bytes(self.peak)} "
                         f"with the budget, {human_bytes(b.unconstrained_peak)} without")
        lines.append(f"live at the peak (step {self.peak_step}, {human_bytes(self.live_bytes)} of temporaries):")
        lines += [f"  {b:>5} {t:<16} {r:<9} {human_bytes(n):>10}  {src}" for b, t, r, n, src in self.live_at_peak]
        lines.append(f"saved for backward: {len(self.saved)} values, {human_bytes(self.saved_bytes)}")
        lines += [f"  {t:<16} {human_bytes(n):>10}  {src}" for src, t, n in self.saved]
        if self.recomputed:
            lines.append(f"recomputed in the backward: {len(self.recomputed)} values, "
                         f"{human_bytes(self.recomputed_bytes)}, about {self.recomputed_flops / 1e9:.3g} GFLOP")
            lines += [f"  {t:<16} {human_bytes(n):>10}  {src}" for src, t, n in self.recomputed]
        if self.offloaded:
            lines.append(f"offloaded to host memory: {len(self.offloaded)} values, "
                         f"{human_bytes(sum(n for _, _, n in self.offloaded))}")
            lines += [f"  {t:<16} {human_bytes(n):>10}  {src}" for src, t, n in self.offloaded]
        if self.activation is not None:
            lines += activation_lines(self.activation)
        return "\n".join(lines)


def activation_lines(a: ActivationBudget) -> list[str]:
    """The activation budget's lines of the memory report: what was asked and reached, then each
    choice (recompute or offload) with its bytes and the time it costs at the Target's rates."""
    lines = [f"activation budget: {a.requested:g} of the {human_bytes(a.unconstrained)} of activations kept for "
             f"the backward without it = {human_bytes(a.bytes)}; kept {human_bytes(a.kept)}",
             f"  choices, {sum(s for *_, s in a.choices) * 1e6:.1f} us in all:"]
    lines += [f"  {kind:<9} {human_bytes(n):>10} {sec * 1e6:9.2f} us  {src}" for kind, src, n, sec in a.choices]
    return lines


def _is_offload(op) -> bool:
    return REGISTRY[op.name].library == "host" and not is_backward(op)


def _slot_bytes(buffers) -> int:
    """The arena bytes the buffers hold: buffers at one offset (an output written in place of an input
    that dies at that step, both live there) count once."""
    slots: dict[int, int] = {}
    for b in buffers:
        slots[b.offset] = max(slots.get(b.offset, 0), aligned(b.nbytes))
    return sum(slots.values())


def saved_for_backward(plan: Plan) -> list:
    """The activation memory kept for the backward, as flame measures it everywhere (the memory
    report, flame.compile's activation_budget, `flame explain`): values computed by forward ops and
    read by backward ops (ir.graph.is_backward), in order. A
    view with no buffer of its own (a library call reads it from its input's bytes: a folded
    transpose, attention's strided operands) counts as the buffered value it views, once; a value
    with no buffer otherwise (an attention output written into its permute's buffer) is that buffer,
    listed with its own value. Only the arena's buffers are listed: not graph inputs nor graph outputs
    (bound buffers the caller holds, which the plan keeps whether or not the backward reads them:
    MemoryReport.bound), nor values offloaded to host memory (held there, not on the device)."""
    g = plan.graph
    users = g.users()
    out = []
    for op in g.ops:
        if is_backward(op) or _is_offload(op) or not any(is_backward(u) for u in users[op.out]):
            continue
        v = op.out
        while v not in plan.buffer_of and v.producer is not None and REGISTRY[v.producer.name].view is not None:
            v = v.producer.inputs[0]
        if v in plan.buffer_of and v.producer is not None and v not in out:
            if plan.buffers[plan.buffer_of[v]].role not in BOUND_ROLES:
                out.append(v)
    return out


def saved_bytes(plan: Plan) -> int:
    """The bytes of the activations `plan` keeps for the backward (saved_for_backward): what
    MemoryReport.saved_bytes says and what an activation budget bounds."""
    return sum(v.type.numel * v.dtype.itemsize for v in saved_for_backward(plan))


def memory_report(plan: Plan) -> MemoryReport:
    """The planned memory of `plan` (see MemoryReport)."""
    ranges = live_ranges(plan.buffers, plan.steps)
    temps = [b for b in plan.buffers.values() if b.role in ("temporary", "scratch")]
    ids = plan.graph.numbering()
    producer = {}
    for v, bid in plan.buffer_of.items():
        if v.producer is not None:
            producer.setdefault(bid, v.producer)
    peak_step, peak = 0, -1
    for i in range(max(len(plan.steps), 1)):
        live = _slot_bytes(b for b in temps if ranges.get(b.id, (1, 0))[0] <= i <= ranges.get(b.id, (1, 0))[1])
        if live > peak:
            peak_step, peak = i, live
    at_peak = sorted((b for b in temps if ranges.get(b.id, (1, 0))[0] <= peak_step <= ranges.get(b.id, (1, 0))[1]),
                     key=lambda b: (-b.nbytes, b.offset, b.id))
    first_at = {}  # offset -> the first listed buffer there: a buffer written in place of another says so
    live = []
    for b in at_peak:
        src = format_op(producer[b.id], ids) if b.id in producer else "(kernel scratch)"
        if b.offset in first_at:
            src += f"  (in place of {first_at[b.offset]})"
        first_at.setdefault(b.offset, f"b{b.id}")
        live.append((f"b{b.id}", b.typename, b.role, b.nbytes, src))
    saved = [(format_op(v.producer, ids), str(v.type), v.type.numel * v.dtype.itemsize)
             for v in saved_for_backward(plan)]
    recomputed = [(format_op(op, ids), str(op.out.type), op.out.type.numel * op.out.dtype.itemsize)
                  for op in plan.graph.ops if is_recompute(op)]
    extra = sum(flops(op) for op in plan.graph.ops if is_recompute(op))
    offloaded = [(format_op(op.inputs[0].producer, ids) if op.inputs[0].producer is not None else format_op(op, ids),
                  str(op.out.type), op.out.type.numel * op.out.dtype.itemsize)
                 for op in plan.graph.ops if _is_offload(op)]
    return MemoryReport(plan.name, plan.arena_size, bound_bytes(plan), peak_step, max(peak, 0), live, saved,
                        recomputed, plan.memory_budget, extra, offloaded, plan.activation_budget)
