"""Dynamic sizes for @flame.compile: one traced graph serves every size of a dimension.

A dimension becomes dynamic after the function was traced at two sizes of it (automatic; or at the
first call, from a probe trace, with `flame.compile(fn, dynamic=True)`). The two traced graphs are
compared number by number: they must have the same structure (ops, operands, attribute keys, dtypes,
ranks), and every integer that differs between them is taken as an affine function of the size,
`a*s + b` with rational a and b (a shape `[64, 784]` -> `[s, 784]`, a reshape target `[64*12, 64]`
-> `[12*s, 64]`, a slice end `s - 1`), every float that differs as `1 / (a*s + b)` (the mean's
gradient scale). `Template.instantiate(s)` writes the graph for a new size without running the
Python function again, and checks it: each op's result type from its shape rule must be the one the
forms predict, so an integer the forms got wrong (a size squared, halved and rounded) is caught
there rather than run. What cannot be expressed raises NotDynamic with the reason; the compiled
function then specialises per size and says why in its RecompileWarning.

One symbol per template: the first dim that changed between the two traces is s0, and every other
dim that changed is an affine function of it fitted like any other number (a batch of inputs x and
labels y: both s0; tokens [s0, 4] and their flattened targets [4*s0]: a short last batch of a language
model). A call is covered when its first dim gives s0 and every other dim is its form at s0.
`str(template)` prints the graph with the symbol in its types (`f32[s0,784]`)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from flame.errors import FlameError
from flame.ir import registry
from flame.ir.graph import FusionGroup, Graph, Op, Value
from flame.ir.printer import print_graph
from flame.ir.symbolic import SymFloat, SymInt
from flame.ir.types import TensorType


class NotDynamic(FlameError):
    """The traced graphs do not make one graph with a size parameter (the message says why)."""


Dim = tuple[int, int]  # (argument position, dimension)


def changed_dims(old: dict[int, tuple], new: dict[int, tuple]) -> dict[Dim, tuple[int, int]]:
    """{(argument, dim): (old size, new size)} for the tensor arguments' dims that differ; old and
    new map argument positions to shapes of the same ranks."""
    return {(i, d): (a, b) for i, shape in old.items() for d, (a, b) in enumerate(zip(shape, new[i])) if a != b}


# ---- forms: what a number in the template is, as a function of the size s ----

@dataclass(frozen=True)
class _Affine:
    """An integer a*s + b."""

    a: Fraction
    b: Fraction

    def __post_init__(self) -> None:
        # (a, b) as ints where both are integral (the common case: int arithmetic, no Fraction's)
        ints = (int(self.a), int(self.b)) if self.a.denominator == 1 and self.b.denominator == 1 else None
        object.__setattr__(self, "_ints", ints)

    def at(self, s: int) -> int:
        ints = self._ints
        v = ints[0] * s + ints[1] if ints is not None else self.a * s + self.b
        if v < 0 or (ints is None and v.denominator != 1):
            raise NotDynamic(f"{self} is {v} at s0={s}, not a size")
        return int(v)

    def sym(self, s: int) -> SymInt:
        """The value at s as a SymInt (rendered by codegen as the size parameter)."""
        ints = self._ints
        return SymInt(self.at(s), *(ints if ints is not None else (self.a, self.b)))

    def __str__(self) -> str:
        a = "" if self.a == 1 else f"{self.a}*"
        b = "" if self.b == 0 else f"{'+' if self.b > 0 else '-'}{abs(self.b)}"
        return f"{a}s0{b}"


@dataclass(frozen=True)
class _Reciprocal:
    """A float k / (a*s + b) (k = 1: the mean's gradient scale; -1/s0 once the passes fold a sign in)."""

    n: _Affine
    k: float = 1.0
    f32: bool = False  # rounded to f32 (a constant the passes folded in f32)

    def at(self, s: int) -> float:
        v = self.k / max(self.n.at(s), 1)
        return float(np.float32(v)) if self.f32 else v

    def sym(self, s: int) -> SymFloat:
        n = max(self.n.at(s), 1)
        return SymFloat(self.at(s), self.k, SymInt(n, self.n.a, self.n.b) if n == self.n.at(s) else n, self.f32)

    def __str__(self) -> str:
        return f"1/({self.n})" if self.k == 1 else f"{self.k!r}/({self.n})"


def _affine(va: int, vb: int, sa: int, sb: int) -> _Affine:
    a = Fraction(vb - va, sb - sa)
    return _Affine(a, va - a * sa)


def _reciprocal_int(v: float) -> int | None:
    """n if v is 1/n for an integer n >= 1 (as 1.0 / n computes it), else None."""
    if not (0 < v <= 1) or not math.isfinite(v):
        return None
    n = round(1 / v)
    return n if 1.0 / n == v else None


class _Fitter:
    """Fits each number of trace B against the same number of trace A (sizes sa, sb)."""

    def __init__(self, sa: int, sb: int):
        self.sa, self.sb = sa, sb

    def fit(self, x: Any, y: Any, where: str) -> Any:
        """A form tree: x itself where x == y, an _Affine/_Reciprocal where they differ."""
        if type(x) is not type(y):
            raise NotDynamic(f"{where}: {x!r} and {y!r} are of different kinds")
        if isinstance(x, (list, tuple)):
            if len(x) != len(y):
                raise NotDynamic(f"{where}: {list(x)} and {list(y)} differ in length")
            return type(x)(self.fit(a, b, where) for a, b in zip(x, y))
        if isinstance(x, dict):
            if x.keys() != y.keys():
                raise NotDynamic(f"{where}: attributes {sorted(x)} and {sorted(y)} differ")
            return {k: self.fit(x[k], y[k], f"{where} {k}") for k in x}
        if x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y)):
            return x
        if isinstance(x, int) and not isinstance(x, bool):
            return _affine(x, y, self.sa, self.sb)
        if isinstance(x, float):
            na, nb = _reciprocal_int(x), _reciprocal_int(y)
            if na is not None and nb is not None:
                return _Reciprocal(_affine(na, nb, self.sa, self.sb))
            for k in (round(x * self.sa, 6), x * self.sa):  # k / s0: a constant the passes folded into a scale
                for f32 in (False, True):  # (folded in f32 arithmetic: rounded to f32)
                    r = _Reciprocal(_Affine(Fraction(1), Fraction(0)), k, f32)
                    if math.isfinite(k) and k != 0 and r.at(self.sa) == x and r.at(self.sb) == y:
                        return r
            raise NotDynamic(f"{where}: the constant {x!r} at size {self.sa} is {y!r} at size {self.sb}, "
                             f"neither the same nor 1/n of an affine n")
        raise NotDynamic(f"{where}: {x!r} at size {self.sa} is {y!r} at size {self.sb}")


