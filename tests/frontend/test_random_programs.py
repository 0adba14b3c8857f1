"""Differential test over random programs (issue 14 deliverable 2): each program runs six ways and
every result is held to torch float64 autograd:
  1. eager flame, f32           2. @flame.compile, fused       3. @flame.compile, FLAME_FUSE=0
  4. eager flame in f64 (tight tolerance: the reference executor against torch f64)
  5. eager loss.backward() gradients   6. compiled gradients (backward inside the step).
A fixed budget runs in CI (BATCHES x PER_BATCH programs); `--fuzz-seconds N` keeps drawing new
seeds for N seconds instead. A failure prints the seed and the program, which replays it."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

import flame
from tests.frontend.random_programs import program

BATCHES, PER_BATCH = 50, 10  # 500 programs per CI run
F32 = {"rtol": 2e-4, "atol": 2e-5}
F64 = {"rtol": 1e-10, "atol": 1e-12}


def _grad(t) -> np.ndarray:
    """t.grad as an array; zeros for an input the loss does not use (both libraries leave it None)."""
    return np.zeros(tuple(t.shape)) if t.grad is None else t.grad.numpy()


def _oracle(prog, xs):
    ts = [torch.tensor(x, requires_grad=True) for x in xs]
    loss, vals = prog.run(torch, ts)
    loss.backward()
    return loss.item(), [v.detach().numpy() for v in vals[len(xs):]], [_grad(t) for t in ts]


def _flame_eager(prog, xs, dtype):
    ts = [flame.tensor(x, dtype=dtype, requires_grad=True) for x in xs]
    loss, vals = prog.run(flame, ts)
    loss.backward()
    return loss.item(), [v.numpy() for v in vals[len(xs):]], [_grad(t) for t in ts]


def _flame_compiled(prog, xs, monkeypatch, fuse: bool):
    monkeypatch.setenv("FLAME_FUSE", "1" if fuse else "0")

    def step(*ts):
        loss, vals = prog.run(flame, list(ts))
        loss.backward()
        return loss, vals[len(ts):]

    ts = [flame.tensor(x, dtype=flame.float32, requires_grad=True) for x in xs]
    loss, vals = flame.compile(step, name="random_program")(*ts)
    return loss.item(), [v.numpy() for v in vals], [_grad(t) for t in ts]


def _close(what, got, want, tol):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, err_msg=what, equal_nan=True, **tol)


def check_program(seed: int, monkeypatch) -> None:
    """Run program(seed) the six ways; AssertionError naming the way, the seed and the program."""
    prog = program(seed)
    xs = prog.inputs(seed)
    want = _oracle(prog, xs)
    ways = {
        "eager f32": lambda: _flame_eager(prog, xs, flame.float32),
        "eager f64": lambda: _flame_eager(prog, xs, flame.float64),
        "compiled fused": lambda: _flame_compiled(prog, xs, monkeypatch, fuse=True),
        "compiled unfused": lambda: _flame_compiled(prog, xs, monkeypatch, fuse=False),
    }
    for way, run in ways.items():
        tol = F64 if way == "eager f64" else F32
        loss, vals, grads = run()
        where = f"{way}, seed {seed}:\n{prog}"
        _close(f"loss, {where}", loss, want[0], tol)
        for k, (g, w) in enumerate(zip(vals, want[1])):
            _close(f"value v{len(xs) + k}, {where}", g, w, tol)
        for k, (g, w) in enumerate(zip(grads, want[2])):
            _close(f"gradient of input {k}, {where}", g, w, tol)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("batch", range(BATCHES))
def test_random_programs_agree_six_ways(batch, monkeypatch, request):
    seconds = request.config.getoption("--fuzz-seconds")
    if seconds:
        if batch:
            pytest.skip("--fuzz-seconds runs in the first batch")
        start, seed = time.monotonic(), 10_000
        while time.monotonic() - start < seconds:
            check_program(seed, monkeypatch)
            seed += 1
        return
    for seed in range(batch * PER_BATCH, (batch + 1) * PER_BATCH):
        check_program(seed, monkeypatch)
