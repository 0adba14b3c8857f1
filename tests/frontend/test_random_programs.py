"""Differential test over random programs (tests/frontend/random_programs.py: every op family, 0-d
and zero-size shapes, extreme norm inputs, every attention mask kind, index writes, autocast
regions, checkpoint regions with policies, FP8 linears, score modifications). Each program runs four
ways and every result, and the gradient of every input (each requires grad), is held to torch float64
autograd on the same inputs (an FP8 region: torch's emulation of the recipe, in the float32 ways):
  1. eager flame, float32      2. eager flame, float64
  3. @flame.compile, fused     4. @flame.compile, unfused (FLAME_FUSE=0), float32
A compiled run holds an attention op (with a score_mod graph) for each hand-written attention with a
score modification; a program with an activation budget is compiled once more with it, and gives
the fused run's results and gradients bit for bit.
CI runs a fixed set of seeds. `--fuzz-seconds N` draws fresh seeds for N seconds instead, keeps
going past failures and prints how many programs ran, and for each failure its seed, what disagreed
and a minimal reproduction: the fewest nodes of the program that still fail, as program text.

Tolerances are per dtype and relative to the float64 result's magnitude: an element may be off by
u * |want| + max(u * W, M * e), where u = K * eps(dtype) times the program's condition (the largest
|mean| / std of an input: a norm of values near 1000 spread by 0.1 loses four digits in any float
format), W the largest magnitude among the program's float64 results and gradients (a gradient that
is exactly zero in float64 is the cancellation of terms of about that size), and e how far torch's
own float32 run lands from float64 on that array (scaled to the dtype's eps; the comparison
PyTorch's compiler tests make against a float64 reference). eps is the autocast dtype's in a program
with an autocast region (float32 runs only: autocast leaves float64 alone, in torch and flame, so the
float64 run's e comes from torch's float32 run without the autocast regions). Where torch's own
float32 run overflows (inf or NaN where its float64 answer is finite), the float32 runs are not
compared: the program has left float32's range there."""

from __future__ import annotations

import contextlib
import os
import random
import re
import time

import numpy as np
import pytest
import torch

import flame
from flame.errors import FlameError, MemoryBudgetError
from flame.ir.ops.attention import FORWARD as ATTENTION
from tests.frontend import random_math, random_ops, random_views
from tests.frontend.random_programs import EPS, Node, Program, _Gen, program

SEEDS = range(100)  # the fixed CI budget (about 10 s of CPU)
K = 64  # roundings a program of a few ops and short reductions may accumulate
K_LOW = 4
M = 8  # how many times torch's own float32 error a flame float32 run may show


@contextlib.contextmanager
def _fusion(on: bool):
    """FLAME_FUSE set for the duration (the setting is part of the compile cache key)."""
    old = os.environ.get("FLAME_FUSE")
    os.environ["FLAME_FUSE"] = "1" if on else "0"
    try:
        yield
    finally:
        if old is None:
            del os.environ["FLAME_FUSE"]
        else:
            os.environ["FLAME_FUSE"] = old


def _shown(prog: Program) -> list[int]:
    """The nodes whose values are compared: every op's, then every input's that does not require grad
    (a buffer the program may write into), read after the program ran."""
    grads = dict(zip([i for i, n in enumerate(prog.nodes) if n.op == "input"], prog.grads))
    return [i for i, n in enumerate(prog.nodes) if n.op != "input"] + [i for i, g in grads.items() if not g]


def _results(prog: Program, vals: list) -> list:
    return [vals[i] for i in _shown(prog)]


def _oracle(prog: Program, xs, dtype=torch.float64):
    """torch's loss, results and input gradients (float64 arrays), computed in dtype, and whether the
    loss requires grad (a program that only writes inputs into buffers may have no gradient at all: its
    runs call no backward())."""
    ts = [torch.tensor(x, dtype=dtype, requires_grad=g) for x, g in zip(xs, prog.grads)]
    loss, vals = prog.run(torch, ts)
    if loss.requires_grad:
        loss.backward()
    return [
        _array(loss),
        [_array(v) for v in _results(prog, vals)],
        [_array(t.grad, t) for t in ts],
        loss.requires_grad,
    ]