def _at(form: Any, s: int, sym: bool = False) -> Any:
    """The form's value at s0 = s; with sym, each affine integer a SymInt (its value, rendered by
    codegen as the size parameter)."""
    kind = type(form)
    if kind is int:
        return form
    if kind is _Affine or kind is _Reciprocal:
        return form.sym(s) if sym else form.at(s)
    if kind is tuple:
        return tuple([_at(f, s, sym) for f in form])
    if kind is list:
        return [_at(f, s, sym) for f in form]
    if kind is dict:
        return {k: _at(f, s, sym) for k, f in form.items()}
    if isinstance(form, (list, tuple)):
        return type(form)(_at(f, s, sym) for f in form)
    return form


def _show(form: Any) -> str:
    if isinstance(form, (list, tuple)):
        return "[" + ", ".join(_show(f) for f in form) + "]"
    return str(form)


@dataclass(frozen=True, eq=False)
class _OpForm:
    op: Op  # the op in trace A: name, operands (by position), loc
    operands: tuple[int, ...]  # value numbers of its inputs
    attrs: dict
    shape: tuple  # the result's shape forms

    @functools.cached_property
    def sized_attrs(self) -> bool:
        return _has_form(self.attrs)

    @functools.cached_property
    def sized_shape(self) -> bool:
        return _has_form(self.shape)


