"""A compiled graph and its Plan as printable data, and back (ARCHITECTURE.md "Plans are data"): what
the persistent plan cache (flame.plan.cache) stores.

The graph travels as the IR text's pieces (flame.ir.printer.graph_data: the printer's text of each
distinct type and of each distinct op with its attributes once, each op as numbers naming them and its
inputs, each fusion group with its outputs; flame.ir.parser.graph_from_data reads it back with the
parser's readers and no regex per line), with what the text leaves out beside it: each op's `loc` (the
user's line, and whether the op is the backward's or a recomputation; each distinct one written once).
Given the trace the graph was compiled from, a loc is written as the position of the trace op whose
line it is (with the note a pass appended to it: flame.ir.locs), not as the line: read back with
another trace of the same text and layout (what the plan cache's key holds), it is that trace's line,
so a plan one program stored names the lines of the program that loads it. The plan travels as plain
data (lists, dicts, strings, numbers, None, booleans): every buffer and step is a frozen dataclass,
written field by field, with an op written as its position in the graph, a dtype by its name, a tuple
as a list and a long string (a kernel's source, which every launch of that kernel holds) once, in a
table of texts. So a loaded plan's steps read the loaded graph's ops, exactly as a plan built from
that graph would. That data is pickled (a 12-block GPT's, 1.1 MB as JSON text, in 3 ms where JSON took
11, and read in 5 where JSON took 8) and zlib-compressed; it is read back by an unpickler that looks up no
class or function (`_PlainData`), so a payload holding anything but plain data is BadPayload, and
dumps refuses to write one (NotStorable). Reading the graph back skips the
verifier's shape rules (it was written from a verified graph, and the entry is signed);
tests/plan/test_plan_load.py holds it to the verified parse of its text.

`dumps(graph, plan, trace)` raises NotStorable for anything it cannot write (a field holding a number
of a dynamic size, an op not in the graph); `loads(payload, trace)` raises BadPayload for anything it
cannot read back (damaged or foreign data, locs written for a trace of other ops)."""

from __future__ import annotations

import dataclasses
import io
import numbers
import pickle
import zlib
from functools import lru_cache

from flame.errors import FlameError
from flame.ir import locs as loc_data
from flame.ir.dtypes import DType, dtype_of
from flame.ir.graph import Graph, Op
from flame.ir.parser import graph_from_data
from flame.ir.printer import graph_data
from flame.plan.steps import ActivationBudget, Buffer, MemoryBudget, Plan, Step

FORMAT = 6  # the payload's layout; an entry of another layout is rebuilt
LONG = 256  # a string field this long (a kernel's source) is written once, in the payload's table of texts


class NotStorable(Exception):
    """The compiled graph holds something the payload has no form for (it is then not stored)."""


class BadPayload(Exception):
    """The payload does not read back as a graph and its plan."""


def _steps() -> dict[str, type]:
    """Every step type by name (the subclasses of Step that are dataclasses)."""
    found, todo = {}, [Step]
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if dataclasses.is_dataclass(cls):
            found[cls.__name__] = cls
    return found


_SELF = frozenset((int, float, bool, type(None)))  # what _enc writes as itself, by exact type


def _enc(x, ops: dict[Op, int], texts: dict[str, int]):
    """x as plain data: numbers, strings, None as themselves, tuples as lists, ops as {"o": position},
    dtypes as {"d": name}, a long string (launches of one kernel share its source) as {"s": its
    position in `texts`}."""
    t = type(x)
    if t in _SELF:  # (the common cases first, by exact type: the same answers as the general ones below)
        return x
    if t is str:
        return {"s": texts.setdefault(x, len(texts))} if len(x) >= LONG else x
    if t is tuple:
        return [v if type(v) in _SELF else _enc(v, ops, texts) for v in x]
    if t is Op:  # (a fused kernel's thousands of ops)
        at = ops.get(x)
        if at is None:
            raise NotStorable(f"a step reads op {x.name}, which is not in the graph")
        return {"o": at}
    if isinstance(x, Op):
        if x not in ops:
            raise NotStorable(f"a step reads op {x.name}, which is not in the graph")
        return {"o": ops[x]}
    if isinstance(x, DType):
        return {"d": x.name}
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, numbers.Integral) and type(x).__module__ in ("builtins", "numpy"):
        return int(x)
    if type(x) is float:
        return x
    if isinstance(x, tuple):
        return [_enc(v, ops, texts) for v in x]
    raise NotStorable(f"no stored form for {type(x).__name__} {x!r}")


