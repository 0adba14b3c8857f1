"""More op families for the random programs (tests/frontend/random_programs.py):

  checkpoint      a random sub-chain of ops (elementwise, matmuls, norms, attention, convolutions,
                  pooling, scans, indexing) run inside flame.utils.checkpoint with a random policy
                  (save_nothing, save_matmuls, save_only_these_names over values marked with
                  flame.tag); torch runs it in torch.utils.checkpoint.checkpoint: values and gradients
                  are torch's
  fp8_linear      F.linear inside an FP8 autocast region (float8_e4m3fn or a Float8Recipe with current
                  scaling and a margin); torch's side emulates the recipe as docs/mixed_precision_and_memory.md
                  specifies it: per-tensor f32 scales from the amax, saturated casts to float8_e4m3fn
                  (the gradient to float8_e5m2, from the bf16 cotangent), products of the rounded values
                  scaled by both inverse scales, rounded to bf16; the gradient passes straight through
                  the rounding and the gradient GEMMs run in FP8 too. In float64 nothing is cast (autocast's
                  rule), so the float64 run is held to the plain linear (Program.without_autocast)
  attention_mod   attention written by hand with a random elementwise score modification between the
                  scaled scores and the softmax (tanh soft-capping, sigmoid, sin, abs, a learned per-head,
                  per-query or per-key vector, a per-position bias from arange, a constant) and a mask
                  from arange comparisons at its end (causal, a sliding window, a band, a causal offset):
                  a compiled program holds one attention op with a score_mod graph for each
                  (tests/frontend/test_random_programs.py checks that).

The activation budget (a program-level draw, not a node) lives in random_programs.program."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import numpy as np

E4M3_MAX, E5M2_MAX, SCALE_EPS = 448.0, 57344.0, 1e-12


def _programs():
    """tests/frontend/random_programs.py (imported on use: it imports this module)."""
    return importlib.import_module("tests.frontend.random_programs")


# ---- checkpoint ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Body:
    """The ops of a checkpoint region: `nodes` over the region's arguments a0.. (the checkpoint node's
    operands, in order) and the body's own earlier results; the region's value is the last one's."""

    args: int
    nodes: tuple

    def __repr__(self) -> str:
        return "[" + "; ".join(_programs().render(self.args + k, n, "a") for k, n in enumerate(self.nodes)) + "]"


def _checkpoint(lib, *xs, policy: str, tags: tuple, saves: tuple, body: Body):
    """The body run inside lib's checkpoint (flame: with `policy`; the body values whose local index is in
    `tags` marked with flame.tag as "t<index>", and save_only_these_names(*saves) for policy "names")."""
    apply = _programs().APPLY

    def region(*args):
        vals = list(args)
        for k, n in enumerate(body.nodes):
            v = apply[n.op](lib, *[vals[i] for i in n.ins], **dict(n.kw))
            if lib.__name__ == "flame" and body.args + k in tags:
                v = lib.tag(v, f"t{body.args + k}")
            vals.append(v)
        return vals[-1]

    if lib.__name__ == "torch":
        import torch.utils.checkpoint

        return torch.utils.checkpoint.checkpoint(region, *xs, use_reentrant=False)
    import flame.utils

    chosen = {
        "default": None,
        "save_nothing": "save_nothing",
        "save_matmuls": "save_matmuls",
        "names": flame.utils.checkpoint_policies.save_only_these_names(*saves),
    }[policy]
    return flame.utils.checkpoint(region, *xs, policy=chosen, use_reentrant=False)