def _has_form(form: Any) -> bool:
    if isinstance(form, (_Affine, _Reciprocal)):
        return True
    if isinstance(form, (list, tuple)):
        return any(_has_form(f) for f in form)
    if isinstance(form, dict):
        return any(_has_form(f) for f in form.values())
    return False


class Template:
    """A traced graph with one size symbol s0 (see the module docstring). `dims` are the
    (argument, dim) pairs that change with s0, the first (`primary`, the first changed dim unless
    given) s0 itself; `sizes` the sizes it was traced at."""

    symbol = "s0"

    def __init__(self, ga: Graph, gb: Graph, dims: dict[Dim, tuple[int, int]], primary: Dim | None = None):
        primary = min(dims) if primary is None and dims else primary
        sa, sb = dims[primary] if dims else (0, 0)
        if sa == sb:
            raise NotDynamic("no dim changed size")
        self.name, self.sizes = ga.name, (sa, sb)
        self.dims = (primary, *sorted(d for d in dims if d != primary))
        f = _Fitter(sa, sb)
        if (len(ga.inputs), len(ga.ops), len(ga.outputs)) != (len(gb.inputs), len(gb.ops), len(gb.outputs)):
            ida, idb = ga.numbering(), gb.numbering()
            differ = next(((oa, ob) for oa, ob in zip(ga.ops, gb.ops) if oa.name != ob.name
                           or tuple(ida[v] for v in oa.inputs) != tuple(idb[v] for v in ob.inputs)), None)
            at = "" if differ is None else (f" (first at {differ[0].name}" + (f", {differ[0].loc}" if differ[0].loc
                                                                             else "") + f" vs {differ[1].name})")
            raise NotDynamic(f"the traces at sizes {sa} and {sb} differ in their ops{at}: the function does "
                             f"something else at one of the sizes")
        if ga.roles != gb.roles or ga.aliases != gb.aliases:
            raise NotDynamic(f"the traces at sizes {sa} and {sb} read or update different tensors")
        self.inputs = [(r, va.dtype, f.fit(va.shape, vb.shape, f"input %{i}"))
                       for i, (r, va, vb) in enumerate(zip(ga.roles, ga.inputs, gb.inputs))]
        for i, (va, vb) in enumerate(zip(ga.inputs, gb.inputs)):
            if va.dtype != vb.dtype:
                raise NotDynamic(f"input %{i}: {va.type} at size {sa} is {vb.type} at size {sb}")
        ida, idb = ga.numbering(), gb.numbering()
        self.ops: list[_OpForm] = []
        shapes: dict = {}  # equal shape forms as one object: instantiate makes each type once per size
        for oa, ob in zip(ga.ops, gb.ops):
            where = f"%{ida[oa.out]} = {oa.name}" + (f" ({oa.loc})" if oa.loc else "")
            operands = tuple(ida[v] for v in oa.inputs)
            if (oa.name != ob.name or operands != tuple(idb[v] for v in ob.inputs)
                    or oa.out.dtype != ob.out.dtype):
                raise NotDynamic(f"{where}: the trace at size {sb} has {ob.name} here: the function takes "
                                 f"another path at that size")
            shape = f.fit(oa.out.shape, ob.out.shape, where)
            self.ops.append(_OpForm(oa, operands, f.fit(oa.attrs, ob.attrs, where), shapes.setdefault(shape, shape)))
        self.outputs = [ida[v] for v in ga.outputs]
        if self.outputs != [idb[v] for v in gb.outputs]:
            raise NotDynamic(f"the traces at sizes {sa} and {sb} return different values")
        self.aliases = dict(ga.aliases)
        self.groups = _groups(ga, gb, ida, idb, sa, sb)
        # worked out now, while compiling, rather than on the path of the first new size's call (where it
        # would cost ~5 ms of the digits MLP's first smaller batch on an H100's host)
        _ = self._program

    def size_at(self, k: int, d: int, s: int) -> int | None:
        """The size of graph input k's dim d at s0 = s (None where the form gives no size there)."""
        try:
            return _at(self.inputs[k][2][d], s)
        except NotDynamic:
            return None

    def differs(self, traced: Graph, s: int) -> str:
        """'' where `traced`, the body traced at size s, is this template's graph at s; else where they
        first differ. Two sizes cannot tell a number that is not affine in the size from a constant where
        the number is equal at both (n // 2 at sizes 2 and 3, n % 2 at 4 and 6, min(n, 4) at 5 and 7),
        so the first size a template serves is traced too and checked against it."""
        try:
            mine = print_graph(self.instantiate(s)).splitlines()
        except NotDynamic as e:
            return str(e)
        theirs = print_graph(traced).splitlines()
        line = next(((a, b) for a, b in zip(theirs, mine) if a != b), None)
        if line is None and len(mine) == len(theirs):
            return ""
        if line is None:
            return f"the trace at size {s} has {len(theirs)} lines, the template {len(mine)}"
        return f"at size {s} the trace has `{line[0].strip()}` where the template has `{line[1].strip()}`"

    def instantiate(self, s: int, symbolic: bool = False, check: bool = True) -> Graph:
        """The graph at size s0 = s, each op's result type checked against its shape rule (with its
        fusion groups, if the traced graphs had them). symbolic: the sizes are SymInts, so codegen
        renders kernels that take s0 as a parameter (flame.ir.symbolic). check=False skips the shape
        rules: for a size where the guards recorded while checking another hold (flame.plan.instance)."""
        if not check:
            return self._unchecked(s, symbolic)
        g = Graph(self.name)
        values = [g.add_input(TensorType(_at(shape, s, symbolic), dtype), role)
                  for role, dtype, shape in self.inputs]
        for f in self.ops:
            operands = tuple(values[i] for i in f.operands)
            attrs, out = self._checked(f, operands, s, symbolic)
            op = Op(f.op.name, operands, attrs, out, f.op.loc)
            g.ops.append(op)
            values.append(op.out)
        return self._finish(g, values)

    def _finish(self, g: Graph, values: list[Value]) -> Graph:
        """g (its inputs and ops made, `values` every value in order) with its outputs, aliases and
        fusion groups."""
        g.outputs = [values[i] for i in self.outputs]
        g.aliases = dict(self.aliases)
        if self.groups is not None:
            first = len(self.inputs)
            g.groups = [FusionGroup(tuple(g.ops[i - first] for i in ops), kind, reason, tuple(values[i] for i in outs),
                                    epilogue, update) for ops, kind, reason, outs, epilogue, update in self.groups]
        return g

    def _unchecked(self, s: int, symbolic: bool) -> Graph:
        """instantiate(s, symbolic, check=False) through the work list worked out once (`_program`):
        each distinct sized type made once, every op and value made without its constructor's copies
        (a new size's graph is on the path of its first call: flame.plan.instance)."""
        forms, program = self._program
        types = [TensorType(_at(shape, s, symbolic), dtype) for shape, dtype in forms]
        g = Graph(self.name)
        values = [g.add_input(TensorType(_at(shape, s, symbolic), dtype), role)
                  for role, dtype, shape in self.inputs]
        ops, append = g.ops, values.append
        new = object.__new__
        for name, operands, attrs, sized, out, loc in program:
            op = new(Op)
            op.name, op.loc = name, loc
            op.inputs = (values[operands],) if operands.__class__ is int else tuple([values[i] for i in operands])
            op.attrs = _at(attrs, s, symbolic) if sized else attrs.copy()
            v = new(Value)
            v.type, v.producer = types[out] if out.__class__ is int else out, op
            op.out = v
            ops.append(op)
            append(v)
        return self._finish(g, values)

    @functools.cached_property
    def _program(self) -> tuple[list, list]:
        """(the distinct sized (shape form, dtype) pairs, per op (name, operand numbers or the one
        operand's, attributes or their form, whether they are sized, the result's type or the number
        of its sized pair, loc)): what _unchecked does per size, worked out once."""
        forms: list = []
        slot: dict[tuple, int] = {}
        program = []
        for f in self.ops:
            out: TensorType | int = f.op.out.type
            if f.sized_shape:
                key = (id(f.shape), f.op.out.dtype)
                if key not in slot:
                    slot[key] = len(forms)
                    forms.append((f.shape, f.op.out.dtype))
                out = slot[key]
            operands = f.operands[0] if len(f.operands) == 1 else f.operands
            program.append((f.op.name, operands, f.attrs, f.sized_attrs, out, f.op.loc))
        return forms, program

    def _checked(self, f: _OpForm, operands: tuple, s: int, symbolic: bool) -> tuple[dict, TensorType]:
        """The op's attributes at s and its result type from its shape rule, which must be the forms'."""
        attrs = _at(f.attrs, s, symbolic)
        try:
            out = registry.get(f.op.name).infer([v.type for v in operands], **attrs)
        except (FlameError, TypeError, ValueError, IndexError, KeyError, ArithmeticError) as e:
            raise NotDynamic(f"{self._line(f)} at s0={s}: {e}") from None
        want = TensorType(_at(f.shape, s, symbolic), out.dtype)
        if out != want:
            raise NotDynamic(f"{self._line(f)} at s0={s}: its shape rule gives {out}, the traced sizes "
                             f"predict {want} (a size that is not affine in s0)")
        return attrs, out

    def _line(self, f: _OpForm) -> str:
        return f"{f.op.name}" + (f" ({f.op.loc})" if f.op.loc else "")

    def __str__(self) -> str:
        """The graph as traced at the first size, each symbolic number printed as its form."""
        return print_graph(self._symbolic())

    def _symbolic(self) -> Graph:
        g = self.instantiate(self.sizes[0])  # same structure; shapes and attributes then replaced
        types = [shape for _, _, shape in self.inputs] + [f.shape for f in self.ops]
        for v, shape in zip(g.inputs + [op.out for op in g.ops], types):
            v.type = _SymbolicType(shape, v.type.dtype)
        for op, f in zip(g.ops, self.ops):
            op.attrs = _symbolic_attrs(f.attrs)
        return g


