"""Views and in-place writes for the random programs (tests/frontend/random_programs.py): nodes that take
views of a value (view/reshape/flatten, transpose/t/permute, basic indexing with ints, slices with steps
and None, narrow, select, unsqueeze/squeeze, unbind/split/chunk, expand), nodes that write
through one in place (add_, sub_, mul_, copy_, zero_, fill_, masked_fill_, clamp_, x[key] = v with
basic or integer-tensor keys, +=; recorded, or under no_grad or through detach(), which record no
gradient), and buffers that do not require grad to write into (an input that
does not require grad, which @flame.compile takes as an argument it updates, or a tensor made inside the
program). A write node's value is the tensor it wrote (the same tensor as its target); every value is
read at the end of the program, so a view taken before a write is read after it, and later ops read
views and bases between the writes.

Which writes torch takes is torch's to say: the generator runs the program so far on torch with each
new view or write and keeps the node only where torch runs it and its backward (torch refuses a write
into one of several outputs of unbind/split/chunk while recording gradients, into a view whose saved
value a backward needs, into an expanded view, into a leaf that requires grad or a view of it, and
where source and target partly overlap). The refusals flame must share (the expanded-view write and the
leaf writes) are kept as programs of their own that flame must refuse too."""

from __future__ import annotations

import numpy as np

# nodes whose value shares its first operand's storage (where the op is a view in torch and flame)
ALIASING = {"view", "write", "transpose", "mT", "unsqueeze", "reshape"}


def must_refuse(error: str, leaf: bool) -> bool:
    """torch's refusal is one flame must share: a write into an expanded view, or into an input that
    requires grad (`leaf`) or a view of it. (torch also calls a view taken of a buffer before a write made
    the buffer require grad a leaf; flame computes that write.)"""
    return "more than one element of the written-to tensor" in error or leaf and "leaf Variable" in error


VIEWS = {
    "view": lambda x, shape: x.view(shape),
    "reshape": lambda x, shape: x.reshape(shape),
    "flatten": lambda x, start: x.flatten(start),
    "transpose": lambda x, a, b: x.transpose(a, b),
    "t": lambda x: x.t(),
    "permute": lambda x, dims: x.permute(dims),
    "index": lambda x, key: x[key],
    "narrow": lambda x, dim, start, length: x.narrow(dim, start, length),
    "select": lambda x, dim, i: x.select(dim, i),
    "unsqueeze": lambda x, dim: x.unsqueeze(dim),
    "squeeze": lambda x, dim: x.squeeze(dim),
    "unbind": lambda x, dim, k: x.unbind(dim)[k],
    "split": lambda x, size, dim, k: x.split(size, dim)[k],
    "chunk": lambda x, n, dim, k: x.chunk(n, dim)[k],
    "expand": lambda x, shape: x.expand(shape),
    "diagonal": lambda x, offset, a, b: x.diagonal(offset, a, b),
}


def _view(lib, x, kind, **kw):
    return VIEWS[kind](x, **kw)


def _buffer(lib, x, kind):
    """A tensor that does not require grad, made inside the program: zeros like x, or a copy of x's values."""
    return lib.zeros_like(x) if kind == "zeros" else x.detach().clone()


def _write(lib, t, *operand, way="plain", **kw):
    """t written in place (through t's storage: a view's write reaches its base); the value is t. `way`:
    recorded ("plain"), or recording no gradient: under no_grad, or through t.detach() (t keeps its
    gradient history and takes the new values, as torch's)."""
    if way == "no_grad":
        with lib.no_grad():
            _write_into(lib, t, *operand, **kw)
    else:
        _write_into(lib, t.detach() if way == "detach" else t, *operand, **kw)
    return t


