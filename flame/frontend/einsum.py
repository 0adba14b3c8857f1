"""flame.einsum: PyTorch's einsum (implicit and explicit output, `...`, repeated labels for diagonals,
dimensions of size 1 broadcasting) as permutes, reshapes, sums and one matmul per pair of operands, so
a contraction runs as a GEMM (cuBLASLt on the GPU) and its gradient is the matmul's. Operands of different
dtypes follow torch's einsum, which pairs them left to right: a pair that sums a shared dimension (torch's
bmm) refuses two dtypes, any other pair (torch's mul) promotes them."""

from __future__ import annotations

import math
import string

from flame.errors import DTypeError, ShapeError
from flame.frontend.autocast import get_autocast_dtype, is_autocast_enabled
from flame.frontend.context import user_location
from flame.frontend.dispatch import apply
from flame.frontend.norms import torch_dtype_name
from flame.ir.dtypes import f64, promote

_LETTERS = set(string.ascii_letters)


def _fail(msg: str):
    raise ShapeError(f"einsum: {msg}\n  at {user_location()}")


def _parse_term(term: str, ndim: int, ell: list[str]) -> list[str]:
    """The labels of one operand's term, '...' expanded to the trailing ellipsis labels it covers."""
    if term.count("...") > 1 or any(c not in _LETTERS for c in term.replace("...", "")):
        _fail(f"invalid subscripts {term!r} (letters and at most one '...')")
    if "..." not in term:
        if len(term) != ndim:
            _fail(f"the subscripts {term!r} name {len(term)} dimensions but the operand has {ndim}")
        return list(term)
    head, tail = term.split("...")
    n = ndim - len(head) - len(tail)
    if n < 0:
        _fail(f"the subscripts {term!r} name more dimensions than the operand's {ndim}")
    return list(head) + ell[len(ell) - n:] + list(tail)


def _diagonal(x, labels: list[str]):
    """Repeated labels in one term ('ii'): keep the diagonal, once."""
    while len(set(labels)) < len(labels):
        lab = next(c for c in labels if labels.count(c) > 1)
        a, b = [i for i, c in enumerate(labels) if c == lab][:2]
        if x.shape[a] != x.shape[b]:
            _fail(f"label {lab!r} is repeated over dimensions of sizes {x.shape[a]} and {x.shape[b]}")
        rest = [i for i in range(x.ndim) if i not in (a, b)]
        n = x.shape[a]
        x = x.permute(*rest, a, b).reshape(*[x.shape[i] for i in rest], n * n)
        x = x[..., :: n + 1] if n else x.reshape(*x.shape[:-1], 0)
        labels = [labels[i] for i in rest] + [lab]
    return x, labels


def _sum_labels(x, labels: list[str], drop: set[str]):
    axes = [i for i, c in enumerate(labels) if c in drop]
    if not axes:
        return x, labels
    return x.sum(axes), [c for c in labels if c not in drop]


def _aligned(x, labels: list[str], order: list[str]):
    """x with its dims permuted to `order` (labels x lacks become size-1 dims)."""
    x = x.permute(*[labels.index(c) for c in order if c in labels])
    have = [c for c in order if c in labels]
    return x.reshape(*[x.shape[have.index(c)] if c in labels else 1 for c in order])


def _contract(a, la: list[str], b, lb: list[str], keep: set[str], sizes: dict[str, int]):
    """a (labels la) times b (labels lb), summing the shared labels not in keep."""
    batch = [c for c in la if c in lb and c in keep]
    inner = [c for c in la if c in lb and c not in keep]
    left = [c for c in la if c not in lb]
    right = [c for c in lb if c not in la]
    if not a.dtype.is_float:  # no integer GEMM: broadcast multiply and sum
        order = batch + left + right + inner
        prod = _aligned(a, la, order) * _aligned(b, lb, order)
        return _sum_labels(prod, order, set(inner))
    bs = [sizes[c] for c in batch]
    am = _aligned(a, la, batch + left + inner).broadcast_to(*bs, *[sizes[c] for c in left + inner])
    bm = _aligned(b, lb, batch + inner + right).broadcast_to(*bs, *[sizes[c] for c in inner + right])
    lsz, ksz, rsz = (math.prod(sizes[c] for c in g) for g in (left, inner, right))
    out = apply("matmul", am.reshape(*bs, lsz, ksz), bm.reshape(*bs, ksz, rsz))
    return out.reshape(*bs, *[sizes[c] for c in left + right]), batch + left + right


