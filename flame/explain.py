"""What a plan does, for people (the `flame explain` and `flame viz` reports): one line per kernel
(ops, bytes in/out, why the kernel boundary is there) and the memory plan (peak, what is live at the
peak, activations saved for backward). The pictures (`flame viz`) are flame.viz."""

from __future__ import annotations

from flame.ir.graph import Graph
from flame.ir.printer import format_op
from flame.ir.registry import get
from flame.plan.memory import human_bytes, memory_report
from flame.plan.steps import Alias, AttentionCall, Copy, KernelLaunch, LibraryCall, Plan, Step

UNFUSED = "one kernel per op (unfused)"
MIN_REPEATED = 4  # steps a repeated run covers at least to be named (a kernel launched twice in a row is not a region)


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


DECOMPOSED = "[decompose_attention: "


def _where(loc: str | None) -> str:
    """The user's line of an op, without the notes passes appended to it."""
    return (loc or "?").split("\n", 1)[0].split("  [")[0]


def attention_lines(graph: Graph, plan: Plan) -> list[str]:
    """How each attention op runs: cuDNN's call, the generated flash-attention kernels, or primitive ops
    (with the reason the decomposition noted on their source line), one line per op or reason."""
    out: list[str] = []
    for s in plan.steps:
        if isinstance(s, AttentionCall):
            how = ("one call of its NumPy reference (the reference executor; cuDNN cannot run a score "
                   "modification, so the CUDA executor runs what FLAME_ATTENTION chooses)"
                   if s.op.attrs.get("score_mod") is not None else
                   "one fused attention call (cuDNN on the CUDA executor, the NumPy reference on the reference one)")
            out.append(f"  {s.op.name} at {_where(s.op.loc)}: {how}")
        elif isinstance(s, KernelLaunch) and s.part[0] == 0 and any(get(o.name).library == "attention" for o in s.ops):
            out.append(f"  {s.ops[0].name} at {_where(s.ops[0].loc)}: {s.reason}")
    notes = {}
    for op in graph.ops:
        first = (op.loc or "").split("\n", 1)[0]
        if DECOMPOSED in first:
            notes.setdefault((_where(first), first[first.index(DECOMPOSED) + len(DECOMPOSED): first.rindex("]")]))
    out += [f"  attention at {where}: primitive ops (matmul, softmax, matmul): {why}" for where, why in notes]
    return ["== attention lowering (FLAME_ATTENTION=auto|cudnn|flash|decomposed) =="] + out if out else []


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
    lines += attention_lines(graph, plan)
    lines += reused_lines(plan)
    return "\n".join(lines) + "\n" + str(memory_report(plan)) + "\n"


def reused_lines(plan: Plan) -> list[str]:
    """Where the plan repeats itself, and what the plan builder rendered once for it (Plan.reused):
    the runs of steps that recur back to back (a model's repeated blocks, forward and backward), then
    the kernels of each group that recurs in the graph (the same ops on other values) and how often
    they were reused."""
    if not plan.reused:
        return []
    work = [s for s in plan.steps if s.ops]
    tokens = [(type(s).__name__, s.name, tuple(str(o.out.type) for o in s.ops)) for s in work]
    groups = sum(n for _, n in plan.reused)
    lines = [f"  reused regions: {len(plan.reused)} kernel group(s) rendered once and reused by {groups} alike "
             f"group(s) (the same ops on other values)"]
    for start, period, count in repeated_runs(tokens):
        lines.append(f"    steps [{start}, {start + period * count}): a region of {period} step(s) repeated {count} "
                     f"times, its kernels rendered for the first")
    lines += [f"    {' + '.join(names)}: rendered once, reused {n} time(s)" for names, n in plan.reused]
    return lines


def repeated_runs(tokens: list, limit: int = 8) -> list[tuple[int, int, int]]:
    """The longest runs of `tokens` made of one region repeated back to back, as (start, period,
    count), largest first, non-overlapping, at most `limit`: per period, the maximal stretches where
    each token equals the one a period later; the shortest period wins among those covering as much."""
    ids: dict = {}
    tokens = [ids.setdefault(t, len(ids)) for t in tokens]  # small ints compare fast
    taken = [False] * len(tokens)
    found = []
    while len(found) < limit:
        best = None  # (covered, -period, start, period, count)
        for p in range(1, len(tokens) // 2 + 1):
            i = 0
            while i + p < len(tokens):
                j = i
                while j + p < len(tokens) and tokens[j] == tokens[j + p] and not taken[j] and not taken[j + p]:
                    j += 1
                count = (j - i + p) // p
                if count >= 2 and (best is None or (count * p, -p) > best[:2]):
                    best = (count * p, -p, i, p, count)
                i = j + 1
        if best is None or best[0] < MIN_REPEATED:
            break
        _, _, start, p, count = best
        taken[start:start + p * count] = [True] * (p * count)
        found.append((start, p, count))
    return sorted(found)
