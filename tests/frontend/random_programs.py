"""A generator of random PyTorch-style programs over the ops flame and torch share by name, run on
either library: `program(seed)` returns `run(lib, xs)` where lib is `flame` or `torch`. Used by the
differential test (test_random_programs.py) and its --fuzz-seconds mode."""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

UNARY = ["exp", "tanh", "sigmoid", "relu", "abs", "neg", "sin", "cos"]
BINARY = ["add", "sub", "mul", "maximum", "minimum"]


@dataclass
class Program:
    """Input shapes and a list of steps; each step is (op, operand indices, arguments)."""

    shapes: list[tuple[int, ...]]
    steps: list[tuple[str, tuple[int, ...], tuple]]

    def __str__(self) -> str:
        lines = [f"inputs {self.shapes}"] + [f"v{len(self.shapes) + i} = {op}{tuple(f'v{j}' for j in ins)} {args}"
                                              for i, (op, ins, args) in enumerate(self.steps)]
        return "\n".join(lines)

    def inputs(self, seed: int) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        return [rng.standard_normal(s) for s in self.shapes]

    def run(self, lib, xs: list):
        """The program's scalar loss (and every intermediate value) on lib's tensors xs."""
        vals = list(xs)
        for op, ins, args in self.steps:
            vals.append(_APPLY[op](lib, *[vals[i] for i in ins], *args))
        loss = sum((v * v).mean() if i % 2 else v.sum() * 0.1 for i, v in enumerate(vals[len(xs):]))
        return loss, vals


def _where(lib, x, y):
    return lib.where(x > y, x, y * 0.5)


_APPLY = {
    **{u: (lambda name: lambda lib, x: getattr(x, name)())(u) for u in UNARY},
    **{b: (lambda name: lambda lib, x, y: getattr(lib, name)(x, y) if name in ("maximum", "minimum")
           else getattr(x, {"add": "__add__", "sub": "__sub__", "mul": "__mul__"}[name])(y))(b) for b in BINARY},
    "sum": lambda lib, x, dim, keep: x.sum(dim, keepdim=keep),
    "mean": lambda lib, x, dim, keep: x.mean(dim, keepdim=keep),
    "amax": lambda lib, x, dim, keep: x.amax(dim, keepdim=keep),
    "softmax": lambda lib, x, dim: x.softmax(dim),
    "log_softmax": lambda lib, x, dim: x.log_softmax(dim),
    "transpose": lambda lib, x, a, b: x.transpose(a, b),
    "flip": lambda lib, x, dim: x.flip(dim),
    "unsqueeze": lambda lib, x, dim: x.unsqueeze(dim),
    "reshape": lambda lib, x, shape: x.reshape(shape),
    "matmul": lambda lib, x, y: x @ y,
    "where": _where,
    "scale": lambda lib, x, c: x * c,
}


def program(seed: int) -> Program:
    """A random program of 3 to 8 steps over 1 to 3 inputs of rank 1 to 3 (sizes 1 to 4)."""
    rng = random.Random(seed)
    shapes = [tuple(rng.randint(1, 4) for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(1, 3))]
    known = list(shapes)
    steps = []
    while len(steps) < rng.randint(3, 8):
        i = len(known) - 1 if rng.random() < 0.5 else rng.randrange(len(known))
        step = _step(rng, known, i)
        if step is not None:
            steps.append(step)
            known.append(_shape_of(step, known))
    return Program(shapes, steps)


def _step(rng: random.Random, known: list, i: int):
    s = known[i]
    r = len(s)
    kind = rng.choice(["unary", "binary", "binary", "reduce", "softmax", "move", "matmul", "where", "scale"])
    if kind == "unary":
        return rng.choice(UNARY), (i,), ()
    if kind in ("binary", "where"):
        others = [j for j, t in enumerate(known) if _broadcasts(s, t)]
        return ("where" if kind == "where" else rng.choice(BINARY)), (i, rng.choice(others)), ()
    if kind == "reduce" and r > 1:
        return rng.choice(["sum", "mean", "amax"]), (i,), (rng.randrange(-r, r), rng.random() < 0.5)
    if kind == "softmax":
        return rng.choice(["softmax", "log_softmax"]), (i,), (rng.randrange(-r, r),)
    if kind == "move":
        m = rng.choice(["transpose", "flip", "unsqueeze", "reshape"])
        if m == "transpose" and r > 1:
            return m, (i,), (rng.randrange(r), rng.randrange(r))
        if m == "flip":
            return m, (i,), (rng.randrange(-r, r),)
        if m == "unsqueeze" and r < 4:
            return m, (i,), (rng.randrange(-r - 1, r + 1),)
        return "reshape", (i,), ((-1,),)
    if kind == "matmul" and r == 2:
        others = [j for j, t in enumerate(known) if len(t) == 2 and t[0] == s[1]]
        if others:
            return "matmul", (i, rng.choice(others)), ()
    if kind == "scale":
        return "scale", (i,), (rng.choice([0.5, -2.0, 3.0]),)
    return None


def _broadcasts(a: tuple, b: tuple) -> bool:
    return all(x == y or x == 1 or y == 1 for x, y in zip(reversed(a), reversed(b)))


def _shape_of(step, known) -> tuple[int, ...]:
    """The result shape, from torch on zeros (the oracle for the shape rules of the ops above)."""
    import torch

    op, ins, args = step
    xs = [torch.zeros(known[j], dtype=torch.float64) for j in ins]
    return tuple(_APPLY[op](torch, *xs, *args).shape)
