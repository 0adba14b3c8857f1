"""The verifier: rejects malformed graphs with the offending IR line in the message."""

from __future__ import annotations

from collections.abc import Callable

from flame.errors import FlameError, VerifyError
from flame.ir import registry
from flame.ir.dtypes import DType
from flame.ir.graph import ROLES, Graph, Op, Value
from flame.ir.printer import format_attr, format_op

_PRINTABLE = frozenset((int, float, bool, str, type(None), DType))  # attribute values format_attr always prints


def verify(g: Graph, shape_rules: bool = True) -> Graph:
    """Check use-before-definition, unknown ops, arity, attributes, types, outputs and aliases.
    Returns g so it can sit in a pipeline. shape_rules=False: every op of g came from a Builder, which
    looked the op up, checked its arity, normalised its attributes and ran its shape rule as it appended
    it (a traced graph): those are not done again; the rest is (a value from another graph or not yet
    defined, an attribute the IR text has no form for, the inputs' roles, the outputs and aliases)."""
    defined: set[Value] = set()
    if len(g.roles) != len(g.inputs):
        raise VerifyError(f"graph {g.name}: {len(g.inputs)} inputs but {len(g.roles)} roles")
    for v, role in zip(g.inputs, g.roles):
        if role not in ROLES:
            raise VerifyError(f"graph {g.name}: input %{g.numbering()[v]} has unknown role {role!r}")
        defined.add(v)

    def bad(why: str, op: Op) -> VerifyError:
        # the line as it reads at this point (values not yet defined unnumbered), built only for an
        # error: a map per op would make verifying quadratic in the graph's size
        shown = {v: i for v, i in g.numbering().items() if v in defined or v is op.out}
        return VerifyError(f"{why}\n  {format_op(op, shown, loc=True)}")

    for op in g.ops:
        try:
            for v in op.attrs.values():
                if type(v) not in _PRINTABLE:
                    format_attr(v)  # what the op's line prints of its attributes
        except TypeError as e:  # an attribute value the IR text has no form for
            raise VerifyError(f"graph {g.name}: {op.name} has an attribute that is not IR data ({e})") from None
        if op.out in defined:
            raise bad("value defined twice", op)
        if not defined.issuperset(op.inputs):
            raise bad("use of a value before its definition", op)
        if shape_rules:
            _check_rule(op, bad)
        elif not op.inputs and registry.get(op.name).arity < 0:
            raise bad(f"{op.name} needs at least one input", op)
        defined.add(op.out)

    def ret() -> str:  # the return line, made only for an error
        return _return_line(g, g.numbering())

    for i, v in enumerate(g.outputs):
        if v not in defined:
            raise VerifyError(f"graph {g.name}: output {i} is not defined in the graph\n  {ret()}")
    if len(set(g.aliases.values())) != len(g.aliases):
        raise VerifyError(f"graph {g.name}: two outputs replace the same input\n  {ret()}")
    for o, i in g.aliases.items():
        if not (0 <= o < len(g.outputs) and 0 <= i < len(g.inputs)):
            raise VerifyError(f"graph {g.name}: alias {o} -> {i} is out of range\n  {ret()}")
        if g.outputs[o].type != g.inputs[i].type:
            raise VerifyError(
                f"graph {g.name}: output {o} ({g.outputs[o].type}) cannot replace "
                f"input %{g.numbering()[g.inputs[i]]} ({g.inputs[i].type})\n  {ret()}"
            )
    return g


def _check_rule(op: Op, bad: Callable[[str, Op], VerifyError]) -> None:
    """op's name, arity, attributes (in normal form) and result type against its declaration (`bad(why, op)`:
    the error quoting op's line)."""
    try:
        opdef = registry.get(op.name)
    except VerifyError as e:
        raise bad(str(e), op) from None
    if opdef.arity >= 0 and len(op.inputs) != opdef.arity:
        raise bad(f"{op.name} takes {opdef.arity} inputs, got {len(op.inputs)}", op)
    if opdef.arity < 0 and not op.inputs:
        raise bad(f"{op.name} needs at least one input", op)
    try:
        attrs = opdef.normalize_attrs(op.attrs)
        if attrs != op.attrs:
            raise VerifyError(f"attributes {op.attrs} are not in normal form {attrs}")
        want = opdef.infer([v.type for v in op.inputs], **attrs)
    except FlameError as e:
        raise bad(f"{op.name}: {e}", op) from None
    except (TypeError, ValueError, IndexError, KeyError, ArithmeticError) as e:
        # a shape rule meeting attributes or types it never expected (parsed text, a buggy pass)
        raise bad(f"{op.name}: invalid attributes or input types ({type(e).__name__}: {e})", op) from None
    if want != op.out.type:
        raise bad(f"{op.name}: result type should be {want}, not {op.out.type}", op)


def _return_line(g: Graph, ids: dict[Value, int]) -> str:
    """The `return ...` line as printed, with %? for unknown values and out-of-range alias targets."""
    items = []
    for o, v in enumerate(g.outputs):
        item = f"%{ids[v]}" if v in ids else "%?"
        if o in g.aliases:
            i = g.aliases[o]
            item += f" -> %{ids[g.inputs[i]]}" if 0 <= i < len(g.inputs) else f" -> input {i}?"
        items.append(item)
    return "return" + (" " + ", ".join(items) if items else "")
