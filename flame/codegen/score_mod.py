"""An attention's score modification (flame/ir/ops/attention.py: the graph-valued attribute score_mod and
its VJP score_mod_grad) as CUDA device functions evaluated at one score element, for the flash-attention
kernels (codegen/flash_attention.py).

Every value of the graph is computed at coordinates that are C expressions of the score element's
coordinates (c0 .. c{R-1} of the scores [..., H, L, S]): an elementwise op at its operands' broadcast
coordinates (its CUDA text from the snippet table, codegen/snippets.py, each intermediate rounded to its
own dtype as the ops compute one by one), a view at the coordinates its index map gives (a reshape that
merges dims through the flat index), index_select / gather at the coordinate the index operand holds, a
positional op (arange) from its own flat index, an operand (the extras) loaded from its contiguous
buffer. The scores themselves are read only at the element. `unsupported(sub)` says what is outside."""

from __future__ import annotations

import math

from flame.codegen import cuda_c
from flame.codegen.elementwise import op_expr
from flame.codegen.snippets import prelude
from flame.ir.graph import Graph, Op, Value
from flame.ir.indexmap import broadcast, input_map
from flame.ir.registry import get


def _selects_axis(op: Op) -> int | None:
    d = get(op.name)
    return op.attrs["axis"] % op.out.type.rank if d.selects and "axis" in op.attrs else None


def unsupported(sub: Graph) -> str:
    """Why a kernel cannot evaluate graph `sub` per score element ("" if it can)."""
    for op in sub.ops:
        d = get(op.name)
        if d.random:
            return f"{op.name} draws random numbers"
        if d.category == "elementwise":
            try:
                op_expr(op, ["x"] * len(op.inputs))
            except KeyError:
                return f"{op.name} has no CUDA snippet"
        elif d.view is None and _selects_axis(op) is None:
            return f"{op.name} is not elementwise, a view or a gather"
    return ""


def _flat(coords: tuple[str, ...], shape: tuple[int, ...]) -> str:
    if not shape:
        return "0"
    strides = [math.prod(shape[k + 1 :]) for k in range(len(shape))]
    return " + ".join(f"({c}) * {st}LL" for c, st, n in zip(coords, strides, shape) if n != 1) or "0"


def _unflat(flat: str, shape: tuple[int, ...]) -> tuple[str, ...]:
    strides = [math.prod(shape[k + 1 :]) for k in range(len(shape))]
    return tuple("0" if n == 1 else f"((({flat}) / {st}LL) % {n}LL)" for st, n in zip(strides, shape))


def _mapped(m, coords: tuple[str, ...]) -> tuple[str, ...]:
    out = []
    for row, base in zip(m.rows, m.base):
        terms = [f"{a} * ({c})" if a != 1 else f"({c})" for a, c in zip(row, coords) if a]
        out.append(" + ".join(terms + ([str(base)] if base or not terms else [])))
    return tuple(out)


