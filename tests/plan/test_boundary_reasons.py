"""Every kernel of a fused plan carries the boundary reason the fusion pass recorded for its group,
single-op groups included (issue 15 point 8: `flame explain` said "one kernel per op (unfused)" for
them because the plan builder dropped the reason on the one-op path)."""

from __future__ import annotations

from flame.explain import UNFUSED, explain_plan
from flame.ir import Builder, Graph, TensorType, dtype_of, verify
from flame.passes.pipeline import lower, run_pipeline
from flame.plan.build import to_plan
from flame.plan.steps import KernelLaunch


def _graph() -> Graph:
    """relu(a) @ b, then exp of the product: two single-op kernels around a matmul."""
    g = Graph("reasons")
    bld = Builder(g)
    a = g.add_input(TensorType((4, 8), dtype_of("f32")))
    b = g.add_input(TensorType((8, 3), dtype_of("f32")))
    g.outputs = [bld.exp(bld.matmul(bld.relu(a), b))]
    return verify(g)


def test_single_op_kernels_carry_the_reason_of_their_group():
    g = lower(run_pipeline(_graph()))
    reason_of = {grp.ops[0]: grp.reason for grp in g.groups if len(grp.ops) == 1}
    plan = to_plan(g)
    singles = [s for s in plan.steps if isinstance(s, KernelLaunch) and len(s.ops) == 1 and s.ops[0] in reason_of]
    assert len(singles) >= 1
    for s in singles:
        assert s.reason and s.reason == reason_of[s.ops[0]], s.name
    report = explain_plan(g.name, g, plan)
    assert UNFUSED not in report
    for s in singles:
        assert f"boundary: {s.reason}" in report


def test_an_unfused_plan_still_says_so():
    g = run_pipeline(_graph())
    assert g.groups is None
    report = explain_plan(g.name, g, to_plan(g))
    assert f"boundary: {UNFUSED}" in report
