"""What a plan does, for people (the `flame explain` and `flame viz` reports): one line per kernel
(ops, bytes in/out, why the kernel boundary is there) and the memory plan (peak, what is live at the
peak, activations saved for backward). The pictures (`flame viz`) are flame.viz."""

from __future__ import annotations

from flame.ir.graph import Graph
from flame.ir.printer import format_op
from flame.plan.memory import human_bytes, memory_report
from flame.plan.steps import Alias, Copy, LibraryCall, Plan, Step

UNFUSED = "one kernel per op (unfused)"


def _label(s: Step) -> tuple[str, str]:
    """(what the report calls a work step, why its kernel boundary is there): every library call
    (matmul now; attention, convolution, all-reduce later) reads alike, from what the step says."""
    if isinstance(s, LibraryCall):
        epilogue = getattr(s, "epilogue", "none")  # a GEMM's fused epilogue (MatmulCall)
        extra = f", epilogue {epilogue}" if epilogue != "none" else ""
        return f"{s.name} ({s.library})", f"{s.name} ({s.library} call{extra})"
    return s.name, s.reason or UNFUSED


def _bytes(plan: Plan, bids) -> int:
    return sum(plan.buffers[b].nbytes for b in dict.fromkeys(bids))  # q, k, v may be one buffer, read once


def explain_plan(title: str, graph: Graph, plan: Plan) -> str:
    """The `flame explain` report of one compiled function, headed by `title` (the CLI's: the function,
    its trace number and its input types)."""
    ids = graph.numbering()
    kernels = [s for s in plan.steps if s.ops]  # views and copies do no work
    views = sum(isinstance(s, Alias) for s in plan.steps)
    copies = sum(isinstance(s, Copy) for s in plan.steps)
    lines = [f"== {title}: {len(kernels)} launches ({sum(isinstance(s, LibraryCall) for s in kernels)} "
             f"library calls), {views} views, {copies} copies =="]
    for i, s in enumerate(kernels):
        label, reason = _label(s)
        lines.append(f"  [{i:3d}] {label}: {' + '.join(o.name for o in s.ops)}  in {human_bytes(_bytes(plan, s.reads))}"
                     f"  out {human_bytes(_bytes(plan, s.outputs))}  | boundary: {reason}")
        for o in s.ops:
            lines.append(f"          {format_op(o, ids, loc=True)}")
    return "\n".join(lines) + "\n" + str(memory_report(plan)) + "\n"
