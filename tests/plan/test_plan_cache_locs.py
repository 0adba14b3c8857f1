"""A plan read back from the persistent plan cache names the lines of the program that loads it, not
those of the program that stored it: the key leaves the user's lines out (the same program in another
file or at other lines loads the entry), and the loaded graph's locs, the derived ones too (backward
ops, recomputations, fused kernels, the notes passes append), are made from the trace being compiled.
An error at run time and `flame explain` of the second program name its own file, in one process and
in a new one; and for every case of the benchmark suite, a plan read back for the same trace at other
lines has the locs a compile of that trace makes. Each test has a cache directory of its own."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import flame
from flame import compiler
from flame.bench.spec import flame_inputs
from flame.bench.table import CASES
from flame.errors import IndexValueError, MemoryBudgetError
from flame.explain import explain_plan
from flame.ir import locs as loc_data
from flame.ir.graph import Graph
from flame.ir.printer import print_graph
from flame.plan import cache as plan_cache
from flame.plan import serial
from flame.runtime.check import NanWatch
from flame.runtime.reference import watch_steps

ROOT = Path(__file__).resolve().parent.parent.parent

# a small training step: a matmul, a gather (whose index is checked at run time, naming its line) and the
# backward autodiff derives from them, fused into kernels
PROGRAM = """
import flame


def step(x, w, i):
    h = (x @ w).tanh()
    loss = flame.gather(h, 0, i).sum()
    loss.backward()
    return loss, w.grad
"""
GATHER_LINE = 7  # the gather's line in PROGRAM, before the lines a file puts above it


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("FLAME_CACHE_DIR", str(d))
    monkeypatch.delenv("FLAME_CACHE_SIZE")  # the default size: the cache is on
    monkeypatch.setattr(compiler, "_CACHE", type(compiler._CACHE)())  # nothing compiled by another test
    return d


def _program(folder: Path, name: str, above: int) -> Path:
    """PROGRAM written to folder/name.py with `above` comment lines before it."""
    path = folder / f"{name}.py"
    path.write_text("".join(f"# line {k}\n" for k in range(above)) + PROGRAM)
    return path


def _step(path: Path):
    spec = importlib.util.spec_from_file_location(f"_plan_cache_locs_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.step


def _arrays():
    rng = np.random.default_rng(4)
    return rng.standard_normal((5, 6)).astype(np.float32), rng.standard_normal((6, 4)).astype(np.float32)


def _args(index: list[int]) -> list:
    x, w = _arrays()
    return [flame.tensor(x), flame.tensor(w, requires_grad=True), flame.tensor(np.array([index] * 2))]


def _torch_step(index: list[int]) -> tuple[float, np.ndarray]:
    x, w = (torch.from_numpy(a).double() for a in _arrays())
    w.requires_grad_(True)
    loss = torch.gather((x @ w).tanh(), 0, torch.tensor([index] * 2)).sum()
    loss.backward()
    return loss.item(), w.grad.numpy()


def _run(step) -> dict:
    """What one program reports: its result on good indices (checked against torch), the message of
    the error an index out of range raises at run time, `flame explain` of its compiled plan, and what
    `flame check --nan`'s watch says of the first kernel making an Inf (the matmul, w all 3e38)."""
    f = flame.compile(step)
    loss, grad = f(*_args([0, 4, 1, 2]))
    want_loss, want_grad = _torch_step([0, 4, 1, 2])
    np.testing.assert_allclose(loss.item(), want_loss, rtol=1e-5)
    np.testing.assert_allclose(grad.numpy(), want_grad, rtol=1e-5, atol=1e-6)
    with pytest.raises(IndexValueError) as e:
        f(*_args([0, 9, 1, 2]))[0].item()
    (v,) = f.variants()
    watch = NanWatch()
    watch.watch("step", v.plan)
    x, _, i = _args([0, 4, 1, 2])
    with watch_steps(watch):
        f(x, flame.tensor(np.full((6, 4), 3e38, np.float32), requires_grad=True), i)
    return {
        "error": str(e.value),
        "explain": explain_plan("step", v.graph, v.plan),
        "graph": v.graph,
        "traced": v.traced,
        "nan": watch.found[id(v.plan)],
    }


def _counts(run, *args) -> tuple[object, dict]:
    before = dataclasses.replace(plan_cache.COUNTS)
    out = run(*args)
    after = plan_cache.COUNTS
    return out, {k: getattr(after, k) - getattr(before, k) for k in ("hits", "misses", "stored", "rebuilt")}


