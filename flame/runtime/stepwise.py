"""Run a plan's kernels one at a time, each on the reference executor's values of its inputs, so a
wrong result is pinned on the kernel that produced it (`flame check`) and each kernel can be timed
alone (`flame profile`). Not an executor: the steady-state path is runtime.cuda."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from flame.ir.graph import Graph, Value
from flame.runtime.plan import KernelLaunch, LibraryCall, Plan
from flame.runtime.reference import run_op


def reference_values(g: Graph, inputs: list[np.ndarray]) -> dict[Value, np.ndarray]:
    """Every value of g computed by the reference (inputs included)."""
    env = dict(zip(g.inputs, inputs))
    for op in g.ops:
        env[op.out] = run_op(op, [env[v] for v in op.inputs])
    return env


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
        s = self.steps[0]
        return s.ops if isinstance(s, KernelLaunch) else (s.op,)


def units(plan: Plan) -> list[Unit]:
    """Group consecutive launch parts of the same ops; each library call is its own unit."""
    out: list[Unit] = []
    for s in plan.steps:
        if isinstance(s, LibraryCall):
            out.append(Unit(len(out), [s], s.args[:-1], (s.out,), ()))
        elif isinstance(s, KernelLaunch):
            if out and isinstance(out[-1].steps[-1], KernelLaunch) and out[-1].steps[-1].ops == s.ops \
                    and s.part[0] > 0:
                out[-1].steps.append(s)
                continue
            n_out = getattr(s, "n_outputs", 1)
            ins = s.args[: s.n_inputs]
            outs = s.args[s.n_inputs: s.n_inputs + n_out]
            out.append(Unit(len(out), [s], ins, outs, s.args[s.n_inputs + n_out:]))
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

        from flame.runtime.cuda import load_kernels

        self.plan, self.cp = plan, cupy
        self.values = UnitValues(plan, env)
        self.fns = load_kernels(plan.kernels())

    def buffers(self, unit: Unit) -> dict[int, object]:
        cp, bufs = self.cp, {}
        for bid in unit.outs + unit.scratch:  # poisoned, so an element left unwritten shows
            b = self.plan.buffers[bid]
            bufs[bid] = cp.full(b.nbytes, 0xFF, dtype=np.uint8).view(b.dtype.np_dtype).reshape(b.shape)
        for bid in unit.ins:  # an input updated in place starts from its value, not poison
            bufs[bid] = cp.asarray(self.values.read(unit, bid))
        return bufs

    def launch(self, unit: Unit, bufs: dict[int, object], stream) -> None:
        from flame.runtime.cuda import _source_key
        from flame.runtime.matmul import matmul_into

        for s in unit.steps:
            if isinstance(s, LibraryCall):
                extra = {"epilogue": s.info["epilogue"]} if s.info.get("epilogue", "none") != "none" else {}
                if len(s.args) == 4:
                    extra["bias"] = bufs[s.args[2]]
                matmul_into(bufs[s.out], bufs[s.args[0]], bufs[s.args[1]], ta=s.info["ta"], tb=s.info["tb"],
                            stream=stream, **extra)
            elif s.grid > 0:
                fn = self.fns[(_source_key(s.source), s.name)]
                fn((s.grid,), (s.block,), [bufs[a] for a in s.args], shared_mem=s.smem, stream=stream)

    def run(self, unit: Unit) -> Iterator[tuple[int, np.ndarray, np.ndarray | None]]:
        """Run the unit once; yield (buffer id, GPU result, reference result) per output."""
        bufs = self.buffers(unit)
        stream = self.cp.cuda.get_current_stream()
        self.launch(unit, bufs, stream)
        stream.synchronize()
        for bid in unit.outs:
            yield bid, self.cp.asnumpy(bufs[bid]), self.values.written(unit, bid)
