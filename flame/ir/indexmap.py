"""Index maps for fusion: inside a fused kernel every value is evaluated at coordinates of one
iteration domain D (a shape). A value v is read or computed at `coords_v = base + A @ coords_D` — an
IndexMap. Elementwise broadcasting, broadcast_to, permute, squeeze/unsqueeze, slice, flip and the
reshapes that only split dimensions are affine, so a chain of them composes into one IndexMap, and a
load of v becomes a flat offset `strides(v) . coords_v`. A piecewise op (concat, pad: the OpDef trait
`pieces`) is a select between such maps: each region of its result reads one input through its own
map (or is the fill value), and what a region reads is loaded only where that region holds.

A row domain has `n_red` trailing reduced dims: reductions over exactly those dims are computed
once per row. `derive` assigns the maps of a candidate group, or says why it cannot be one kernel;
the fusion pass (feasibility) and codegen (index math) share it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache, wraps
from operator import mul

from flame.ir import symbolic
from flame.ir.graph import Op, Value, segments
from flame.ir.registry import accumulates, axis_order, get, is_fill, is_relabel

MAX_MAPS = 4  # a value needed at more maps than this is recomputed too often: split the group


def is_view(op: Op) -> bool:
    """op only relabels or reindexes its input (the OpDef's `view` trait)."""
    return get(op.name).view is not None


def swaps_last_two(op: Op | None) -> bool:
    """op is a permute that swaps the last two axes and keeps the others (a matmul can read its input
    with the operand's transpose flag instead: plan.build.fold_transposes)."""
    if axis_order(op) is None or op.out.type.rank < 2:
        return False
    perm = list(op.attrs["perm"])
    want = list(range(len(perm)))
    want[-2], want[-1] = want[-1], want[-2]
    return perm == want


def is_reduction(op: Op) -> bool:
    """op folds its input over `axes` with a monoid (the OpDef's `reduction` trait; argmax, which
    yields an index, is not one): the reductions fused kernels compute."""
    r = get(op.name).reduction
    return r is not None and not r.index


@dataclass(frozen=True)
class IndexMap:
    """coords of a value (one per dim) = base + rows @ coords of the domain."""

    rows: tuple[tuple[int, ...], ...]
    base: tuple[int, ...]
    cols: int  # the domain's rank
    # a map made by _select: the coordinate each dim reads (None: none), so composing is a lookup
    picks: tuple[int | None, ...] | None = field(default=None, compare=False, repr=False)

    def __hash__(self) -> int:
        """The dataclass's hash of (rows, base, cols), computed once (layouts key dicts on maps)."""
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.rows, self.base, self.cols))
            object.__setattr__(self, "_hash", h)
        return h

    def then(self, inner: IndexMap) -> IndexMap:
        """inner o self: `inner` maps this value's coords to another value's coords."""
        if inner is identity(len(self.rows)):  # most steps (a same-shape operand): nothing to compose
            return self
        if self is identity(self.cols):
            return inner
        if inner.picks is not None:  # dim i of the result is self's dim picks[i] (or constant)
            zero = (0,) * self.cols
            rows = tuple(zero if p is None else self.rows[p] for p in inner.picks)
            base = tuple(b if p is None else b + self.base[p] for p, b in zip(inner.picks, inner.base))
            return IndexMap(rows, base, self.cols)
        key = (self, inner) if self.plain and inner.plain else None  # (a symbolic size compared is a guard)
        got = None if key is None else _COMPOSED.get(key)
        if got is None:
            cols = tuple(zip(*self.rows)) if self.rows else ((),) * self.cols  # self's coefficients per domain dim
            rows = tuple(tuple(sum(map(mul, r, c)) for c in cols) for r in inner.rows)
            base = tuple(b + sum(map(mul, r, self.base)) for r, b in zip(inner.rows, inner.base))
            got = IndexMap(rows, base, self.cols)
            if key is not None:
                if len(_COMPOSED) >= 4096:
                    _COMPOSED.clear()
                _COMPOSED[key] = got
        return got

    @property
    def plain(self) -> bool:
        """Every coefficient and offset is a plain int (no symbolic size), found once."""
        got = self.__dict__.get("_plain")
        if got is None:
            got = _INT.issuperset(map(type, self.base)) and all(_INT.issuperset(map(type, r)) for r in self.rows)
            object.__setattr__(self, "_plain", got)
        return got

    def depends_on(self, dims: range) -> bool:
        return any(r[d] for r in self.rows for d in dims)

    def flat(self, shape: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
        """(base, strides per domain dim) of the flat offset into a contiguous buffer of `shape`."""
        st = contiguous_strides(shape)
        strides = tuple(sum(s * r[d] for s, r in zip(st, self.rows)) for d in range(self.cols))
        return sum(s * b for s, b in zip(st, self.base)), strides


# (a map, a map without picks) -> their composition (IndexMap.then's product of matrices): derive composes
# the same few maps again for every group it is asked about (a U-Net step's 1.7k groups: 66 products)
_COMPOSED: dict[tuple[IndexMap, IndexMap], IndexMap] = {}


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


def _select(n_out: int, picks: list[tuple[int | None, int]]) -> IndexMap:
    """A map whose dim k reads coordinate picks[k][0] (None: constant) plus picks[k][1]."""
    if len(picks) == n_out and all(p == k and type(b) is int and b == 0 for k, (p, b) in enumerate(picks)):
        return identity(n_out)  # one object per rank: `then` skips composing with it
    return IndexMap(tuple(_unit(n_out, p) for p, _ in picks), tuple(b for _, b in picks), n_out,
                    tuple(p for p, _ in picks))


@lru_cache(maxsize=256)
def _unit(n: int, p: int | None) -> tuple[int, ...]:
    """The row of n coefficients that reads coordinate p alone (None: none)."""
    return tuple(1 if d == p else 0 for d in range(n))


@lru_cache(maxsize=64)
def identity(rank: int) -> IndexMap:
    return IndexMap(tuple(_unit(rank, d) for d in range(rank)), (0,) * rank, rank, tuple(range(rank)))


def _memo_plain(f):
    """f(src, dst) memoised where both shapes are tuples of plain ints: a SymInt among them is
    compared anew on every call (while recording, each comparison is a guard: flame.ir.symbolic)."""
    memo = lru_cache(maxsize=4096)(f)
    # (id(src), id(dst)) -> (src, dst, answer) for plain shapes: most calls pass the shape tuples of the
    # same values again, answered without reading them (the entry holds them, so the ids stay theirs)
    seen: dict[tuple[int, int], tuple] = {}

    @wraps(f)
    def call(src, dst):
        got = seen.get((id(src), id(dst)))
        if got is not None and got[0] is src and got[1] is dst:
            return got[2]
        plain = type(src) is tuple and type(dst) is tuple and _INT.issuperset(map(type, src)) and _INT.issuperset(
            map(type, dst))
        if not plain:
            return f(src, dst)
        answer = memo(src, dst)
        if len(seen) >= 4096:
            seen.clear()
        seen[id(src), id(dst)] = (src, dst, answer)
        return answer

    return call


_INT = frozenset({int})


@_memo_plain
def broadcast(src: tuple[int, ...], dst: tuple[int, ...]) -> IndexMap | None:
    """dst coords -> src coords under NumPy broadcasting (src aligned right); None if not a broadcast."""
    lead = len(dst) - len(src)
    if lead < 0 or any(s not in (1, d) for s, d in zip(src, dst[lead:])):
        return None
    return _select(len(dst), [(None if s == 1 else k + lead, 0) for k, s in enumerate(src)])


@_memo_plain
def reshape(src: tuple[int, ...], dst: tuple[int, ...]) -> IndexMap | None:
    """dst coords -> src coords when every src dim of size > 1 is a product of consecutive dst dims."""
    big = [(d, s) for d, s in enumerate(dst) if s != 1]
    rows, at = [], 0
    for s in src:
        row = [0] * len(dst)
        if s != 1:
            group, size = [], 1
            while size < s and at < len(big):
                group.append(big[at])
                size *= big[at][1]
                at += 1
            if size != s:
                return None
            inner = 1
            for d, n in reversed(group):
                row[d] = inner
                inner *= n
        rows.append(tuple(row))
    if at != len(big):
        return None
    return IndexMap(tuple(rows), (0,) * len(src), len(dst))


def reshape_map(op: Op) -> IndexMap | None:
    """reshape / squeeze / unsqueeze: out coords -> in coords when the reshape only splits dims."""
    return reshape(op.inputs[0].shape, op.out.shape)


def broadcast_map(op: Op) -> IndexMap | None:
    """broadcast_to, and every elementwise operand: NumPy broadcasting of the input into the output."""
    return broadcast(op.inputs[0].shape, op.out.shape)


def permute_map(op: Op) -> IndexMap:
    perm = op.attrs["perm"]
    inv = {p: j for j, p in enumerate(perm)}
    return _select(len(perm), [(inv[k], 0) for k in range(len(perm))])


def slice_map(op: Op) -> IndexMap:
    n = op.out.type.rank
    rows = tuple(tuple(st if d == k else 0 for d in range(n)) for k, st in enumerate(op.attrs["steps"]))
    return IndexMap(rows, tuple(op.attrs["starts"]), n)


def as_strided_map(op: Op) -> IndexMap:
    """as_strided of a flat storage: in[0] = offset + sum_k stride_k * out_k."""
    return IndexMap((tuple(op.attrs["stride"]),), (op.attrs["offset"],), len(op.attrs["size"]))


def diagonal_map(op: Op) -> IndexMap:
    """diagonal: out[..., i] reads in at i + max(-offset, 0) on axis1, i + max(offset, 0) on axis2."""
    n, a, b, k = op.out.type.rank, op.attrs["axis1"], op.attrs["axis2"], op.attrs["offset"]
    rest = [d for d in range(n + 1) if d not in (a, b)]
    picks = {d: (rest.index(d), 0) for d in rest} | {a: (n - 1, max(-k, 0)), b: (n - 1, max(k, 0))}
    return IndexMap(tuple(_unit(n, picks[d][0]) for d in range(n + 1)), tuple(picks[d][1] for d in range(n + 1)), n)


def flip_map(op: Op) -> IndexMap:
    shape = op.out.shape
    if not shape:
        return identity(0)
    axes = {a % len(shape) for a in op.attrs["axes"]}
    rows = tuple(tuple((-1 if k in axes else 1) if d == k else 0 for d in range(len(shape))) for k in range(len(shape)))
    return IndexMap(rows, tuple(s - 1 if k in axes else 0 for k, s in enumerate(shape)), len(shape))


@dataclass(frozen=True)
class Piece:
    """A region of a piecewise op's result (the OpDef trait `pieces`: concat, pad): the coordinates c
    with lo <= c[axis] < hi for each (axis, lo, hi) of `bounds` hold input `source` read at `index_map`
    (result coords -> that input's coords), or the op's fill value (source None). The last piece of an
    op holds every coordinate the ones before it do not (its bounds are not tested)."""

    source: int | None
    bounds: tuple[tuple[int, int, int], ...]
    index_map: IndexMap | None


def _shift(rank: int, offsets: dict[int, int]) -> IndexMap:
    """The map that reads coordinate k minus offsets[k] (0 where not given)."""
    return _select(rank, [(k, -offsets.get(k, 0)) for k in range(rank)])


def concat_pieces(op: Op) -> tuple[Piece, ...]:
    """concat: one piece per input of non-zero extent along the axis, read shifted back by its offset."""
    rank = op.out.type.rank
    axis = op.attrs["axis"] % rank
    out, at = [], 0
    for k, v in enumerate(op.inputs):
        size = v.shape[axis]
        if size:
            out.append(Piece(k, ((axis, at, at + size),), _shift(rank, {axis: at})))
        at += size
    return tuple(out)


def pad_pieces(op: Op) -> tuple[Piece, ...]:
    """pad: the input, shifted by the low pads, inside its box (only the padded axes bounded); the
    value around it."""
    x = op.inputs[0]
    pads = op.attrs["pads"]
    bounds = tuple((k, lo, lo + n) for k, ((lo, hi), n) in enumerate(zip(pads, x.shape))
                   if symbolic.nonzero(lo) or symbolic.nonzero(hi))
    inside = Piece(0, bounds, _shift(len(pads), {k: lo for k, (lo, _) in enumerate(pads)}))
    fill = Piece(None, (), None)
    if not math.prod(x.shape):
        return (fill,)
    return (inside, fill) if bounds else (inside,)


def pieces(op: Op) -> tuple[Piece, ...] | None:
    """The pieces of a piecewise op (the OpDef's `pieces` trait), or None for other ops."""
    got = get(op.name).pieces
    return None if got is None else got(op)


def input_map(op: Op, i: int) -> IndexMap | None:
    """op.out coords -> op.inputs[i] coords, for elementwise and view ops, and for a piecewise op the
    map of the piece reading input i (valid inside that piece only); None when not affine."""
    opdef = get(op.name)
    if opdef.view is not None:
        return opdef.view.index_map(op)
    if opdef.pieces is not None:
        return next((p.index_map for p in opdef.pieces(op) if p.source == i), None)
    if opdef.category == "elementwise":
        return broadcast(op.inputs[i].shape, op.out.shape)
    return None


def row_map(v: Value, domain: tuple[int, ...], n_red: int) -> IndexMap | None:
    """The map of a per-row value: its dims of size > 1 are the domain's kept dims of size > 1."""
    kept = [d for d in range(len(domain) - n_red) if domain[d] != 1]
    big = [k for k, s in enumerate(v.shape) if s != 1]
    if [v.shape[k] for k in big] != [domain[d] for d in kept]:
        return None
    where = dict(zip(big, kept))
    return _select(len(domain), [(where.get(k), 0) for k in range(len(v.shape))])


def canonical(v: Value, domain: tuple[int, ...], n_red: int) -> IndexMap | None:
    """Where a value the group writes is stored from: a per-row map in row domains when its shape
    fits one, else NumPy broadcasting of v into the domain."""
    if n_red:
        m = row_map(v, domain, n_red)
        if m is not None:
            return m
    return broadcast(v.shape, domain)


def reduced_ok(op: Op, domain: tuple[int, ...], n_red: int) -> bool:
    """op reduces exactly the trailing n_red dims (size-1 dims aside) of an input shaped like domain."""
    if not is_reduction(op) or n_red == 0 or op.inputs[0].shape != domain:
        return False
    rank = len(domain)
    axes = {a % max(rank, 1) for a in op.attrs["axes"]}
    tail = set(range(rank - n_red, rank))
    return {a for a in axes if domain[a] != 1} == {d for d in tail if domain[d] != 1}


def column_map(op: Op, m: IndexMap, domain: tuple[int, ...], n_red: int) -> IndexMap | None:
    """Domain coords -> coords of the result of column reduction `op` (a sum or mean over dims that
    are not the row's trailing ones), when a row kernel over (domain, n_red) has op's input at map m,
    a bijection of the domain onto it (each element once: identity, or the permuted view of a
    GroupNorm over channels-last data), and every result dim of size > 1 is one domain dim (unit
    coefficient, no offset). The kept dims among those fix the rows that may share a partial; the
    reduced ones fix the elements of a row. None when op is no such reduction."""
    v = op.inputs[0]
    if not is_reduction(op) or not accumulates(op) or n_red == 0:
        return None
    if not _bijection(m, v.shape, domain):
        return None
    rank = v.type.rank
    axes = {a % max(rank, 1) for a in op.attrs["axes"]}
    keep = [k for k in range(rank) if k not in axes or op.attrs.get("keepdim")]
    rows, used = [], set()
    for k, s in zip(keep, op.out.shape):
        if k in axes or s == 1:
            rows.append((0,) * len(domain))
            continue
        big = [d for d, c in enumerate(m.rows[k]) if c and domain[d] != 1]
        if len(big) != 1 or m.rows[k][big[0]] != 1 or big[0] in used or domain[big[0]] != s:
            return None
        used.add(big[0])
        rows.append(tuple(1 if d == big[0] else 0 for d in range(len(domain))))
    if math.prod(domain[d] for d in used) != math.prod(op.out.shape):
        return None
    return IndexMap(tuple(rows), (0,) * len(rows), len(domain))


def _bijection(m: IndexMap, shape: tuple[int, ...], domain: tuple[int, ...]) -> bool:
    """m maps the domain onto a contiguous buffer of `shape` one to one: its strides over the domain
    dims of size > 1, sorted, tile the buffer from offset 0."""
    if math.prod(shape) != math.prod(domain):
        return False
    base, strides = m.flat(shape)
    acc = 1
    for st, n in sorted((st, n) for st, n in zip(strides, domain) if n != 1):
        if st != acc:
            return False
        acc *= n
    return base == 0


def row_segments(ops: list[Op]) -> list[list[Op]]:
    """The segments of a rows kernel (`ops` without its column reductions), or of an elementwise one:
    the connected parts, except that parts without reductions that read a value of their domain's
    shape in common run as one (_shared_reads), and a part without reductions whose work spans the
    row domain of the one part with row reductions runs inside that part's row loop (a LayerNorm
    output recomputed beside the LayerNorm backward reads the same rows), so the kernel stays one
    segment and keeps its columns; without columns, a part of its own would run one element per row
    (codegen/fused.prepare falls back to it only when the row domain cannot index the part)."""
    parts = segments(ops)
    reducing = [p for p in parts if any(is_reduction(o) for o in p)]
    if len(parts) > 1 and not reducing:
        return _shared_reads(ops, parts)
    if len(parts) == 1 or len(reducing) != 1:
        return parts
    n = max(math.prod(o.inputs[0].shape) for o in reducing[0] if is_reduction(o))
    inner = [p for p in parts if p is not reducing[0] and max(math.prod(o.out.shape) for o in p) == n]
    rest = [p for p in parts if p is not reducing[0] and p not in inner]
    joined = set(reducing[0]).union(*inner)
    return [[o for o in ops if o in joined]] + rest


def _shared_reads(ops: list[Op], parts: list[list[Op]]) -> list[list[Op]]:
    """Parts of an elementwise kernel over one domain that read a value of that whole shape in common
    (directly, not through a view) run as one segment, which loads each element of it once for all of
    them: a GELU recomputed beside its gradient reads the pre-activation once, not twice."""
    import networkx as nx

    def domain(part):
        shapes = {o.out.shape for o in part if not is_view(o) and not is_fill(o)}
        return shapes.pop() if len(shapes) == 1 else None

    g = nx.Graph()
    g.add_nodes_from(range(len(parts)))
    for i, part in enumerate(parts):
        dom = domain(part)
        if dom:  # a part over a non-empty domain: joined to the values of that shape it reads
            g.add_edges_from((i, ("value", v, dom)) for o in part if not is_view(o) for v in o.inputs
                             if v.shape == dom and v.producer not in part)
    groups = [sorted(n for n in c if isinstance(n, int)) for c in nx.connected_components(g)]
    if len(groups) == len(parts):
        return parts
    at = {o: k for k, grp in enumerate(sorted(groups)) for i in grp for o in parts[i]}  # op -> its segment
    merged: list[list[Op]] = [[] for _ in groups]
    for o in ops:  # (each segment's ops in the order of ops)
        merged[at[o]].append(o)
    return merged


def leading_reduced(op: Op) -> int | None:
    """n_red of the row domain (its input's shape) in which column reduction `op` sums whole columns:
    the kept dims are the innermost ones (a channels-last BatchNorm's per-channel sums over [N, *S, C]:
    rows of C), so a row kernel without row reductions can carry it (passes/fuse_columns.py
    column_kernels); None for other reductions."""
    shape = op.inputs[0].shape
    rank = len(shape)
    if not is_reduction(op) or not rank or trailing_reduced(op) is not None:
        return None
    axes = {a % rank for a in op.attrs["axes"]}
    red = [d for d in axes if shape[d] != 1]
    kept = [d for d in range(rank) if d not in axes and shape[d] != 1]
    if not red or not kept or max(red) > min(kept):
        return None
    return rank - min(kept)


def trailing_reduced(op: Op) -> int | None:
    """n_red of the row domain of reduction `op` (its input's shape), or None when the reduced dims
    are not the innermost ones (a column reduction)."""
    shape = op.inputs[0].shape
    rank = len(shape)
    if not is_reduction(op):
        return None
    axes = {a % max(rank, 1) for a in op.attrs["axes"]} if rank else set()
    kept = [d for d in range(rank) if d not in axes and shape[d] != 1]
    red = [d for d in axes if shape[d] != 1]
    if not red:
        return None
    n_red = rank - (max(kept) + 1 if kept else 0)
    return n_red if all(d >= rank - n_red for d in red) else None


@dataclass
class Layout:
    """The maps of one fused group: every value (computed or read) -> the maps it is needed at."""

    domain: tuple[int, ...]
    n_red: int
    maps: dict[Value, list[IndexMap]]
    stores: dict[Value, IndexMap]
    # (a merging reshape's result, a map it is needed at) -> the map its input is read at, where that
    # is no function of the result's map but the domain holds both once (derive's `_onto`)
    through: dict[tuple[Value, IndexMap], IndexMap] = field(default_factory=dict)
    # (value, map) needed only inside pieces of piecewise ops: read only where that piece holds (the
    # map may point outside the value elsewhere), so never loaded ahead of its piece's test
    guarded: frozenset[tuple[Value, IndexMap]] = frozenset()

    def input_at(self, op: Op, i: int, m: IndexMap) -> IndexMap:
        """The map op.inputs[i] is needed at where op's result is needed at m."""
        got = self.through.get((op.out, m))
        return got if got is not None else m.then(input_map(op, i))


def derive(ops: list[Op], exposed: list[Value], domain: tuple[int, ...], n_red: int) -> Layout | str:
    """Maps for evaluating `ops` over `domain` and storing `exposed`, or the reason it cannot be done."""
    inside = {op.out: op for op in ops}
    maps: dict[Value, list[IndexMap]] = {}
    stores: dict[Value, IndexMap] = {}
    through: dict[tuple[Value, IndexMap], IndexMap] = {}
    guarded: dict[tuple[Value, IndexMap], bool] = {}  # needed only inside pieces (so far)

    def need(v: Value, m: IndexMap, inside_piece: bool = False) -> str:
        got = maps.get(v)
        if got is None:  # the first map v is needed at (most values have one)
            maps[v] = [m]
            guarded[(v, m)] = inside_piece
            return ""
        if m not in got:
            got.append(m)
        key = (v, m)
        guarded[key] = guarded.get(key, True) and inside_piece
        return "value needed at too many index maps" if len(got) > MAX_MAPS and v in inside else ""

    found: list[dict[Value, IndexMap]] = []

    def onto() -> dict[Value, IndexMap]:  # computed once, when needed
        if not found:
            found.append(_onto(ops, domain))
        return found[0]

    for v in exposed:
        if v in inside and is_reduction(inside[v]):
            m = row_map(v, domain, n_red)
        elif v in inside and (n_red or canonical(v, domain, n_red) is None or _reorders(v, ops)) and v in onto():
            m = onto()[v]  # computed in another order than the domain's: where the group's structure
            # puts it (its shape alone may not say, `_reorders`)
        else:
            m = canonical(v, domain, n_red)
        if m is None:
            return f"result {v.type} does not map into the domain {list(domain)}"
        stores[v] = m
        need(v, m)
    for op in reversed(ops):
        ms = maps.get(op.out)
        if ms is None:
            continue
        for m in ms:
            why = _inputs(op, m, domain, n_red, need, onto, through, guarded[(op.out, m)])
            if why:
                return why
    return Layout(domain, n_red, maps, stores, through, frozenset(k for k, g in guarded.items() if g))


class Layouts:
    """`derive` with its answers kept, keyed on the structure of the group alone: each op's name,
    attributes and types, which ops read which values (values numbered by position), the values
    stored (with the types of those no op of the group reads or computes), the domain and
    n_red, which decide the answer (derive reads nothing else of them). A model of identical blocks
    asks the same questions of each block; this answers a repeat by renumbering the first answer.
    Groups with a symbolic size anywhere (a SymInt: comparing it may record a guard) are derived anew
    every time. One per fusion pass, at most `limit` answers kept."""

    def __init__(self, limit: int = 1 << 16):
        self.limit = limit
        self._sig: dict[Op, int | None] = {}  # op -> the number of its (name, attrs, types), None: symbolic
        self._sigs: dict[tuple, int] = {}
        self._found: dict[tuple, tuple] = {}

    def derive(self, ops: list[Op], exposed: list[Value], domain: tuple[int, ...], n_red: int) -> Layout | str:
        """derive(ops, exposed, domain, n_red)."""
        got, values = self._answer(ops, exposed, domain, n_red)
        return got if values is None or isinstance(got, str) else _renumbered(got, values, domain, n_red)

    def reordered(self, ops: list[Op], exposed: list[Value], domain: tuple[int, ...],
                  n_red: int) -> list[tuple[Value, IndexMap]] | str:
        """The values derive(ops, exposed, domain, n_red) stores at another map than `canonical`'s
        (_onto's order), with those maps in the order it stores them, or the reason derive gives (what
        the fusion pass asks: it stores `exposed`, most groups each at its canonical map)."""
        got, values = self._answer(ops, exposed, domain, n_red)
        if isinstance(got, str):
            return got
        if values is None:
            return [(v, m) for v, m in got.stores.items() if m != canonical(v, domain, n_red)]
        return [(values[i], m) for i, m in got[4]]

    def _answer(self, ops, exposed, domain, n_red) -> tuple[Layout | str | tuple, list[Value] | None]:
        """(derive's answer, None) where it was derived now, or (the kept answer, the group's values)."""
        key = self._key(ops, exposed, domain, n_red)
        if key is None:
            return derive(ops, exposed, domain, n_red), None
        key, values = key
        got = self._found.get(key)
        if got is not None:
            return got, values
        lay = derive(ops, exposed, domain, n_red)
        if len(self._found) < self.limit:
            self._found[key] = lay if isinstance(lay, str) else _numbered(lay, values, domain, n_red)
        return lay, None

    def _key(self, ops, exposed, domain, n_red) -> tuple[tuple, list[Value]] | None:
        """(the group's structure as a tuple, its values: the ops' results, then the other values
        it reads or stores in order of first use), or None for a symbolic group. An op's number
        fixes its arity, so the numbers of the values it reads follow it without a separator; a
        value stored that no op reads or computes is followed by its type, which no op gives."""
        if not _INT.issuperset(map(type, domain)):
            return None
        sig, n = self._sig, len(ops)
        pos = {op.out: i for i, op in enumerate(ops)}
        values = [op.out for op in ops]
        flat = [domain, n_red, n]
        for op in ops:
            s = sig.get(op, -1)
            if s == -1:
                s = sig[op] = self._number(op)
            if s is None:
                return None
            flat.append(s)
            for v in op.inputs:
                r = pos.get(v)
                if r is None:
                    r = pos[v] = len(values)
                    values.append(v)
                flat.append(r)
        flat.append(-1)
        for v in exposed:
            r = pos.get(v)
            if r is None:
                if not _INT.issuperset(map(type, v.shape)):
                    return None
                r = pos[v] = len(values)
                values.append(v)
                flat.append(r)
                r = (v.shape, v.dtype.name)
            flat.append(r)
        return tuple(flat), values

    def _number(self, op: Op) -> int | None:
        """The number of op's (name, attributes, result type, input types), or None where a size is symbolic."""
        out = op.out.type
        sig = [op.name, out.shape, out.dtype.name]
        for v in op.inputs:
            t = v.type
            sig += (t.shape, t.dtype.name)
        if not all(_INT.issuperset(map(type, s)) for s in sig[1::2]):
            return None
        try:
            sig.append(tuple([(k, _frozen(a)) for k, a in op.attrs.items()]))
            return self._sigs.setdefault(tuple(sig), len(self._sigs))
        except _Symbolic:
            return None
        except TypeError:  # an attribute with no hashable form
            return None


class _Symbolic(Exception):
    """An attribute holds a SymInt."""


def _frozen(a):
    """An attribute as a hashable key that tells apart what == does not (1, 1.0 and True; -0.0 and 0.0)."""
    t = type(a)
    if t is int or t is str or t is bool or a is None:
        return t, a
    if t is list or t is tuple:
        return t, tuple(map(_frozen, a))
    if t is float:
        return t, a.hex() if a == a else repr(a)
    if isinstance(a, dict):
        return t, tuple((k, _frozen(x)) for k, x in a.items())
    if isinstance(a, (int, float)):  # a SymInt, SymFloat or NumPy number: no key
        raise _Symbolic
    return t, a


def _numbered(lay: Layout, values: list[Value], domain: tuple[int, ...], n_red: int) -> tuple:
    """A layout with its values as their positions in `values`; last, the values it stores at another
    map than `canonical`'s, with those maps."""
    at = {v: i for i, v in enumerate(values)}
    return (
        tuple((at[v], tuple(ms)) for v, ms in lay.maps.items()),
        tuple((at[v], m) for v, m in lay.stores.items()),
        tuple(((at[v], m), t) for (v, m), t in lay.through.items()),
        tuple((at[v], m) for v, m in lay.guarded),
        tuple((at[v], m) for v, m in lay.stores.items() if m != canonical(v, domain, n_red)),
    )


def _renumbered(got: tuple, values: list[Value], domain: tuple[int, ...], n_red: int) -> Layout:
    """The layout `_numbered` kept, for the group whose values are `values`."""
    maps, stores, through, guarded, _ = got
    return Layout(
        domain,
        n_red,
        {values[i]: list(ms) for i, ms in maps},
        {values[i]: m for i, m in stores},
        {(values[i], m): t for (i, m), t in through},
        frozenset((values[i], m) for i, m in guarded),
    )


def domains(ops: list[Op]) -> list[tuple[int, ...]]:
    """The iteration domains an elementwise group of `ops` is tried over, in order: the shapes of its
    largest results (the last op's first), then smaller ones, largest first (a strided slice's half
    of a value the group reads through it, which the larger domains cannot store)."""
    shapes = list(dict.fromkeys([op.out.type.shape for op in reversed(ops)]))
    if len(shapes) == 1:  # (most groups: every result of one shape)
        return shapes
    sizes = {s: math.prod(s) for s in shapes}
    big = max(sizes.values())
    return [s for s in shapes if sizes[s] == big] + sorted((s for s in shapes if sizes[s] != big), key=sizes.get,
                                                             reverse=True)


def _onto(ops: list[Op], domain: tuple[int, ...]) -> dict[Value, IndexMap]:
    """The values of `ops` that hold each element of the domain once, with such (bijective) maps:
    the operands of its row reductions (else the values of the domain's shape), and what a same-shape
    elementwise op, a permute or a reshape relates to one of them either way. A group whose iteration
    order differs from the order a result is stored in (a GroupNorm's rows over channels-last data)
    stores that result through these."""
    n = math.prod(domain)
    seeds = [op.inputs[0] for op in ops if is_reduction(op) and op.inputs[0].type.shape == domain]
    seeds = seeds or [u for op in ops for u in (*op.inputs, op.out) if u.type.shape == domain and not _reorders(u, ops)]
    out = dict.fromkeys(seeds, identity(len(domain)))
    # per op: its operands of n elements and whether its result has n elements; an op without such an
    # operand never relates two values, and one whose result and such operands all have maps no more
    live = []
    for op in ops:
        full = [(i, u) for i, u in enumerate(op.inputs) if math.prod(u.type.shape) == n]
        if full:
            live.append((op, full, math.prod(op.out.type.shape) == n))
    grew = True
    while grew:
        grew = False
        still = []
        for item in live:
            op, full, whole = item
            if whole and op.out not in out:
                for i, u in full:
                    step = _forward(op, i) if u in out else None
                    if step is not None:
                        out[op.out], grew = out[u].then(step), True
                        break
            if op.out in out:
                for i, u in full:
                    step = None if u in out or not _bijective(op, i) else input_map(op, i)
                    if step is not None:
                        out[u], grew = out[op.out].then(step), True
                if all(u in out for _, u in full):
                    continue
            still.append(item)
        live = still
    return out


def _reorders(v: Value, ops: list[Op]) -> bool:
    """v is a permute, computed among `ops`, of a value of its shape (a GroupNorm's channels-last
    [N, H, W, G, C/G] viewed as [N, G, H, W, C/G] where H = W = G): the domain holds it in its
    input's order, whatever its shape says."""
    order = axis_order(v.producer)
    return (order is not None and order != tuple(range(len(order))) and v.producer in ops
            and v.producer.inputs[0].shape == v.shape)


def _bijective(op: Op, i: int) -> bool:
    return axis_order(op) is not None or is_relabel(op) or (
        get(op.name).category == "elementwise" and op.inputs[i].shape == op.out.shape)


def _forward(op: Op, i: int) -> IndexMap | None:
    """op.inputs[i] coords -> op.out coords, when op writes each element of that input once."""
    u, rank = op.inputs[i], op.out.type.rank
    if get(op.name).category == "elementwise" and u.shape == op.out.shape:
        return identity(rank)
    order = axis_order(op)
    if order is not None:
        return _select(rank, [(p, 0) for p in order])
    if is_relabel(op):
        return reshape(op.out.shape, u.shape)
    return None


def _inputs(op: Op, m: IndexMap, domain, n_red, need, onto, through, under: bool) -> str:
    """Record the maps op's inputs are needed at where its result is needed at m (`under`: only inside
    pieces of piecewise ops; what it reads there is too, but a reduction reads its whole row)."""
    opdef = get(op.name)  # (once: what pieces, is_reduction and input_map would each look up)
    if opdef.pieces is not None:
        if set(map(type, op.out.shape)) - _INT:
            return f"{op.name} of a dynamic size"
        return next((w for p in opdef.pieces(op) if p.source is not None
                     for w in [need(op.inputs[p.source], m.then(p.index_map), True)] if w), "")
    if opdef.reduction is not None and not opdef.reduction.index:
        if not reduced_ok(op, domain, n_red):
            return "reduction over other axes than the row's"
        if m != row_map(op.out, domain, n_red):
            return "reduction result used at another shape"
        return need(op.inputs[0], identity(len(domain)))
    view, elementwise = opdef.view, opdef.category == "elementwise"
    for i, u in enumerate(op.inputs):
        # input_map(op, i) (no pieces here)
        im = (view.index_map(op) if view is not None
              else broadcast(u.type.shape, op.out.type.shape) if elementwise else None)
        if im is not None:
            why = need(u, m.then(im), under)
        elif (step := _forward(op, i)) is not None and u in onto() and onto()[u].then(step) == m:
            through[(op.out, m)] = onto()[u]  # a merging reshape of a value the domain holds once
            why = need(u, onto()[u], under)
        else:
            return f"{op.name} is not an affine view"
        if why:
            return why
    return ""


def numel(shape) -> int:
    return math.prod(shape)