_PLAIN = frozenset((int, float, str, bool, type(None)))  # stored values that decode as themselves


def _dec(x, ops: list[Op], texts: list[str]):
    """The inverse of _enc."""
    t = type(x)
    if t in _PLAIN:
        return x
    if t is list:
        return tuple([v if type(v) in _PLAIN else _dec(v, ops, texts) for v in x])
    if t is dict:
        if "o" in x:
            return ops[x["o"]]
        if "s" in x:
            return texts[x["s"]]
        if "d" in x:
            return dtype_of(x["d"])
        raise BadPayload(f"unknown stored value {x!r}")
    return x


def _fields(x, ops: dict[Op, int], texts: dict[str, int]) -> dict:
    out = {}
    for n in _names(type(x)):
        v = getattr(x, n)
        out[n] = v if type(v) in _SELF else _enc(v, ops, texts)
    return out


@lru_cache(maxsize=256)
def _names(cls: type) -> tuple[str, ...]:
    """The names of a dataclass's fields, in order."""
    return tuple(f.name for f in dataclasses.fields(cls))


def _undo(fields: dict, ops: list[Op], texts: list[str]) -> dict:
    """The inverse of _fields."""
    return {k: v if type(v) in _PLAIN else _dec(v, ops, texts) for k, v in fields.items()}


def _loc(loc) -> tuple | None:
    """An op's loc as data: (kind, text, region) (kind: flame.ir.locs.kind's code)."""
    if loc is None:
        return None
    return (loc_data.kind(loc), str(loc), getattr(loc, "region", 0))


def _stored(data: tuple | None, found: dict[str, int] | None) -> tuple | None:
    """A loc's data (_loc's) as stored: (kind, text, region, origin), where origin is -1 and text the
    loc's (no trace given, or a text no trace op's loc has), or the position of the trace op whose loc
    it derives from and text the note after that loc's first line. found: locs.origins of the trace."""
    if data is None:
        return None
    at, text = (-1, data[1]) if found is None else loc_data.origin(data[1], found)
    return (data[0], text, data[2], at)


def _unloc(data: list | None, trace: Graph | None):
    if data is None:
        return None
    code, text, region, at = data
    if at >= 0:
        text = loc_data.derived(trace.ops[at].loc, text)
    return loc_data.make(code, text, region)


def dumps(graph: Graph, plan: Plan | None, trace: Graph | None = None) -> bytes:
    """The payload of a compiled graph (after every pass) and its memory-planned plan (None: the
    graph alone, as flame.compiler.optimize_graph makes it). trace: the graph it was compiled from,
    whose ops' lines its locs are written as (loads then needs a trace of the same text and layout);
    None: the locs are written as they are. NotStorable if it has no stored form."""
    try:
        stored = graph_data(graph)
    except TypeError as e:  # an attribute the printer has no text for
        raise NotStorable(str(e)) from None
    ops = {op: i for i, op in enumerate(graph.ops)}
    numbers_ = graph.numbering()
    found = None if trace is None else loc_data.origins(trace)
    locs: dict[tuple, int] = {}  # each distinct loc once: many ops come from one line
    texts: dict[str, int] = {}
    data = {
        "format": FORMAT,
        "graph": stored,
        "locs": [locs.setdefault(_loc(op.loc), len(locs)) for op in graph.ops],
        "loc_table": [_stored(loc, found) for loc in locs],
        "trace_ops": None if trace is None else len(trace.ops),
        "plan": None if plan is None else _plan(plan, graph, ops, numbers_, texts),
        "texts": list(texts),
    }
    out = io.BytesIO()
    _PlainPickler(out, pickle.HIGHEST_PROTOCOL).dump(data)
    return zlib.compress(out.getbuffer(), 1)


class _PlainPickler(pickle.Pickler):
    """A pickler of plain data only (the containers, strings and numbers dumps makes): anything else
    is NotStorable, since loads would not read it back."""

    def reducer_override(self, obj):  # (called for all but None, booleans and exact ints, floats, strs, lists ...)
        raise NotStorable(f"no stored form for {type(obj).__name__} {obj!r}")


