"""CUDA graphs for the CUDA executor: whether a plan's replay pays off (`graphs_pay_off`), and the
capture, replay and output-slab half of a compiled plan (`GraphReplay`, which runtime/cuda.py's
CompiledPlan is).

CUDA graphs (ARCHITECTURE.md "CUDA graphs"): the first call runs the steps as plain launches; the second captures the
whole plan once on a non-default stream (cuBLASLt through nvmath on that same stream),
later calls replay it. Inputs: parameters, state, constants, in-place-updated inputs and data inputs
are captured by pointer (in-place updates must land in the caller's arrays). When data inputs of at
most STAGE_BYTES in all arrive at other addresses (a new batch), they are staged from then on:
copied into fixed buffers before each replay (where that costs less than the launches it saves),
one graph again. Larger ones (a 256 MB tensor to reduce, attention's q, k, v) would cost a copy
each call: at addresses no graph has, the call runs plain launches, and when those addresses come
back they get a graph of their own, up to GRAPH_VARIANTS per plan (the least recently replayed
goes), so double-buffered inputs replay without copies. Scalar inputs, a new array at every call,
are staged from the start. Outputs (those not updated in place) live in an output slab whose
disjoint views a call returns; each slab has its own graph. The caller gets a slab's views only
while nothing outside flame still holds the views of an earlier call from it (its memory's reference
count says so), so in a loop (`loss = step(x)` holds the last call's outputs while the next call
runs) two slabs take turns and nothing is copied. When the caller holds every slab (a list of every
call's outputs), another slab (and graph) is made, as an allocator would hand out fresh memory, up to
OUTPUT_SLABS slabs per plan holding OUTPUT_SLAB_SHARE of the device's memory in all (at least
OUTPUT_SLAB_BYTES: ten held 256 MiB attention results fit on an 80 GB GPU); past that the graph writes an internal slab
that is copied into a fresh one (one allocation, one memcpy: a copy costs the GPU microseconds even
for a scalar, and bandwidth for a large output). A free slab that already has a graph for the call's
input pointers is taken first, so a few input sets in turn do not capture a graph per slab each.
Graph launches go on the caller's current stream. A plan that cannot be captured runs plain launches
and says why at debug level; FLAME_CUDA_GRAPHS=0 disables.

The constants below are read when a plan decides, captures or hands out a slab, so setting one on
this module changes what the next call does.

CuPy is imported lazily: `import flame` works without a GPU.
"""

from __future__ import annotations

import logging
import sys

from flame._env import env_choice
from flame._lists import all_same, gather
from flame.plan.steps import AttentionCall, ConvCall, KernelLaunch, Plan, Step, aligned, byte_offset
from flame.runtime.cuda_steps import cupy_dtype, run_program
from flame.runtime.cuda_streams import graph_stream

log = logging.getLogger("flame")

LAUNCH_US = 8.0  # a kernel launch from Python costs about this much host time (ARCHITECTURE.md "CUDA graphs")
GRAPH_VARIANTS = 4  # graphs kept per plan, one per set of input pointers (module docstring)
STAGE_BYTES = 1 << 20  # data inputs moved by at most this many bytes in all are staged (module docstring)
OUTPUT_SLABS = 16  # the most output slabs a plan hands out, each with its graph (module docstring) ...
OUTPUT_SLAB_SHARE = 1 / 16  # ... and the share of the device's memory they may hold in all ...
OUTPUT_SLAB_BYTES = 1 << 30  # ... or this many bytes, where that is more
_INTERNAL = -1  # the slot of the internal output slab, copied out after each replay
COPY_BYTES_PER_US = 2.0e6  # a device copy moves about this many bytes per µs (read + write at ~4 TB/s)


def _slab_bytes() -> int:
    """The most bytes a plan's output slabs may hold in all (module docstring)."""
    import cupy

    return max(OUTPUT_SLAB_BYTES, int(OUTPUT_SLAB_SHARE * cupy.cuda.Device().mem_info[1]))


def graphs_setting() -> str:
    """FLAME_CUDA_GRAPHS: "0" never replays CUDA graphs, "1" always does, unset/"auto" decides per plan."""
    return env_choice("FLAME_CUDA_GRAPHS", {"0": "never", "1": "always", "auto": "auto"}, "auto")