def _paired(a, la: list[str], b, lb: list[str], keep: set[str], empty: bool):
    """a and b in one dtype, as torch's einsum pairs them: where the pair sums a dimension both hold with more
    than one element (torch's bmm), two dtypes raise torch's error (unless an operand has no element,
    which torch answers with zeros first, or autocast casts both of the GEMM's operands to its dtype: not a
    float64 or integer one); otherwise (torch's mul)
    they are promoted."""
    if a.dtype == b.dtype:
        return a, b
    summed = any(c in lb and c not in keep and a.shape[i] != 1 and b.shape[lb.index(c)] != 1
                 for i, c in enumerate(la))
    if summed and not empty:
        da, db = a.dtype, b.dtype
        if is_autocast_enabled():  # the GEMM's autocast casts its floating operands but float64 ones
            low = get_autocast_dtype()
            da, db = (low if d.is_float and d != f64 else d for d in (da, db))
        if da != db:
            raise DTypeError(f"einsum: expected scalar type {torch_dtype_name(da)} but found "
                             f"{torch_dtype_name(db)}\n  at {user_location()}")
    dt = promote(a.dtype, b.dtype)
    return a.to(dt), b.to(dt)


def einsum(equation: str, *operands):
    """Sum of products over the labelled dimensions (torch.einsum), e.g. einsum("bij,bjk->bik", a, b)."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        _fail(f"{equation!r} has {len(terms)} operand terms but {len(operands)} operands were given")
    ell_rank = max((x.ndim - len(t.replace("...", "")) for t, x in zip(terms, operands) if "..." in t), default=0)
    ell = [chr(0x100 + i) for i in range(ell_rank)]  # private labels for the '...' dimensions
    empty = any(x.numel() == 0 for x in operands)
    xs, labels, sizes, uses = [], [], {}, {}
    for t, x in zip(terms, operands):
        lab = _parse_term(t, x.ndim, ell)
        for c in lab:
            uses[c] = uses.get(c, 0) + 1
        for c, n in zip(lab, x.shape):
            if sizes.get(c, 1) != 1 and n not in (1, sizes[c]):
                _fail(f"label {c!r} has sizes {sizes[c]} and {n} (they must match or be 1)")
            sizes[c] = n if sizes.get(c, 1) == 1 else sizes[c]
        x, lab = _diagonal(x, lab)
        xs.append(x)
        labels.append(lab)
    if arrow:
        if rhs.count("...") > 1 or any(c not in _LETTERS for c in rhs.replace("...", "")):
            _fail(f"invalid output subscripts {rhs!r}")
        out = list(rhs.replace("...", "\0")) if "..." in rhs else list(rhs)
        out = [c for o in out for c in (ell if o == "\0" else [o])]
        if len(set(out)) != len(out) or any(c not in sizes for c in out):
            _fail(f"output subscripts {rhs!r} must be distinct labels of the inputs")
    else:  # implicit: the '...' dims, then the labels used once, alphabetically
        out = ell + sorted(c for c in sizes if uses[c] == 1 and c not in ell)
    for i in range(len(xs)):  # labels only this operand has and the output lacks: sum them now
        mine = {c for c in labels[i] if c not in out and sum(c in lab for lab in labels) == 1}
        xs[i], labels[i] = _sum_labels(xs[i], labels[i], mine)
    x, lab = xs[0], labels[0]
    for j in range(1, len(xs)):
        keep = set(out).union(*labels[j + 1:])
        x, xj = _paired(x, lab, xs[j], labels[j], keep, empty)
        x, lab = _contract(x, lab, xj, labels[j], keep, sizes)
    x, lab = _sum_labels(x, lab, set(lab) - set(out))
    x = x.permute(*[lab.index(c) for c in out]) if lab != out else x
    return x.broadcast_to(*[sizes[c] for c in out])