def checkpoint_family(g) -> int | None:
    """One to three ops drawn by the families that compute (no views or writes), made one checkpoint node:
    the ops that the last one reads (directly or not) are its body, every value from outside (earlier
    values and the inputs the families drew) its operands."""
    p, rng = _programs(), g.rng
    mark = len(g.nodes)
    inner = p.CHECKPOINTED
    for _ in range(rng.randint(1, 3)):
        step = len(g.nodes)
        if rng.choices(list(inner), list(inner.values()))[0](g) is None:
            g.undo(step)
    ops = [i for i in range(mark, len(g.nodes)) if g.nodes[i].op != "input"]
    if not ops:
        return None
    keep, todo = set(), [ops[-1]]
    while todo:
        i = todo.pop()
        if i >= mark and g.nodes[i].op != "input" and i not in keep:
            keep.add(i)
            todo.extend(g.nodes[i].ins)
    body = sorted(keep)
    outside = sorted({j for i in body for j in g.nodes[i].ins if j not in keep})
    drawn = [(i, g.nodes[i], g.shapes[i], i in g.free) for i in range(mark, len(g.nodes)) if g.nodes[i].op == "input"]
    local = {old: k for k, old in enumerate(outside)} | {old: len(outside) + k for k, old in enumerate(body)}
    nodes = tuple(p.Node(g.nodes[i].op, tuple(local[j] for j in g.nodes[i].ins), g.nodes[i].kw) for i in body)
    g.undo(mark)
    where = {i: i for i in range(mark)}
    for old, node, shape, free in drawn:
        where[old] = g.append(node, shape, free)
    policy = rng.choice(["default", "save_nothing", "save_matmuls", "names", "names"])
    tags = tuple(sorted(rng.sample(range(len(outside), len(outside) + len(body)), rng.randint(0, len(body)))))
    saves = tuple(f"t{t}" for t in tags if rng.random() < 0.7) + (("unused",) if g.rare(0.2) else ())
    return g.add(
        "checkpoint",
        tuple(where[j] for j in outside),
        policy=policy,
        tags=tags,
        saves=saves if policy == "names" else (),
        body=Body(len(outside), nodes),
    )


# ---- FP8 -------------------------------------------------------------------------------------------


def _scale(t, fp8_max: float, margin: int = 0):
    """The f32 scale fp8_max / 2**margin / max(amax(t), 1e-12) of the recipe, as a Python float: a Python
    number over the f32 amax, which torch computes as amax.reciprocal() * number (as flame does; a true f32
    division differs by an ulp now and then, which moves a cast lying on a tie of the FP8 format)."""
    import torch

    amax = torch.tensor(float(t.detach().abs().max()), dtype=torch.float32).clamp(min=SCALE_EPS)
    return float((fp8_max / 2.0**margin) / amax)


def _to_fp8(t, scale: float, dtype, fp8_max: float):
    """t * scale in f32, saturated to the format's range and rounded to it (nearest even), as float64."""
    import torch

    scaled = t.detach().float() * torch.tensor(scale, dtype=torch.float32)
    return scaled.clamp(-fp8_max, fp8_max).to(dtype).double()


def _inv(scale: float) -> float:
    import torch

    return float(torch.tensor(1.0, dtype=torch.float32) / torch.tensor(scale, dtype=torch.float32))


def _bf16(t):
    import torch

    return t.to(torch.bfloat16).to(t.dtype)


def _fp8_gemm_class():
    """torch.autograd.Function emulating flame's FP8 linear (frontend/fp8.py) on x [m, k], w [n, k]."""
    import torch

    class Fp8Linear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, margin):
            sx, sw = _scale(x, E4M3_MAX, margin), _scale(w, E4M3_MAX, margin)
            x8, w8 = _to_fp8(x, sx, torch.float8_e4m3fn, E4M3_MAX), _to_fp8(w, sw, torch.float8_e4m3fn, E4M3_MAX)
            ctx.save_for_backward(x8, w8)
            ctx.inv = (_inv(sx), _inv(sw))
            return _bf16((x8 @ w8.T * ctx.inv[0] * ctx.inv[1]).to(x.dtype))

        @staticmethod
        def backward(ctx, g):
            x8, w8 = ctx.saved_tensors
            g = _bf16(g)  # the cotangent of a bf16 result
            sg = _scale(g, E5M2_MAX)
            g8 = _to_fp8(g, sg, torch.float8_e5m2, E5M2_MAX)
            inv_x, inv_w = ctx.inv
            dx = g8 @ w8 * _inv(sg) * inv_w
            dw = g8.T @ x8 * _inv(sg) * inv_x
            return dx.to(g.dtype), dw.to(g.dtype), None

    return Fp8Linear