def _array(t, like=None) -> np.ndarray:
    """A tensor of either library as a float64 array; zeros for the missing gradient of an input the
    loss does not use (both libraries leave it None)."""
    if t is None:
        return np.zeros(tuple(like.shape))
    return np.asarray(
        t.detach().double().numpy() if isinstance(t, torch.Tensor) else t.to(flame.float64).numpy(), np.float64
    )


def _torch_error(prog: Program, xs, want) -> list:
    """How far torch itself lands from its float64 answer in float32 (with autocast's dtype inside
    autocast regions): per result, the largest difference. A flame float32 run may be off by a few
    times this (the comparison PyTorch's own compiler tests make against a float64 reference)."""
    try:
        got = _oracle(prog, xs, torch.float32)
    except RuntimeError:  # an autocast dtype torch's CPU autocast does not run
        return [0.0, [0.0] * len(want[1]), [0.0] * len(want[2])]
    err = lambda g, w: float(np.nan_to_num(np.abs(g - w), nan=0.0, posinf=0.0).max(initial=0.0))  # noqa: E731
    return [
        err(got[0], want[0]),
        [err(g, w) for g, w in zip(got[1], want[1])],
        [err(g, w) for g, w in zip(got[2], want[2])],
    ]


def _flame_eager(prog: Program, xs, dtype, backward: bool = True):
    """The program run eagerly: loss, results, input gradients (float64 arrays) and None (no graph)."""
    ts = [flame.tensor(x, dtype=dtype, requires_grad=g) for x, g in zip(xs, prog.grads)]
    with _fusion(True):
        loss, vals = prog.run(flame, ts)
        if backward:
            loss.backward()
    return _array(loss), [_array(v) for v in _results(prog, vals)], [_array(t.grad, t) for t in ts], None


def _flame_compiled(prog: Program, xs, fuse: bool, backward: bool = True, budget: float | None = None):
    """The program as one @flame.compile step (with `budget` as its activation_budget); the buffers among
    its inputs are arguments it updates in place, read after the call. Loss, results, input gradients
    and the graph that ran."""
    ops = [i for i, n in enumerate(prog.nodes) if n.op != "input"]

    def step(*ts):
        loss, vals = prog.run(flame, list(ts))
        if backward:
            loss.backward()
        return loss, [vals[i] for i in ops]

    ts = [flame.tensor(x, dtype=flame.float32, requires_grad=g) for x, g in zip(xs, prog.grads)]
    compiled = flame.compile(step, name="random_program", activation_budget=budget)
    with _fusion(fuse):
        loss, vals = compiled(*ts)
    vals = list(vals) + [t for t, g in zip(ts, prog.grads) if not g]
    return _array(loss), [_array(v) for v in vals], [_array(t.grad, t) for t in ts], compiled._last.graph


# flame's eager backward recomputes the forward, so it needs every value a recorded op read: one written
# in place since, with nothing keeping it, is refused where torch's op saved nothing (compiled runs agree);
# torch's own error ("modified by an inplace operation") is not this one
RECOMPUTED = "a tensor needed to compute gradients was modified in place after it was used by"

WAYS = {  # (program, inputs, whether torch's loss requires grad: then each way calls backward())
    "eager f32": lambda prog, xs, bw: _flame_eager(prog, xs, flame.float32, bw),
    "eager f64": lambda prog, xs, bw: _flame_eager(prog, xs, flame.float64, bw),
    "compiled fused": lambda prog, xs, bw: _flame_compiled(prog, xs, True, bw),
    "compiled unfused": lambda prog, xs, bw: _flame_compiled(prog, xs, False, bw),
}


