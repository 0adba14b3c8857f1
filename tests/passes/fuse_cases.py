"""Composite graphs for the fusion tests: traced through the frontend and simplified (not fused)."""

from __future__ import annotations

import numpy as np

import flame
import flame.nn as nn
import flame.nn.functional as F
import flame.optim as optim
from flame.ir import Graph
from flame.passes.pipeline import run_pipeline
from flame.runtime.device import executor

_R = np.random.default_rng(0)
X = _R.standard_normal((16, 40)).astype(np.float32)
W = _R.standard_normal((40,)).astype(np.float32)
LABELS = _R.integers(0, 40, 16)


def build(fn, *arrays) -> tuple[Graph, list[np.ndarray]]:
    """(fn traced and simplified, the arrays bound to its inputs)."""
    c = flame.compile(fn)
    args = c._args(arrays)
    entry = c._build(args)
    ex = executor()
    inputs = [np.array(ex.to_numpy(a)) for a in entry.replay.inputs(args, ex)]
    return run_pipeline(entry.traced), inputs


def _forward(name, f):
    def fn(x):
        return f(x)

    fn.__name__ = name
    return fn


def _backward(name, f):
    """loss = sum(f(p) * w) for a captured p that requires grad: the graph returns the loss and p's grad."""
    p = flame.tensor(X, requires_grad=True)
    w = flame.tensor(_R.standard_normal(X.shape).astype(np.float32))

    def fn():
        loss = (f(p) * w).sum()
        loss.backward()
        return loss

    fn.__name__ = name
    return fn


def _ln(x):
    return F.layer_norm(x, 40, flame.tensor(W), flame.tensor(W * 0.5))


def _rms(x):
    return F.rms_norm(x, 40, flame.tensor(W))


def _gelu_chain(x):
    return F.gelu((x * 2.0 + 1.0).tanh() - x)


COMPOSITES = {
    "softmax": lambda x: F.softmax(x, -1),
    "log_softmax": lambda x: F.log_softmax(x, -1),
    "layer_norm": _ln,
    "rms_norm": _rms,
    "gelu_chain": _gelu_chain,
}


def composite(name: str, backward: bool = False) -> tuple[Graph, list[np.ndarray]]:
    f = COMPOSITES[name]
    if backward:
        return build(_backward(name + "_bwd", f))
    return build(_forward(name, f), X)


def cross_entropy(backward: bool = False) -> tuple[Graph, list[np.ndarray]]:
    p = flame.tensor(X, requires_grad=True)

    def ce(y):
        loss = F.cross_entropy(p, y)
        if backward:
            loss.backward()
        return loss

    return build(ce, LABELS)


def cross_entropy_bf16(backward: bool = True, vocab: int = 40) -> tuple[Graph, list[np.ndarray]]:
    """gpt_train's loss, small: bf16 logits [2, 8, vocab] from a bf16 matmul (a tied head), then
    F.cross_entropy(logits.float().reshape(-1, vocab), labels) and the head's gradient."""
    w = flame.tensor(_R.standard_normal((vocab, 8)).astype(np.float32), requires_grad=True)

    def ce_bf16(x, y):
        logits = x.to("bf16") @ w.to("bf16").transpose(0, 1)
        loss = F.cross_entropy(logits.float().reshape(-1, vocab), y)
        if not backward:
            return loss
        loss.backward()
        return loss, w.grad

    return build(ce_bf16, _R.standard_normal((2, 8, 8)).astype(np.float32), _R.integers(0, vocab, 16))


def square_bf16() -> tuple[Graph, list[np.ndarray]]:
    """A bf16 matmul result's .float() read by a forward kernel (h * h) and by a backward kernel
    (d(h*h) = 2 h g, with g from the next matmul's backward)."""
    w = flame.tensor(_R.standard_normal((8, 8)).astype(np.float32), requires_grad=True)

    def square(x):
        h = (x.to("bf16") @ w.to("bf16")).float()
        loss = (((h * h).to("bf16") @ w.to("bf16")).float() ** 2).sum()
        loss.backward()
        return loss, w.grad

    return build(square, _R.standard_normal((16, 8)).astype(np.float32))