def _write_into(lib, t, *operand, kind, c=None, key=None, index=None, dim=None, mask=None):
    v = operand[0] if operand else c
    if kind == "add_":
        t.add_(v)
    elif kind == "sub_":
        t.sub_(v)
    elif kind == "mul_":
        t.mul_(v)
    elif kind == "copy_":
        t.copy_(v)
    elif kind == "zero_":
        t.zero_()
    elif kind == "fill_":
        t.fill_(c)
    elif kind == "clamp_":
        t.clamp_(min=c)
    elif kind == "masked_fill_":
        t.masked_fill_(lib.tensor(mask), c)
    elif kind == "setitem":
        t[key] = v
    elif kind == "index_put":
        t[(slice(None),) * dim + (lib.tensor(index),)] = v
    else:  # "iadd"
        t += v


def _as_strided(lib, x, size, stride, offset):
    """x.as_strided(...) read at once (times 1.5, a new tensor): writes through as_strided views, which
    overlap where strides repeat elements, are tests/frontend/test_as_strided.py's."""
    return x.as_strided(size, stride, offset) * 1.5


APPLY = {"view": _view, "buffer": _buffer, "write": _write, "as_strided": _as_strided}


def roots(nodes) -> list[int]:
    """For each node, the node that owns the storage its value may share (itself, for a new tensor)."""
    out = []
    for i, n in enumerate(nodes):
        out.append(out[n.ins[0]] if n.op in ALIASING else i)
    return out


# ---- the generator --------------------------------------------------------------------------------


def views_family(g) -> int | None:
    """A storage to write into (an intermediate value, a buffer made in the program or an input that does
    not require grad; now and then an input that does, which torch refuses), then one to five steps:
    a view of it or of one of its views, a write through one of them, or an op reading one."""
    rng = g.rng
    base = _storage(g)
    if base is None:
        return None
    last = base
    for _ in range(rng.randint(1, 5)):
        family = g.rng.choices([_take_view, _write_through, _read], [3, 4, 1])[0]
        got = family(g, g.roots[base])
        last = got if got is not None else last
    return last


def _storage(g) -> int | None:
    rng = g.rng
    r = rng.random()
    if r < 0.2:  # (no zero-size one: the planner loses a zero-size argument written in place and returned)
        return g.input(tuple(max(n, 1) for n in g.shape()), grad=False)
    if r < 0.35:
        i = g.pick()
        return g.add_aliasing("buffer", (i,), kind=rng.choice(["zeros", "clone"]))
    if r < 0.45:
        return g.pick()  # an input now and then: torch refuses its writes, and so must flame
    writable = [j for j in g.free if g.nodes[g.roots[j]].op != "input" or not g.requires_grad(g.roots[j])]
    if writable:
        return writable[-1] if rng.random() < 0.5 else rng.choice(writable)
    return g.add("scale", (g.pick(),), c=rng.choice([1.0, 2.0, -0.5]))


def _sharing(g, root: int) -> list[int]:
    return [i for i in g.free if g.roots[i] == root]


def _take_view(g, root: int) -> int | None:
    rng = g.rng
    i = rng.choice(_sharing(g, root))
    s = g.shapes[i]
    kind, kw = _view_args(g, s)
    if kind is None:
        return None
    return g.add_aliasing("view", (i,), kind=kind, **kw)