def _names_only(report: dict, name: str, other: str, above: int) -> None:
    """report names `name`.py's lines (the gather's in the error) and never `other`.py."""
    assert f"\n  at {name}.py:{GATHER_LINE + above}  loss = flame.gather(h, 0, i).sum()" in report["error"]
    assert other not in report["error"] and other not in report["explain"] and other not in report["nan"]
    assert "FIRST BAD KERNEL in step" in report["nan"]
    assert f"# {name}.py:{GATHER_LINE + above - 1}  h = (x @ w).tanh()" in report["nan"]
    shown = set(re.findall(r"# (\w+\.py:\d+)", report["explain"]))
    assert shown and all(s.startswith(f"{name}.py:") for s in shown), shown
    locs = [op.loc for op in report["graph"].ops]
    assert all(not loc or loc.startswith(f"{name}.py:") for loc in locs)
    assert any(loc_data.kind(loc) == "b" for loc in locs if loc)  # the backward's ops name the forward's lines


def test_the_same_program_in_another_file_loads_the_plan_and_names_its_own_lines(cache_dir, tmp_path, monkeypatch):
    first = _step(_program(tmp_path, "first_program", 0))
    second = _step(_program(tmp_path, "second_program", 11))
    one, did = _counts(_run, first)
    assert did == {"hits": 0, "misses": 1, "stored": 1, "rebuilt": 0}
    _names_only(one, "first_program", "second_program", 0)
    monkeypatch.setattr(compiler, "_CACHE", type(compiler._CACHE)())  # as a new process
    two, did = _counts(_run, second)
    assert did == {"hits": 1, "misses": 0, "stored": 0, "rebuilt": 0}
    _names_only(two, "second_program", "first_program", 11)
    # the graph that runs is the one the first program stored, its lines the second's
    assert print_graph(two["graph"]) == print_graph(one["graph"])
    assert re.sub(r"\w+\.py:\d+", "", two["explain"]) == re.sub(r"\w+\.py:\d+", "", one["explain"])


def test_an_identical_graph_at_other_lines_in_one_process_names_its_own_lines(tmp_path):
    """The in-process compile cache too: its key holds the lines (the plan cache is off here)."""
    one = _run(_step(_program(tmp_path, "first_program", 0)))
    two = _run(_step(_program(tmp_path, "second_program", 3)))
    _names_only(one, "first_program", "second_program", 0)
    _names_only(two, "second_program", "first_program", 3)


def test_a_program_whose_ops_share_lines_otherwise_gets_an_entry_of_its_own(cache_dir, tmp_path, monkeypatch):
    """One printed text, other ops on one line (the loss on the gather's line): the layout in the key
    differs, so the entry of the first program, whose locs say nothing of which of its ops the
    second's shared line covers, is not loaded for it."""
    first, did = _counts(_run, _step(_program(tmp_path, "first_program", 0)))
    assert did == {"hits": 0, "misses": 1, "stored": 1, "rebuilt": 0}
    joined = tmp_path / "joined_program.py"
    joined.write_text(
        PROGRAM.replace("    loss = flame.gather(h, 0, i).sum()\n", "    loss = flame.gather(h, 0, i)\n").replace(
            "    loss.backward()\n", "    loss = loss.sum(); loss.backward()\n"
        )
    )
    monkeypatch.setattr(compiler, "_CACHE", type(compiler._CACHE)())
    report, did = _counts(_run, _step(joined))
    assert did == {"hits": 0, "misses": 1, "stored": 1, "rebuilt": 0}
    assert print_graph(report["traced"]) == print_graph(first["traced"])
    assert f"\n  at joined_program.py:{GATHER_LINE}  loss = flame.gather(h, 0, i)" in report["error"]


def _dynamic(step, sizes: tuple[int, ...]) -> list[str]:
    """step compiled with a dynamic batch size and called at each size, then with an index out of
    range at that size: the errors' messages."""
    f = flame.compile(step, dynamic=True)
    rng = np.random.default_rng(2)
    errors = []
    for n in sizes:
        x = flame.tensor(rng.standard_normal((n, 6)).astype(np.float32))
        w_np = rng.standard_normal((6, 4)).astype(np.float32)
        # a fresh w per call: a w whose .grad the first call set would be another trace (its .grad an input)
        f(x, flame.tensor(w_np, requires_grad=True), flame.tensor(np.zeros((2, 4), np.int64)))
        with pytest.raises(IndexValueError) as e:
            f(x, flame.tensor(w_np, requires_grad=True), flame.tensor(np.full((2, 4), n + 3)))[0].item()
        errors.append(str(e.value))
    return errors


