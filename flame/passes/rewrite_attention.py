"""Recognise attention written by hand and make it ONE scaled_dot_product_attention op (ARCHITECTURE.md
"Patterns become ops").

The pattern, read from the value matmul backwards:

    s = q @ kT                       kT: k.transpose(-1, -2), or anything (k is then kT transposed back)
    s = s * c | s / c                optional scaling by a constant, on s, on q or on kT
    s = s + mask                     additive mask, or
    s = where(keep, s, -inf)         boolean mask (where(drop, -inf, s) too), or a constant mask that
                                     equals PyTorch's causal tril(ones(L, S)): becomes is_causal=True
    p = softmax(s, -1)               as F.softmax decomposes: exp(s - stop_gradient(max s)) / sum,
                                     possibly in f32 between casts (s.float().softmax(-1).to(v.dtype))
    out = p @ v

It is rewritten only when the scores and probabilities have no reader outside the pattern (and are
neither graph outputs nor autodiff targets), so nothing else needs them. An additive mask that needs a
gradient (a learned bias) keeps it: the attention op's VJP gives it. A row whose keys are all masked
out gives 0 from the op (as torch's SDPA) where the hand-written softmax gives NaN, so a mask that may
empty a row adds the softmax's NaN (value and gradients) to the op's result (_nan_rows). A mask found in a
where (is_causal or a bool mask input) makes the op's where_mask true: a dropped score's gradient is 0,
as the where's, also where the result's gradient is not finite (flame/ir/ops/attention.py).

The rewritten op keeps the value matmul's result value and its source line, with REWRITE_NOTE
appended to the line's text, so dumps and `flame explain` say where the op came from.
`rewrite_attention` is the pipeline pass; `rewrite_attention_in_place` is what autodiff runs on a
graph that is still being traced (it edits ops in place and leaves the dead pattern to DCE, so
tensors the trace still holds stay valid)."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import numpy as np

from flame.errors import FlameError
from flame.ir.builder import Builder
from flame.ir.evaluate import compute_op, constant_value
from flame.ir.graph import Graph, Op, SubGraph, Value
from flame.ir.ops.elementwise import ADD, DIV, MUL
from flame.ir.ops.linalg import MATMUL
from flame.ir.registry import REGISTRY
from flame.passes import _score_chain
from flame.passes._rewrite import annotate_loc, full_value
from flame.passes.dce import eliminate_dead_code

Differentiate = Callable[[Graph], Graph]  # a score modification's graph -> its VJP graph (the autodiff pass)

OP = "scaled_dot_product_attention"
REWRITE_NOTE = "[rewrite_attention: attention written by hand -> one scaled_dot_product_attention]"
MAX_MASK_EVAL = 1 << 22  # constant masks up to this many elements are evaluated to detect causality
ROWS_AT_ONCE = 1 << 20  # a larger mask comparing query and key positions is checked this many elements at a time


@dataclass
class _Match:
    q: Value
    kt: Value
    v: Value
    scale: float = 1.0
    mask: Value | None = None
    mask_kind: str = ""  # "additive", "keep" (True takes part) or "drop" (True is masked out)
    inner: list[Op] = field(default_factory=list)  # the pattern's ops whose results must stay private


def _producer(v: Value, *names: str) -> Op | None:
    op = v.producer
    return op if op is not None and op.name in names else None


def _constant_factor(op: Op, operand: Value) -> float | None:
    """c when op is `operand * c`, `c * operand` or `operand / c` with c a one-element constant."""
    other = [v for v in op.inputs if v is not operand]
    if len(other) != 1 or other[0].type.numel != 1 or (op.name == DIV.name and op.inputs[0] is not operand):
        return None
    c = full_value(other[0])
    if c is None or not np.isfinite(c) or c == 0:
        return None
    return float(c) if op.name == MUL.name else 1.0 / float(c)


def _scaling(v: Value) -> tuple[Value, float, tuple[Op, ...]] | None:
    """(x, c, ops) when v = op(x, c) scales x by a constant c without broadcasting x, or is such a scaling
    computed in f32 and rounded back once, cast(op(cast(x, f32), c), x's dtype) (a half-precision tensor
    scaled by a Python number as PyTorch computes it), else None."""
    outer = _producer(v, "cast")
    if outer is not None:
        got = _scaling(outer.inputs[0])
        widen = _producer(got[0], "cast") if got is not None else None
        if widen is None or widen.inputs[0].type != v.type:
            return None
        return widen.inputs[0], got[1], (outer, *got[2], widen)
    op = _producer(v, "mul", "div")
    for x in op.inputs if op is not None else ():
        c = _constant_factor(op, x)
        if c is not None and x.type == op.out.type:
            return x, c, (op,)
    return None


def _peel_scale(v: Value, m: _Match) -> Value:
    """v without a scaling by a constant (the factor goes into m.scale)."""
    got = _scaling(v)
    if got is None:
        return v
    x, c, ops = got
    m.scale *= c
    m.inner.extend(ops)
    return x


def _scaled_reader(v: Value, users: dict) -> tuple[Value, float, tuple[Op, ...]] | None:
    """(y, c, ops) when v's one reader starts a scaling of v by a constant c (see _scaling) ending at y."""
    y = v
    for _ in range(3):  # a scaling, or a cast, a scaling and a cast back
        readers = users.get(y, ())
        if len(readers) != 1:
            return None
        y = readers[0].out
        got = _scaling(y)
        if got is not None and got[0] is v:
            return y, got[1], got[2]
    return None


