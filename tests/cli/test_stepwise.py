"""The stepwise runner behind `flame check` / `flame profile` feeds every unit the values its
buffers really hold — also for in-place parameter updates and transposes folded into matmuls."""

import numpy as np

import flame
import flame.nn as nn
import flame.nn.functional as F
from flame.ir.evaluate import evaluate_graph, evaluate_op
from flame.plan.steps import KernelLaunch, LibraryCall
from flame.runtime.stepwise import UnitValues, units


def _sgd_step_record():
    from flame import debug

    flame.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = flame.optim.SGD(model.parameters(), lr=0.1)

    @flame.compile
    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    rng = np.random.default_rng(0)
    records = []
    with debug.observe(records.append):
        step(flame.tensor(rng.standard_normal((32, 8)).astype(np.float32)), flame.tensor(rng.integers(0, 4, 32)))
    return records[0]


def test_units_read_the_values_their_buffers_hold():
    rec = _sgd_step_record()
    plan = rec.plan
    env = evaluate_graph(plan.graph, rec.inputs)
    vals = UnitValues(plan, env)
    assert any(set(u.ins) & set(u.outs) for u in units(plan)), "expected an in-place update in the plan"
    folded = 0
    for u in units(plan):
        s = u.steps[0]
        if isinstance(s, LibraryCall):
            a, b = s.op.inputs[:2]  # a Linear's matmul_bias also reads its bias
            for v, bid, t in ((a, s.a, s.ta), (b, s.b, s.tb)):
                want = np.swapaxes(env[v], -1, -2) if t else env[v]
                np.testing.assert_array_equal(vals.read(u, bid), want)
                folded += t
            continue
        assert isinstance(s, KernelLaunch)
        local = {}
        for op in u.ops:  # recompute the unit from what it reads: must give what it writes
            args = [local[v] if v in local else vals.read(u, plan.buffer_of[v]) for v in op.inputs]
            local[op.out] = evaluate_op(op, args)
        for bid in u.outs:
            want = vals.written(u, bid)
            if want is not None:
                got = [local[o.out] for o in u.ops if plan.buffer_of.get(o.out) == bid][-1]
                np.testing.assert_array_equal(got, want)
    assert folded, "expected a transpose folded into a matmul"
