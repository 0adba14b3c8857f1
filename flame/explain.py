"""What a plan does, for people (the `flame explain` and `flame viz` reports): one line per kernel
(ops, bytes in/out, why the kernel boundary is there) and the memory plan (peak, what is live at the
peak, activations saved for backward); and the graph as Graphviz DOT, each kernel a coloured cluster."""

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
        return f"{s.name} ({s.library})", f"{s.name} ({s.library} call)"
    return s.name, s.reason or UNFUSED


def _bytes(plan: Plan, bids) -> int:
    return sum(plan.buffers[b].nbytes for b in bids)


def explain_plan(name: str, graph: Graph, plan: Plan) -> str:
    """The `flame explain` report of one compiled function."""
    ids = graph.numbering()
    kernels = [s for s in plan.steps if s.ops]  # views and copies do no work
    views = sum(isinstance(s, Alias) for s in plan.steps)
    copies = sum(isinstance(s, Copy) for s in plan.steps)
    lines = [f"== {name}: {len(kernels)} launches ({sum(isinstance(s, LibraryCall) for s in kernels)} "
             f"library calls), {views} views, {copies} copies =="]
    for i, s in enumerate(kernels):
        label, reason = _label(s)
        lines.append(f"  [{i:3d}] {label}: {' + '.join(o.name for o in s.ops)}  in {human_bytes(_bytes(plan, s.reads))}"
                     f"  out {human_bytes(plan.buffers[s.out].nbytes)}  | boundary: {reason}")
        for o in s.ops:
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
        ops = [o for o in s.ops if o not in grouped]
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
