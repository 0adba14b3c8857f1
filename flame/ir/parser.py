"""Parse the text printed by flame.ir.printer back into a Graph (then verified). A parse reads each
distinct type and attribute text once (a graph repeats few), and an op line as the printer writes it
with one match; verify=False skips the verifier's shape rules. graph_from_data reads the pieces of a
text that printer.graph_data writes (the plan cache's signed payload) with the same readers, and no
regex per line."""

from __future__ import annotations

import json
import re
from typing import Any

from flame.errors import FlameError, ParseError
from flame.ir import registry
from flame.ir.dtypes import dtype_of
from flame.ir.graph import CheckpointLoc, FusionGroup, Graph, Kind, Op, SubGraph, Value
from flame.ir.types import TensorType

_TYPE = r"([a-z0-9]+)\[([0-9,]*)\]"
_HEADER = re.compile(r"^graph\s+([\w.\-]+)\((.*)\)\s*\{$")
_PARAM = re.compile(r"^%(\d+):\s*" + _TYPE + r"\s+(\w+)$")
_KERNEL = re.compile(r"^# kernel \d+ \(([a-z]+)(?:, epilogue ([a-z_]+))?(, update)?\): (.*)$")
_OP_HEAD = re.compile(r"^%(\d+)\s*=\s*([a-z_0-9]+)\s*((?:%\d+\s*,?\s*)*)")
_OP_TAIL = re.compile(r"^:\s*" + _TYPE + r"(?:\s+checkpoint\s+(\d+)(\s+saved)?)?\s*(?:#\s*(.*))?$")
# an op line exactly as the printer writes it, without a loc and with no string or nested brace in its
# attributes (most lines): what _op_line finds in it, in one match
_PRINTED = re.compile(
    r"%(\d+) = ([a-z_0-9]+)(?: (%\d+(?:, %\d+)*))?(?: (\{[^{}\"]*\}))? : " + _TYPE + r"(?: checkpoint (\d+)( saved)?)?"
)
_TOKEN = re.compile(r'\s*(\[|\]|,|"(?:[^"\\]|\\.)*"|[^\s,\[\]]+)')


def _type(dt: str, dims: str) -> TensorType:
    return TensorType(tuple(int(d) for d in dims.split(",") if d != ""), dtype_of(dt))


def _split_top(text: str, sep: str = ",", level: int = 0) -> list[str]:
    """Split `a=1, b=[1, 2]` on `sep` outside strings and nested at most `level` deep in brackets,
    braces and parentheses."""
    parts, depth, cur, in_str = [], 0, "", False
    for i, ch in enumerate(text):
        if ch == '"' and (i == 0 or text[i - 1] != "\\"):
            in_str = not in_str
        if not in_str:
            depth += ch in "[{("
            depth -= ch in "]})"
            if ch == sep and depth <= level:
                parts.append(cur)
                cur = ""
                continue
        cur += ch
    if cur.strip():
        parts.append(cur)
    return parts


def _scalar(tok: str) -> Any:
    if tok.startswith('"'):
        return json.loads(tok)
    named = {
        "true": True,
        "false": False,
        "none": None,
        "inf": float("inf"),
        "-inf": float("-inf"),
        "nan": float("nan"),
    }
    if tok in named:
        return named[tok]
    if re.fullmatch(r"-?\d+", tok):
        return int(tok)
    try:
        return float(tok)
    except ValueError:
        return dtype_of(tok)


MAX_NESTING = 16  # attribute lists nest at most twice today (pads); deeper text is not IR


def _closing_brace(line: str, start: int) -> int:
    """The index just past the `}` that closes the `{` at line[start] (strings skipped), or -1."""
    depth, in_str = 0, False
    for i in range(start, len(line)):
        ch = line[i]
        if ch == '"' and line[i - 1] != "\\":
            in_str = not in_str
        elif not in_str and ch in "{}":
            depth += 1 if ch == "{" else -1
            if depth == 0:
                return i + 1
    return -1