def _unit(prog: Program, way: str) -> float:
    """The allowed error per unit of magnitude for this program run this way: K roundings of the
    dtype (K_LOW of autocast's: its inputs are rounded once and it accumulates in float32)."""
    low = prog.casts if way == "eager f64" else prog.low_precision
    if low:
        return K_LOW * EPS[low] * prog.condition
    return K * EPS["float64" if way == "eager f64" else "float32"] * prog.condition


def _magnitude(want) -> float:
    """The largest finite magnitude among the float64 loss, results and gradients."""
    arrays = [np.asarray(want[0]).ravel(), *[a.ravel() for a in want[1]], *[a.ravel() for a in want[2]]]
    flat = np.abs(np.concatenate(arrays))
    flat = flat[np.isfinite(flat)]
    return float(flat.max()) if flat.size else 0.0


def _overflows(prog: Program, xs, want) -> tuple:
    """Where torch's own float32 run is inf or NaN and its float64 answer is not (the program leaves
    float32's range there): masks shaped as want, for the float32 ways, which are not compared there."""
    try:
        got = _oracle(prog, xs, torch.float32)
    except RuntimeError:  # an autocast dtype torch's CPU autocast does not run
        return None, [None] * len(want[1]), [None] * len(want[2])
    m = lambda g, w: ~np.isfinite(np.asarray(g, np.float64)) & np.isfinite(np.asarray(w, np.float64))  # noqa: E731
    return m(got[0], want[0]), [m(g, w) for g, w in zip(got[1], want[1])], [m(g, w) for g, w in zip(got[2], want[2])]


def _close(what: str, got, want, unit: float, atol: float, lost=None) -> None:
    """got against torch's float64 want, except where `lost` (torch's float32 run overflowed there)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, torch {want.shape}"
    if lost is not None and np.shape(lost) == want.shape and np.any(lost):
        want = np.where(lost, got, want)
    np.testing.assert_allclose(got, want, rtol=unit, atol=atol, equal_nan=True, err_msg=what)


def _room(prog: Program, way: str):
    """M times torch's float32 error (float32 with autocast's dtype in its regions; for the float64
    way, which runs no autocast region, float32 throughout) scaled to this way's dtype: rounding
    errors grow with the dtype's eps."""
    if way == "eager f64":  # from torch's float32 run without autocast regions (check)
        return lambda e: M * e * EPS["float64"] / EPS["float32"]
    return lambda e: M * e


def check(prog: Program, xs: list[np.ndarray]) -> None:
    """Run prog on xs the four ways against torch float64; AssertionError on the first disagreement
    (flame's errors included), its message naming the way and the value. A compiled run also holds an
    attention op (with a score_mod graph) for each hand-written attention with a score modification,
    and a program drawn with an activation budget is compiled with it too: bit for bit the fused run."""
    want = _oracle(prog, xs)
    slack = _torch_error(prog, xs, want)
    # float64 runs no autocast region: torch's answer and float32 error without them (scaled from float32's
    # eps); torch's float64 answer is the same but where an FP8 region is emulated in it
    plain = prog.without_autocast()
    want64 = _oracle(plain, xs) if prog.fp8 else want
    slack64 = _torch_error(plain, xs, want64) if prog.low_precision else slack
    ops = _shown(prog)
    inputs = [i for i, n in enumerate(prog.nodes) if n.op == "input"]
    lost32 = _overflows(prog, xs, want)
    fused = None
    for way, run in WAYS.items():
        unit, room = _unit(prog, way), _room(prog, way)
        e_loss, e_vals, e_grads = slack64 if way == "eager f64" else slack
        w_loss, w_vals, w_grads, _ = want64 if way == "eager f64" else want
        floor = unit * _magnitude(want64 if way == "eager f64" else want)
        try:
            loss, vals, grads, graph = run(prog, xs, want[3])
        except Exception as e:
            if way.startswith("eager") and RECOMPUTED in str(e) and any(n.op == "write" for n in prog.nodes):
                continue  # eager backward recomputes what torch saves (docs/coming_from_pytorch.md, Gradients)
            raise AssertionError(f"{way}: {type(e).__name__}: {e}") from e
        lost = (None, [None] * len(w_vals), [None] * len(w_grads)) if way == "eager f64" else lost32
        _close(f"{way}: loss", loss, w_loss, unit, max(floor, room(e_loss)), lost[0])
        for i, g, w, e, m in zip(ops, vals, w_vals, e_vals, lost[1]):
            _close(f"{way}: value v{i}", g, w, unit, max(floor, room(e)), m)
        for i, g, w, e, m in zip(inputs, grads, w_grads, e_grads, lost[2]):
            _close(f"{way}: gradient of input v{i}", g, w, unit, max(floor, room(e)), m)
        if graph is not None:
            _attention_ops(prog, graph, _shapes(prog, want), way)
        if way == "compiled fused":
            fused = (loss, vals, grads)
    if prog.budget is not None:
        _same_under_budget(prog, xs, want[3], fused)
    for bad, why in prog.refused:
        refuses(bad, why)


