"""The IR text form: one op per line, values numbered in order, types on every result, attributes
in braces. `flame.ir.parse` reads it back; print -> parse -> print is the identity. graph_data gives
the text's pieces as data (each distinct type and attribute text once), which
`flame.ir.parser.graph_from_data` reads back without a regex per line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np

from flame.ir.dtypes import DType
from flame.ir.graph import CheckpointLoc, Graph, Kind, Op, SubGraph, Value


def format_attr(v: Any) -> str:
    """One attribute value as IR text (NumPy scalars print as the Python number they hold)."""
    t = type(v)
    if t is int:  # the common cases first (exactly these types: a SymInt prints as its context says)
        return str(v)
    if t is tuple or t is list:
        return "[" + ", ".join([format_attr(x) for x in v]) + "]"
    if isinstance(v, np.generic) and v.dtype.kind in "biuf":
        v = v.item()
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "none"
    if isinstance(v, DType):
        return v.name
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(format_attr(x) for x in v) + "]"
    if isinstance(v, SubGraph):  # the graph's text on one line: `graph NAME(...) {; %2 = ...; return %2; }`
        return "; ".join(line.strip() for line in v.text.strip().splitlines())
    raise TypeError(f"cannot print attribute value {v!r}")


def checkpoint_numbers(g: Graph) -> dict[int, int]:
    """flame.utils.checkpoint regions of g numbered 0, 1, ... in order of appearance."""
    out: dict[int, int] = {}
    for op in g.ops:
        if isinstance(op.loc, CheckpointLoc):
            out.setdefault(op.loc.region, len(out))
    return out


_TAILS: ContextVar[dict[Op, str] | None] = ContextVar("flame_op_tails", default=None)


@contextmanager
def op_tails() -> Iterator[dict[Op, str]]:
    """Within: each op's text after its operands (op_tail) is made once and kept, for code that
    formats the same ops several times while they cannot change (the plan builder: a group's cache
    key, then its kernel's header)."""
    memo = _TAILS.get()
    if memo is not None:  # (nested: the outer block's)
        yield memo
        return
    token = _TAILS.set({})
    try:
        yield _TAILS.get()
    finally:
        _TAILS.reset(token)


def op_tail(op: Op) -> str:
    """What format_op writes after op's operands: ` {attributes} : type`, then a checkpoint mark
    with the region's raw id (kept inside an op_tails block)."""
    memo = _TAILS.get()
    if memo is None:
        return _tail(op, None)
    tail = memo.get(op)
    if tail is None:
        tail = memo[op] = _tail(op, None)
    return tail


def _tail(op: Op, regions: dict[int, int] | None) -> str:
    text = f" {{{', '.join([f'{k}={format_attr(v)}' for k, v in op.attrs.items()])}}}" if op.attrs else ""
    text += f" : {op.out.type}"
    if isinstance(op.loc, CheckpointLoc):  # inside flame.utils.checkpoint: recomputed by the backward
        text += f" checkpoint {(regions or {}).get(op.loc.region, op.loc.region)}" + (" saved" if op.loc.saved else "")
    return text


def op_key(op: Op, ids: dict[Value, int]) -> tuple:
    """What format_op(op, ids) says, as a tuple (cheaper to make, for keys that compare texts)."""
    return (op.name, ids.get(op.out, -1), op_tail(op), *[ids.get(v, -1) for v in op.inputs])


def format_op(op: Op, ids: dict[Value, int], loc: bool = False, regions: dict[int, int] | None = None) -> str:
    """`%3 = mul %1, %2 : f32[128,256]`; unknown values print as %? (used by the verifier). An op of
    a flame.utils.checkpoint region ends with `checkpoint N` (N from `regions`, else its raw id)."""
    text = f"%{ids.get(op.out, '?')} = {op.name}"
    if op.inputs:
        text += " " + ", ".join([f"%{ids.get(v, '?')}" for v in op.inputs])
    text += op_tail(op) if regions is None else _tail(op, regions)
    if loc and op.loc:
        text += f"  # {op.loc.splitlines()[0]}"
    return text


def _line(op: Op, names: dict[Value, str], regions: dict[int, int]) -> str:
    """format_op's text of op (no loc) indented as print_graph writes it; names: each value's `%N`."""
    text = f"  {names.get(op.out, '%?')} = {op.name}"
    if op.inputs:
        text += " " + ", ".join([names.get(v, "%?") for v in op.inputs])
    if op.attrs:
        text += " {" + ", ".join([f"{k}={format_attr(v)}" for k, v in op.attrs.items()]) + "}"
    text += f" : {op.out.type}"
    loc = op.loc
    if loc is not None and type(loc) is not str and isinstance(loc, CheckpointLoc):
        text += f" checkpoint {regions.get(loc.region, loc.region)}" + (" saved" if loc.saved else "")
    return text


def print_graph(g: Graph, locs: bool = False) -> str:
    """The whole graph as text; with locs=True each op line ends with `# file:line` of its source."""
    ids, regions = g.numbering(), checkpoint_numbers(g)
    params = ", ".join(f"%{ids[v]}: {v.type} {r}" for v, r in zip(g.inputs, g.roles))
    lines = [f"graph {g.name}({params}) {{"]
    names = {v: f"%{i}" for v, i in ids.items()}
    starts = {k.ops[0]: (i, k) for i, k in enumerate(g.groups or []) if k.ops}
    for op in g.ops:
        if op in starts:  # the fusion pass's kernels; the parser skips comment lines
            i, k = starts[op]
            kind = k.kind + (f", epilogue {k.epilogue}" if k.epilogue != "none" else "")
            kind += ", update" if k.update else ""
            lines.append(f"  # kernel {i} ({kind}): {k.reason}")
        lines.append("  " + format_op(op, ids, True, regions) if locs else _line(op, names, regions))
    rets = []
    for i, v in enumerate(g.outputs):
        item = f"%{ids[v]}" if v in ids else "%?"
        if i in g.aliases:
            item += f" -> %{ids[g.inputs[g.aliases[i]]]}"
        rets.append(item)
    lines.append("  return" + (" " + ", ".join(rets) if rets else ""))
    lines.append("}")
    return "\n".join(lines) + "\n"


def graph_data(g: Graph) -> dict:
    """g as JSON data, for a reader that trusts it (the plan cache's signed payload: parser.graph_from_data)
    and should not match a regex per line: the printer's text of each distinct result type and of each
    distinct op with its attributes written once, each op as [that op's entry, its type's entry, its
    inputs' numbers...] (values numbered as print_graph numbers them), the checkpoint marks print_graph
    writes, and each fusion group as [its first op, past its last op, kind, reason, outputs, epilogue,
    update]. TypeError where the text has no form for something (an attribute, a value not in g, a
    group whose ops are not consecutive)."""
    ids, regions = g.numbering(), checkpoint_numbers(g)
    types: dict[Any, int] = {}
    type_at: dict[int, int] = {}  # id(type) -> its entry (ops share type objects: a look-up without hashing one)
    kinds: dict[tuple[str, str], int] = {}
    rows, marks = [], []
    try:
        for i, op in enumerate(g.ops):
            attrs = ", ".join([f"{k}={format_attr(v)}" for k, v in op.attrs.items()]) if op.attrs else ""
            t = op.out.type
            at = type_at.get(id(t))
            if at is None:
                at = type_at[id(t)] = types.setdefault(t, len(types))
            rows.append([kinds.setdefault((op.name, attrs), len(kinds)), at, *[ids[v] for v in op.inputs]])
            loc = op.loc
            if loc is not None and type(loc) is not str and isinstance(loc, CheckpointLoc):
                marks.append([i, regions.get(loc.region, loc.region), loc.saved])
        outputs = [ids[v] for v in g.outputs]
        at = {op: i for i, op in enumerate(g.ops)}
        groups = []
        for k in g.groups or ():
            start = at[k.ops[0]] if k.ops else 0
            if list(k.ops) != g.ops[start : start + len(k.ops)]:
                raise TypeError(f"fusion group {k.kind} ({k.reason}): its ops are not consecutive")
            outs = [ids[v] for v in k.outputs]
            groups.append([start, start + len(k.ops), Kind(k.kind).value, k.reason, outs, k.epilogue, k.update])
    except KeyError as e:
        raise TypeError(f"a value not in the graph: {e}") from None
    return {
        "name": g.name,
        "inputs": [[types.setdefault(v.type, len(types)), r] for v, r in zip(g.inputs, g.roles)],
        "types": [str(t) for t in types],
        "ops_kinds": [list(k) for k in kinds],
        "ops": rows,
        "checkpoints": marks,
        "outputs": outputs,
        "aliases": [[i, j] for i, j in g.aliases.items()],
        "groups": None if g.groups is None else groups,
    }