def _op_line(line: str) -> tuple | None:
    """(number, name, arguments, attribute text or None, dtype, dims, checkpoint, saved, loc) of an op line
    `%N = name %a, %b {attrs} : TYPE [checkpoint K] [# loc]`, or None. The attribute braces may nest
    (a graph-valued attribute holds a whole graph's text)."""
    head = _OP_HEAD.match(line)
    if not head:
        return None
    rest, attrs = line[head.end() :].lstrip(), None
    if rest.startswith("{"):
        close = rest.find("}")  # the common case: no string and no nested brace before the first `}`
        simple = close > 0 and '"' not in rest[:close] and rest.count("{", 0, close) == 1
        end = close + 1 if simple else _closing_brace(rest, 0)
        if end < 0:
            return None
        attrs, rest = rest[:end], rest[end:].lstrip()
    tail = _OP_TAIL.match(rest)
    return None if tail is None else (*head.groups(), attrs, *tail.groups())


def _subgraph(text: str) -> SubGraph:
    """A graph-valued attribute from its one-line text (lines joined by `;`)."""
    try:
        return SubGraph(parse("\n".join(_split_top(text, ";", 1))))
    except ParseError as e:
        raise ValueError(f"bad graph attribute: {e}") from None


def parse_attr_value(text: str) -> Any:
    """One attribute value: a scalar, a string, a dtype, a nested [list] or a graph (`graph NAME(...)
    {; ...; }`); ValueError if malformed."""
    if text.startswith("graph ") and text.endswith("}"):
        return _subgraph(text)
    toks = [t for t in _TOKEN.findall(text) if t]
    out, pos = _value(text, toks, 0, 0)
    if pos != len(toks):
        raise ValueError(f"trailing text in attribute value {text!r}")
    return out


def _value(text: str, toks: list[str], pos: int, depth: int) -> tuple[Any, int]:
    """The value starting at token `pos` of `text`'s tokens, and the position after it (a module
    function: recursive closures made per attribute would be reference cycles for the collector)."""
    tok, pos = _take(text, toks, pos)
    if tok == "]" or tok == ",":
        raise ValueError(f"unexpected {tok!r} in attribute value {text!r}")
    if tok != "[":
        return _scalar(tok), pos
    if depth >= MAX_NESTING:
        raise ValueError(f"attribute value nests deeper than {MAX_NESTING} lists")
    items = []
    while pos < len(toks) and toks[pos] != "]":
        item, pos = _value(text, toks, pos, depth + 1)
        items.append(item)
        if pos < len(toks) and toks[pos] == ",":
            _, pos = _take(text, toks, pos)
    _, pos = _take(text, toks, pos)  # the closing ]
    return tuple(items), pos


def _take(text: str, toks: list[str], pos: int) -> tuple[str, int]:
    if pos >= len(toks):
        raise ValueError(f"attribute value {text!r} ends early")
    return toks[pos], pos + 1


def _attrs(text: str) -> dict[str, Any]:
    body = text.strip()[1:-1]
    out = {}
    for part in _split_top(body):
        key, _, val = part.partition("=")
        out[key.strip()] = parse_attr_value(val.strip())
    return out


