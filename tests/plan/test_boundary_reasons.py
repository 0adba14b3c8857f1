"""Every kernel of a fused plan carries the boundary reason the fusion pass recorded for its group,
single-op groups included (issue 15 point 8: `flame explain` said "one kernel per op (unfused)" for
them because the plan builder dropped the reason on the one-op path), and that reason is why the kernel
reading it did not join, not the first join refused on the way (a reader that joined elsewhere or reads
it no more is no boundary)."""

from __future__ import annotations

from flame.explain import UNFUSED, explain_plan
from flame.ir import Builder, Graph, TensorType, bf16, dtype_of, f32, verify
from flame.passes.fusion_state import PHASES
from flame.passes.pipeline import lower, run_pipeline
from flame.passes.remat import RecomputeLoc
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


def _kernel_reasons(g: Graph) -> dict[tuple[str, ...], str]:
    fused = lower(g)
    report = explain_plan(fused.name, fused, to_plan(fused))
    reasons = {tuple(op.name for op in grp.ops): grp.reason for grp in fused.groups}
    for reason in reasons.values():
        assert f"boundary: {reason}" in report
    return reasons


def test_a_refused_join_that_is_no_boundary_any_more_is_not_the_reason():
    """The first join tried at the forward kernel cast+mul+cast fails (a recomputation may not share
    a kernel with forward work), but that reader then gets its own copy of the cast and reads the
    kernel no more: the boundary left is the matmul reading it, and that is what explain says."""
    g = Graph("stale_reason")
    fwd, rec = Builder(g), Builder(g, RecomputeLoc("recomputed"))
    x, w, dy = (g.add_input(TensorType(s, t)) for s, t in (((16, 8), bf16), ((8, 8), bf16), ((16, 8), f32)))
    h = fwd.cast(x, dtype=f32)
    m = fwd.matmul(fwd.cast(fwd.mul(h, h), dtype=bf16), w)
    g.outputs = [m, rec.mul(h, dy)]  # the recomputation reads h (tries to join h's kernel first)
    reasons = _kernel_reasons(verify(g))
    assert reasons[("cast", "mul", "cast")] == "result read by a matmul"
    assert PHASES not in reasons.values()


def test_a_reduction_over_other_rows_is_the_recorded_reason():
    """softmax rows (sum over the last dim) and a whole-tensor sum of the same exp: the second
    reduction cannot share the row kernel, and explain says so (it used to say nothing specific)."""
    g = Graph("other_rows")
    b = Builder(g)
    x = g.add_input(TensorType((4, 8), f32))
    e = b.exp(x)
    g.outputs = [b.div(e, b.reduce_sum(e, axes=[1], keepdim=True)), b.reduce_sum(e, axes=[0, 1], keepdim=False)]
    reasons = _kernel_reasons(verify(g))
    assert reasons[("exp", "reduce_sum", "div")] == (
        "a reduction of [4, 8] over its last 2 dim(s) in a kernel reducing [4, 8] over its last 1")