def _view_args(g, s: tuple) -> tuple[str | None, dict]:
    """A view kind that takes shape s and its arguments (None where the kind drawn does not fit s)."""
    rng, r = g.rng, len(s)
    kind = rng.choice(
        [
            "view",
            "reshape",
            "flatten",
            "transpose",
            "t",
            "permute",
            "index",
            "index",
            "narrow",
            "select",
            "unsqueeze",
            "squeeze",
            "unbind",
            "split",
            "chunk",
            "expand",
            "diagonal",
        ]
    )
    dim = rng.randrange(r) if r else None
    if kind in ("view", "reshape"):
        return kind, {"shape": _factor(g, s)}
    if kind == "unsqueeze":
        return kind, {"dim": rng.randrange(-r - 1, r + 1)}
    if kind == "t":
        return (kind, {}) if r <= 2 else (None, {})
    if kind == "index":
        return kind, {"key": _basic_key(g, s)}
    if kind == "expand":
        return kind, {"shape": tuple(rng.randint(1, 3) if n == 1 else n for n in ((1,) * rng.randint(0, 1) + s))}
    if dim is None:
        return None, {}
    n = s[dim]
    if kind == "flatten":
        return kind, {"start": dim}
    if kind == "transpose":
        return kind, {"a": dim, "b": rng.randrange(r)}
    if kind == "permute":
        return kind, {"dims": tuple(rng.sample(range(r), r))}
    if kind == "squeeze":
        return kind, {"dim": dim}
    if kind == "diagonal":  # of any plane, offsets past its corner too (an empty diagonal)
        others = [k for k in range(-r, r) if k % r != dim]
        return (kind, {"offset": rng.randint(-2, 2), "a": dim, "b": rng.choice(others)}) if others else (None, {})
    if kind == "narrow":
        start = rng.randint(0, n)
        return kind, {"dim": dim, "start": start, "length": rng.randint(0, n - start)}
    if n == 0:
        return None, {}
    if kind == "select":
        return kind, {"dim": dim, "i": rng.randrange(-n, n)}
    if kind == "unbind":
        return kind, {"dim": dim, "k": rng.randrange(n)}
    size = rng.randint(1, n)
    count = -(-n // size)
    return kind, {"dim": dim, "k": rng.randrange(count)} | ({"size": size} if kind == "split" else {"n": count})


def _factor(g, s: tuple) -> tuple:
    """A shape of s's element count: (-1,), or s with two neighbouring dims merged, or a dim split."""
    rng = g.rng
    if len(s) >= 2 and rng.random() < 0.4:
        k = rng.randrange(len(s) - 1)
        return s[:k] + (s[k] * s[k + 1],) + s[k + 2 :]
    splittable = [k for k, n in enumerate(s) if n in (4, 6)]
    if splittable and rng.random() < 0.5:
        k = rng.choice(splittable)
        return s[:k] + (2, s[k] // 2) + s[k + 1 :]
    return (-1,)


def _basic_key(g, s: tuple) -> tuple:
    """A key of ints (negative too), slices (steps 1 to 3) and None over some of s's leading dims."""
    rng, key = g.rng, []
    for n in s[: rng.randint(1, len(s))] if s else ():
        r = rng.random()
        if r < 0.3 and n:
            key.append(rng.randrange(-n, n))
        elif r < 0.85:
            a = rng.choice([None, *range(-n, n + 1)])
            key.append(slice(a, rng.choice([None, *range(-n, n + 1)]), rng.choice([None, 1, 2, 3])))
        else:
            key.append(slice(None))
        if rng.random() < 0.1:
            key.append(None)
    return tuple(key) if key else (None,)


def _write_through(g, root: int) -> int | None:
    rng = g.rng
    t = rng.choice(_sharing(g, root))
    s = g.shapes[t]
    kind = rng.choice(
        [
            "add_",
            "sub_",
            "mul_",
            "mul_",
            "copy_",
            "zero_",
            "fill_",
            "clamp_",
            "masked_fill_",
            "setitem",
            "setitem",
            "index_put",
            "iadd",
        ]
    )
    if kind == "index_put" and _expanded(g, t):  # torch's index_put_ writes overlapping memory unchecked
        return None
    way = {"way": rng.choice(["no_grad", "detach"])} if rng.random() < 0.25 else {}  # records no gradient
    if kind == "zero_":
        return g.add_aliasing("write", (t,), kind=kind, **way)
    if kind in ("fill_", "clamp_"):
        return g.add_aliasing("write", (t,), kind=kind, c=rng.choice([0.5, -1.0, 2.0]), **way)
    if kind == "masked_fill_":
        mask = g.np.random(tuple(1 if rng.random() < 0.3 else n for n in s)) < 0.5
        return g.add_aliasing("write", (t,), kind=kind, mask=mask, c=rng.choice([0.0, 1.5]), **way)
    kw = {}
    region = s
    if kind == "setitem":
        kw["key"] = _basic_key(g, s)
        region = np.empty(s)[kw["key"]].shape
    elif kind == "index_put":
        if not s:
            return None
        kw["dim"] = dim = rng.randrange(len(s))
        n = s[dim]
        kw["index"] = g.np.integers(-n, n, g.size(1, 3)) if n else np.zeros(0, np.int64)
        region = s[:dim] + (len(kw["index"]),) + s[dim + 1 :]
    kw.update(way)
    if kind not in ("copy_",) and rng.random() < 0.3:
        return g.add_aliasing("write", (t,), kind=kind, c=rng.choice([0.5, -2.0, 3.0]), **kw)
    return g.add_aliasing("write", (t, _operand(g, tuple(region))), kind=kind, **kw)


def _expanded(g, i: int) -> bool:
    """Value i is reached from its storage through an expand."""
    while g.nodes[i].op in ALIASING:
        if g.nodes[i].op == "view" and dict(g.nodes[i].kw)["kind"] == "expand":
            return True
        i = g.nodes[i].ins[0]
    return False


def _operand(g, region: tuple) -> int:
    """A value that broadcasts to region: a free one (a view of the storage written now and then, so
    source and target may overlap), or a new input."""
    fits = [j for j in g.free if _broadcasts_to(g.shapes[j], region)]
    if fits and g.rng.random() < 0.6:
        return g.rng.choice(fits)
    r = len(region)
    return g.input(tuple(1 if g.rng.random() < 0.3 else n for n in region[g.rng.randrange(r + 1) :]))


def _broadcasts_to(a: tuple, b: tuple) -> bool:
    return len(a) <= len(b) and all(x == y or x == 1 for x, y in zip(reversed(a), reversed(b)))


def _read(g, root: int) -> int | None:
    """An op reading a view or the base between writes (its input saved for the backward now and then,
    so a later write into it is refused by torch and dropped), or as_strided of one (_as_strided_read)."""
    i = g.rng.choice(_sharing(g, root))
    op = g.rng.choice(["scale", "exp", "sin", "neg", "sum", "as_strided"])
    if op == "as_strided":
        return _as_strided_read(g, root, i)
    if op == "scale":
        return g.add(op, (i,), c=g.rng.choice([2.0, -0.5]))
    if op == "sum":
        r = len(g.shapes[i])
        return g.add(op, (i,), dim=g.rng.randrange(r), keep=False) if r else None
    return g.add(op, (i,))


def _as_strided_read(g, root: int, i: int) -> int | None:
    """as_strided of value i, a view of an input (an input's storage is row-major in torch and flame alike;
    an op's result is row-major only in flame): sizes 1 to 3 over one or two dims, strides 0 to 3 (windows
    overlap, elements repeat) and an explicit storage offset, within i's element count and its storage's,
    so that reading from the storage's start reaches elements outside a view's own (torch gives them no
    gradient)."""
    rng = g.rng
    if g.nodes[root].op != "input":
        return None
    total = int(min(np.prod(g.shapes[i]), np.prod(g.shapes[root])))  # (an expanded view has more elements)
    size = tuple(rng.randint(1, 3) for _ in range(rng.randint(1, 2)))
    stride = tuple(rng.randint(0, 3) for _ in size)
    extent = sum((n - 1) * st for n, st in zip(size, stride)) + 1
    if extent > total:
        return None
    return g.add("as_strided", (i,), size=size, stride=stride, offset=rng.randint(0, total - extent))


def as_strided_family(g) -> int | None:
    """as_strided of an input (one that requires grad, or a new one) or of a view of it through one or two
    view ops (_as_strided_read): torch's gradient reaches only the elements of the tensor as_strided was
    called on, not the storage around a view."""
    rng = g.rng
    inputs = [j for j in g.free if g.nodes[j].op == "input" and g.requires_grad(j)]
    i = rng.choice(inputs) if inputs and rng.random() < 0.5 else g.input(tuple(max(n, 1) for n in g.shape()))
    for _ in range(rng.randint(0, 2)):
        kind, kw = _view_args(g, g.shapes[i])
        if kind is not None:
            i = g.add_aliasing("view", (i,), kind=kind, **kw) or i
    return _as_strided_read(g, g.roots[i], i)
