"""What a plan does, for people (the `flame explain` and `flame viz` reports): one line per kernel
(ops, bytes in/out, why the kernel boundary is there) and the memory plan (peak, what is live at the
peak, activations saved for backward); and the graph as Graphviz DOT, each kernel a coloured cluster."""

from __future__ import annotations

from flame.ir.graph import Graph
from flame.ir.printer import format_op
from flame.passes.plan_memory import memory_report
from flame.runtime.plan import Alias, Copy, KernelLaunch, LibraryCall, Plan, human_bytes

UNFUSED = "one kernel per op (unfused)"


def _reason(step) -> str:
    if isinstance(step, LibraryCall):
        return "matmul (cuBLASLt call)"
    return getattr(step, "reason", "") or UNFUSED


def _bytes(plan: Plan, bids) -> int:
    return sum(plan.buffers[b].nbytes for b in bids)


def explain_plan(name: str, graph: Graph, plan: Plan) -> str:
    """The `flame explain` report of one compiled function."""
    ids = graph.numbering()
    kernels = [s for s in plan.steps if isinstance(s, (KernelLaunch, LibraryCall))]
    views = sum(isinstance(s, Alias) for s in plan.steps)
    copies = sum(isinstance(s, Copy) for s in plan.steps)
    lines = [f"== {name}: {len(kernels)} launches ({sum(isinstance(s, LibraryCall) for s in kernels)} "
             f"library calls), {views} views, {copies} copies =="]
    for i, s in enumerate(kernels):
        ins = s.args[: s.n_inputs] if isinstance(s, KernelLaunch) else s.args[:-1]
        ops = s.ops if isinstance(s, KernelLaunch) else (s.op,)
        label = s.name if isinstance(s, KernelLaunch) else f"{s.name} (cuBLASLt)"
        lines.append(f"  [{i:3d}] {label}: {' + '.join(o.name for o in ops)}  in {human_bytes(_bytes(plan, ins))}"
                     f"  out {human_bytes(plan.buffers[s.out].nbytes)}  | boundary: {_reason(s)}")
        for o in ops:
            lines.append(f"          {format_op(o, ids, loc=True)}")
    return "\n".join(lines) + "\n" + str(memory_report(plan)) + "\n"


_COLOURS = ("#fde2e4", "#e2ece9", "#dfe7fd", "#fff1c1", "#e8dff5", "#d7f9f1", "#fce1e4", "#eaf4f4")


def to_dot(name: str, graph: Graph, plan: Plan) -> str:
    """Graphviz DOT of the graph: values as nodes, one coloured cluster per kernel or library call."""
    ids = graph.numbering()
    lines = [f'digraph "{name}" {{', "  rankdir=TB; node [fontname=monospace, fontsize=10];"]
    for v, role in zip(graph.inputs, graph.roles):
        lines.append(f'  v{ids[v]} [shape=box, label="%{ids[v]} {role}\\n{v.type}"];')
    grouped = set()
    k = 0
    for s in plan.steps:
        ops = s.ops if isinstance(s, KernelLaunch) else (s.op,) if isinstance(s, LibraryCall) else ()
        ops = [o for o in ops if o not in grouped]
        if not ops:
            continue
        lines.append(f'  subgraph cluster_{k} {{ style=filled; color="{_COLOURS[k % len(_COLOURS)]}"; '
                     f'label="{s.name}";')
        for o in ops:
            grouped.add(o)
            lines.append(f'    v{ids[o.out]} [label="%{ids[o.out]} = {o.name}\\n{o.out.type}"];')
        lines.append("  }")
        k += 1
    for o in graph.ops:
        if o not in grouped:
            lines.append(f'  v{ids[o.out]} [shape=plaintext, label="%{ids[o.out]} = {o.name} (view)"];')
        for v in o.inputs:
            lines.append(f"  v{ids[v]} -> v{ids[o.out]};")
    for i, v in enumerate(graph.outputs):
        lines.append(f'  out{i} [shape=doublecircle, label="out {i}"]; v{ids[v]} -> out{i};')
    lines.append("}")
    return "\n".join(lines) + "\n"
