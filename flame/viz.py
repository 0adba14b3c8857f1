"""`flame viz`: pictures of compiled functions a person can read. The default view draws one box per
unit of work (a generated kernel with its fused ops, or a library call) and the data flowing between
them; a run of kernels that repeats (the same kernels, layer after layer) is drawn once, inside a
frame saying how many times it runs. `--ops` draws every IR op instead, each kernel a coloured
cluster. Graphviz (`dot`) renders the pictures; without it an HTML page shows the same boxes."""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

from flame.ir.graph import Graph, Op, Value
from flame.plan.steps import Plan
from flame.runtime.stepwise import units

_COLOURS = {"KernelLaunch": "#dfe7fd", "MatmulCall": "#fde2e4", "AttentionCall": "#e8dff5"}
_CLUSTER_COLOURS = ("#fde2e4", "#e2ece9", "#dfe7fd", "#fff1c1", "#e8dff5", "#d7f9f1", "#fce1e4", "#eaf4f4")
MAX_OPS_SHOWN = 6


@dataclass
class Box:
    """One unit of work as drawn: what it is, what it computes, where it came from, what it reads."""

    index: int
    step_type: str
    name: str
    ops: list[str]
    out: str
    lines: list[str]  # the user's source lines (file:line) of its ops, first few
    preds: set[int] = field(default_factory=set)  # boxes whose results it reads
    reads: list[str] = field(default_factory=list)  # graph inputs it reads ("x0 f32[32,8]", "param f32[8,16]")

    @property
    def key(self) -> tuple:
        """What makes two boxes 'the same kernel' (one layer's kernels repeat in the next)."""
        return self.step_type, self.name, tuple(self.ops), self.out

    def ops_text(self) -> str:
        shown = self.ops[:MAX_OPS_SHOWN]
        more = f" + ... ({len(self.ops)} ops)" if len(self.ops) > MAX_OPS_SHOWN else ""
        return " + ".join(shown) + more


def _few(items: list[str], what: str, keep: int = 3) -> str:
    """At most `keep` items, then how many more: long lists make boxes too wide to read."""
    more = f", ... ({len(items)} {what})" if len(items) > keep else ""
    return ", ".join(items[:keep]) + more


def _source(v: Value, unit_of: dict[Op, int]) -> Value | Op:
    """The op of a unit that produced v, looking through views that no unit computes (reshapes and
    transposes folded into a buffer), or the graph input v comes from."""
    while v.producer is not None and v.producer not in unit_of:
        if not v.producer.inputs:
            return v
        v = v.producer.inputs[0]
    return v.producer if v.producer is not None else v


def boxes(graph: Graph, plan: Plan) -> list[Box]:
    """The boxes of a plan in launch order, with the data edges between them."""
    work = units(plan)
    unit_of = {op: u.index for u in work for op in u.ops}
    role_of = dict(zip(graph.inputs, graph.roles))
    data_no = {v: i for i, v in enumerate(v for v, r in zip(graph.inputs, graph.roles) if r == "data")}
    returned: dict[Value, str] = {}
    for k, v in enumerate(graph.outputs):
        alias = graph.aliases.get(k)
        returned.setdefault(v, f"updates {graph.roles[alias]} input" if alias is not None else f"output {k}")
    out = []
    for u in work:
        outs = _few([plan.buffers[b].typename for b in u.outs], "outputs")
        locs = list(dict.fromkeys((o.loc or "").split("  ")[0] for o in u.ops if o.loc))
        ends = list(dict.fromkeys(returned[o.out] for o in u.ops if o.out in returned))
        outs += f" ({', '.join(ends)})" if ends else ""
        box = Box(u.index, type(u.steps[0]).__name__, u.name, [o.name for o in u.ops], outs, locs[:2])
        mine = set(u.ops)
        for op in u.ops:
            for v in op.inputs:
                src = _source(v, unit_of)
                if isinstance(src, Op):
                    if src not in mine:
                        box.preds.add(unit_of[src])
                elif src in role_of and src.producer is None:
                    role = role_of[src]
                    what = f"x{data_no[src]} {src.type}" if role == "data" else f"{role} {src.type}"
                    if what not in box.reads:
                        box.reads.append(what)
        out.append(box)
    return out


