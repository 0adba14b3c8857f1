"""Elementwise kernels (snippets over broadcast operands) and the affine movement ops (copies whose
input is a View of the output coordinates), both through templates/elementwise.cu.j2."""

from __future__ import annotations

from flame.codegen import cuda_c, views
from flame.codegen.kernel import (
    Kernel,
    block_for,
    finish,
    grid_for,
    header,
    index_types,
    kernel_fields,
    op_params,
    render_template,
    shape_tag,
)
from flame.codegen.snippets import prelude, snippet
from flame.codegen.views import View
from flame.ir import symbolic
from flame.ir.dtypes import DType, f64
from flame.ir.graph import Op
from flame.ir.indexmap import broadcast
from flame.ir.ops.random import unit_bits
from flame.ir.registry import get, is_fill


# ops whose expression is computed in another dtype than the output's (the store rounds once)
def _arange_dtype(op: Op) -> DType:
    """Integer arange with integer start/step and values below 2**53 is exact in its own integer type
    (the reference computes in float64, which is exact there too); otherwise float64."""
    start, stop, step = (op.attrs[k] for k in ("start", "stop", "step"))
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (start, stop, step))
    small = max(abs(start), abs(stop) + abs(step)) < 2**53 if ints else False
    return op.out.dtype if op.out.dtype.kind == "int" and ints and small else f64


_EXPR_DTYPE = {
    "arange": _arange_dtype,
    "random_uniform": lambda op: f64,
    "random_normal": lambda op: f64,
    "cast": lambda op: op.inputs[0].dtype,
}


def _arange_fields(op: Op, expr_dtype: DType) -> dict[str, str]:
    as_float = expr_dtype.kind != "int"
    return {
        key: cuda_c.literal(float(op.attrs[key]) if as_float else op.attrs[key], expr_dtype)
        for key in ("start", "step")
    }


def _triangle_fields(op: Op, expr_dtype: DType) -> dict[str, str]:
    rows, cols = op.out.shape[-2:]
    return {"rows": f"{rows}u", "cols": f"{cols}u", "k": f"{op.attrs['k']}LL"}


def _random_fields(op: Op, expr_dtype: DType) -> dict[str, str]:
    return {"bits": str(unit_bits(op.out.dtype))}


# fields an op's snippet reads beside its attributes (per-op code, as the snippets are)
_EXTRA_FIELDS = {"arange": _arange_fields, "triu": _triangle_fields, "tril": _triangle_fields,
                 "random_uniform": _random_fields, "random_normal": _random_fields}


def _fields(op: Op, expr_dtype: DType) -> dict[str, str]:
    """Attributes (and a few derived values) formatted for a snippet."""
    out: dict[str, str] = {"ctype": cuda_c.compute_dtype(expr_dtype).cuda_type}
    for key, v in op.attrs.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            out[key] = str(v)
        else:
            out[key] = cuda_c.literal(v, expr_dtype)
    if is_fill(op):
        out["value"] = cuda_c.literal(op.attrs["value"], op.out.dtype)
    extra = _EXTRA_FIELDS.get(op.name)
    if extra is not None:
        out.update(extra(op, expr_dtype))
    return out


def _variant(op: Op) -> str | None:
    return next((v for v in op.attrs.values() if isinstance(v, str)), None)


def op_expr(op: Op, operands: list[str]) -> tuple[str, DType]:
    """The CUDA expression of elementwise `op` over the operand expressions (bound to variables:
    a snippet may use one twice), and the dtype it computes in (the store rounds once from it)."""
    expr_dtype = _EXPR_DTYPE.get(op.name, lambda o: o.out.dtype)(op)
    kind = cuda_c.kind(op.inputs[-1].dtype if op.inputs else op.out.dtype)
    return snippet(op.name, kind, _variant(op)).format(*operands, **_fields(op, expr_dtype)), expr_dtype


def lower_elementwise(op: Op) -> list[Kernel]:
    """out[i] = snippet(inputs broadcast to out's shape), stored with one rounding."""
    expr, expr_dtype = op_expr(op, [f"a{k}" for k in range(len(op.inputs))])
    vs = [views.of_map(broadcast(v.shape, op.out.shape), v.shape) for v in op.inputs]
    bcast = any(v.shape != op.out.shape for v in op.inputs)
    return render_map(op, vs, expr, expr_dtype, prelude(op.name, op.out.dtype), "bcast" if bcast else "")