def test_a_dynamic_size_new_to_both_programs_names_the_loading_programs_line(cache_dir, tmp_path, monkeypatch):
    """The size template is fitted from the graphs loaded for the second program: the size it
    instantiates (11, new to both) names the second program's line too."""
    _, did = _counts(_dynamic, _step(_program(tmp_path, "first_program", 0)), (8, 5))
    assert did["stored"] >= 2
    monkeypatch.setattr(compiler, "_CACHE", type(compiler._CACHE)())
    errors, did = _counts(_dynamic, _step(_program(tmp_path, "second_program", 9)), (8, 5, 11))
    assert did["hits"] >= 2 and did["stored"] == 0 and did["misses"] == 0
    for error in errors:
        assert f"\n  at second_program.py:{GATHER_LINE + 9}  loss = flame.gather" in error and "first_" not in error


_PROCESS = """
import importlib.util, json, sys, warnings
warnings.simplefilter("error", RuntimeWarning)
import numpy as np
import flame
from flame.explain import explain_plan
from flame.plan import cache
spec = importlib.util.spec_from_file_location("program", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
f = flame.compile(module.step)
rng = np.random.default_rng(4)
x, w = rng.standard_normal((5, 6)).astype(np.float32), rng.standard_normal((6, 4)).astype(np.float32)
args = lambda index: [flame.tensor(x), flame.tensor(w, requires_grad=True), flame.tensor(np.array([index] * 2))]
loss = f(*args([0, 4, 1, 2]))[0].item()
try:
    f(*args([0, 9, 1, 2]))[0].item()
    error = None
except IndexError as e:
    error = str(e)
(v,) = f.variants()
c = cache.COUNTS
print(json.dumps({"loss": loss.hex(), "error": error, "explain": explain_plan("step", v.graph, v.plan),
                  "cache": {"hits": c.hits, "misses": c.misses, "stored": c.stored, "rebuilt": c.rebuilt}}))
"""


