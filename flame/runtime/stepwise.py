"""Run a plan's kernels one at a time, each on the reference executor's values of its inputs, so a
wrong result is pinned on the kernel that produced it (`flame check`) and each kernel can be timed
alone (`flame profile`). Not an executor: the steady-state path is runtime.cuda."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from flame.ir.graph import Value
from flame.plan.steps import KernelLaunch, Plan, with_fields


@dataclass
class Unit:
    """One unit of GPU work: the launches of one kernel group (all parts) or one library call."""

    index: int
    steps: list
    ins: tuple[int, ...]
    outs: tuple[int, ...]
    scratch: tuple[int, ...]

    @property
    def name(self) -> str:
        return self.steps[0].name

    @property
    def ops(self) -> tuple:
        return self.steps[0].ops


def units(plan: Plan) -> list[Unit]:
    """The steps that do work (views and copies do none), with the launch parts of one kernel
    (same ops, part > 0) joined to the unit of their first part."""
    out: list[Unit] = []
    for s in plan.steps:
        if not s.ops:
            continue
        if isinstance(s, KernelLaunch) and s.part[0] > 0 and out and out[-1].steps[-1].ops == s.ops:
            out[-1].steps.append(s)
            continue
        out.append(Unit(len(out), [s], s.reads, s.outputs, s.scratch))
    return out


class UnitValues:
    """Which reference value a buffer holds when a unit reads it, and which value the unit writes.
    A buffer holds several values over time: graph inputs, then what units write (an in-place update
    writes a new value into its input's buffer); a value that only names a buffer (a transpose folded
    into a matmul, a view) holds none of its own."""

    def __init__(self, plan: Plan, env: dict[Value, np.ndarray]):
        self.env = env
        self.order = plan.graph.numbering()
        written = set(plan.graph.inputs)
        for u in units(plan):
            written |= {o.out for o in u.ops if plan.buffer_of.get(o.out) in u.outs}
        self.held: dict[int, list[Value]] = {}
        self.named: dict[int, Value] = {}
        for v in sorted(plan.buffer_of, key=self.order.__getitem__):
            bid = plan.buffer_of[v]
            self.named.setdefault(bid, v)
            if v in written:
                self.held.setdefault(bid, []).append(v)

    def read(self, unit: Unit, bid: int) -> np.ndarray:
        first = min(self.order[o.out] for o in unit.ops)
        mine = {o.out for o in unit.ops}
        before = [v for v in self.held.get(bid, []) if v not in mine and self.order[v] < first]
        return self.env[before[-1] if before else self.named[bid]]

    def written(self, unit: Unit, bid: int) -> np.ndarray | None:
        mine = [v for v in self.held.get(bid, []) if v.producer is not None and v.producer in unit.ops]
        return self.env[mine[-1]] if mine else None


class GpuUnitRunner:
    """Uploads a unit's inputs (from reference values) and runs it on the GPU."""

    def __init__(self, plan: Plan, env: dict[Value, np.ndarray]):
        import cupy

        from flame.runtime.cuda_kernels import load_kernels
        from flame.runtime.cuda_steps import cupy_dtype, cupy_storage

        self._dtype, self._storage = cupy_dtype, cupy_storage
        self.plan, self.cp = plan, cupy
        self.values = UnitValues(plan, env)
        self.fns = load_kernels(plan.kernels())
        self._programs: dict[int, list] = {}

    def buffers(self, unit: Unit) -> dict[int, object]:
        cp, bufs = self.cp, {}
        for bid in unit.outs + unit.scratch:  # poisoned, so an element left unwritten shows
            b = self.plan.buffers[bid]
            bufs[bid] = cp.full(b.nbytes, 0xFF, dtype=np.uint8).view(self._dtype(b.dtype)).reshape(b.shape)
        for bid in unit.ins:  # an input updated in place starts from its value, not poison
            bufs[bid] = cp.asarray(self._storage(self.values.read(unit, bid)))
        # the uploads run on the current stream; the profiler times the unit on a stream of its own,
        # which would otherwise read indices still in flight (an illegal address in a gather)
        cp.cuda.get_current_stream().synchronize()
        return bufs

    def launch(self, unit: Unit, bufs: dict[int, object], stream) -> None:
        """Issue the unit's steps on `stream`, through the CUDA executor's step handlers."""
        from flame.runtime.cuda_steps import prepare, run_program

        if unit.index not in self._programs:  # an update runs on `stream` too: it is timed and checked alone
            steps = [with_fields(s, {"side": False}) if isinstance(s, KernelLaunch) and s.side else s
                     for s in unit.steps]
            self._programs[unit.index] = prepare(steps, self.fns)
        run_program(self._programs[unit.index], bufs, stream)

    def run(self, unit: Unit) -> Iterator[tuple[int, np.ndarray, np.ndarray | None]]:
        """Run the unit once; yield (buffer id, GPU result, reference result) per output."""
        bufs = self.buffers(unit)
        stream = self.cp.cuda.get_current_stream()
        self.launch(unit, bufs, stream)
        stream.synchronize()
        for bid in unit.outs:
            got = self.cp.asnumpy(bufs[bid]).view(self.plan.buffers[bid].dtype.np_dtype)  # FP8: its bytes
            yield bid, got, self.values.written(unit, bid)