def _round_bf16_class():
    """torch.autograd.Function: a value rounded to bf16 and back (its gradient rounded too: a cast's)."""
    import torch

    class RoundBf16(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return _bf16(x)

        @staticmethod
        def backward(ctx, g):
            return _bf16(g)

    return RoundBf16


def _fp8_linear(lib, x, w, *bias, recipe: str, margin: int = 0):
    """F.linear(x, w, bias) in an FP8 autocast region, the bf16 result cast back to x's dtype; on torch
    the recipe's emulation (module doc)."""
    if lib.__name__ == "flame":
        fp8 = lib.float8_e4m3fn if recipe == "float8_e4m3fn" else lib.amp.Float8Recipe("current", margin=margin)
        with lib.autocast("cuda", dtype=fp8):
            y = lib.nn.functional.linear(x, w, bias[0] if bias else None)
        return y.to(x.dtype)
    k = w.shape[-1]
    y = _fp8_gemm_class().apply(x.reshape(-1, k), w, margin).reshape(*x.shape[:-1], w.shape[0])
    if bias:
        rnd = _round_bf16_class().apply
        y = rnd(y + rnd(bias[0]))
    return y


def fp8_family(g) -> int | None:
    """F.linear of a free value (rank 1 to 3, no zero-size dim: an empty tensor has no amax to scale by,
    and torch has no FP8 recipe whose answer would say what it gives) and a new weight [n, k] (and bias),
    in an FP8 region: flame.float8_e4m3fn or Float8Recipe(scaling="current", margin=0..2)."""
    rng = g.rng
    i = g.pick(lambda s: 1 <= len(s) <= 3 and 0 not in s)
    if i is None:
        i = g.input(tuple(rng.randint(1, 4) for _ in range(rng.randint(1, 3))))
    k = g.shapes[i][-1]
    w = g.input((rng.randint(1, 4), k))
    bias = rng.random() < 0.5
    ins = (i, w, g.input((g.shapes[w][0],))) if bias else (i, w)
    recipe = rng.choice(["float8_e4m3fn", "Float8Recipe"])
    margin = {"margin": rng.randint(0, 2)} if recipe == "Float8Recipe" else {}
    return g.add("fp8_linear", ins, recipe=recipe, **margin)


# ---- attention with a score modification -----------------------------------------------------------

SCORE_UNARY = ("sigmoid", "sin", "abs")
SCORE_OPERANDS = ("head", "query", "key", "position", "constant")  # head/query/key: learned vectors


def _positions(lib, length: int, keys: int):
    return lib.arange(length)[:, None], lib.arange(keys)[None, :]


def _keep(kind: str, arg: int, i, j):
    """Which scores a mask keeps, from positions i [L, 1] and j [1, S] (either library or NumPy)."""
    if kind == "causal":
        return j <= i
    if kind == "window":
        return (i - j < arg) & (j <= i)
    if kind == "band":
        return abs(i - j) <= arg
    return j <= i + arg  # "offset"


def _attention_mod(lib, q, k, v, *learned, scale: float, steps: tuple, mask: tuple):
    """softmax(mod(q @ k^T * scale)) @ v: mod the elementwise `steps` ((op, operand or cap) pairs), then
    the `mask` ((kind, arg)) as where(keep, s, -inf) (masked_fill of the dropped ones for a window)."""
    s = (q @ k.transpose(-2, -1)) * scale
    i, j = _positions(lib, *s.shape[-2:])
    given = iter(learned)
    for op, arg in steps:
        if op == "softcap":
            s = (s / arg).tanh() * arg
        elif op in SCORE_UNARY:
            s = getattr(s, op)()
        else:
            x = {
                "head": lambda: next(given)[:, None, None],
                "query": lambda: next(given)[:, None],
                "key": lambda: next(given),
                "position": lambda: (j - i) * 0.25,
                "constant": lambda: 0.75,
            }[arg]()
            s = s + x if op == "add" else s * x if op == "mul" else s - x
    if mask[0] == "window":
        s = s.masked_fill(~_keep(*mask, i, j), float("-inf"))
    elif mask[0] != "none":
        s = lib.where(_keep(*mask, i, j), s, float("-inf"))
    return s.softmax(-1) @ v


def attention_mod_family(g) -> int | None:
    """Hand-written attention ([batch,] heads, L, E) with 0 to 3 score modification steps and a mask that
    leaves every query row a key (a row masked out entirely gives NaN in torch's hand-written softmax and
    0 in flame's compiled attention op, as docs/training.md says: that difference is not drawn)."""
    rng = g.rng
    h = rng.randint(1, 3)
    lead = rng.choice([(h,), (rng.randint(1, 2), h)])
    length, keys, e = g.size(1, 5), g.size(1, 5), rng.randint(1, 4)
    q = g.operand(lead + (length, e))
    k, v = g.input(lead + (keys, e)), g.input(lead + (keys, rng.randint(1, 3)))
    steps, learned = [], []
    for _ in range(rng.choice([0, 1, 1, 2, 2, 3])):
        op = rng.choice(["softcap", "softcap", *SCORE_UNARY, "add", "add", "mul", "sub"])
        if op == "softcap":
            steps.append((op, rng.choice([0.5, 2.0, 20.0])))
        elif op in SCORE_UNARY:
            steps.append((op, None))
        else:
            arg = rng.choice(SCORE_OPERANDS)
            steps.append((op, arg))
            size = {"head": h, "query": length, "key": keys}.get(arg)
            if size is not None:
                learned.append(g.input((size,)))
    mask = rng.choice([("none", 0), ("none", 0), ("causal", 0), ("window", rng.randint(1, 3)), ("band", 1)])
    mask = rng.choice([mask, ("offset", rng.randint(-1, 2))]) if g.rare(0.3) else mask
    i, j = np.arange(length)[:, None], np.arange(keys)[None, :]
    if mask[0] != "none" and length and not _keep(*mask, i, j).any(-1).all():
        mask = ("none", 0)
    return g.add("attention_mod", (q, k, v, *learned), scale=rng.choice([e**-0.5, 0.7]), steps=tuple(steps), mask=mask)


def modified(nodes, shapes: list) -> tuple[int, int, int]:
    """Of the program's attention_mod nodes (`shapes`: every node's shape) whose q, k and v are not
    empty and whose result no later write overwrites (an attention whose result nothing reads is
    dead code): how many there are, how many have a nonlinear step (soft-capping, sigmoid, sin, abs:
    a step that adds a graph input or multiplies by a constant may become the op's mask input or part of
    its scale instead), and how many have one or a mask that drops a score (a mask that keeps every
    score may vanish). A compiled program holds at least as many attention ops, at least the second
    count of them with a score_mod graph and the third with a score_mod graph or is_causal (a mask that
    is torch's causal one becomes that)."""
    from tests.frontend import random_views

    roots = random_views.roots(nodes)
    written = {roots[i] for i, n in enumerate(nodes) if n.op == "write"}
    count = steps = masks = 0
    for i, n in enumerate(nodes):
        kw = dict(n.kw)
        if n.op != "attention_mod" or i in written or any(0 in shapes[j] for j in n.ins[:3]):
            continue
        count += 1
        nonlinear = any(op in ("softcap", *SCORE_UNARY) for op, _ in kw["steps"])
        steps += nonlinear
        length, keys = shapes[n.ins[0]][-2], shapes[n.ins[1]][-2]
        positions = np.arange(length)[:, None], np.arange(keys)[None, :]
        masks += nonlinear or (kw["mask"][0] != "none" and not _keep(*kw["mask"], *positions).all())
    return count, steps, masks


APPLY = {"checkpoint": _checkpoint, "fp8_linear": _fp8_linear, "attention_mod": _attention_mod}