def _process(program: Path, cache: Path) -> dict:
    env = dict(os.environ, FLAME_DEVICE="reference", FLAME_CACHE_DIR=str(cache), FLAME_CACHE_SIZE="")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run(
        [sys.executable, "-c", _PROCESS, str(program)], capture_output=True, text=True, env=env, timeout=300, cwd=ROOT
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_new_process_running_the_program_from_another_file_names_its_own_lines(tmp_path):
    cache = tmp_path / "cache"
    one = _process(_program(tmp_path, "first_program", 0), cache)
    two = _process(_program(tmp_path, "second_program", 20), cache)
    assert one["cache"] == {"hits": 0, "misses": 1, "stored": 1, "rebuilt": 0}
    assert two["cache"] == {"hits": 1, "misses": 0, "stored": 0, "rebuilt": 0}
    assert two["loss"] == one["loss"]
    assert f"at second_program.py:{GATHER_LINE + 20}  loss = flame.gather" in two["error"]
    assert "first_program" not in two["error"] and "first_program" not in two["explain"]
    assert "second_program.py:" in two["explain"]


def _moved(trace: Graph) -> Graph:
    """trace with each of its source lines replaced by another (one for one, kinds, checkpoint regions
    and empty lines kept): the same program at other lines of another file."""
    moved = trace.copy()
    lines = {text: f"moved_program.py:{500 + i}  line {i}" for i, text in enumerate(loc_data.origins(trace)) if text}
    for op in moved.ops:
        if op.loc:
            op.loc = loc_data.make(loc_data.kind(op.loc), lines[op.loc], getattr(op.loc, "region", 0))
    return moved


def _locs(g: Graph) -> list[tuple]:
    return [
        (type(op.loc).__name__, op.loc, getattr(op.loc, "region", None), getattr(op.loc, "saved", None)) for op in g.ops
    ]


def _traced(case) -> tuple[Graph, object]:
    """The trace flame.compile makes for one call of `case` at its quick sizes, and the case's memory budget."""
    sizes = case.sizes(True)
    a = flame_inputs(case, sizes)
    bound = case.flame(sizes, a, flame.compile)
    data = [a[n] for n, inp in case.inputs(sizes).items() if not inp.state]
    c = bound.call
    return type(c)(c.fn, c.name)._build(c._args(data), compile=False).traced, c.memory_budget


def _compiled(trace: Graph, budget) -> compiler.CompiledGraph:
    """trace compiled with `budget`, or without one where its quick sizes cannot meet it."""
    try:
        return compiler.compile_graph(trace, memory_budget=budget)
    except MemoryBudgetError:
        return compiler.compile_graph(trace)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_plan_read_back_for_a_trace_at_other_lines_has_the_locs_its_compile_makes(case, cuda_target):
    """Every loc of the compiled graph derives from a trace op's; read back with the moved trace, the
    locs (kinds, texts, regions) are those compiling the moved trace gives, and none names the stored
    trace's lines."""
    trace, budget = _traced(case)
    moved = _moved(trace)
    assert loc_data.layout(moved).text == loc_data.layout(trace).text and print_graph(moved) == print_graph(trace)
    c = _compiled(trace, budget)
    found = loc_data.origins(trace)
    assert all(loc_data.origin(op.loc, found)[0] >= 0 for op in c.graph.ops if op.loc)
    graph, plan = serial.loads(serial.dumps(c.graph, c.plan, trace), moved)
    want = _compiled(moved, budget)  # its lines differ: compiled anew
    assert want.plan is not c.plan and print_graph(want.graph) == print_graph(c.graph)
    assert _locs(graph) == _locs(want.graph)
    assert print_graph(graph, locs=True) == print_graph(want.graph, locs=True)
    old = {text.split("  ")[0] for text in found if text}
    assert not any(op.loc and op.loc.split("  ")[0] in old for op in graph.ops)
    assert plan.graph is graph


def test_a_payload_written_for_a_trace_reads_back_only_with_a_trace_of_as_many_ops(tmp_path):
    step = _step(_program(tmp_path, "traced_program", 2))
    trace = flame.compile(step).trace(*_args([0, 1, 2, 3]))
    c = compiler.compile_graph(trace)
    payload = serial.dumps(c.graph, c.plan, trace)
    with pytest.raises(serial.BadPayload, match="trace of"):
        serial.loads(payload)
    shorter = trace.copy()
    shorter.ops.pop()
    with pytest.raises(serial.BadPayload, match="trace of"):
        serial.loads(payload, shorter)
    graph, _ = serial.loads(payload, trace)
    assert _locs(graph) == _locs(c.graph)


def test_layout_says_which_ops_share_a_line_and_their_kinds_not_the_lines():
    from flame.ir.builder import Builder
    from flame.ir.graph import BackwardLoc, CheckpointLoc
    from flame.ir.types import TensorType

    def graph(a: str, b: str) -> Graph:
        g = Graph("g")
        x = g.add_input(TensorType((2,), flame.float32))
        bld = Builder(g)
        for loc in (a, a, None, b, BackwardLoc(a), BackwardLoc(""), CheckpointLoc(b, 3, True)):
            bld.loc = loc
            x = bld.exp(x)
        g.outputs = [x]
        return g

    one, two = loc_data.layout(graph("a.py:1  y = f(x)", "a.py:2")), loc_data.layout(graph("b.py:7", "b.py:9  z"))
    assert one.text == two.text == "0*2 n*1 2*1 0b*1 eb*1 2s*1"
    assert one.lines == ("a.py:1  y = f(x)", None, "a.py:2", "") and two.lines[0] == "b.py:7"
    assert loc_data.layout(graph("a.py:1", "a.py:1")).text != one.text  # two lines become one
    found = loc_data.origins(graph("a.py:1  y = f(x)", "a.py:2"))
    assert loc_data.origin("a.py:1  y = f(x)  [decompose_conv: why]", found) == (0, "  [decompose_conv: why]")
    assert loc_data.origin("elsewhere.py:3", found) == (2, "elsewhere.py:3")  # an empty line (op 2 has none)
    assert loc_data.origin("elsewhere.py:3", {"a.py:1": 0}) == (-1, "elsewhere.py:3")
    assert loc_data.derived("b.py:7  y = g(x)", "  [decompose_conv: why]") == "b.py:7  y = g(x)  [decompose_conv: why]"
    assert loc_data.derived(None, "[decompose_conv: why]") == "[decompose_conv: why]"