def _attention_ops(prog: Program, graph, shapes: list, way: str) -> None:
    """The compiled graph holds an attention op for each hand-written attention_mod node, with a score_mod
    graph for each that modifies the scores, or is_causal where only a mask equal to torch's causal one
    drops scores (docs/training.md, "Score modifications"). shapes: the nodes' shapes."""
    count, steps, masks = random_ops.modified(prog.nodes, shapes)
    if not count:
        return
    found = [op for op in graph.ops if op.name == ATTENTION]
    with_mod = [op for op in found if op.attrs.get("score_mod") is not None]
    masking = [op for op in found if op.attrs.get("score_mod") is not None or op.attrs.get("is_causal")]
    assert len(found) >= count and len(with_mod) >= steps and len(masking) >= masks, (
        f"{way}: {count} hand-written attentions ({steps} with a nonlinear score modification, {masks} with one "
        f"or a mask) became {len(found)} attention ops ({len(with_mod)} with a score_mod graph, "
        f"{len(masking)} with one or is_causal)"
    )


def _shapes(prog: Program, want) -> list:
    """Every node's shape: an input's from its declaration, an op's from torch's result."""
    shown = dict(zip(_shown(prog), want[1]))
    return [dict(n.kw)["shape"] if n.op == "input" else shown[i].shape for i, n in enumerate(prog.nodes)]


def _same_under_budget(prog: Program, xs, backward: bool, fused) -> None:
    """The fused compiled run again with prog.budget as its activation_budget: the same loss, results and
    gradients bit for bit (the documented promise on the reference executor). A budget below the floor
    (what recomputing everything that may be recomputed keeps: values under 4 KiB are never offloaded)
    raises flame.MemoryBudgetError naming the budget to ask for instead; the run then asks for that."""
    budget = prog.budget
    try:
        got = _flame_compiled(prog, xs, True, backward, budget=budget)
    except MemoryBudgetError as e:
        floor = re.search(r"ask for activation_budget >= ([0-9]+(?:\.[0-9]+)?)", str(e))
        assert floor and float(floor[1]) > budget, f"activation_budget={budget}: {e}"
        budget = float(floor[1])
        got = None
    except Exception as e:
        raise AssertionError(f"compiled, activation_budget={budget}: {type(e).__name__}: {e}") from e
    way = f"compiled, activation_budget={budget}"
    if got is None:
        try:
            got = _flame_compiled(prog, xs, True, backward, budget=budget)
        except Exception as e:
            raise AssertionError(f"{way} (the floor {prog.budget} was refused for): {type(e).__name__}: {e}") from e
    inputs = [i for i, n in enumerate(prog.nodes) if n.op == "input"]
    np.testing.assert_array_equal(got[0], fused[0], err_msg=f"{way}: loss differs from the run without it")
    for i, g, w in zip(_shown(prog), got[1], fused[1]):
        np.testing.assert_array_equal(g, w, err_msg=f"{way}: value v{i} differs from the run without it")
    for i, g, w in zip(inputs, got[2], fused[2]):
        np.testing.assert_array_equal(g, w, err_msg=f"{way}: gradient of input v{i} differs from the run without it")