def layer_norm_params() -> tuple[Graph, list[np.ndarray]]:
    """layer_norm forward + backward for x, weight and bias (the benchmark's case, small): y, dx, dw,
    db; the weight and bias gradients are column reductions over the rows."""
    dy = flame.tensor(_R.standard_normal(X.shape).astype(np.float32))

    def ln_fwd_bwd(x, w, b):
        def loss(x, w, b):
            return (F.layer_norm(x, 40, w, b) * dy).sum()

        return F.layer_norm(x, 40, w, b), flame.grad(loss, (0, 1, 2))(x, w, b)

    return build(ln_fwd_bwd, X, W, W * 0.5)


def layer_norm_linear() -> tuple[Graph, list[np.ndarray]]:
    """A step: gelu(layer_norm(x) @ m.T).sum() (a Linear), backward; the gradients of x, weight, bias
    and m. m's gradient reads the LayerNorm output, which the backward recomputes (remat.free)
    beside the LayerNorm backward."""
    x, w, b = (flame.tensor(a, requires_grad=True) for a in (X, W, W * 0.5))
    m = flame.tensor(_R.standard_normal((8, 40)).astype(np.float32), requires_grad=True)

    def ln_linear():
        loss = F.gelu(F.layer_norm(x, 40, w, b) @ m.transpose(0, 1)).sum()
        loss.backward()
        return loss, x.grad, w.grad, b.grad, m.grad

    return build(ln_linear)


def mlp_adamw(n_hidden: int = 2, width: int = 16, dtype: str = "f32") -> tuple[Graph, list[np.ndarray], int]:
    """One AdamW training step of a small MLP (Linear, ReLU, LayerNorm, GELU, cross-entropy):
    (graph, inputs, number of parameters)."""
    g = flame.Generator(3)
    layers = [nn.Linear(8, width, generator=g, dtype=dtype), nn.ReLU(), nn.LayerNorm(width, dtype=dtype)]
    for _ in range(n_hidden - 1):
        layers += [nn.Linear(width, width, generator=g, dtype=dtype), nn.GELU()]
    layers.append(nn.Linear(width, 4, generator=g, dtype=dtype))
    model = nn.Sequential(*layers)
    opt = optim.AdamW(model.parameters(), lr=0.01)

    def train_step(x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    r = np.random.default_rng(1)
    x = r.standard_normal((32, 8)).astype(flame.ir.dtype_of(dtype).np_dtype)
    graph, inputs = build(train_step, x, r.integers(0, 4, 32))
    return graph, inputs, len(list(model.parameters()))


GPT_SHAPES = [(64, 16), (16, 16), (16,), (16,), (48, 16), (48,), (16, 16), (16,), (16,), (16,), (64, 16), (64,),
              (16, 64), (16,), (16,), (16,)]  # a tiny GPT's parameters: embeddings, one block, final norm


def multi_adamw(shapes=GPT_SHAPES, dtype: str = "bf16") -> tuple[Graph, list[np.ndarray]]:
    """One AdamW step over parameters of the given shapes (state in the parameters' dtype), each
    gradient a data input: the multi-tensor update alone, as the adamw_multi_tensor benchmark runs it."""
    r = np.random.default_rng(2)
    np_dt = flame.ir.dtype_of(dtype).np_dtype
    ps = [nn.Parameter(flame.tensor(r.standard_normal(s).astype(np.float32)).to(getattr(flame, dtype)))
          for s in shapes]
    opt = optim.AdamW(ps, lr=1e-3, weight_decay=1e-2)

    def adamw_step(*gs):
        for p, g in zip(ps, gs):
            p.grad = g
        opt.step()
        for p in ps:
            p.grad = None

    return build(adamw_step, *[(r.standard_normal(s) * 1e-2).astype(np.float32).astype(np_dt) for s in shapes])