def _scores(v: Value) -> bool:
    """v is q @ kT, possibly scaled: the operand of a mask that is not the mask."""
    got = _scaling(v)
    return _producer(got[0] if got else v, "matmul") is not None


def _softmax_input(p: Value, inner: list[Op]) -> Value | None:
    """x when p = exp(x - [stop_gradient](max x)) / sum(...) over the last axis, keepdim."""
    div = _producer(p, "div")
    exp = div and _producer(div.inputs[0], "exp")
    total = div and _producer(div.inputs[1], "reduce_sum")
    sub = exp and _producer(exp.inputs[0], "sub")
    if not (sub and total and total.inputs[0] is exp.out and _last_axis(total)):
        return None
    x, shift = sub.inputs
    sg = _producer(shift, "stop_gradient")
    mx = _producer(sg.inputs[0] if sg else shift, "reduce_max")
    if mx is None or mx.inputs[0] is not x or not _last_axis(mx) or x.type != p.type:
        return None
    inner.extend(o for o in (div, exp, total, sub, sg, mx) if o is not None)
    return x


def _peel_gradient_form(v: Value) -> tuple[Value, Value | None]:
    """(y, form) when v = straight_through(form, y): a half-precision softmax whose gradient is that of a
    form made from y and the softmax's input (frontend/functional.py); else (v, None)."""
    op = _producer(v, "straight_through")
    return (op.inputs[1], op.inputs[0]) if op is not None else (v, None)


def _form_ops(form: Value, ends: set[Value], inner: list[Op]) -> bool:
    """Add to inner the straight_through and the ops computing form from the values `ends` only (the
    softmax's input, result and intermediates: elementwise work, reductions and views); False when form
    reads anything else."""
    seen: set[int] = set()
    stack = [form]
    while stack:
        v = stack.pop()
        if v in ends or id(v) in seen:
            continue
        seen.add(id(v))
        op = v.producer
        if op is None or REGISTRY[op.name].category in ("matmul", "library", "opaque"):
            return False  # a graph input, or work that is no part of a softmax's gradient form
        inner.append(op)
        stack.extend(op.inputs)
    return True


def _peel_cast(v: Value, inner: list[Op]) -> Value:
    """v without a cast between float types (mixed precision: the softmax runs in f32)."""
    op = _producer(v, "cast")
    if op is None or not (op.inputs[0].dtype.is_float and v.dtype.is_float):
        return v
    inner.append(op)
    return op.inputs[0]


def _last_axis(op: Op) -> bool:
    rank = op.inputs[0].type.rank
    return op.attrs["keepdim"] and tuple(a % rank for a in op.attrs["axes"]) == (rank - 1,)