class _PlainData(pickle.Unpickler):
    """An unpickler of plain data: it looks up no class or function, so a payload naming one (not
    made by dumps) is refused."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"a payload names {module}.{name}; it holds plain data only")


def _plan(plan: Plan, graph: Graph, ops: dict[Op, int], numbering: dict, texts: dict[str, int]) -> dict:
    if plan.graph is not graph:
        raise NotStorable("the plan was made for another graph")
    steps = _steps()
    for s in plan.steps:
        if steps.get(type(s).__name__) is not type(s):
            raise NotStorable(f"step type {type(s).__name__} has no stored form")
    budget = plan.memory_budget
    return {
        "name": plan.name,
        "buffers": [_fields(b, ops, texts) for b in plan.buffers.values()],
        "steps": [[type(s).__name__, _fields(s, ops, texts)] for s in plan.steps],
        "inputs": list(plan.inputs),
        "outputs": list(plan.outputs),
        "arena_size": plan.arena_size,
        "buffer_of": [[numbering[v], b] for v, b in plan.buffer_of.items()],
        "memory_budget": None if budget is None else _fields(budget, ops, texts),
        "activation_budget": None if plan.activation_budget is None else _fields(plan.activation_budget, ops, texts),
        "reused": [[list(names), n] for names, n in plan.reused],
    }


def payload_data(payload: bytes) -> dict:
    """The plain data a payload made by dumps holds (what loads reads the graph and plan from); zlib.error,
    pickle.UnpicklingError, EOFError or BadPayload for what is not such a payload."""
    data = _PlainData(io.BytesIO(zlib.decompress(payload))).load()
    if type(data) is not dict:
        raise BadPayload(f"payload of {type(data).__name__}, expected a dict")
    return data


def loads(payload: bytes, trace: Graph | None = None) -> tuple[Graph, Plan | None]:
    """The graph and plan (None if the payload holds the graph alone) of a payload made by dumps, its
    locs made from `trace`'s where dumps wrote them as a trace's (trace: a graph of the same printed
    text and flame.ir.locs.layout as dumps's). BadPayload if it is not one, or if it needs a trace of
    another number of ops than `trace`'s."""
    try:
        data = payload_data(payload)
        if data.get("format") != FORMAT:
            raise BadPayload(f"payload layout {data.get('format')!r}, expected {FORMAT}")
        wanted = data["trace_ops"]
        if wanted is not None and (trace is None or len(trace.ops) != wanted):
            raise BadPayload(
                f"its locations are those of a trace of {wanted} ops, not of "
                f"{'no trace' if trace is None else f'one of {len(trace.ops)}'}"
            )
        graph = graph_from_data(data["graph"])  # written from a verified graph, and signed
        if len(data["locs"]) != len(graph.ops):
            raise BadPayload("the ops' locations do not match the graph")
        locs = [_unloc(loc, trace) for loc in data["loc_table"]]
        for op, i in zip(graph.ops, data["locs"]):
            op.loc = locs[i]
        values = graph.inputs + [op.out for op in graph.ops]
        plan = None if data["plan"] is None else _unplan(data["plan"], graph, values, data["texts"])
    except BadPayload:
        raise
    except (FlameError, ValueError, KeyError, IndexError, TypeError, AttributeError, zlib.error, EOFError,
            pickle.UnpicklingError) as e:
        raise BadPayload(f"{type(e).__name__}: {e}") from None
    return graph, plan


def _unplan(data: dict, graph: Graph, values: list, texts: list[str]) -> Plan:
    ops, steps = graph.ops, _steps()
    buffers = {}
    for fields in data["buffers"]:
        b = Buffer(**_undo(fields, ops, texts))
        buffers[b.id] = b
    made = []
    for name, fields in data["steps"]:
        if name not in steps:
            raise BadPayload(f"unknown step type {name!r}")
        made.append(steps[name](**_undo(fields, ops, texts)))
    budget, activations = data["memory_budget"], data["activation_budget"]
    return Plan(
        data["name"],
        buffers,
        made,
        list(data["inputs"]),
        list(data["outputs"]),
        data["arena_size"],
        graph,
        {values[n]: b for n, b in data["buffer_of"]},
        None if budget is None else MemoryBudget(**budget),
        None if activations is None else ActivationBudget(**_undo(activations, ops, texts)),
        tuple((tuple(names), n) for names, n in data.get("reused", ())),
    )
