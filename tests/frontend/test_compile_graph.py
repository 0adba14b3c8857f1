"""compile_graph: the one pipeline and the one cache behind @flame.compile, eager ops and backward()."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace

import numpy as np

import flame
from flame import compiler, debug
from flame.ir import Builder, Graph, TensorType, f32, print_graph
from flame.runtime.backend import capabilities


def _graph(name: str = "g") -> Graph:
    g = Graph(name)
    b = Builder(g)
    x = g.add_input(TensorType((4, 3), f32))
    g.outputs = [b.relu(b.mul(b.add(x, 1.0), 1.0))]
    return g


def test_stages_run_and_identical_graphs_share_one_entry() -> None:
    first = compiler.compile_graph(_graph())
    assert "mul" not in print_graph(first.graph)  # x*1 simplified away before planning
    assert [s for s, _ in first.timings][-2:] == ["plan", "reference compile"]
    again = compiler.compile_graph(_graph())
    assert again.run is first.run and again.plan is first.plan
    (out,) = again.run([np.full((4, 3), -2.0, np.float32)])
    np.testing.assert_array_equal(out, np.zeros((4, 3), np.float32))


def test_own_run_shares_the_plan_but_not_the_runnable() -> None:
    shared = compiler.compile_graph(_graph("own"))
    own = compiler.compile_graph(_graph("own"), own_run=True)
    assert own.plan is shared.plan and own.run is not shared.run


def test_fusion_setting_is_part_of_the_key(monkeypatch) -> None:
    monkeypatch.setenv("FLAME_FUSE", "0")
    unfused = compiler.compile_graph(_graph("fuse_key"))
    monkeypatch.setenv("FLAME_FUSE", "1")
    fused = compiler.compile_graph(_graph("fuse_key"))
    assert unfused.graph.groups is None and fused.graph.groups is not None


def _linear(name: str) -> Graph:
    g = Graph(name)
    b = Builder(g)
    x, w, bias = (g.add_input(TensorType(s, f32)) for s in ((8, 16), (16, 4), (4,)))
    g.outputs = [b.relu(b.add(b.matmul(x, w), bias))]
    return g


def test_the_target_is_part_of_the_key(monkeypatch) -> None:
    # two GPUs of one executor: one runs matmul epilogues inside the GEMM, the other does not; a plan
    # made for one must never be served for the other
    full = capabilities("reference")
    targets = {"sm_90": replace(full, arch="sm_90"), "sm_80": replace(full, arch="sm_80", matmul_epilogues=frozenset())}
    current = ["sm_90"]
    monkeypatch.setattr(compiler, "_target", lambda *settings: targets[current[0]])
    monkeypatch.setattr(compiler, "_CACHE", OrderedDict())  # a full cache (tests before this one) evicts
    before = len(compiler._CACHE)
    sm90 = compiler.compile_graph(_linear("target_key"))
    current[0] = "sm_80"
    sm80 = compiler.compile_graph(_linear("target_key"))
    assert len(compiler._CACHE) == before + 2
    assert len(sm90.plan.steps) == 1 and len(sm80.plan.steps) == 2  # GEMM+epilogue vs GEMM, then a kernel
    assert compiler.compile_graph(_linear("target_key")).plan is sm80.plan  # the same target: a hit
    current[0] = "sm_90"
    assert compiler.compile_graph(_linear("target_key")).plan is sm90.plan
    assert len(compiler._CACHE) == before + 2


def test_one_target_per_executor_setting() -> None:
    # the real targets: asked once per (executor, GPU, FLAME_COMM_STREAM, FLAME_SIDE_STREAM, FLAME_MATMUL_BGRAD,
    # FLAME_FUSE_PIECES), equal when asked again
    first = compiler._target("reference", None, False, False, False, False)
    assert first is compiler._target("reference", None, False, False, False, False)
    assert compiler._target("reference", None, False, False, False, False) == capabilities("reference")
    assert capabilities("reference").arch == ""


def test_eager_ops_compile_once_per_signature() -> None:
    a, b = flame.tensor(np.ones((2, 5), np.float32)), flame.tensor(np.ones((2, 5), np.float32))
    (a + b).numpy()
    before = len(compiler._CACHE)
    for _ in range(3):
        np.testing.assert_array_equal((a + b).numpy(), np.full((2, 5), 2.0, np.float32))
    assert len(compiler._CACHE) == before


def test_backward_of_an_identical_graph_reuses_its_compilation() -> None:
    # recorded at the same lines (a training loop's next step): its ops name those lines
    w = flame.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    sizes = []
    for _ in range(2):
        w.grad = None
        (w * w).sum().backward()
        sizes.append(len(compiler._CACHE))
    assert sizes[0] == sizes[1]
    np.testing.assert_allclose(w.grad.numpy(), 2 * w.numpy())


def test_compiled_functions_with_one_graph_share_the_plan_and_each_is_reported() -> None:
    def f(x):
        return (x * 2.0).exp()

    x = np.ones((3,), np.float32)
    records = []
    with debug.observe(records.append):
        first, second = flame.compile(f), flame.compile(f)
        np.testing.assert_allclose(first(x).numpy(), second(x).numpy())
    assert len(records) == 2  # while observed, every traced function is compiled and reported
    first, second = flame.compile(f), flame.compile(f)
    first(x), second(x)
    (e1,), (e2,) = first._entries(), second._entries()
    assert e1.plan is e2.plan and e1.run is not e2.run and e1.record is None