REFUSING = {
    "eager": lambda prog, xs: _flame_eager(prog, xs, flame.float32),
    "compiled": lambda prog, xs: _flame_compiled(prog, xs, fuse=True),
}


def refuses(prog: Program, why: str) -> None:
    """flame raises its error on a program torch refuses (a write into an expanded view or into a leaf
    that requires grad), eagerly and compiled; AssertionError naming the program where it does not."""
    xs = [np.zeros(dict(n.kw)["shape"]) for n in prog.nodes if n.op == "input"]
    for way, run in REFUSING.items():
        try:
            run(prog, xs)
        except FlameError:
            continue
        except Exception as e:
            raise AssertionError(f"{way}: {type(e).__name__} where torch refuses ({_gist(why)}): {e}\n{prog}") from e
        raise AssertionError(f"{way}: flame runs a program torch refuses ({_gist(why)})\n{prog}")


def _ancestors(prog: Program, j: int, aliases: bool = False) -> list[int]:
    """Node j, the nodes it reads, and the writes before j into the storage of any of them (aliases:
    every node before j that shares storage with one of them: the views a write changes)."""
    roots = random_views.roots(prog.nodes)
    sharing = [w for w in range(j) if prog.nodes[w].op == "write" or aliases and roots[w] != w]
    keep, todo = set(), [j]
    while todo:
        i = todo.pop()
        if i not in keep:
            keep.add(i)
            todo.extend(prog.nodes[i].ins)
            todo.extend(w for w in sharing if roots[w] == roots[i])
    return sorted(keep)


def _fails(prog: Program, xs, torch_may_refuse: bool = False) -> str | None:
    """Why prog disagrees with torch, or None. torch_may_refuse: a part of a program (shrink) that torch
    refuses (a write whose refusal a dropped node avoided) passes."""
    try:
        with np.errstate(all="ignore"):
            check(prog, xs)
    except AssertionError as e:
        return str(e)
    except RuntimeError:
        if not torch_may_refuse:
            raise
    return None


def shrink(prog: Program, xs) -> tuple[list[int], str]:
    """The nodes of the smallest sub-program that still fails (the first failing op with only the
    nodes it reads), and its failure."""
    inputs = [i for i, n in enumerate(prog.nodes) if n.op == "input"]
    for j, n in enumerate(prog.nodes):
        if n.op == "input":
            continue
        tried = []
        for keep in (_ancestors(prog, j), _ancestors(prog, j, aliases=True)):
            if keep in tried:
                continue
            tried.append(keep)
            sub_xs = [xs[inputs.index(i)] for i in keep if i in inputs]
            why = _fails(prog.subset(keep), sub_xs, torch_may_refuse=True)
            if why:
                return keep, why
    return list(range(len(prog.nodes))), _fails(prog, xs) or "passes when run again"


def replay(seed: int, keep: list[int] | None = None) -> None:
    """Run program(seed), or its nodes `keep`, the four ways (what a failure report tells to run)."""
    prog = program(seed)
    xs = prog.inputs(seed)
    if keep is not None:
        inputs = [i for i, n in enumerate(prog.nodes) if n.op == "input"]
        xs = [xs[inputs.index(i)] for i in keep if i in inputs]
        prog = prog.subset(keep)
    print(prog)
    check(prog, xs)