class _Reader:
    """One parse's state: the lines, the values defined so far by number, and what was read from the
    type and attribute texts seen (an IR text repeats few of either: each is read and checked once;
    types and attribute values are immutable, so ops may share them)."""

    __slots__ = ("lines", "ids", "types", "attrs")

    def __init__(self, lines: list[str]):
        self.lines = lines
        self.ids: dict[int, Value] = {}
        self.types: dict[tuple[str, str], TensorType] = {}
        self.attrs: dict[tuple[str, str], dict[str, Any]] = {}

    def fail(self, n: int, why: str):
        raise ParseError(f"line {n + 1}: {why}\n  {self.lines[n]}")

    def ref(self, n: int, tok: str) -> Value:
        """The value `%K` names (line n's error if it is not a defined value)."""
        tok = tok.strip()
        v = self.ids.get(int(tok[1:])) if tok[:1] == "%" and tok[1:].isdecimal() else None
        if v is None:
            self.fail(n, f"{tok!r} is not a defined value")
        return v

    def type(self, dt: str, dims: str) -> TensorType:
        t = self.types.get((dt, dims))
        if t is None:
            t = self.types[dt, dims] = _type(dt, dims)
        return t

    def attributes(self, n: int, opdef, text: str | None) -> dict[str, Any]:
        """The op's attributes from their text `{k=v, ...}`, normalized (defaults filled, kinds coerced);
        an attribute that coercion would change in meaning is line n's error."""
        key = (opdef.name, text or "")
        found = self.attrs.get(key)
        if found is None:
            raw = _attrs(text) if text else {}
            found = opdef.normalize_attrs(raw)
            coerced = [k for k in raw if not _same(raw[k], found[k])]
            if coerced:  # keepdim="false" must not become True
                self.fail(
                    n, f"attribute {coerced[0]}={raw[coerced[0]]!r} is not a valid {opdef.attrs[coerced[0]].kind}"
                )
            self.attrs[key] = found
        return found

    def op(self, n: int, line: str) -> Op:
        """The op of line n (`%N = name %a, %b {attrs} : TYPE [checkpoint K [saved]] [# loc]`), its
        result numbered N; its type is the one written (the verifier checks it against the shape rule)."""
        printed = _PRINTED.fullmatch(line)
        m = (*printed.groups(), None) if printed else _op_line(line)
        if not m:
            self.fail(n, "expected `%N = op %a, %b {attrs} : TYPE`")
        num, name, args, attrs, dt, dims, checkpoint, saved, loc = m
        number = int(num)
        if number in self.ids:
            self.fail(n, f"%{num} is defined twice")
        try:
            ins = tuple([self.ref(n, a) for a in args.split(",")]) if args else ()
            attrs = self.attributes(n, registry.get(name), attrs)
            loc = loc.strip() if loc else None
            op = Op(
                name,
                ins,
                attrs,
                self.type(dt, dims),
                CheckpointLoc(loc or "", int(checkpoint), bool(saved)) if checkpoint else loc,
            )
        except ParseError:
            raise
        except (FlameError, ValueError, IndexError, TypeError, KeyError, OverflowError) as e:
            self.fail(n, str(e))
        self.ids[number] = op.out
        return op


def parse(text: str, verify: bool = True) -> Graph:
    """Parse IR text into a verified Graph. Errors quote the offending line. verify=False skips the
    verifier's shape rules, for text flame printed from a verified graph and signed (the plan cache)."""
    stripped = [ln.strip() for ln in text.strip().splitlines()]
    lines = [ln for ln in stripped if ln and (ln[0] != "#" or _KERNEL.match(ln))]
    kernels: list[tuple[int, re.Match]] = []  # (index in g.ops where it starts, `# kernel` line)
    if not lines:
        raise ParseError("empty IR text")
    r = _Reader(lines)
    g = _header(r)
    for n, line in enumerate(lines[1:], start=1):
        if line.startswith("#"):
            kernels.append((len(g.ops), _KERNEL.match(line)))
            continue
        if line.startswith("return"):
            _parse_return(g, line[len("return") :], lambda t, n=n: r.ref(n, t))
            if n + 1 >= len(lines) or lines[n + 1] != "}":
                r.fail(n, "expected `}` after return")
            if n + 2 < len(lines):
                r.fail(n + 2, "unexpected text after the graph's closing `}`")
            break
        g.ops.append(r.op(n, line))
    else:
        raise ParseError("missing `return` line")
    if verify:
        from flame.ir.verify import verify as check

        check(g)
    if kernels:
        _groups(g, kernels)
    return g


def _header(r: _Reader) -> Graph:
    """The graph of the first line `graph NAME(%0: TYPE ROLE, ...) {`, with its inputs."""
    head = _HEADER.match(r.lines[0])
    if not head:
        r.fail(0, "expected `graph NAME(%0: TYPE ROLE, ...) {`")
    g = Graph(head.group(1))
    for p in _split_top(head.group(2)):
        m = _PARAM.match(p.strip())
        if not m:
            r.fail(0, f"bad graph input {p.strip()!r}")
        try:
            r.ids[int(m.group(1))] = g.add_input(r.type(m.group(2), m.group(3)), m.group(4))
        except (FlameError, ValueError) as e:
            r.fail(0, str(e))
    return g