def render_map(
    op: Op,
    in_views: list[View],
    expr: str,
    expr_dtype: DType,
    prelude: str = "",
    tag: str = "",
    what: str = "",
    raw: bool = False,
) -> list[Kernel]:
    """One kernel computing out[i] = store(expr) where operand a_k = in_k[view_k(coords of i)].
    raw: operands stay in their storage type and expr is stored as is (pure copies)."""
    out_t = op.out.type
    n = out_t.numel
    if n == 0:
        return []
    dims, cviews = views.collapse(out_t.shape, in_views)
    inputs = []
    for k, (v, cv) in enumerate(zip(op.inputs, cviews)):
        m = views.mode(cv, dims)
        inputs.append(
            {
                "k": k,
                "mode": m,
                "stype": v.dtype.cuda_type,
                "base": cv.base,
                "ctype": v.dtype.cuda_type if raw else cuda_c.compute_dtype(v.dtype).cuda_type,
                "load": "@" if raw else cuda_c.load("@", v.dtype),
                "offset": "i" if m == "identity" else views.offset_expr(cv),
            }
        )
    general = any(x["mode"] == "general" for x in inputs)
    vec = _vec_width(op, inputs, cviews, dims)
    for x, cv in zip(inputs, cviews):
        t = f"flame_vec<{x['stype']}, {vec}>"
        if x["mode"] == "identity":
            x["vload"] = f"reinterpret_cast<const {t}*>(in{x['k']})[v]"
        elif x["mode"] == "general":  # blocked (_vec_width): one aligned run of the input at c(v * vec)
            x["vload"] = f"*reinterpret_cast<const {t}*>(in{x['k']} + {views.offset_expr(cv)})"
    aligned = " && ".join(
        [
            f"(reinterpret_cast<unsigned long long>(in{x['k']}) % {vec * op.inputs[x['k']].dtype.itemsize} == 0)"
            for x in inputs
            if x["mode"] != "scalar"
        ]
        + [f"(reinterpret_cast<unsigned long long>(out) % {vec * out_t.dtype.itemsize} == 0)"]
    )
    idx_t, off_t = index_types(n, *(v.type.numel for v in op.inputs))
    work = -(-n // vec)
    block = block_for(work)
    dtypes = {out_t.dtype, *(v.dtype for v in op.inputs)}
    source = render_template(
        "elementwise.cu.j2",
        header=header(op, what),
        **kernel_fields(dtypes, op_params(op)),
        prelude=prelude,
        block=block,
        idx_t=idx_t,
        off_t=off_t,
        n=n,
        inputs=inputs,
        dims=list(dims) if general else [],
        vec=vec,
        aligned=aligned,
        out_stype=out_t.dtype.cuda_type,
        store=expr if raw else cuda_c.convert(expr, expr_dtype, out_t.dtype),
    )
    stem = "_".join(x for x in (op.name, out_t.dtype.name, shape_tag(out_t.shape), tag) if x)
    return [finish(stem, source, grid_for(work, block), block, len(op.inputs))]


def _blocked(view: View, dims: tuple[int, ...], vec: int) -> bool:
    """Each aligned run of `vec` output elements reads `vec` consecutive, vec-aligned input elements (a
    permute that keeps the innermost dim, a slice of whole vectors, a bias broadcast along leading dims)."""
    return (
        bool(dims)
        and view.strides[-1] == 1
        and dims[-1] % vec == 0
        and view.base % vec == 0
        and all(s % vec == 0 for s in view.strides[:-1])
    )


def _vec_width(op: Op, inputs: list[dict], cviews: list[View], dims: tuple[int, ...]) -> int:
    """Elements per 16-byte vector access of the output (1: scalar code only): the widest power of two
    at which every general view is blocked."""
    walked = [op.inputs[x["k"]].dtype.itemsize for x in inputs if x["mode"] != "scalar"]
    vec = 16 // max([op.out.dtype.itemsize, *walked])
    general = [cv for x, cv in zip(inputs, cviews) if x["mode"] == "general"]
    if general and any(isinstance(d, symbolic.SymInt) for d in dims):
        return 1  # a dynamic size: no guard on its remainders (flame.ir.symbolic)
    while vec > 1 and not all(_blocked(cv, dims, vec) for cv in general):
        vec //= 2
    return 1 if op.out.type.numel < vec else vec


def lower_view(op: Op) -> list[Kernel]:
    """A view op (the OpDef's `view` trait) as an index-mapping copy: a relabel copies element i to
    element i; the others read their input through the op's index map."""
    trait = get(op.name).view
    if trait.relabel:
        view = views.identity_view(op.out.shape)
    else:
        view = views.of_map(trait.index_map(op), op.inputs[0].shape)
    return render_map(op, [view], "a0", op.out.dtype, what="index-mapping copy", raw=True)