def report(seed: int) -> str | None:
    """None when program(seed) agrees with torch; else the seed, the failure and a minimal reproduction."""
    prog = program(seed)
    xs = prog.inputs(seed)
    why = _fails(prog, xs)
    if why is None:
        return None
    for bad, refusal in prog.refused:
        try:
            refuses(bad, refusal)
        except AssertionError as e:
            keep = _ancestors(bad, len(bad.nodes) - 1)
            small = bad.subset(keep)
            try:
                refuses(small, refusal)
            except AssertionError:
                bad = small
            return f"seed {seed}: {_gist(str(e))}\n  a program torch refuses and flame runs:\n" + "\n".join(
                "    " + line for line in str(bad).splitlines()
            )
    keep, small_why = shrink(prog, xs)
    return (
        f"seed {seed}: {_gist(why)}\n  minimal reproduction, replay({seed}, {keep}) in "
        f"tests/frontend/test_random_programs.py: {_gist(small_why)}\n"
        + "\n".join("    " + line for line in str(prog.subset(keep)).splitlines())
    )


def _gist(why: str) -> str:
    """A failure's first lines that say something (numpy's message starts with a blank line)."""
    return " | ".join([line.strip() for line in why.splitlines() if line.strip()][:4])


def _fuzz_for(seconds: float, write) -> list[str]:
    start, seed, ran, failures = time.monotonic(), int.from_bytes(os.urandom(3), "little") * 1000, 0, []
    while time.monotonic() - start < seconds:
        try:
            found = report(seed)
        except Exception as e:  # torch refusing the drawn program, or the harness failing: the seed says which
            found = f"seed {seed}: the check itself raised {type(e).__name__}: {_gist(str(e))}"
        ran += 1
        if found:
            failures.append(found)
            write(found)
        seed += 1
    write(f"random programs: {ran} ran, {len(failures)} failed")
    return failures


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """torch on one thread: its thread pool costs far more than it saves on these small tensors."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("seed", SEEDS)
def test_random_program_agrees_with_torch(seed, request):
    if request.config.getoption("--fuzz-seconds"):
        pytest.skip("--fuzz-seconds runs test_fuzz_for_the_given_time instead")
    found = report(seed)
    assert found is None, found


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_fuzz_for_the_given_time(request):
    seconds = request.config.getoption("--fuzz-seconds")
    if not seconds:
        pytest.skip("runs with --fuzz-seconds N")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    failures = _fuzz_for(seconds, lambda line: reporter.write_line(line) if reporter else print(line))
    assert not failures, f"{len(failures)} random programs disagree with torch:\n" + "\n".join(failures)


def test_a_budget_below_the_floor_is_refused_asking_for_one_that_is_met():
    """A program whose activations flame cannot recompute to nothing (values under 4 KiB are never
    offloaded): activation_budget=0 is refused naming the floor and the least budget of three decimals
    that holds it (int(budget * unconstrained bytes) >= floor, rounded up, never down), and that budget
    gives the results and gradients of the plan without a budget, bit for bit (and torch's)."""

    def node(op, *ins, **kw):
        return Node(op, ins, tuple(kw.items()))

    prog = Program(
        [
            node("input", shape=(1, 1, 3), mean=0.0, std=1.0),
            node("input", shape=(2, 2, 1, 1), mean=0.0, std=1.0),
            node("interpolate", 1, mode="nearest", size=3),
            node("add", 0, 2),
            node("maximum", 3, 0),
            node("input", shape=(3, 4), mean=0.0, std=1.0),
            node("autocast", 4, 5, dtype="bfloat16", inner="matmul"),
        ],
        budget=0.0,
    )
    xs = prog.inputs(0)
    with pytest.raises(MemoryBudgetError, match=r"ask for activation_budget >= ") as e:
        _flame_compiled(prog, xs, True, budget=0.0)
    said = re.search(r"of the (\d+) bytes .* the floor is (\d+) bytes .* activation_budget >= ([0-9.]+)", str(e.value))
    unconstrained, floor, asked = int(said[1]), int(said[2]), float(said[3])
    assert 0 < floor < unconstrained
    assert int(asked * unconstrained) >= floor > int(round(asked - 0.001, 3) * unconstrained)
    check(prog, xs)


def test_a_floor_above_the_unconstrained_plan_asks_for_no_budget():
    """Where the plan with every value recomputed or offloaded keeps more for the backward than the plan
    without a budget (a strided 3-d convolution into a matrix norm: the recomputation's own saved values),
    the least a plan keeps is the unconstrained one's: the refusal asks for activation_budget >= 1.000,
    which is met, never for a fraction above 1."""

    def node(op, *ins, **kw):
        return Node(op, ins, tuple(kw.items()))

    prog = Program(
        [
            node("input", shape=(1, 1, 3, 2, 3), mean=0.0, std=1.0),
            node("input", shape=(1, 1, 1, 1, 1), mean=0.0, std=1.0),
            node("conv3d", 0, 1, has_weight=True, has_bias=False, stride=2, padding=1, dilation=2, groups=1),
            node("linalg", 2, fn="matrix_norm", ord="fro", dim=(3, -1), keep=True),
        ],
        budget=0.0,
    )
    xs = prog.inputs(0)
    with pytest.raises(MemoryBudgetError, match=r"ask for activation_budget >= 1.000") as e:
        _flame_compiled(prog, xs, True, budget=0.0)
    said = re.search(r"of the (\d+) bytes .* the floor is (\d+) bytes", str(e.value))
    assert int(said[1]) == int(said[2]) > 0
    check(prog, xs)


def _node(op, *ins, **kw):
    return Node(op, ins, tuple(kw.items()))


# minimal programs of seeds --fuzz-seconds found failing, run as they were drawn (a seed draws another
# program once the generator changes)
FOUND = {
    "a write into attention's result, torch's math path (value's head size differs)": Program([
        _node("input", shape=(2, 1, 2, 1), mean=0.0, std=1.0),
        _node("input", shape=(2, 1, 1, 1), mean=0.0, std=1.0),
        _node("input", shape=(2, 1, 1, 4), mean=0.0, std=1.0),
        _node("sdpa", 0, 1, 2, scale=None, is_causal=True),
        _node("write", 3, kind="zero_"),
    ]),
    "a write into a tensor copied onto from one gelu saved, compiled": Program([
        _node("input", shape=(), mean=0.0, std=1.0),
        _node("act", 0, fn="gelu"),
        _node("input", shape=(), mean=0.0, std=1.0),
        _node("fmod", 1, 2),
        _node("write", 3, 0, kind="copy_"),
        _node("input", shape=(), mean=0.0, std=1.0),
        _node("write", 3, 5, kind="copy_"),
    ]),
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name", list(FOUND))
def test_found_program_agrees_with_torch(name):
    prog = FOUND[name]
    check(prog, prog.inputs(0))


def test_integer_values_of_a_rounded_value_are_not_drawn():
    """floor(4 x) of a value computed under autocast moves by one wherever a rounding of the low-precision
    format takes 4 x across an integer, and which elements those are depends on how a run rounds
    (flame's eager linear rounds the product and then its sum with the bias, torch's addmm once): int_op
    and the integer values of the dtypes family are drawn from other values only."""
    linear = (("dtype", "bfloat16"), ("inner", "linear"), ("has_weight", True), ("has_bias", False))
    for seed in range(20):
        g = _Gen(random.Random(seed))
        x, w = g.input((2, 3)), g.input((4, 3))
        y = g.append(Node("autocast", (x, w), linear), (2, 4), True)
        z = g.add("scale", (y,), c=2.0)
        assert g.rounded(y) and g.rounded(z) and not g.rounded(x)
        g.free = [z]
        assert random_math.int_op_family(g) is None
        random_math.dtypes_family(g)
        assert all(n.op != "promote" or dict(n.kw)["fn"] not in ("floor_divide", "remainder") for n in g.nodes)
