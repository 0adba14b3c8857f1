"""A dynamic-size template of a compiled function (flame.frontend.dynamic's Template) with the traced
entry it serves sizes for: which calls it covers (their signatures' family and sizes), the optimised
graphs and plan template it learns, and whether the first size it served was checked against a trace
(docs/compile_model.md, Dynamic sizes)."""

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flame.compiler import plan_template
from flame.frontend.dynamic import NotDynamic, Template
from flame.ir.graph import Graph

if TYPE_CHECKING:
    from flame.plan.instance import PlanTemplate

log = logging.getLogger("flame")


def family(key: tuple) -> tuple:
    """A signature with each tensor's shape replaced by its rank: the calls one template can serve."""
    return tuple(("T", len(k[1]), *k[2:]) if k[0] == "T" else k for k in key)


def made_constants_differ(a: Any, b: Any, sizes: tuple[int, int]) -> str:
    """'' where the tensors traces a and b (of one function at sizes `sizes`) bind as constant inputs
    that each made itself (a tensor of Python or NumPy values made in the body, a distinct object in
    each trace: a captured one is the same object in both) hold the same values; else which first
    differs. A template binds the values its base trace made at every size, so such a tensor that
    depends on the size (`flame.tensor(float(n))`, `flame.tensor(np.arange(n))`) cannot be dynamic."""
    for k, (x, y) in enumerate(zip(a.bindings, b.bindings)):
        if x.kind != "tensor" or y.kind != "tensor" or x.tensor is y.tensor:
            continue
        u, v = x.tensor, y.tensor
        if u.shape == v.shape and u.dtype == v.dtype and u.numpy().tobytes() == v.numpy().tobytes():
            continue
        read = next((op for op in b.graph.ops if b.graph.inputs[k] in op.inputs), None)
        at = f" (read by {read.name} at {read.loc})" if read is not None and read.loc else ""
        shown = "values" if u.shape == v.shape else "shapes"
        return (f"input %{k}{at}, a tensor made in the body from Python values, has other {shown} at sizes "
                f"{sizes[0]} and {sizes[1]} ({_brief(u)} vs {_brief(v)}): a constant cannot follow the size "
                f"(make it from the arguments with flame ops, e.g. flame.arange(x.shape[0]))")
    return ""


def _brief(t: Any) -> str:
    values = t.numpy().reshape(-1)
    shown = ", ".join(map(str, values[:4].tolist())) + (", ..." if values.size > 4 else "")
    return f"{t.dtype.name}{list(t.shape)} [{shown}]"


def shapes_of(key: tuple) -> dict[int, tuple]:
    """{argument position: shape} of a signature's tensor arguments."""
    return {i: k[1] for i, k in enumerate(key) if isinstance(k, tuple) and k[:1] == ("T",)}


@dataclass(eq=False)
class SizeTemplate:
    """A template (flame.frontend.dynamic) and the traced entry whose Python-side facts (output
    structure, .grad targets, bindings, guards) every size instantiated from it shares."""

    template: Template
    base: Any  # flame.frontend.compile's entry of the traced call
    instances: int = 0
    checked: bool = False  # the first size it served was traced too, and the trace was its graph there
    planned: Template | None = None  # the optimised graphs' template: a new size is only planned
    plans: PlanTemplate | None = None  # planned's plan at every size (made once, when planned is learned)
    not_planned: str = ""  # why there is none (a new size then runs the passes and compiles)
    optimised: list = dataclasses.field(default_factory=list)  # the passes' graphs at sizes so far
    sources: set = dataclasses.field(default_factory=set)  # kernel sources compiled for its sizes so far

    def learn(self, graph: Graph, budget: float | None) -> None:
        """Fit the graph the passes made at one size against those made at the sizes before (a dim
        equal to s0 at one size may be fused otherwise there) into `planned`, or say why not (`budget`:
        a memory or activation budget, which plans what to recompute per size)."""
        if budget is not None:
            self.not_planned = "a memory or activation budget plans what to recompute per size"
            return
        for other in self.optimised:
            dims = {(k, d): (other.inputs[k].shape[d], graph.inputs[k].shape[d]) for k, d in self.input_dims}
            try:
                self.planned = Template(other, graph, dims, primary=self.input_dims[0])
            except NotDynamic as e:
                self.not_planned = f"the optimised graphs at two sizes differ: {e}"
                log.info("flame.compile: %s: %s", graph.name, self.not_planned)
                continue
            planned = self.planned
            try:
                # recording and checking (check) need SymInts; a size served by a recorded plan needs the
                # graph's numbers only (the plan's are evaluated from its forms), as plain ints: cheaper
                self.plans = plan_template(
                    lambda s, check, planned=planned: planned.instantiate(s, symbolic=check, check=check),
                    planned.sizes)
            except NotDynamic as e:
                self.planned, self.not_planned = None, f"the optimised graph cannot be planned at its sizes: {e}"
                log.info("flame.compile: %s: %s", graph.name, self.not_planned)
                continue
            return
        self.optimised.insert(0, graph)

    @functools.cached_property
    def input_dims(self) -> tuple:
        """The template's (argument, dim) pairs as (graph input, dim) pairs."""
        at = {b.arg: k for k, b in enumerate(self.base.trace.bindings) if b.kind == "arg"}
        return tuple((at[i], d) for i, d in self.template.dims)

    def size_of(self, key: tuple) -> int | None:
        """The size s0 takes in a call with this signature, or None if the template does not cover it
        (another dim changed, or a dim that follows s0 is not its form at this s0)."""
        if family(key) != self.base.family:
            return None
        shapes, base, dims = shapes_of(key), self.base.shapes, self.template.dims
        (i0, d0), *others = dims
        s = shapes[i0][d0]
        if any(shapes[i][d] != self.template.size_at(k, d, s)
               for (i, d), (k, _) in zip(others, self.input_dims[1:])):
            return None
        if any(shapes[i][d] != n for i, shape in base.items() for d, n in enumerate(shape) if (i, d) not in dims):
            return None
        return s

    def describe(self) -> str:
        t = self.template
        forms = [str(t.inputs[k][2][d]) for k, d in self.input_dims]
        dims = ", ".join(f"argument {i} dim {d}" + ("" if form == t.symbol else f" = {form}")
                         for (i, d), form in zip(t.dims, forms))
        return f"{dims} ({self.template.symbol} = {', '.join(map(str, self.template.sizes))}, ...)"