def _peel_mask(x: Value, m: _Match) -> Value:
    """x without an additive mask or a where(-inf) mask (recorded in m)."""
    op = _producer(x, "add", "where")
    if op is None:
        return x
    if op.name == ADD.name:
        for s, mask in (op.inputs, op.inputs[::-1]):
            if s.type == x.type and _scores(s):
                m.mask, m.mask_kind = mask, "additive"
                m.inner.append(op)
                return s
        return x
    cond, a, b = op.inputs
    for s, fill, kind in ((a, b, "keep"), (b, a, "drop")):
        value = full_value(fill)
        if s.type == x.type and value is not None and np.isneginf(value):
            m.mask, m.mask_kind = cond, kind
            m.inner.append(op)
            return s
    return x


def _match(op: Op) -> _Match | None:
    """The attention pattern ending at value matmul `op`, or None."""
    p, v = op.inputs
    inner: list[Op] = [op]
    p, form = _peel_gradient_form(p)
    if form is not None:
        inner.append(op.inputs[0].producer)
    y = p
    p = _peel_cast(p, inner)
    x = _softmax_input(p, inner)
    if x is None:
        return None
    if p.dtype != v.dtype:
        x = _peel_cast(x, inner)
        if x.dtype != v.dtype:
            return None
    if form is not None and not _form_ops(form, {y, x, *(o.out for o in inner)}, inner):
        return None
    m = _Match(x, x, v, inner=inner)
    x = _peel_scale(x, m)
    before = len(m.inner)
    x = _peel_mask(x, m)
    if len(m.inner) > before and m.mask_kind == "additive" and m.scale != 1.0:
        return None  # (s + mask) * c scales the mask too: not what SDPA computes
    if m.scale <= 0:
        return None  # where(-inf) then a negative scale is not a mask any more
    x = _peel_scale(x, m)
    mm = _producer(x, "matmul")
    if mm is None:
        return None
    m.inner.append(mm)
    m.q, m.kt = _peel_scale(mm.inputs[0], m), _peel_scale(mm.inputs[1], m)
    return m


def _private(m: _Match, users: dict[Value, list[Op]], keep: Collection[Value]) -> bool:
    """Every intermediate result of the pattern is read only inside it."""
    ops = set(m.inner)
    final = m.inner[0]
    return all(o is final or (o.out not in keep and all(u in ops for u in users.get(o.out, ())))
               for o in ops)


def _constant(v: Value, g: Graph) -> np.ndarray | None:
    """v's value when it depends on no graph input and is small enough to evaluate, else None."""
    return constant_value(g, v, MAX_MASK_EVAL)


def _is_causal(mask: np.ndarray, kind: str, length: int, keys: int) -> bool:
    """The mask equals PyTorch's is_causal: key j takes part in query i's row iff j <= i."""
    tril = np.tril(np.ones((length, keys), bool))
    full = np.broadcast_to(mask, mask.shape[:-2] + (length, keys))
    if kind == "keep":
        return bool(np.all(full == tril))
    if kind == "drop":
        return bool(np.all(full == ~tril))
    return bool(np.all(np.where(tril, full == 0, np.isneginf(full))))


# mask value -> {(kind, length, keys): whether it is causal}: a value's constant is fixed by the ops it is
# computed from, and a model's layers share one mask (each would evaluate it twice: the match, the rewrite)
_CAUSAL: weakref.WeakKeyDictionary[Value, dict[tuple, bool]] = weakref.WeakKeyDictionary()


def _constant_causal(cond: Value, kind: str, g: Graph, length: int, keys: int) -> bool:
    """cond is a constant mask equal to PyTorch's is_causal (_constant_causal_now, remembered per value)."""
    known = _CAUSAL.setdefault(cond, {})
    found = known.get((kind, length, keys))
    if found is None:
        found = known[kind, length, keys] = _constant_causal_now(cond, kind, g, length, keys)
    return found