class ElementEmitter:
    """C statements computing values of `sub` at coordinate expressions. `inputs`: C expressions of the
    graph's inputs as (value at the element) for input 0 and (pointer name) for the others."""

    def __init__(
        self, sub: Graph, coords: tuple[str, ...], inputs: list[str], prefix: str = "m", element: tuple[Value, ...] = ()
    ):
        self.sub, self.coords, self.inputs = sub, coords, dict(zip(sub.inputs, inputs))
        self.element = {sub.inputs[0], *element}  # read at the element only (the scores, a VJP's seed)
        self.lines: list[str] = []
        self.memo: dict = {}
        self.prefix, self.count = prefix, 0

    def _fresh(self) -> str:
        self.count += 1
        return f"{self.prefix}{self.count}"

    def _bind(self, v: Value, expr: str) -> str:
        name = self._fresh()
        self.lines.append(f"const {cuda_c.compute_dtype(v.dtype).cuda_type} {name} = {expr};")
        return name

    def value(self, v: Value, coords: tuple[str, ...]) -> str:
        key = (v, coords)
        if key not in self.memo:
            self.memo[key] = self._value(v, coords)
        return self.memo[key]

    def _value(self, v: Value, coords: tuple[str, ...]) -> str:
        op = v.producer
        if v in self.inputs:
            if v in self.element:
                return self.inputs[v]
            return self._bind(v, cuda_c.load(f"{self.inputs[v]}[{_flat(coords, v.shape)}]", v.dtype))
        d = get(op.name)
        axis = _selects_axis(op)
        if axis is not None:
            return self._select(op, coords, axis)
        if d.view is not None:
            m = input_map(op, 0)
            inner = _unflat(_flat(coords, op.out.shape), op.inputs[0].shape) if m is None else _mapped(m, coords)
            return self.value(op.inputs[0], inner)
        args = [self.value(u, _mapped(broadcast(u.shape, op.out.shape), coords)) for u in op.inputs]
        expr, expr_dtype = op_expr(op, args)
        rounded = cuda_c.load(cuda_c.convert(expr, expr_dtype, op.out.dtype), op.out.dtype)
        if not d.positional:
            return self._bind(op.out, rounded)
        name = self._fresh()
        ctype = cuda_c.compute_dtype(op.out.dtype).cuda_type
        at = _flat(coords, op.out.shape)  # the snippet reads `i`, the op's own flat index
        self.lines.append(f"{ctype} {name}; {{ const long long i = {at}; {name} = {rounded}; }}")
        return name

    def _select(self, op: Op, coords: tuple[str, ...], axis: int) -> str:
        """index_select (index [n] along axis) / gather (index of the result's shape)."""
        x, index = op.inputs
        at = (coords[axis],) if index.type.rank == 1 and index.type.rank != op.out.type.rank else coords
        i = self.value(index, at)
        n = x.shape[axis]
        wrapped = f"((long long)({i}) < 0 ? (long long)({i}) + {n}LL : (long long)({i}))"
        inner = tuple(wrapped if k == axis else (c if x.shape[k] != 1 else "0") for k, c in enumerate(coords))
        return self.value(x, inner)


def device_function(sub: Graph, name: str, coords_rank: int, outputs: tuple[str, ...], seed: bool = False) -> str:
    """`__device__ void NAME(float s, long long c0, ..., const T* ex0, ...[, float g], OUT* o0, ...)`: the
    graph `sub` at one score element, its inputs after the first as pointers ex0.. (contiguous) but, with
    `seed` (a VJP graph), the last, which is a value at the element like the scores; its outputs written
    through o0.. in their compute types (`outputs`: the parameter declarations)."""
    coords = tuple(f"c{k}" for k in range(coords_rank))
    n_ptr = len(sub.inputs) - 1 - seed
    extra = [f"ex{k}" for k in range(n_ptr)]
    em = ElementEmitter(sub, coords, ["s", *extra, *(["g"] if seed else [])], element=(sub.inputs[-1],) if seed else ())
    full = sub.inputs[0].shape
    for k, out in enumerate(sub.outputs):
        em.lines.append(f"*o{k} = {em.value(out, _mapped(broadcast(out.shape, full), coords))};")
    s_type = cuda_c.compute_dtype(sub.inputs[0].dtype).cuda_type
    params = [f"{s_type} s"] + [f"long long {c}" for c in coords]
    params += [f"const {v.dtype.cuda_type}* __restrict__ {n}" for v, n in zip(sub.inputs[1:], extra)]
    if seed:
        params.append(f"{cuda_c.compute_dtype(sub.inputs[-1].dtype).cuda_type} g")
    params += [f"{decl}* o{k}" for k, decl in enumerate(outputs)]
    body = "\n".join(f"  {line}" for line in em.lines)
    return f"__device__ __forceinline__ void {name}({', '.join(params)}) {{\n{body}\n}}"


def preludes(*subs: Graph) -> str:
    """The device functions the graphs' snippets call, each once."""
    return "\n".join(x for x in dict.fromkeys(prelude(op.name, op.out.dtype) for sub in subs for op in sub.ops) if x)
