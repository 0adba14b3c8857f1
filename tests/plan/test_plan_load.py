"""A compiled plan read back as the persistent plan cache reads it (flame.plan.serial: the graph from
its stored data (ir.printer.graph_data, read by ir.parser.graph_from_data, without the verifier's
shape rules), the steps from plain data) is the plan that was compiled: for every case of the benchmark
suite, planned for the CUDA target at its quick sizes (nothing runs), the graph read back equals the
one the parser reads from its text, with and without the verifier, and the compiled one (the same ops
in the same order, with the same inputs, attributes of the same types and values, result types, fusion
groups and source locations), and every step, buffer and value the loaded plan holds refers to the
loaded graph's ops and values at the compiled ones' positions."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import flame
from flame.bench.spec import flame_inputs
from flame.bench.table import CASES
from flame.errors import MemoryBudgetError
from flame.ir import parse, print_graph
from flame.ir.graph import CheckpointLoc, Graph, Op
from flame.ir.parser import graph_from_data
from flame.ir.printer import format_attr
from flame.plan import serial
from flame.plan.steps import format_plan


def _compiled(case):
    """The graph and plan flame.compile makes for one call of `case` at its quick sizes (without the
    case's memory budget where those sizes cannot meet it)."""
    sizes = case.sizes(True)
    a = flame_inputs(case, sizes)
    bound = case.flame(sizes, a, flame.compile)
    data = [a[n] for n, inp in case.inputs(sizes).items() if not inp.state]
    c = bound.call
    try:
        entry = type(c)(c.fn, c.name, memory_budget=c.memory_budget)._build(c._args(data))
    except MemoryBudgetError:
        entry = type(c)(c.fn, c.name)._build(c._args(data))
    return entry.graph, entry.plan


def _ops(g: Graph) -> list[tuple]:
    """Each op as what identifies it: name, input numbers, attributes (type and text of each value),
    result type."""
    ids = g.numbering()
    return [
        (
            op.name,
            tuple(ids[v] for v in op.inputs),
            tuple((k, type(v).__name__, format_attr(v)) for k, v in op.attrs.items()),
            op.out.type,
            str(op.out.type),
        )
        for op in g.ops
    ]


def _groups(g: Graph) -> list[tuple]:
    ids, at = g.numbering(), {op: i for i, op in enumerate(g.ops)}
    return [
        (str(k.kind), k.reason, k.epilogue, k.update, tuple(at[op] for op in k.ops), tuple(ids[v] for v in k.outputs))
        for k in g.groups or ()
    ]


def _locs(g: Graph) -> list[tuple]:
    return [
        (type(op.loc).__name__, op.loc, getattr(op.loc, "region", None), getattr(op.loc, "saved", None)) for op in g.ops
    ]


def _by_position(x, at: dict[Op, int]):
    """A step's or buffer's field with each op replaced by its position in the graph."""
    if isinstance(x, Op):
        return ("op", at[x])
    if isinstance(x, (tuple, list)):
        return tuple(_by_position(v, at) for v in x)
    return (type(x).__name__, x)


def _plan(plan) -> tuple:
    """Everything the plan holds, ops and values by their positions in its graph."""
    at, ids = {op: i for i, op in enumerate(plan.graph.ops)}, plan.graph.numbering()

    def fields(x):
        return (type(x).__name__,) + tuple(
            (f.name, _by_position(getattr(x, f.name), at)) for f in dataclasses.fields(x)
        )

    return (
        plan.name,
        tuple(fields(b) for b in plan.buffers.values()),
        tuple(fields(s) for s in plan.steps),
        tuple(plan.inputs),
        tuple(plan.outputs),
        plan.arena_size,
        tuple(sorted((ids[v], b) for v, b in plan.buffer_of.items())),
        plan.memory_budget,
        plan.activation_budget,
        tuple(plan.reused),
    )


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_plan_read_back_is_the_plan_compiled(case, cuda_target):
    graph, plan = _compiled(case)
    payload = serial.dumps(graph, plan)
    text = print_graph(graph)
    fast, verified = parse(text, verify=False), parse(text)
    stored = graph_from_data(serial.payload_data(payload)["graph"])
    assert print_graph(fast) == print_graph(verified) == print_graph(stored) == text
    assert _ops(fast) == _ops(verified) == _ops(stored) == _ops(graph)
    assert _groups(fast) == _groups(verified) == _groups(stored) == _groups(graph)
    for g in (fast, verified, stored):
        assert g.roles == graph.roles and g.aliases == graph.aliases
        assert [v.type for v in g.inputs] == [v.type for v in graph.inputs]

    loaded, loaded_plan = serial.loads(payload)
    assert loaded_plan.graph is loaded
    assert print_graph(loaded, locs=True) == print_graph(graph, locs=True)
    assert _ops(loaded) == _ops(graph) and _groups(loaded) == _groups(graph) and _locs(loaded) == _locs(graph)
    assert _plan(loaded_plan) == _plan(plan)
    assert format_plan(loaded_plan) == format_plan(plan)


def _checkpointed(x, w1, w2):
    h = flame.utils.checkpoint(lambda a: (a @ w1).relu() @ w2, x, policy="save_matmuls",
                                 use_reentrant=False)
    loss = (h * h).sum()
    loss.backward()
    return loss, w1.grad, w2.grad


def test_checkpoint_marks_read_back_with_their_regions_and_what_the_policy_saves(cuda_target):
    rng = np.random.default_rng(0)
    x, w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((4, 8), (8, 16), (16, 8)))
    args = [flame.tensor(x), flame.tensor(w1, requires_grad=True), flame.tensor(w2, requires_grad=True)]
    c = flame.compile(_checkpointed)
    c(*args)
    v = c.variants()[0]
    marks = [op.loc for op in v.graph.ops if isinstance(op.loc, CheckpointLoc)]
    assert any(m.saved for m in marks) and not all(m.saved for m in marks)
    loaded, plan = serial.loads(serial.dumps(v.graph, v.plan))
    assert _locs(loaded) == _locs(v.graph)
    assert print_graph(loaded, locs=True) == print_graph(v.graph, locs=True)
    assert _plan(plan) == _plan(v.plan)
    assert [v.type.shape for v in loaded.inputs] == [a.shape for a in (x, w1, w2)]
    from flame.runtime.reference import run_plan

    loss, g1, g2 = run_plan(plan, [x, w1, w2])[:3]
    t = [torch.from_numpy(a).double().requires_grad_(i > 0) for i, a in enumerate((x, w1, w2))]
    h = (t[0] @ t[1]).relu() @ t[2]
    (h * h).sum().backward()
    np.testing.assert_allclose(loss, (h * h).sum().item(), rtol=1e-5)
    np.testing.assert_allclose(g1, t[1].grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(g2, t[2].grad.numpy(), rtol=1e-4, atol=1e-4)