def _groups(ga: Graph, gb: Graph, ida: dict, idb: dict, sa: int, sb: int) -> list[tuple] | None:
    """The fusion groups of ga as (op value numbers, kind, reason, output value numbers, epilogue, update),
    checked to be gb's; the reason is ga's (it may quote sizes, and only explains)."""
    if ga.groups is None and gb.groups is None:
        return None
    shape = [(tuple(ida[op.out] for op in grp.ops), grp.kind, tuple(ida[v] for v in grp.outputs), grp.epilogue,
              grp.update) for grp in ga.groups or ()]
    other = [(tuple(idb[op.out] for op in grp.ops), grp.kind, tuple(idb[v] for v in grp.outputs), grp.epilogue,
              grp.update) for grp in gb.groups or ()]
    if ga.groups is None or gb.groups is None or shape != other:
        at = next((f"first at %{a[0][0]}" for a, b in zip(shape, other) if a != b), "")
        raise NotDynamic(f"the fusion pass grouped the ops differently at sizes {sa} and {sb}"
                         + (f" ({at})" if at else ""))
    return [(ops, kind, grp.reason, outs, epi, up) for (ops, kind, outs, epi, up), grp in zip(shape, ga.groups)]


class _Shown(int):
    """An attribute form that prints as s0's expression (only for Template.__str__: the printer
    writes an int attribute with str())."""

    def __new__(cls, form):
        obj = super().__new__(cls, 0)
        obj.form = form
        return obj

    def __str__(self) -> str:
        return _show(self.form)


def _symbolic_attrs(form: Any) -> Any:
    if isinstance(form, (_Affine, _Reciprocal)):
        return _Shown(form)
    if isinstance(form, (list, tuple)):
        return type(form)(_symbolic_attrs(f) for f in form)
    if isinstance(form, dict):
        return {k: _symbolic_attrs(f) for k, f in form.items()}
    return form


class _SymbolicType:
    """A TensorType look-alike whose shape may hold s0 forms, printed as f32[s0,784]."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype

    def __str__(self) -> str:
        return f"{self.dtype.name}[{','.join(str(s) for s in self.shape)}]"
