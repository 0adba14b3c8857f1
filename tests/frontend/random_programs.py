"""A generator of random PyTorch-style programs over the ops flame and torch share by name, run on
either library: `program(seed)` returns a Program whose `run(lib, xs)` takes `flame` or `torch`.
Used by the differential test (test_random_programs.py) and its --fuzz-seconds mode.

A program is a list of nodes: inputs (a shape, drawn from N(mean, std^2); every input requires grad)
and ops over earlier nodes. The op families: elementwise, reductions, softmax, movement (mT
included), matmul and linear; convolutions and transposed convolutions; max, average and adaptive
pooling; interpolation; every norm (inputs with extreme means and scales); attention with every mask
kind (none, causal, boolean with fully masked rows, float additive, a learned float mask) and
attention written by hand with a learned bias; gather, index_select, index reads and writes
(duplicate and negative indices), scatter_add, scatter_reduce and index_add; cumsum, cumprod, logcumsumexp,
cummax and cummin; autocast regions around the low-precision ops; views of intermediates and buffers written
through in place (tests/frontend/random_views.py); checkpoint regions with a policy, FP8 linears and hand-written
attention with a score modification (tests/frontend/random_ops.py); reductions over dim tuples,
sort/topk/kthvalue, integer, bool and float64 constants under type promotion, integer arithmetic,
where and the masked ops, torch.linalg's norms and products (tests/frontend/random_math.py); activations and
hand-written math, cat/stack/pad/repeat/roll/einsum and their kin, reductions with keepdim broadcast back, and
explicit float16/bfloat16 casts mixed with other dtypes (tests/frontend/random_common.py). A fifth
of the programs carry an activation budget (compiled once more with it). Shapes include 0-d and
zero-size ones. Constants (indices, masks, running statistics) live in the node's arguments, so the
printed program is the whole program."""

from __future__ import annotations

import importlib
import random
import warnings
from dataclasses import dataclass, field

import numpy as np

from tests.frontend import random_common, random_math, random_ops, random_views

UNARY = ["exp", "tanh", "sigmoid", "relu", "abs", "neg", "sin", "cos", "lgamma", "erfinv", "asin", "acos", "atan",
         "asinh", "acosh", "atanh", "erfc"]