def repeats(keys: list, max_period: int = 400) -> list[tuple[int, int, int]]:
    """Cover keys with (start, period, count) runs, greedily from the left: at each position the run
    of a repeated block that covers the most keys (count >= 2), else a single key (period 1, count 1)."""
    runs, i, n = [], 0, len(keys)
    while i < n:
        best = (1, 1)
        for p in range(1, min(max_period, (n - i) // 2) + 1):
            if keys[i] != keys[i + p]:
                continue
            r = 1
            while i + (r + 1) * p <= n and keys[i + r * p: i + (r + 1) * p] == keys[i: i + p]:
                r += 1
            if r >= 2 and p * r > best[0] * best[1]:
                best = (p, r)
        runs.append((i, *best))
        i += best[0] * best[1]
    return runs


def _collapse(bxs: list[Box]) -> tuple[list[tuple[int, int, int]], dict[int, int]]:
    """The repeated runs of boxes and, per box, the box drawn for it (its counterpart in the first
    repeat of its run)."""
    runs = repeats([b.key for b in bxs])
    shown = {}
    for start, p, r in runs:
        for k in range(p * r):
            shown[start + k] = start + k % p
    return runs, shown


def _dot_label(b: Box) -> str:
    parts = [f"[{b.index}] {b.name}", b.ops_text(), f"-> {b.out}"]
    if b.reads:
        parts.append("reads " + _few(b.reads, "inputs"))
    parts += b.lines
    return "\\n".join(p.replace('"', "'") for p in parts)


def kernel_dot(title: str, graph: Graph, plan: Plan) -> str:
    """Graphviz DOT of the kernel-level picture (one box per kernel or library call, repeats collapsed)."""
    bxs = boxes(graph, plan)
    runs, shown = _collapse(bxs)
    lines = [f'digraph "{graph.name}" {{', f'  label="{title}"; labelloc=t; rankdir=TB;',
             "  node [shape=box, style=filled, fontname=monospace, fontsize=10];"]
    for start, p, r in runs:
        body = [f'    k{bxs[start + j].index} [fillcolor="{_COLOURS.get(bxs[start + j].step_type, "#eeeeee")}", '
                f'label="{_dot_label(bxs[start + j])}"];' for j in range(p)]
        if r == 1:
            lines += [x[2:] for x in body]
            continue
        lines.append(f'  subgraph cluster_{start} {{ style=dashed; label="x {r}: kernels [{start}]..'
                     f'[{start + p * r - 1}], the same {p} kernel(s) repeated";')
        lines += body
        lines.append("  }")
    where = {start + k: (start, k // p) for start, p, r in runs for k in range(p * r)}  # box -> (run, repeat)
    edges = set()
    for b in bxs:
        for q in b.preds:
            u, v = shown[q], shown[b.index]
            if u != v:
                across = where[q][0] == where[b.index][0] and where[q][1] != where[b.index][1]
                edges.add((u, v, across))
    for u, v, across in sorted(edges):
        style = ' [style=dashed, label="next repeat"]' if across else ""
        lines.append(f"  k{u} -> k{v}{style};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def ops_dot(title: str, graph: Graph, plan: Plan) -> str:
    """Graphviz DOT of every value: one coloured cluster per kernel or library call (`--ops`)."""
    ids = graph.numbering()
    lines = [f'digraph "{graph.name}" {{', f'  label="{title}"; labelloc=t;',
             "  rankdir=TB; node [fontname=monospace, fontsize=10];"]
    for v, role in zip(graph.inputs, graph.roles):
        lines.append(f'  v{ids[v]} [shape=box, label="%{ids[v]} {role}\\n{v.type}"];')
    grouped = set()
    for k, s in enumerate(s for s in plan.steps if s.ops):
        ops = [o for o in s.ops if o not in grouped]
        if not ops:
            continue
        lines.append(f'  subgraph cluster_{k} {{ style=filled; color="{_CLUSTER_COLOURS[k % len(_CLUSTER_COLOURS)]}"; '
                     f'label="{s.name}";')
        for o in ops:
            grouped.add(o)
            lines.append(f'    v{ids[o.out]} [label="%{ids[o.out]} = {o.name}\\n{o.out.type}"];')
        lines.append("  }")
    for o in graph.ops:
        if o not in grouped:
            lines.append(f'  v{ids[o.out]} [shape=plaintext, label="%{ids[o.out]} = {o.name} (view)"];')
        for v in o.inputs:
            lines.append(f"  v{ids[v]} -> v{ids[o.out]};")
    for i, v in enumerate(graph.outputs):
        lines.append(f'  out{i} [shape=doublecircle, label="out {i}"]; v{ids[v]} -> out{i};')
    lines.append("}")
    return "\n".join(lines) + "\n"


_CSS = """body{font-family:sans-serif;margin:2em}h2{font-size:1.1em;margin-top:2em}
.box{border:1px solid #888;border-radius:4px;padding:4px 8px;margin:4px 0;font-family:monospace;font-size:12px}
.rep{border:2px dashed #666;padding:4px 8px;margin:8px 0}.rep>.n{font-weight:bold}
.meta{color:#555}.KernelLaunch{background:#dfe7fd}.MatmulCall{background:#fde2e4}.AttentionCall{background:#e8dff5}"""


def kernel_html(title: str, graph: Graph, plan: Plan) -> str:
    """The kernel-level picture as an HTML fragment (no Graphviz needed): boxes in launch order, each
    saying which boxes it reads from; repeated runs framed once with their count."""
    bxs = boxes(graph, plan)
    runs, shown = _collapse(bxs)
    e = html.escape
    out = [f"<h2>{e(title)}</h2>"]
    for start, p, r in runs:
        if r > 1:
            out.append(f'<div class="rep"><div class="n">x {r}: kernels [{start}]..[{start + p * r - 1}], '
                       f"the same {p} kernel(s) repeated (first repeat shown)</div>")
        for b in bxs[start: start + p]:
            frm = sorted({shown[q] for q in b.preds})
            meta = []
            if frm:
                meta.append("reads results of " + " ".join(f"[{q}]" for q in frm))
            if b.reads:
                meta.append("reads " + _few(b.reads, "inputs"))
            meta += b.lines
            out.append(f'<div class="box {e(b.step_type)}"><b>[{b.index}] {e(b.name)}</b> '
                       f"{e(b.ops_text())} &rarr; {e(b.out)}<div class=\"meta\">{e(' | '.join(meta))}</div></div>")
        if r > 1:
            out.append("</div>")
    return "\n".join(out)


def _page(parts: list[str]) -> str:
    return (f"<!doctype html><html><head><meta charset=\"utf-8\"><title>flame viz</title><style>{_CSS}</style>"
            f"</head><body>\n" + "\n".join(parts) + "\n</body></html>\n")


def _paths(titled, output: str) -> list[str]:
    """One output path per compiled function: the output itself for one function, else
    base.NAME.ext (base.NAME.N.ext for the N-th trace of a function traced more than once)."""
    if len(titled) == 1:
        return [output]
    base, ext = os.path.splitext(output)
    names = [r.name for _, r in titled]
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", n)
        out.append(f"{base}.{safe}{f'.{seen[n]}' if names.count(n) > 1 else ''}{ext}")
    return out


def _render(dot: str, fmt: str) -> bytes:
    return subprocess.run(["dot", f"-T{fmt}"], input=dot.encode(), check=True, capture_output=True).stdout


def write_viz(titled, output: str, ops: bool = False) -> list[str]:
    """Draw every (title, debug record): DOT text, rendered by Graphviz when it is installed (svg, png,
    pdf ... by the output's extension); `.html` gives one page for all of them. Without Graphviz the
    DOT files are written with an HTML page beside them. Returns the lines to print."""
    draw = ops_dot if ops else kernel_dot
    base, ext = os.path.splitext(output)
    ext = ext or ".svg"
    have_dot = shutil.which("dot") is not None
    dots = [(title, r, draw(title, r.graph, r.plan)) for title, r in titled]
    msgs = []
    if ext == ".html":
        if have_dot:
            parts = [f"<h2>{html.escape(t)}</h2>" + _render(d, "svg").decode() for t, _, d in dots]
        else:
            parts = [kernel_html(t, r.graph, r.plan) for t, r, _ in dots]
            msgs.append("Graphviz `dot` is not installed: drew the HTML view (boxes in launch order)")
        with open(output, "w") as f:
            f.write(_page(parts))
        return msgs + [f"wrote {output} ({len(dots)} compiled function(s))"]
    paths = _paths(titled, base + ext)
    for (_, _, d), path in zip(dots, paths):
        dot_path = os.path.splitext(path)[0] + ".dot"
        with open(dot_path, "w") as f:
            f.write(d)
        if ext == ".dot":
            msgs.append(f"wrote {dot_path}")
        elif have_dot:
            with open(path, "wb") as f:
                f.write(_render(d, ext.lstrip(".")))
            msgs.append(f"wrote {path}")
        else:
            msgs.append(f"wrote {dot_path}")
    if ext != ".dot" and not have_dot:
        page = base + ".html"
        with open(page, "w") as f:
            f.write(_page([kernel_html(t, r.graph, r.plan) for t, r, _ in dots]))
        msgs.append(f"Graphviz `dot` is not installed, so no {ext} was rendered: wrote the HTML view {page} "
                    f"instead (install graphviz, then: dot -T{ext.lstrip('.')} FILE.dot -o FILE{ext})")
    return msgs