# host time of one plain call into a library from Python: a cuDNN frontend graph's execute (variant
# pack, handle, stream) costs ~150 us on an H100's host (sdpa_fwd_bwd's two attention calls run 331 us
# per call back to back without a graph, 261 us of GPU time: benchmarks/results/2026-11-27-H100-multi-tensor/);
# a convolution's is counted low; a cuBLASLt matmul: an estimate
LIBRARY_CALL_US = {AttentionCall: 150.0, ConvCall: 100.0}
LIBRARY_CALL_US_DEFAULT = 30.0


def _host_us(step: Step) -> float:
    """What the step's launches cost the host when run plainly (not replayed)."""
    each = LAUNCH_US if isinstance(step, KernelLaunch) else LIBRARY_CALL_US.get(type(step), LIBRARY_CALL_US_DEFAULT)
    return each * step.launches


def graphs_pay_off(plan: Plan, staged_bytes: int) -> tuple[bool, str]:
    """A replay saves the launches' host time but copies data inputs into fixed buffers and outputs
    out of them; replay only when the copies cost less than half of what the launches cost."""
    launches = sum(s.launches for s in plan.steps)
    copy_us, launch_us = staged_bytes / COPY_BYTES_PER_US, sum(_host_us(s) for s in plan.steps)
    if copy_us < launch_us / 2:
        return True, ""
    return False, (f"copying {staged_bytes} bytes in and out (~{copy_us:.0f} us) would cost more than the "
                   f"{launches} launches it saves (~{launch_us:.0f} us)")


