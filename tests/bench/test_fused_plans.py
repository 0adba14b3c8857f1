"""Every case of the benchmark suite plans its fused groups as the fusion pass formed them: none falls
back to one kernel per op because codegen could not lower it (plan/build.py keeps such a plan correct
but slow, and says so only in the launches' reasons). Planned at --quick sizes, nothing runs."""

from __future__ import annotations

import pytest

import flame
from flame.bench.spec import flame_inputs
from flame.bench.table import CASES


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_no_group_falls_back_to_op_by_op(case):
    sizes = case.sizes(True)
    a = flame_inputs(case, sizes)
    bound = case.flame(sizes, a, flame.compile)
    data = [a[n] for n, inp in case.inputs(sizes).items() if not inp.state]
    c = bound.call
    plan = type(c)(c.fn, c.name, memory_budget=c.memory_budget)._build(c._args(data)).plan
    fallen = [s.reason for s in plan.kernels() if s.reason.startswith("op by op")]
    assert not fallen, fallen[:3]
