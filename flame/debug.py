"""Debug hooks: stage dumps (FLAME_DUMP=DIR) and observers of compiled functions (used by the
`flame` CLI). Observers live in a ContextVar, so one run's observers never leak into another."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from flame.ir.graph import Graph
from flame.ir.printer import print_graph

_observers: ContextVar[tuple] = ContextVar("flame_observers", default=())


@dataclass
class CompileRecord:
    """What one compilation produced: the graph after every stage, its timings, and the final graph."""

    name: str
    stages: list[tuple[str, Graph, float]] = field(default_factory=list)
    graph: Graph | None = None
    plan: object = None
    inputs: list | None = None  # NumPy copies of the first call's input arrays (only while observed)
    plan_seconds: float = 0.0  # building the plan + memory planning
    # the inputs a further call with the latest call's arguments would read (NumPy copies, made when
    # asked; only while observed): the state the calls left (optimizer moments, FP8 scales), which a
    # profile times kernels on; None until a call ran
    next_inputs: Callable[[], list] | None = None

    def steady_inputs(self) -> tuple[list | None, str]:
        """What a profile runs the plan on, and how to say which: the inputs a further call would read,
        or the first call's where the latest arguments no longer give them (a .grad the plan reads
        was cleared after the calls)."""
        if self.next_inputs is not None:
            try:
                return self.next_inputs(), "the state the calls left"
            except (AttributeError, TypeError, ValueError):
                pass
        return self.inputs, "the first call's inputs"


def observing() -> bool:
    """True inside `observe(...)`: compiled functions then keep their records and first inputs."""
    return bool(_observers.get())


def watching() -> bool:
    """True when compilations are wanted stage by stage: inside observe(...) or with FLAME_DUMP set."""
    return observing() or bool(os.environ.get("FLAME_DUMP"))


@contextmanager
def observe(callback: Callable[[CompileRecord], None]):
    """Call callback(record) for every function compiled inside this block."""
    token = _observers.set(_observers.get() + (callback,))
    try:
        yield
    finally:
        _observers.reset(token)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "fn"


def _fresh_dir(root: str, name: str) -> str:
    """root/name, or root/name_2, name_3 ... for further compilations (deterministic numbering)."""
    base = os.path.join(root, _safe(name))
    path, k = base, 1
    while os.path.exists(path):
        k += 1
        path = f"{base}_{k}"
    os.makedirs(path)
    return path


def write_dump(root: str, record: CompileRecord, sources: dict[str, str] | None = None) -> str:
    """Write one file per stage (`NN_stage.ir`, each starting `# after STAGE (T ms)`), the plan and the
    generated CUDA sources. Returns the directory."""
    out = _fresh_dir(root, record.name)
    for i, (stage, g, seconds) in enumerate(record.stages):
        with open(os.path.join(out, f"{i:02d}_{_safe(stage)}.ir"), "w") as f:
            f.write(f"# after {stage} ({seconds * 1e3:.1f} ms)\n")
            f.write(print_graph(g, locs=True))
    if record.plan is not None:
        with open(os.path.join(out, "plan.txt"), "w") as f:
            f.write(f"# after plan_memory ({record.plan_seconds * 1e3:.1f} ms)\n{record.plan}\n")
    for name, src in (sources or {}).items():
        os.makedirs(os.path.join(out, "kernels"), exist_ok=True)
        with open(os.path.join(out, "kernels", f"{_safe(name)}.cu"), "w") as f:
            f.write(src)
    return out


def plan_sources(plan) -> dict[str, str]:
    """name -> CUDA source of every kernel a plan launches (empty if the plan has none)."""
    return {step.name: step.source for step in getattr(plan, "steps", []) if getattr(step, "source", None)}


def notify(record: CompileRecord) -> None:
    """Called by compile_graph for @flame.compile after building: dump if FLAME_DUMP is set, then tell observers."""
    root = os.environ.get("FLAME_DUMP")
    if root:
        write_dump(root, record, plan_sources(record.plan))
    for cb in _observers.get():
        cb(record)


def trace_numbers(records: list[CompileRecord]) -> list[int]:
    """Per record, which trace of its function it is (1 for the first, 2 after a re-trace, ...)."""
    seen: dict[str, int] = {}
    out = []
    for r in records:
        seen[r.name] = seen.get(r.name, 0) + 1
        out.append(seen[r.name])
    return out


def input_types(record: CompileRecord) -> list[str]:
    """The types of a compiled function's call arguments (graph inputs of role data), as traced."""
    g = record.stages[0][1] if record.stages else record.graph
    return [str(v.type) for v, role in zip(g.inputs, g.roles) if role == "data"]


def title(record: CompileRecord, trace: int) -> str:
    """How the reports head a compiled function: `train_step (trace 1; inputs f32[32,8], i64[32])`."""
    types = input_types(record)
    return f"{record.name} (trace {trace}; inputs {', '.join(types) if types else 'none'})"


def titled(records: list[CompileRecord]) -> list[tuple[str, CompileRecord]]:
    """(title, record) for each record, numbered per function."""
    return [(title(r, n), r) for r, n in zip(records, trace_numbers(records))]