BINARY = ["add", "sub", "mul", "maximum", "minimum", "fmod", "atan2"]
# ops defined on part of the line, drawn on a map of it into their domain (away from poles and ends);
# digamma is not drawn: its gradient, trigamma, is torch's to 5e-10 only (tests/ops/test_special_functions.py
# checks flame's against mpmath)
_DOMAIN = {
    "lgamma": lambda lib, x: (x.abs() + 0.5).lgamma(),
    "erfinv": lambda lib, x: (x.tanh() * 0.9).erfinv(),
    "fmod": lambda lib, x, y: x.fmod(y.abs() + 0.5),
    "asin": lambda lib, x: (x.tanh() * 0.9).asin(),
    "acos": lambda lib, x: (x.tanh() * 0.9).acos(),
    "acosh": lambda lib, x: (x.abs() + 1.25).acosh(),
    "atanh": lambda lib, x: (x.tanh() * 0.9).atanh(),
    "atan2": lambda lib, x, y: x.atan2(y.abs() + 0.5),  # away from the origin, where the gradient is singular
}
EPS = {"float64": 2.0**-52, "float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}
# an FP8 region, which torch's side emulates but for the order of the f32 sums: they may round the bf16
# result the other way (the check allows K_LOW of these: one bf16 ulp, relative to the largest value)
EPS["fp8 recipe"] = 2.0**-10


@dataclass(frozen=True)
class Node:
    """One line of a program: `op` ("input" or a key of _APPLY) over earlier nodes `ins`, with
    keyword arguments `kw` (numbers, tuples and NumPy constants)."""

    op: str
    ins: tuple[int, ...]
    kw: tuple[tuple[str, object], ...]


@dataclass
class Program:
    """A random program: its nodes, in order; `refused`: programs (and torch's error) that torch refuses
    and flame must refuse too (a write into an expanded view or into a leaf that requires grad), met
    while drawing this one."""

    nodes: list[Node]
    refused: list[tuple[Program, str]] = field(default_factory=list)
    budget: float | None = None  # compiled once more with this activation_budget: bit for bit the same

    def __str__(self) -> str:
        head = [f"# compiled with activation_budget={self.budget} too"] if self.budget is not None else []
        return "\n".join(head + [render(i, n) for i, n in enumerate(self.nodes)])

    @property
    def grads(self) -> list[bool]:
        """Per input: whether it requires grad (an input marked grad=False is a buffer to write into)."""
        return [dict(n.kw).get("grad", True) for n in self.nodes if n.op == "input"]

    def inputs(self, seed: int) -> list[np.ndarray]:
        """The inputs' values, drawn from each input's N(mean, std^2) and rounded to float32 (so the
        float64 oracle and flame's float32 runs start from the same numbers)."""
        rng = np.random.default_rng(seed)
        out = []
        for n in self.nodes:
            if n.op == "input":
                kw = dict(n.kw)
                out.append(
                    (rng.standard_normal(kw["shape"]) * kw["std"] + kw["mean"]).astype(np.float32).astype(np.float64)
                )
        return out

    @property
    def condition(self) -> float:
        """How much the inputs' offsets amplify rounding: the largest |mean| / std of an input (at
        least 1). A norm of values near 1000 with spread 0.1 loses four digits in any float format."""
        ratios = [abs(dict(n.kw)["mean"]) / dict(n.kw)["std"] for n in self.nodes if n.op == "input"]
        return max([1.0, *ratios])

    @property
    def low_precision(self) -> str | None:
        """The autocast dtype's name when the program has an autocast region ("fp8 recipe" for an FP8 one:
        the least precise of them), else None."""
        nodes = list(_all_nodes(self.nodes))
        lows = [dict(n.kw)["dtype"] for n in nodes if n.op == "autocast"]
        lows += ["fp8 recipe" for n in nodes if n.op == "fp8_linear"]
        lows += [dict(n.kw)["dtype"] for n in nodes if n.op == "lowp"]
        return max(lows, key=lambda d: EPS[d]) if lows else None

    @property
    def casts(self) -> str | None:
        """The least precise dtype the program casts to explicitly (random_common's lowp nodes), else None:
        those casts round in float64 runs too, in torch and flame."""
        lows = [dict(n.kw)["dtype"] for n in _all_nodes(self.nodes) if n.op == "lowp"]
        return max(lows, key=lambda d: EPS[d]) if lows else None

    @property
    def fp8(self) -> bool:
        """The program has an FP8 region (torch's side emulates it; in float64 it runs as written)."""
        return any(n.op == "fp8_linear" for n in _all_nodes(self.nodes))

    def without_autocast(self) -> Program:
        """The program with each autocast region's op run as it is (in the inputs' dtype): what float64
        runs, in torch and flame."""
        return Program([_outside(n) for n in self.nodes])

    def subset(self, keep: list[int]) -> Program:
        """The program of the nodes `keep` only (their operands among them), renumbered."""
        where = {old: new for new, old in enumerate(keep)}
        return Program(
            [Node(self.nodes[i].op, tuple(where[j] for j in self.nodes[i].ins), self.nodes[i].kw) for i in keep],
            budget=self.budget,
        )

    def run(self, lib, xs: list):
        """The program's scalar loss and every value (inputs and results, in node order) on lib's
        tensors xs, one per input node."""
        vals, feed = [], iter(xs)
        for n in self.nodes:
            if n.op == "input":
                vals.append(next(feed))
            else:
                args = [vals[i] for i in n.ins]
                vals.append(_row_major(lib, _APPLY[n.op](lib, *args, **dict(n.kw)), args))
        results = [v for n, v in zip(self.nodes, vals) if n.op != "input"]
        loss = sum(_term(k, v) for k, v in enumerate(results))
        return loss, vals


def _row_major(lib, out, args):
    """out, row-major where torch made it a new tensor laid out as a permuted input (`x.t() * 2`): flame's
    op results are always row-major (docs/coming_from_pytorch.md, "Where the ops differ"), so a reshape of
    one is a view in flame where torch's copies; the programs compare what the ops compute."""
    if lib.__name__ != "torch" or not isinstance(out, lib.Tensor) or out.is_contiguous():
        return out
    ptr = out.untyped_storage().data_ptr()
    if any(isinstance(a, lib.Tensor) and a.untyped_storage().data_ptr() == ptr for a in args):
        return out  # a view of an input: flame's is one too
    return out.contiguous()


def _outside(n: Node) -> Node:
    """n as it runs outside autocast: an autocast node's op alone, an FP8 linear a plain one (checkpoint
    bodies too)."""
    kw = dict(n.kw)
    if n.op == "autocast":
        return Node(kw.pop("inner"), n.ins, tuple((k, v) for k, v in kw.items() if k != "dtype"))
    if n.op == "fp8_linear":
        return Node("linear", n.ins, (("has_weight", True), ("has_bias", len(n.ins) == 3)))
    if n.op == "checkpoint":
        body = kw["body"]
        kw["body"] = random_ops.Body(body.args, tuple(_outside(b) for b in body.nodes))
        return Node(n.op, n.ins, tuple(kw.items()))
    return n


def _all_nodes(nodes):
    """The nodes, and the nodes of checkpoint bodies among them."""
    for n in nodes:
        yield n
        if n.op == "checkpoint":
            yield from _all_nodes(dict(n.kw)["body"].nodes)


def _term(k: int, v):
    """One result's share of the loss: alternately 0.1 * sum and the mean square (sum when empty)."""
    return (v * v).mean() if k % 2 and v.numel() else v.sum() * 0.1


def render(i: int, n: Node, prefix: str = "v") -> str:
    """Node i as a line of program text (values named prefix + index)."""
    kw = dict(n.kw)
    if n.op == "input":
        grad = ", grad=False" if kw.get("grad", True) is False else ""
        return f"{prefix}{i} = input({kw['shape']}, mean={kw['mean']}, std={kw['std']}{grad})"
    args = [f"{prefix}{j}" for j in n.ins] + [f"{k}={_show(v)}" for k, v in kw.items()]
    return f"{prefix}{i} = {n.op}({', '.join(args)})"


def _show(v) -> str:
    if isinstance(v, np.ndarray):
        return f"tensor({np.array2string(v, separator=', ', threshold=10_000).replace(chr(10), '')}, {v.dtype})"
    return repr(v)


# ---- the ops, on either library -------------------------------------------------------------------


def _F(lib):
    return importlib.import_module(f"{lib.__name__}.nn.functional")


def _const(lib, a: np.ndarray, like):
    """A constant on lib: float arrays in like's dtype, integer and bool arrays as they are."""
    if a.dtype.kind == "f":
        return lib.tensor(a, dtype=like.dtype)
    return lib.tensor(a)


def _fn(name: str):
    """nn.functional.name(*tensors, **kw), with NumPy constants among kw made tensors of lib."""

    def apply(lib, *xs, **kw):
        kw = {k: _const(lib, v, xs[0]) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
        return getattr(_F(lib), name)(*xs, **kw)

    return apply


def _binary(name: str):
    if name in ("maximum", "minimum"):
        return lambda lib, x, y: getattr(lib, name)(x, y)
    return lambda lib, x, y: getattr(x, f"__{name}__")(y)


def _with_optional(name: str, slots: tuple[str, ...]):
    """nn.functional.name(x, *params): tensor operands after x fill the named slots whose flag in kw
    (has_<slot>) is true; the rest are None."""

    def apply(lib, x, *params, **kw):
        given = iter(params)
        tensors = {s: next(given) if kw.pop(f"has_{s}") else None for s in slots}
        return _fn(name)(lib, x, **tensors, **kw)

    return apply


def _sdpa(lib, q, k, v, *bias, mask=None, **kw):
    """scaled_dot_product_attention; the mask is a constant (bool or float) or the learned `bias`."""
    m = bias[0] if bias else (None if mask is None else _const(lib, mask, q))
    return _F(lib).scaled_dot_product_attention(q, k, v, attn_mask=m, **kw)


def _attention_by_hand(lib, q, k, v, bias, scale):
    return ((q @ k.transpose(-2, -1)) * scale + bias).softmax(-1) @ v


def _set_rows(lib, x, v, index, dim):
    """y = x * 1; y[..., index, ...] = v (v broadcasts along dim, so duplicate indices write one value)."""
    y = x * 1
    y[(slice(None),) * dim + (_const(lib, index, x),)] = v
    return y


def _add_rows(lib, x, v, index):
    """y = x * 1; y[index] += v: a read, an add and a write (duplicates write the same sum once)."""
    y = x * 1
    i = _const(lib, index, x)
    y[i] += v
    return y


def _contiguous_grad(lib, y):
    """y, whose gradient torch receives contiguous: torch 2.13's CPU batch_norm (and instance_norm, which
    runs it) computes a wrong input gradient from a 4-D gradient laid out channels-last, as a permute
    after the norm leaves it (against finite differences; flame's agrees with them)."""
    if lib.__name__ == "torch" and y.requires_grad:
        y.register_hook(lambda g: g.contiguous())
    return y


def _autocast(lib, *xs, dtype, inner, **kw):
    """_APPLY[inner] inside an autocast region of dtype, the result cast back to the first input's dtype."""
    region = (
        lib.autocast("cpu", dtype=getattr(lib, dtype))
        if lib.__name__ == "torch"
        else lib.autocast("cuda", dtype=getattr(lib, dtype))
    )
    with region:
        out = _APPLY[inner](lib, *xs, **kw)
    return out.to(xs[0].dtype)


_APPLY = {
    **{u: (lambda name: lambda lib, x: getattr(x, name)())(u) for u in UNARY},
    **{b: _binary(b) for b in BINARY},
    **_DOMAIN,
    "sum": lambda lib, x, dim, keep: x.sum(dim, keepdim=keep),
    "mean": lambda lib, x, dim, keep: x.mean(dim, keepdim=keep),
    "amax": lambda lib, x, dim, keep: x.amax(dim, keepdim=keep),
    "softmax": lambda lib, x, dim: x.softmax(dim),
    "log_softmax": lambda lib, x, dim: x.log_softmax(dim),
    "transpose": lambda lib, x, a, b: x.transpose(a, b),
    "mT": lambda lib, x: x.mT,
    "flip": lambda lib, x, dim: x.flip(dim),
    "unsqueeze": lambda lib, x, dim: x.unsqueeze(dim),
    "reshape": lambda lib, x, shape: x.reshape(shape),
    "matmul": lambda lib, x, y: x @ y,
    "where": lambda lib, x, y: lib.where(x > y, x, y * 0.5),
    "scale": lambda lib, x, c: x * c,
    "linear": _with_optional("linear", ("weight", "bias")),
    "addmm": lambda lib, c, a, b, alpha, beta: (lib.baddbmm if a.ndim == 3 else lib.addmm)(
        c, a, b, alpha=alpha, beta=beta
    ),
    "cumsum": lambda lib, x, dim: x.cumsum(dim),
    "cumprod": lambda lib, x, dim: x.cumprod(dim),
    "logcumsumexp": lambda lib, x, dim: x.logcumsumexp(dim),
    "cummax": lambda lib, x, dim: x.cummax(dim).values,
    "cummin": lambda lib, x, dim: x.cummin(dim).values,
    "gather": lambda lib, x, dim, index: x.gather(dim, _const(lib, index, x)),
    "index_select": lambda lib, x, dim, index: x.index_select(dim, _const(lib, index, x)),
    "take_along_dim": lambda lib, x, dim, index: x.take_along_dim(_const(lib, index, x), dim),
    "getitem": lambda lib, x, index, dim: x[(slice(None),) * dim + (_const(lib, index, x),)],
    "masked_fill": lambda lib, x, mask, value: x.masked_fill(_const(lib, mask, x), value),
    "set_rows": _set_rows,
    "add_rows": _add_rows,
    "scatter_add": lambda lib, x, src, dim, index: x.scatter_add(dim, _const(lib, index, x), src),
    "scatter_reduce": lambda lib, x, src, dim, index, reduce, include_self: x.scatter_reduce(
        dim, _const(lib, index, x), src, reduce, include_self=include_self),
    "embedding_bag": lambda lib, w, index, offsets, mode, include_last_offset: lib.nn.functional.embedding_bag(
        _const(lib, index, w), w, _const(lib, offsets, w), mode=mode, include_last_offset=include_last_offset),
    "index_add": lambda lib, x, src, dim, index, alpha: x.index_add(dim, _const(lib, index, x), src, alpha=alpha),
    "sdpa": _sdpa,
    "attention_by_hand": _attention_by_hand,
    "autocast": _autocast,
    **{f"conv{d}d": _with_optional(f"conv{d}d", ("weight", "bias")) for d in (1, 2, 3)},
    **{f"conv_transpose{d}d": _with_optional(f"conv_transpose{d}d", ("weight", "bias")) for d in (1, 2)},
    **{
        f"{p}{d}d": _fn(f"{p}{d}d")
        for p in ("max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool")
        for d in (1, 2)
    },
    "interpolate": _fn("interpolate"),
    "layer_norm": _with_optional("layer_norm", ("weight", "bias")),
    "rms_norm": _with_optional("rms_norm", ("weight",)),
    "group_norm": _with_optional("group_norm", ("weight", "bias")),
    "batch_norm": lambda lib, *xs, **kw: _contiguous_grad(
        lib, _with_optional("batch_norm", ("weight", "bias"))(lib, *xs, **kw)
    ),
    "instance_norm": lambda lib, *xs, **kw: _contiguous_grad(
        lib, _with_optional("instance_norm", ("weight", "bias"))(lib, *xs, **kw)
    ),
    **random_views.APPLY,
    **random_ops.APPLY,
    **random_math.APPLY,
    **random_common.APPLY,
}
APPLY = _APPLY  # (random_ops runs checkpoint bodies with it)


# ---- the generator --------------------------------------------------------------------------------


class _Gen:
    """A program being drawn: its nodes, their shapes and which of them later ops may take."""

    def __init__(self, rng: random.Random):
        self.rng, self.nodes, self.shapes, self.free = rng, [], [], []
        self.roots, self.refused = [], []  # the node owning each value's storage; programs flame must refuse
        self.np = np.random.default_rng(rng.getrandbits(32))  # the constants' values

    def rare(self, p: float = 0.08) -> bool:
        return self.rng.random() < p

    def input(self, shape, mean: float = 0.0, std: float = 1.0, free: bool = True, grad: bool = True) -> int:
        """A new input node (it requires grad unless `grad` is False); `free` lets later ops take it."""
        kw = (("shape", tuple(shape)), ("mean", mean), ("std", std)) + ((("grad", False),) if not grad else ())
        return self.append(Node("input", (), kw), tuple(shape), free)

    def requires_grad(self, i: int) -> bool:
        """Input node i requires grad."""
        return dict(self.nodes[i].kw).get("grad", True)

    def add_aliasing(self, op: str, ins, **kw) -> int | None:
        """A new view, write or buffer node, or None where torch refuses the program with it (run with its
        backward on torch; a refusal flame must share is kept in `refused`)."""
        node = Node(op, tuple(ins), tuple(kw.items()))
        verdict = _torch_verdict(self.nodes + [node])
        if isinstance(verdict, str):
            root = self.roots[node.ins[0]]
            leaf = self.nodes[root].op == "input" and self.requires_grad(root)  # (not a buffer torch made one)
            if random_views.must_refuse(verdict, leaf) and len(self.refused) < 2:
                self.refused.append((Program(self.nodes + [node]), verdict))
            return None
        return self.append(node, verdict, True)

    def add(self, op: str, ins, **kw) -> int | None:
        """A new op node, or None where torch refuses it (its shape comes from torch on zeros)."""
        node = Node(op, tuple(ins), tuple(kw.items()))
        shape = _shape_of(node, [self.shapes[i] for i in ins])
        return None if shape is None else self.append(node, shape, True)

    def append(self, node: Node, shape, free: bool) -> int:
        """Node appended with its result's shape; `free` lets later ops take it."""
        self.nodes.append(node)
        self.shapes.append(shape)
        self.roots.append(self.roots[node.ins[0]] if node.op in random_views.ALIASING else len(self.nodes) - 1)
        if free:
            self.free.append(len(self.nodes) - 1)
        return len(self.nodes) - 1

    def undo(self, mark: int) -> None:
        del self.nodes[mark:], self.shapes[mark:], self.roots[mark:]
        self.free = [i for i in self.free if i < mark]

    def pick(self, ok=lambda s: True) -> int | None:
        """A free value whose shape passes `ok`: the newest such half the time, else any."""
        found = [i for i in self.free if ok(self.shapes[i])]
        if not found:
            return None
        return found[-1] if self.rng.random() < 0.5 else self.rng.choice(found)

    def rounded(self, i: int) -> bool:
        """Value i is computed from a low-precision region's result (autocast, FP8, a checkpoint body with
        one): its integer values (floor, a cast) are not drawn, as a rounding of float16 or bfloat16 moves
        floor(4 x) by one at a few elements in a hundred, and which ones depends on how the run rounds
        (the order of a GEMM's f32 sums, a fused kernel's skipped intermediate rounding)."""
        todo, seen = [i], set()
        while todo:
            j = todo.pop()
            if j not in seen:
                seen.add(j)
                if Program([self.nodes[j]]).low_precision is not None:
                    return True
                todo.extend(self.nodes[j].ins)
        return False

    def size(self, lo: int = 1, hi: int = 4) -> int:
        """A dimension's size: lo..hi, now and then 0."""
        return 0 if self.rare(0.05) else self.rng.randint(lo, hi)

    def shape(self) -> tuple[int, ...]:
        """A tensor shape of rank 0 to 3."""
        return tuple(self.size() for _ in range(self.rng.choice([0, 1, 1, 2, 2, 3, 3])))

    def operand(self, shape) -> int:
        """A free value of exactly this shape half the time there is one, else a new input."""
        i = self.pick(lambda s: s == tuple(shape)) if self.rng.random() < 0.5 else None
        return self.input(shape) if i is None else i

    def batch(self, d: int, channels: int | None = None, lo: int = 1, hi: int = 5) -> int:
        """An [N, C, *spatial] operand of d spatial dims: a free value (half the time) or a new input."""
        if self.rng.random() < 0.5:
            i = self.pick(lambda s: len(s) == d + 2 and (channels is None or s[1] == channels))
            if i is not None:
                return i
        c = self.rng.randint(1, 3) if channels is None else channels
        return self.input((self.size(1, 2), c, *(self.size(lo, hi) for _ in range(d))))


def _shape_of(node: Node, shapes: list) -> tuple[int, ...] | None:
    """The result's shape from torch on zeros (the oracle for every shape rule), None if torch refuses
    the op or its gradient."""
    import torch

    xs = [torch.zeros(s, dtype=torch.float64, requires_grad=True) for s in shapes]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = _APPLY[node.op](torch, *xs, **dict(node.kw))
            out.sum().backward()  # torch's backward refuses a few shapes its forward takes
            return tuple(out.shape)
    except (RuntimeError, ValueError, IndexError, TypeError):
        return None


def _torch_verdict(nodes: list[Node]) -> tuple[int, ...] | str:
    """The last node's shape where torch runs the program (and its backward) on zeros, else torch's error;
    a program with autocast or FP8 regions runs as written too (what float64 runs: a plain matmul saves
    its input for the backward where the region saves a rounded copy, so a later write into the input
    is refused only there)."""
    import torch

    prog = Program(nodes)
    shape = None
    for p in (prog, prog.without_autocast()) if prog.low_precision else (prog,):
        xs = [
            torch.zeros(dict(n.kw)["shape"], dtype=torch.float64, requires_grad=g)
            for n, g in zip([n for n in nodes if n.op == "input"], p.grads)
        ]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                loss, vals = p.run(torch, xs)
                if loss.requires_grad:
                    loss.backward()
        except (RuntimeError, ValueError, IndexError, TypeError) as e:
            return str(e) or type(e).__name__
        shape = shape or tuple(vals[-1].shape)
    return shape


def _elementwise(g: _Gen) -> int | None:
    """A unary, binary, where, scale, reduction, softmax or movement op on a free value."""
    rng, i = g.rng, g.pick()
    s, r = g.shapes[i], len(g.shapes[i])
    kind = rng.choice(["unary", "binary", "binary", "reduce", "softmax", "move", "where", "scale"])
    if kind == "unary":
        return g.add(rng.choice(UNARY), (i,))
    if kind in ("binary", "where"):
        others = [j for j in g.free if _broadcasts(s, g.shapes[j])]
        j = (
            rng.choice(others)
            if others and rng.random() < 0.7
            else g.input(tuple(1 if rng.random() < 0.3 else n for n in s[rng.randrange(r + 1) :]))
        )
        return g.add("where" if kind == "where" else rng.choice(BINARY), (i, j))
    if kind == "reduce" and r:
        return g.add(rng.choice(["sum", "mean", "amax"]), (i,), dim=rng.randrange(-r, r), keep=rng.random() < 0.5)
    if kind == "softmax":
        return g.add(rng.choice(["softmax", "log_softmax"]), (i,), dim=rng.randrange(-r, r) if r else 0)
    if kind == "scale":
        return g.add("scale", (i,), c=rng.choice([0.5, -2.0, 3.0, 0.3, 1 / 3]))  # exact and inexact in bf16
    m = rng.choice(["transpose", "mT", "flip", "unsqueeze", "reshape"])
    if m == "transpose" and r:
        return g.add(m, (i,), a=rng.randrange(r), b=rng.randrange(r))
    if m == "mT" and r >= 2:
        return g.add(m, (i,))
    if m == "flip" and r:
        return g.add(m, (i,), dim=rng.randrange(-r, r))
    if m == "unsqueeze" and r < 4:
        return g.add(m, (i,), dim=rng.randrange(-r - 1, r + 1))
    return g.add("reshape", (i,), shape=(-1,))


def _matmul(g: _Gen) -> int | None:
    """x @ w or F.linear(x, w, b) on a free value of rank 1 or more; w a free value or a new input (now
    and then addmm or baddbmm instead)."""
    rng = g.rng
    if rng.random() < 0.2:
        return _addmm(g)
    i = g.pick(lambda s: len(s) >= 1)
    if i is None:
        return None
    k = g.shapes[i][-1]
    if rng.random() < 0.5:
        others = [j for j in g.free if len(g.shapes[j]) == 2 and g.shapes[j][0] == k]
        return g.add("matmul", (i, rng.choice(others) if others and rng.random() < 0.5 else g.input((k, g.size()))))
    w = g.input((g.size(), k))
    bias = rng.random() < 0.5
    ins = (i, w, g.input((g.shapes[w][0],))) if bias else (i, w)
    return g.add("linear", ins, has_weight=True, has_bias=bias)


def _addmm(g: _Gen) -> int | None:
    """addmm (a free matrix) or baddbmm (a free batch of matrices) with a new input that broadcasts to the
    product (the full shape, a row, a column, a scalar) and alpha and beta drawn (beta = 0 included)."""
    rng = g.rng
    i = g.pick(lambda s: len(s) in (2, 3))
    if i is None:
        return None
    *batch, m, k = g.shapes[i]
    n = g.size()
    b = g.input((*batch, k, n))
    c = g.input(rng.choice([(*batch, m, n), (n,), (m, 1), (1, n), ()]))
    alpha, beta = rng.choice([1, 0.5, -1.5, 0.3]), rng.choice([1, 0.75, -2.0, 0])
    return g.add("addmm", (c, i, b), alpha=alpha, beta=beta)


def _broadcasts(a: tuple, b: tuple) -> bool:
    return all(x == y or x == 1 or y == 1 for x, y in zip(reversed(a), reversed(b)))


def _per_dim(g: _Gen, d: int, lo: int, hi: int):
    """An int or a tuple of d ints in lo..hi (both spellings PyTorch takes)."""
    vals = tuple(g.rng.randint(lo, hi) for _ in range(d))
    return vals[0] if g.rng.random() < 0.5 else vals


def _conv(g: _Gen) -> int | None:
    """conv1d/2d/3d: stride, padding (numbers, "same", "valid"), dilation, groups, with or without
    bias; now and then an empty batch or zero output channels."""
    rng = g.rng
    d, groups = rng.choice([1, 1, 2, 2, 3]), rng.choice([1, 1, 2])
    x = g.batch(d, groups * rng.randint(1, 2), lo=1, hi=6 if d < 3 else 3)
    cout = groups * (0 if g.rare() else rng.randint(1, 2))
    k, stride, dilation = _per_dim(g, d, 1, 3), _per_dim(g, d, 1, 2), _per_dim(g, d, 1, 2)
    padding = rng.choice([0, 1, _per_dim(g, d, 0, 1), "valid"] + (["same"] if stride == 1 else []))
    w = g.input((cout, g.shapes[x][1] // groups, *((k,) * d if isinstance(k, int) else k)))
    bias = rng.random() < 0.5
    ins = (x, w, g.input((cout,))) if bias else (x, w)
    return g.add(
        f"conv{d}d",
        ins,
        has_weight=True,
        has_bias=bias,
        stride=stride,
        padding=padding,
        dilation=dilation,
        groups=groups,
    )


def _conv_transpose(g: _Gen) -> int | None:
    """conv_transpose1d/2d: stride, padding, output_padding (below the stride or the dilation),
    dilation, groups, with or without bias."""
    rng = g.rng
    d, groups = rng.choice([1, 2]), rng.choice([1, 1, 2])
    x = g.batch(d, groups * rng.randint(1, 2), hi=4)
    cout = groups * (0 if g.rare() else rng.randint(1, 2))
    k = tuple(rng.randint(1, 3) for _ in range(d))
    stride, dilation = tuple(rng.randint(1, 2) for _ in range(d)), tuple(rng.randint(1, 2) for _ in range(d))
    out_pad = tuple(rng.randrange(max(s, dl)) for s, dl in zip(stride, dilation))
    w = g.input((g.shapes[x][1], cout // groups, *k))
    bias = rng.random() < 0.5
    ins = (x, w, g.input((cout,))) if bias else (x, w)
    return g.add(
        f"conv_transpose{d}d",
        ins,
        has_weight=True,
        has_bias=bias,
        stride=stride,
        padding=rng.randint(0, 1),
        output_padding=out_pad,
        groups=groups,
        dilation=dilation,
    )


def _pool(g: _Gen) -> int | None:
    """max, average and adaptive pooling, 1-D and 2-D: padding, stride, dilation, ceil_mode,
    count_include_pad, divisor_override."""
    rng = g.rng
    d = rng.choice([1, 2])
    x = g.batch(d, lo=1, hi=6)
    kind = rng.choice(["max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool"])
    if kind.startswith("adaptive"):
        return g.add(f"{kind}{d}d", (x,), output_size=_per_dim(g, d, 1, 4))
    k = _per_dim(g, d, 1, 3)
    kw = {
        "kernel_size": k,
        "stride": rng.choice([None, _per_dim(g, d, 1, 3)]),
        "padding": rng.randint(0, min(k) // 2 if isinstance(k, tuple) else k // 2),
        "ceil_mode": rng.random() < 0.4,
    }
    if kind == "max_pool":  # (torch 2.13's CPU max pool corrupts memory when dilated with padding or ceil_mode)
        kw["dilation"] = 1 if kw["ceil_mode"] or kw["padding"] else rng.randint(1, 2)
    else:
        kw["count_include_pad"] = rng.random() < 0.5
        if d == 2:
            kw["divisor_override"] = rng.choice([None, None, rng.randint(1, 3)])
    return g.add(f"{kind}{d}d", (x,), **kw)


def _interpolate(g: _Gen) -> int | None:
    """interpolate, 1-D and 2-D: nearest, (bi)linear or bicubic (align_corners), to a size or by a scale
    factor."""
    rng = g.rng
    d = rng.choice([1, 2])
    x = g.batch(d, lo=1, hi=4)
    mode = rng.choice(["nearest", "linear"] if d == 1 else ["nearest", "bilinear", "bicubic"])
    kw = {"mode": mode}
    if rng.random() < 0.5:
        kw["size"] = _per_dim(g, d, 1, 6)
    else:
        kw["scale_factor"] = rng.choice([0.5, 0.75, 1.5, 2.0, 3.0])
        kw["recompute_scale_factor"] = rng.choice([None, True])
    if mode != "nearest":
        kw["align_corners"] = rng.choice([None, False, True])
    spatial = g.shapes[x][2:]
    if "scale_factor" in kw and min(int(n * kw["scale_factor"]) for n in spatial) < 1:
        return None
    return g.add("interpolate", (x,), **kw)


NORM_INPUTS = [(0.0, 1.0), (0.0, 1.0), (1000.0, 0.1), (-300.0, 10.0), (3.0, 1e-3)]


def _norm(g: _Gen) -> int | None:
    """layer_norm, rms_norm, group_norm, batch_norm (training or with running statistics) or
    instance_norm, of a new input drawn with an extreme mean and scale now and then. No group_norm of
    groups of fewer than three elements: torch's kernel folds the mean into the shift (x * scale + (b -
    mean * scale)), which cancels to |x| * eps / std, not the exact 0 for one element (its float64
    answer is off by 1e-12 at |x| = 300; std is sqrt(eps) there) and 4e-14 off a gradient for two close
    ones (std is half their distance), and for none gives the weight a NaN gradient (0 times the NaN
    statistics of nothing); no layer_norm of one element either (its input gradient is exactly 0, torch's
    the rounding of its terms, with nothing in the program to measure that rounding against);
    tests/nn/test_conv_functional.py checks flame's exact answers there."""
    rng = g.rng
    kind = rng.choice(["layer_norm", "rms_norm", "group_norm", "batch_norm", "batch_norm", "instance_norm"])
    mean, std = rng.choice(NORM_INPUTS)
    c = rng.randint(1, 4)
    shape = (g.size(1, 3), c, *(g.size(1, 4) for _ in range(rng.randint(0 if kind != "instance_norm" else 1, 2))))
    x = g.input(shape, mean, std, free=not mean)
    if kind in ("layer_norm", "rms_norm"):
        normalized = shape[-rng.randint(1, len(shape)) :]
        if kind == "layer_norm" and np.prod(normalized, dtype=int) == 1:  # as group_norm's groups, below
            return None
        return _affine(
            g,
            kind,
            x,
            normalized,
            kind == "layer_norm",
            normalized_shape=normalized,
            eps=rng.choice([1e-5, 1e-3] + ([None] if kind == "rms_norm" else [])),
        )
    if kind == "group_norm":
        groups = rng.choice([n for n in range(1, c + 1) if c % n == 0])
        if c // groups * np.prod(shape[2:], dtype=int) < 3:  # torch's answer is off there (see below)
            return None
        return _affine(g, kind, x, (c,), True, num_groups=groups, eps=1e-5)
    if kind == "instance_norm":
        return _affine(g, kind, x, (c,), True, eps=1e-5)
    training = rng.random() < 0.6
    stats = {"running_mean": None, "running_var": None}
    if not training or rng.random() < 0.5:
        stats = {"running_mean": g.np.normal(mean, std, c), "running_var": g.np.uniform(0.5, 2.0, c) * std * std}
    return _affine(g, kind, x, (c,), True, training=training, momentum=0.1, eps=1e-5, **stats)


def _affine(g: _Gen, kind: str, x: int, shape, has_bias: bool, **kw) -> int | None:
    """A norm with its optional weight (and bias) as new inputs."""
    weight, bias = g.rng.random() < 0.7, has_bias and g.rng.random() < 0.7
    ins = [x] + ([g.input(shape, 1.0, 1.0)] if weight else []) + ([g.input(shape)] if bias else [])
    flags = {"has_weight": weight} | ({"has_bias": bias} if has_bias else {})
    return g.add(kind, ins, **flags, **kw)


def _attention(g: _Gen) -> int | None:
    """scaled_dot_product_attention with no mask, is_causal, a boolean mask (rows fully masked now and
    then), a float additive mask (-inf entries included) or a learned float mask (an input: it
    requires grad); grouped-query heads, a given scale, empty query or key lengths; or the same
    written by hand with a learned bias."""
    rng = g.rng
    h = rng.randint(1, 2)
    gqa = rng.random() < 0.2
    lead = rng.choice([(h,), (rng.randint(1, 2), h)])
    kv = lead[:-1] + ((1,) if gqa else (h,))
    length, keys, e = g.size(1, 4), g.size(1, 4), rng.randint(1, 4)
    q = g.operand(lead + (length, e))
    k, v = g.input(kv + (keys, e)), g.input(kv + (keys, rng.randint(1, 4)))
    mask_shape = rng.choice([(length, keys), (1, length, keys), lead + (length, keys)])
    kind = rng.choice(["none", "causal", "bool", "float", "learned", "by hand"])
    if kind == "by hand" and not gqa:
        return g.add("attention_by_hand", (q, k, v, g.input(mask_shape)), scale=rng.choice([e**-0.5, 0.7]))
    kw = {"scale": rng.choice([None, None, 0.5])} | ({"enable_gqa": True} if gqa else {})
    if kind == "learned":
        return g.add("sdpa", (q, k, v, g.input(mask_shape)), **kw)
    if kind == "causal":
        kw["is_causal"] = True
    elif kind == "bool":
        mask = g.np.random(mask_shape) < 0.7
        if g.rare(0.3) and length:
            mask[..., rng.randrange(length), :] = False
        kw["mask"] = mask
    elif kind == "float":
        kw["mask"] = np.where(g.np.random(mask_shape) < 0.2, -np.inf, g.np.standard_normal(mask_shape))
    return g.add("sdpa", (q, k, v), **kw)


def _index(g: _Gen) -> int | None:
    """gather, index_select, take_along_dim, x[index] (negative and duplicate indices), x[index] = v
    and x[index] += v (duplicates write one value), scatter_add and index_add (duplicates add up),
    scatter_reduce (every reduce, with and without self), embedding_bag with offsets (a new weight: no
    ties for max to break), masked_fill."""
    rng = g.rng
    i = g.pick(lambda s: len(s) >= 1)
    if i is None:
        return None
    s = g.shapes[i]
    dim = rng.randrange(len(s))
    n = s[dim]
    kind = rng.choice(
        [
            "gather",
            "index_select",
            "take_along_dim",
            "getitem",
            "set_rows",
            "add_rows",
            "scatter_add",
            "scatter_reduce",
            "embedding_bag",
            "index_add",
            "masked_fill",
        ]
    )
    if kind == "embedding_bag":
        length, last = rng.randint(1, 6), rng.random() < 0.5
        weight = g.input((rng.randint(1, 5), rng.randint(1, 4)))
        starts = sorted(rng.randint(0, length) for _ in range(rng.randint(1, 4) - 1))
        offsets = np.array([0, *starts, *([length] if last else [])], np.int64)
        index = g.np.integers(0, g.shapes[weight][0], length)
        return g.add(kind, (weight,), index=index, offsets=offsets, mode=rng.choice(["sum", "mean", "max"]),
                     include_last_offset=last)
    if kind == "masked_fill":
        mask = g.np.random(tuple(1 if rng.random() < 0.3 else m for m in s)) < 0.5
        return g.add(kind, (i,), mask=mask, value=rng.choice([0.0, -1.5]))
    if kind in ("getitem", "set_rows", "add_rows"):
        dim = 0 if kind == "add_rows" else dim  # y[index] += v: along dim 0, in range for dim 0
        n = s[dim]
        index = g.np.integers(-n, n, g.size(1, 4)) if n else np.zeros(0, np.int64)
        if kind == "getitem":
            return g.add(kind, (i,), index=index, dim=dim)
        v = g.input(tuple(1 if j == dim else m for j, m in enumerate(s))[rng.randrange(dim + 1) :])
        return g.add(kind, (i, v), index=index, **({"dim": dim} if kind == "set_rows" else {}))
    if kind in ("index_select", "index_add"):
        index = g.np.integers(0, n, g.size(1, 4)) if n else np.zeros(0, np.int64)
        if kind == "index_select":
            return g.add(kind, (i,), dim=dim, index=index)
        src = g.input(tuple(len(index) if j == dim else m for j, m in enumerate(s)))
        return g.add(kind, (i, src), dim=dim, index=index, alpha=rng.choice([1, -0.5]))
    shape = tuple(g.size(1, 4) if j == dim else (rng.randint(1, m) if m else 0) for j, m in enumerate(s))
    reduce = rng.choice(["sum", "prod", "mean", "amax", "amin"]) if kind == "scatter_reduce" else None
    if reduce in ("amax", "amin"):  # torch's backward wants a full index there
        shape = tuple(m if j != dim else k for j, (k, m) in enumerate(zip(shape, s)))
    if kind == "take_along_dim":
        shape = tuple(m if j == dim or rng.random() < 0.5 else 1 for j, m in enumerate(shape))
    index = g.np.integers(0, n, shape) if n else np.zeros(shape, np.int64)
    if kind == "scatter_add":
        return g.add(kind, (i, g.input(shape)), dim=dim, index=index)
    if kind == "scatter_reduce":
        return g.add(kind, (i, g.input(shape)), dim=dim, index=index, reduce=reduce, include_self=rng.random() < 0.5)
    return g.add(kind, (i,), dim=dim, index=index)


def _scan(g: _Gen) -> int | None:
    """cumsum, cumprod, logcumsumexp, cummax or cummin along a dim of a free value (0-d included)."""
    i = g.pick()
    r = len(g.shapes[i])
    name = g.rng.choice(["cumsum", "cumprod", "logcumsumexp", "cummax", "cummin"])
    return g.add(name, (i,), dim=g.rng.randrange(-r, r) if r else 0)


def _autocast(g: _Gen) -> int | None:
    """A matmul, linear, convolution or attention inside an autocast region (float16 or bfloat16)."""
    i = g.rng.choice([_matmul, _conv, _attention])(g)
    if i is None:
        return None
    node = g.nodes[i]
    dtype = g.rng.choice(["float16", "bfloat16"])
    g.nodes[i] = Node("autocast", node.ins, (("dtype", dtype), ("inner", node.op), *node.kw))
    return i


FAMILIES = {
    _elementwise: 4,
    _matmul: 1.5,
    _conv: 1.5,
    _conv_transpose: 1,
    _pool: 1.5,
    _interpolate: 1,
    _norm: 2,
    _attention: 2,
    _index: 2,
    _scan: 1,
    _autocast: 1,
    random_views.views_family: 3,
    random_views.as_strided_family: 0.5,
    random_ops.checkpoint_family: 1.5,
    random_ops.fp8_family: 1,
    random_ops.attention_mod_family: 1.5,
    random_math.reduce_dims_family: 1.5,
    random_math.ordering_family: 1,
    random_math.dtypes_family: 1.5,
    random_math.int_op_family: 1,
    random_math.masked_family: 1.5,
    random_math.linalg_family: 1,
    random_common.activation_family: 2,
    random_common.structure_family: 2,
    random_common.keepdim_family: 1,
    random_common.lowp_family: 1.5,
    random_common.promote_family: 0.5,
}
# the families a checkpoint region draws its ops from (no views or writes: a region recomputes them)
CHECKPOINTED = {
    _elementwise: 4,
    _matmul: 2,
    _conv: 1,
    _pool: 0.5,
    _norm: 1,
    _attention: 1,
    _index: 1,
    _scan: 0.5,
    _autocast: 0.5,
    random_ops.fp8_family: 0.5,
    random_ops.attention_mod_family: 1,
    random_math.reduce_dims_family: 0.5,
    random_math.ordering_family: 0.5,
    random_math.dtypes_family: 0.5,
    random_math.int_op_family: 0.5,
    random_math.masked_family: 0.5,
    random_math.linalg_family: 0.5,
    random_common.activation_family: 1,
    random_common.structure_family: 0.5,
    random_common.keepdim_family: 0.5,
    random_common.lowp_family: 0.5,
}
BUDGETS = [0.0, 0.25, 0.5, 0.8, 1.0]  # activation_budget, drawn for a fifth of the programs


def program(seed: int) -> Program:
    """A random program: 1 or 2 inputs of rank 0 to 3 (sizes 0 to 4), then 2 to 5 ops drawn from the
    op families (each may add inputs of its own)."""
    rng = random.Random(seed)
    g = _Gen(rng)
    for _ in range(rng.randint(1, 2)):
        g.input(g.shape())
    target, tries = rng.randint(2, 5), 0
    while sum(n.op != "input" for n in g.nodes) < target and tries < 200:
        tries += 1
        mark = len(g.nodes)
        if rng.choices(list(FAMILIES), list(FAMILIES.values()))[0](g) is None:
            g.undo(mark)
    return Program(g.nodes, g.refused, rng.choice(BUDGETS) if rng.random() < 0.2 else None)