def _groups(g: Graph, kernels: list) -> None:
    """Rebuild the fusion pass's groups from its `# kernel k (kind[, epilogue E][, update]): reason` lines."""
    users, outs = g.users(), set(g.outputs)
    g.groups = []
    for (start, m), (stop, _) in zip(kernels, kernels[1:] + [(len(g.ops), None)]):
        ops = tuple(g.ops[start:stop])
        inside = set(ops)
        written = tuple(op.out for op in ops if op.out in outs or any(u not in inside for u in users[op.out]))
        g.groups.append(FusionGroup(ops, Kind(m.group(1)), m.group(4), written, m.group(2) or "none", bool(m.group(3))))


def _same(raw: Any, norm: Any) -> bool:
    """Whether coercing a parsed attribute kept its meaning (1 and 1.0 do; "false" and True do not)."""
    if isinstance(raw, tuple) and isinstance(norm, (tuple, list)):
        return len(raw) == len(norm) and all(_same(a, b) for a, b in zip(raw, norm))
    if isinstance(raw, str) != isinstance(norm, str):
        return False
    if isinstance(raw, float) and isinstance(norm, float) and raw != raw:
        return norm != norm  # NaN
    return raw == norm


def _parse_return(g: Graph, text: str, ref) -> None:
    for i, item in enumerate(p for p in text.split(",") if p.strip()):
        out, _, into = item.partition("->")
        g.outputs.append(ref(out))
        if into.strip():
            target = ref(into)
            if target not in g.inputs:
                raise ParseError(f"output {i} is declared to replace {into.strip()}, which is not a graph input")
            g.aliases[i] = g.inputs.index(target)


_TYPE_TEXT = re.compile(_TYPE)


def graph_from_data(data: dict) -> Graph:
    """The graph of printer.graph_data's data: the graph parse(print_graph(g), verify=False) reads, its
    fusion groups with the outputs they had. Each distinct type and attribute text is read once, by the
    same readers as the text's; nothing is verified (the data is flame's own, signed: the plan cache).
    ParseError, or ValueError, KeyError, IndexError or TypeError, for data that is not such."""
    kinds = data["ops_kinds"]
    r = _Reader([f"{name} {{{text}}}" for name, text in kinds])  # what an attribute's error quotes
    types = []
    for text in data["types"]:
        m = _TYPE_TEXT.fullmatch(text)
        if m is None:
            raise ParseError(f"bad type {text!r}")
        types.append(r.type(m.group(1), m.group(2)))
    made = [(name, r.attributes(n, registry.get(name), f"{{{text}}}" if text else None)) for n, (name, text) in
            enumerate(kinds)]
    g = Graph(data["name"])
    values = [g.add_input(types[t], role) for t, role in data["inputs"]]
    marks = {i: CheckpointLoc("", int(region), bool(saved)) for i, region, saved in data["checkpoints"]}
    ops = g.ops
    for row in data["ops"]:
        name, attrs = made[row[0]]
        op = Op(name, tuple([values[n] for n in row[2:]]), attrs, types[row[1]], marks.get(len(ops)))
        values.append(op.out)
        ops.append(op)
    g.outputs = [values[n] for n in data["outputs"]]
    for i, j in data["aliases"]:
        if not 0 <= j < len(g.inputs) or not 0 <= i < len(g.outputs):
            raise ParseError(f"output {i} is declared to replace input {j}, which the graph does not have")
        g.aliases[i] = j
    if data["groups"] is not None:
        g.groups = [
            FusionGroup(tuple(ops[start:stop]), Kind(kind), reason, tuple([values[n] for n in outs]), epilogue,
                        bool(update))
            for start, stop, kind, reason, outs, epilogue, update in data["groups"]
        ]
    return g