def _constant_causal_now(cond: Value, kind: str, g: Graph, length: int, keys: int) -> bool:
    """cond is a constant mask equal to PyTorch's is_causal: evaluated whole when it is small, and a
    block of query rows at a time when it is an elementwise comparison of a per-query column with a
    per-key row (arange(L)[:, None] >= arange(S)[None, :] at any length)."""
    const = _constant(cond, g)
    if const is not None:
        return _is_causal(const, kind, length, keys)
    op = cond.producer
    if kind == "additive" or op is None or len(op.inputs) != 2 or REGISTRY[op.name].category != "elementwise":
        return False
    args = [_constant(x, g) for x in op.inputs]
    if any(x is None or x.ndim < 2 or 1 not in x.shape[-2:] for x in args):
        return False
    step = max(1, ROWS_AT_ONCE // max(keys, 1))
    for r in range(0, length, step):
        rows = [x[..., r : r + step, :] if x.shape[-2] == length else x for x in args]
        block = compute_op(op, rows, np.broadcast_shapes(*(x.shape for x in rows)))
        tril = np.arange(r, min(r + step, length))[:, None] >= np.arange(keys)[None, :]
        full = np.broadcast_to(block, block.shape[:-2] + tril.shape)
        if not np.all(full == (tril if kind == "keep" else ~tril)):
            return False
    return True


def _causal_mask(m: _Match, g: Graph, length: int, keys: int) -> bool:
    """m's mask is a constant equal to PyTorch's is_causal."""
    return m.mask is not None and _constant_causal(m.mask, m.mask_kind, g, length, keys)


def _keys(b: Builder, kt: Value) -> Value:
    """k from k^T: the permute's input when kt swaps the last two axes of a value, else a transpose."""
    kt_op = _producer(kt, "permute")
    rank = kt.type.rank
    swaps_last = kt_op is not None and tuple(kt_op.attrs["perm"]) == (*range(rank - 2), rank - 1, rank - 2)
    return kt_op.inputs[0] if swaps_last else b.transpose_last(kt)


def _emit(m: _Match, op: Op, g: Graph, gradients: bool) -> tuple[list[Op], dict] | None:
    """The helper ops to insert before `op` and op's new inputs and attributes, or None if the op's
    shape rule refuses (batch dimensions that only broadcast, ranks that differ ...). `gradients`: the
    result is still to be differentiated (_nan_rows)."""
    scratch = Graph()
    b = Builder(scratch, op.loc)
    k = _keys(b, m.kt)
    mask, causal = m.mask, False
    if mask is not None:
        causal = _causal_mask(m, g, *op.inputs[0].shape[-2:])
        mask = None if causal else b.logical_not(mask) if m.mask_kind == "drop" else mask
    attrs = {"scale": m.scale, "is_causal": causal, "enable_gqa": False, "where_mask": m.mask_kind in ("keep", "drop")}
    empty_rows = mask is not None and op.inputs[0].shape[-1] > 0  # (no keys: zeros, as the softmax's)
    return _emitted(scratch, b, op, (m.q, k, m.v, *(() if mask is None else (mask,))), attrs,
                    (lambda out: _nan_rows(b, m, mask, out, gradients)) if empty_rows else None)


def _nan_rows(b: Builder, m: _Match, mask: Value, out: Value, gradients: bool) -> Value:
    """out with NaN in the rows whose keys the mask takes out, as the hand-written softmax gives
    (exp(-inf - -inf)), where the attention op gives 0; the term's gradient is NaN where that softmax's
    is: v's always, and for an additive mask q's row, all of k's and the mask's row (a where's gradient
    is 0 at a dropped score, so there q's and k's stay finite); without `gradients`, the NaN alone."""
    dt = out.dtype
    taken = b.cast(mask, dtype=dt) if mask.dtype != dt else mask  # keep (True takes part) or additive
    row = b.reduce_max(taken, axes=[-1], keepdim=True)
    empty = b.eq(row, float("-inf") if m.mask_kind == "additive" else 0.0)
    nan = b.where(empty, float("nan"), b.const(0.0, dt))  # times a where, so that the gradient is 0 in other rows
    if not gradients:
        return b.add(out, nan)
    parts = [b.reduce_sum(m.v, axes=[-2], keepdim=True)]
    if m.mask_kind == "additive":
        parts += [b.reduce_sum(m.q, axes=[-1], keepdim=True), b.reduce_sum(m.kt, axes=[-2, -1], keepdim=True),
                  b.reduce_sum(mask, axes=[-1], keepdim=True)]
    total = parts[0]
    for x in parts[1:]:
        total = b.add(total, b.cast(x, dtype=dt) if x.dtype != dt else x)
    return b.add(out, b.mul(nan, b.where(empty, total, 0.0)))


def _emitted(scratch: Graph, b: Builder, op: Op, inputs: tuple, attrs: dict,
             then: Callable[[Value], Value] | None = None) -> tuple[list[Op], dict] | None:
    """The ops making op's new value (the attention op, then `then` of its result when given): the ops to
    insert before op, and op's new name, inputs and attributes."""
    try:
        out = b.emit(OP, *inputs, **attrs)
        if then is not None:
            out = then(out)
    except FlameError:
        return None
    if out.type != op.out.type:
        return None
    new = scratch.ops.pop()
    return scratch.ops, {"name": new.name, "inputs": new.inputs, "attrs": new.attrs}


def _find_matmul(x: Value) -> Op | None:
    """The one matmul of x's shape that x is computed from through elementwise ops of its shape."""
    found, seen, stack = [], set(), [x]
    while stack:
        v = stack.pop()
        op = v.producer
        if v in seen or op is None or v.shape != x.shape:
            continue
        seen.add(v)
        if op.name == MATMUL.name:
            found.append(op)
        elif _score_chain._elementwise(op):
            stack.extend(op.inputs)
    return found[0] if len(found) == 1 else None


def _match_chain(op: Op, g: Graph, users: dict) -> tuple[_Match, _score_chain.Chain, Value] | None:
    """The attention pattern ending at value matmul `op` with a score modification between the scaled
    scores and the softmax: (match, chain, the scaled scores), or None."""
    p, v = op.inputs
    inner: list[Op] = [op]
    y, form = _peel_gradient_form(p)
    if form is not None:
        inner.append(p.producer)
    x = _softmax_input(_peel_cast(y, inner), inner)
    if form is not None and x is not None:
        w = x
        x = _peel_cast(x, inner) if x.dtype != v.dtype else x
        if not _form_ops(form, {y, w, x, *(o.out for o in inner)}, inner):
            return None
    mm = None if x is None or not x.dtype.is_float else _find_matmul(x)
    if mm is None:
        return None
    m = _Match(x, x, v, inner=inner)
    base = mm.out
    got = _scaled_reader(mm.out, users)
    if got is not None:
        base, c, ops = got
        m.scale *= c
        inner.extend(ops)
    length, keys = base.shape[-2:]

    def causal_add(mask: Value) -> bool:
        return _constant_causal(mask, "additive", g, length, keys)

    chain = _score_chain.extract(g.ops, x, base, mm.out, causal_add)
    if chain is None or not chain.chain_ops:
        return None
    # the ops that read the scores must stay private; side ops (a mask from arange, a bias) may be shared
    # with anything else, such as another layer's attention: the score_mod sub-graph computes its own
    mine = set(chain.chain_ops)
    scored = _score_chain.reachable_from([o for o in g.ops if o in mine], base)
    inner.extend([mm, *(o for o in chain.chain_ops if o.out in scored)])
    m.q, m.kt = _peel_scale(mm.inputs[0], m), _peel_scale(mm.inputs[1], m)
    return m, chain, base


def _conjuncts(cond: Value, kind: str) -> list[tuple[Value, str]]:
    """A where's condition as (condition, kind) conjuncts of what takes part: ~a becomes (a, keep) for a
    drop, a & b its parts for a keep, a | b its parts for a drop."""
    if kind == "drop" and _producer(cond, "logical_not"):
        return _conjuncts(cond.producer.inputs[0], "keep")
    if kind == "keep" and _producer(cond, "logical_and"):
        return [c for x in cond.producer.inputs for c in _conjuncts(x, "keep")]
    if kind == "drop" and _producer(cond, "logical_or"):  # ~(a | b) = ~a & ~b
        return [c for x in cond.producer.inputs for c in _conjuncts(x, "drop")]
    return [(cond, kind)]


def _emit_chain(m: _Match, chain, base: Value, op: Op, g: Graph,
                differentiate: Differentiate | None) -> tuple[list[Op], dict] | None:
    """As _emit, for a match with a score modification: a causal conjunct of its masks becomes
    is_causal, the rest the score_mod graph (with its VJP graph when `differentiate` is given)."""
    length, keys = base.shape[-2:]
    causal, keeps, selects = False, [], False
    for cond, kind in (c for where in chain.keeps for c in _conjuncts(*where)):
        if kind == "causal" or (not causal and _constant_causal(cond, kind, g, length, keys)):
            causal, selects = True, kind != "causal"  # an added causal mask adds (-inf); a where selects
        else:
            keeps.append((cond, kind))
    sub, extras = _score_chain.build(chain, base, keeps)
    plain = _score_chain.is_plain(sub)
    scratch = Graph()
    b = Builder(scratch, op.loc)
    attrs = {"scale": m.scale, "is_causal": causal, "enable_gqa": False, "where_mask": selects}
    if not plain:
        attrs["score_mod"] = SubGraph(sub)
        attrs["score_mod_grad"] = SubGraph(differentiate(sub)) if differentiate is not None else None
    return _emitted(scratch, b, op, (m.q, _keys(b, m.kt), m.v, *(() if plain else extras)), attrs)


def _mask_input(m: _Match, g: Graph, op: Op) -> bool:
    """The plain pattern's mask stays an input of the attention op: it is a graph input or the result
    of an op a score modification cannot hold, or a constant equal to is_causal; a mask computed from
    positions or small vectors is a score modification (computed where it is used, never stored)."""
    mask = m.mask
    if mask is None or mask.producer is None or not _score_chain._side_op(mask.producer):
        return True
    return _causal_mask(m, g, *op.inputs[0].shape[-2:])


def _rewrite_one(op: Op, g: Graph, users: dict, keep: set, differentiate,
                 gradients: bool) -> tuple[list[Op], dict] | None:
    """The rewrite of the attention ending at value matmul `op` (helpers, new inputs and attributes),
    or None when there is none."""
    m = _match(op)
    if m is not None and _mask_input(m, g, op):
        return _emit(m, op, g, gradients) if _private(m, users, keep) else None
    got = _match_chain(op, g, users)
    if got is not None and _private(got[0], users, keep):
        new = _emit_chain(*got, op, g, differentiate)
        if new is not None:
            return new
    return _emit(m, op, g, gradients) if m is not None and _private(m, users, keep) else None


def rewrite_attention_in_place(g: Graph, keep: Collection[Value] = (),
                               differentiate: Differentiate | None = None, gradients: bool = True) -> int:
    """Rewrite every hand-written attention of g into one op, editing g: the value matmul becomes the
    attention op (same result value), helper ops are inserted before it, the dead pattern stays for
    DCE. `keep`: values that must stay computed as they are (autodiff's targets). `differentiate`:
    makes a score modification's VJP graph (autodiff passes its own; without it the op has none and
    cannot be differentiated). `gradients`: g is still to be differentiated (False: the pipeline's
    rewrite of a finished graph). Returns the count."""
    users = g.users()
    keep = set(keep) | set(g.outputs)
    count = 0
    for op in [o for o in g.ops if o.name == MATMUL.name]:
        got = _rewrite_one(op, g, users, keep, differentiate, gradients)
        if got is None:
            continue
        helpers, new = got
        at = g.ops.index(op)
        g.ops[at:at] = helpers
        op.name, op.inputs, op.attrs = new["name"], new["inputs"], new["attrs"]
        for made in (op, *(h for h in helpers if h.name == OP)):  # the op, or the op its result adds NaN rows to
            made.loc = annotate_loc(made.loc, REWRITE_NOTE)
        count += 1
    return count


def rewrite_attention(g: Graph) -> Graph:
    """Hand-written attention (matmul, scale, mask, softmax, matmul) -> one scaled_dot_product_attention.

    Before: a verified graph. After: the same function; each matched pattern is one attention op (whose
    line carries REWRITE_NOTE) and its dead intermediates are gone. g is not modified (returned as it
    is when no matmul reads a softmax: no pattern can match)."""
    if not any(op.name == MATMUL.name and _softmax_input(_peel_cast(op.inputs[0], []), []) is not None
               for op in g.ops):
        return g
    new = g.copy()
    return eliminate_dead_code(new) if rewrite_attention_in_place(new, gradients=False) else new