class GraphReplay:
    """The CUDA-graph half of runtime/cuda.py's CompiledPlan: captures the plan's program, picks the
    graph and output slab for a call's input pointers, stages the inputs that moved, replays on the
    caller's stream. CompiledPlan's __init__ sets what these read: the plan and its program, the
    arena views (_views), the fresh outputs (_fresh), the inputs' types (_types), which inputs are
    held (_held_set), donated (_donated) and scalar (_scalars), the count of input changes
    (_input_changes), the graph setting (_setting, use_graphs, why_no_graph, captures) and the tables
    of graphs (_graphs, _keys_seen, _staged_from); `_set_staged` and `_setup_graph_buffers` the rest."""

    def _setup_graph_buffers(self) -> None:
        plan = self.plan
        self._stream = graph_stream()
        self._stage: dict = {}  # staged input -> its fixed buffer, made when the input is first staged
        self._slab_at, size = {}, 0
        for b in self._fresh:
            self._slab_at[b.id] = size
            size += aligned(b.nbytes)
        self._slab_size = size
        # output slabs (slot -> the slab and its memory's reference count while flame alone holds it)
        self._slabs: dict[int, tuple] = {}
        # per plan output: (its input position, or -1 and where its bytes are in the slab: a replay's result)
        position = {bid: j for j, bid in enumerate(plan.inputs)}
        self._out_at = [(position[o], 0, 0, None, ()) if o in position else (-1, *self._slab_place(o))
                        for o in plan.outputs]
        # a replay's results: the inputs updated in place (picked in one C call), and the slab's views
        self._in_place = [(k, j) for k, (j, *_) in enumerate(self._out_at) if j >= 0]
        self._take_outputs = gather([j for _, j in self._in_place])
        self._slab_outs = [(k, *rest) for k, (j, *rest) in enumerate(self._out_at) if j < 0]

    def _staged_bytes(self) -> int:
        """What a replay may copy: the staged inputs in, the fresh outputs out (only while the caller
        holds every output slab, but the policy counts that worst case: a plan worth replaying only
        because its outputs are not copied is not worth two slabs of them either)."""
        return sum(self.plan.buffers[self.plan.inputs[j]].nbytes for j in self._staged) + \
            sum(b.nbytes for b in self._fresh)

    def _stage_of(self, j: int):
        """The fixed buffer the graph reads staged input j from. Only staged inputs get one: parameters
        and state are bound by pointer, and a copy of each would double their memory."""
        import cupy

        if j not in self._stage:
            self._stage[j] = cupy.empty(*self._types[j])
        return self._stage[j]

    def _slab_place(self, bid: int) -> tuple:
        """(byte offset, bytes, dtype, shape) of an output's bytes in the slab."""
        b = self.plan.buffers[bid]
        return self._slab_at[self.plan.root(bid).id] + byte_offset(self.plan.buffers, bid), b.nbytes, \
            cupy_dtype(b.dtype), b.shape

    def _slab_view(self, slab, bid: int):
        at, n, dt, shape = self._slab_place(bid)
        return slab[at: at + n].view(dt).reshape(shape)

    def _slab_of(self, slot: int):
        """The output slab of `slot`, allocated on first use."""
        import cupy

        if slot not in self._slabs:
            slab = cupy.empty(max(self._slab_size, 1), cupy.uint8)
            self._slabs[slot] = (slab, sys.getrefcount(slab.data.mem))
        return self._slabs[slot][0]

    def _free_slot(self, graphs: dict) -> int:
        """A slab slot whose earlier outputs nobody outside flame holds any more, one with a graph in
        `graphs` (this call's input pointers) first; a new slot when the caller holds them all (module
        docstring: within OUTPUT_SLABS and OUTPUT_SLAB_BYTES); else _INTERNAL. Views of a slab hold
        its memory, so its reference count is back to what it was when the slab was made exactly when
        they are all gone."""
        if not self._slab_size:
            return _INTERNAL
        free = [slot for slot, (slab, alone) in self._slabs.items()
                if slot != _INTERNAL and sys.getrefcount(slab.data.mem) <= alone]
        for slot in free:
            if slot in graphs:
                return slot
        if free:
            return free[0]
        made = len(self._slabs) - (_INTERNAL in self._slabs)
        if made < OUTPUT_SLABS and (made + 1) * self._slab_size <= _slab_bytes():
            return made
        return _INTERNAL

    def _key(self, arrays: list) -> tuple:
        """The pointers of the inputs bound by pointer (those not staged), in `_bound` order: the last
        call's key unless _inputs saw an input that is not the array of the last call (an array's
        pointer never changes). Then parameters' and state's pointers are read again only if one of
        them changed (their owners keep them alive, and _keyed holds them), the others' always (they
        are remembered weakly: holding them would keep a batch allocated)."""
        memo = self._key_memo
        if memo is not None and memo[0] == self._input_changes:  # every input is the array keyed last
            return memo[1]
        held = self._take_held_bound(arrays)
        if self._keyed is None or not all_same(held, self._keyed[0]):
            ptrs = list(self._keyed[1]) if self._keyed is not None else [0] * len(self._bound)
            for at, a in zip(self._held_at, held):
                ptrs[at] = a.data.ptr
            self._keyed = (held, ptrs)
        ptrs = list(self._keyed[1])
        for at, j in self._unheld_at:
            ptrs[at] = arrays[j].data.ptr
        key = tuple(ptrs)
        self._key_memo = (self._input_changes, key)
        return key

    def _remember(self, key: tuple) -> bool:
        """Note the pointers of a call; whether they were among the last 2 * GRAPH_VARIANTS calls' pointers."""
        seen = key in self._keys_seen
        self._keys_seen[key] = None
        self._keys_seen.move_to_end(key)
        while len(self._keys_seen) > 2 * GRAPH_VARIANTS:
            self._keys_seen.popitem(last=False)
        return seen

    def _set_staged(self, staged: set) -> None:
        self._staged = staged
        self._bound = [j for j in range(len(self.plan.inputs)) if j not in staged]
        self._held_at = [at for at, j in enumerate(self._bound) if j in self._held_set]
        self._take_held_bound = gather([self._bound[at] for at in self._held_at])
        self._unheld_at = [(at, j) for at, j in enumerate(self._bound) if j not in self._held_set]
        self._keyed: tuple | None = None  # (the held bound arrays _key last read, every bound pointer)
        self._key_memo: tuple | None = None  # (_input_changes, the key) of the last _key

    def _capture(self, arrays: list, slot: int) -> None:
        plan = self.plan
        bufs = dict(self._views)
        for j, (bid, a) in enumerate(zip(plan.inputs, arrays)):
            bufs[bid] = self._stage_of(j) if j in self._staged else a
        slab = self._slab_of(slot)
        for b in self._fresh:
            bufs[b.id] = self._slab_view(slab, b.id)
        stream = self._stream
        graph, err = None, None
        with stream:
            stream.begin_capture()
            try:
                run_program(self._program, bufs, stream)
            except Exception as e:  # noqa: BLE001 - any failure means: no graph, plain launches
                err = e
            finally:
                try:
                    graph = stream.end_capture()
                except Exception as e:  # noqa: BLE001
                    err = err or e
        if err is not None:
            raise err
        self._graphs.setdefault(self._key(arrays), {})[slot] = graph
        self.captures += 1

    def _replay(self, arrays: list, stream) -> list | None:
        """Run the captured graph on `stream`, the caller's (capturing first when needed); None: run
        plain launches instead."""
        import cupy

        if self.captures == 0:
            self._setup_graph_buffers()
        key = self._key(arrays)
        graphs = self._graphs.get(key)
        if graphs is None:
            # the pointers of the graph replayed last, else of the call before (the first capture
            # stages a batch that already moved since the first call, instead of capturing twice)
            last = next(reversed(self._graphs if self._graphs else self._keys_seen), None)
            recurring = self._remember(key)
            moved = [] if last is None else [j for j, ptr in zip(self._bound, last)
                                             if arrays[j].data.ptr != ptr and j not in self._donated]
            if moved and sum(arrays[j].nbytes for j in moved) <= STAGE_BYTES:
                # small data inputs at new addresses (a batch): copied into fixed buffers from now on
                self._set_staged(self._staged | set(moved))
                self._graphs.clear()
                self._keys_seen.clear()
                log.debug("flame: re-capturing %s: inputs %s moved (staged from now on)", self.plan.name, moved)
                if self._setting != "always":  # staging them may cost more than the launches save
                    self.use_graphs, self.why_no_graph = graphs_pay_off(self.plan, self._staged_bytes())
                    if not self.use_graphs:
                        log.debug("flame: %s runs without a CUDA graph from now on: %s", self.plan.name,
                                  self.why_no_graph)
                        return None
            elif not recurring and (self._graphs or moved):  # large inputs (or parameters) at new addresses
                log.debug("flame: %s: inputs at addresses no graph has (%s moved): plain launches, a graph "
                          "if they come back", self.plan.name, moved or "parameters")
                return None
            elif len(self._graphs) >= GRAPH_VARIANTS:
                self._graphs.popitem(last=False)  # the least recently replayed goes
        else:
            self._graphs.move_to_end(key)
        slot = self._free_slot(graphs or {})
        graph = (graphs or {}).get(slot)
        if graph is None:
            try:
                self._capture(arrays, slot)
            except Exception as e:  # noqa: BLE001
                self.use_graphs, self.why_no_graph = False, f"{type(e).__name__}: {e}"
                self._graphs.clear()
                log.debug("flame: %s runs without a CUDA graph: %s", self.plan.name, self.why_no_graph)
                return None
            graph = self._graphs[self._key(arrays)][slot]
        # launched on the caller's stream (captured on the graph stream: a capture needs a stream of
        # its own, a launch does not): no events between streams, whose waits cost the GPU microseconds
        for j in self._staged:
            dst, src = self._stage_of(j), arrays[j]
            if j in self._scalars:  # scalar arrays are never written: the same one means the same value
                if self._staged_from.get(j) is src:
                    continue
                self._staged_from[j] = src
            if dst.nbytes:
                cupy.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, dst.nbytes, 3, stream.ptr)
        graph.launch(stream)
        if not self._slab_outs:
            return list(self._take_outputs(arrays))
        out = self._slab_of(slot)
        if slot == _INTERNAL and self._slab_size:  # the caller holds every slab: a copy of the internal one
            internal, out = out, cupy.empty(self._slab_size, cupy.uint8)
            cupy.cuda.runtime.memcpyAsync(out.data.ptr, internal.data.ptr, self._slab_size, 3, stream.ptr)
        results = [None] * len(self._out_at)
        for (k, _), a in zip(self._in_place, self._take_outputs(arrays)):
            results[k] = a
        for k, at, n, dt, shape in self._slab_outs:
            results[k] = out[at: at + n].view(dt).reshape(shape)
        return results
