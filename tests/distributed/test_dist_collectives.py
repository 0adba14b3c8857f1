"""Collectives as IR ops: world size 1 (no process group: the identity, eager and compiled), the passes
that must keep every rank's collectives identical and in order, the plan's overlap of a collective with
the steps after it, the gradient buckets, what DistributedDataParallel and ZeRO-1 add to a traced step
(in-process, with a stand-in communicator of two ranks), and every collective between two real
processes (the launcher, the TCP store, the reference executor)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import flame
import flame.distributed as dist
import flame.nn as nn
import flame.nn.functional as F
from flame.distributed import process_group as pg
from flame.distributed.buckets import plan_buckets, shard_bucket
from flame.ir import Builder, Graph, TensorType, f32, parse, print_graph, verify
from flame.passes.cse import eliminate_common_subexpressions
from flame.passes.dce import eliminate_dead_code
from flame.passes.schedule_collectives import schedule_collectives
from flame.plan.build import build_plan, to_plan
from flame.plan.memory import check_plan
from flame.plan.steps import CollectiveCall, KernelLaunch, Wait, root
from flame.runtime import communicator
from flame.runtime.backend import capabilities
from flame.runtime.reference import run_graph, run_plan
from flame.target import Target
from tests.distributed.launch import ok, run


def test_world_of_one_without_a_process_group():
    assert not dist.is_initialized() and dist.get_rank() == 0 and dist.get_world_size() == 1
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = flame.tensor(x)
    dist.all_reduce(t, dist.ReduceOp.AVG)
    dist.broadcast(t, src=0)
    g = flame.zeros(2, 3)
    dist.all_gather_into_tensor(g, t)
    np.testing.assert_array_equal(g.numpy(), x)

    @flame.compile
    def step(a):
        b = a * 2
        dist.all_reduce(b)
        return b + 1

    np.testing.assert_array_equal(step(flame.tensor(x)).numpy(), x * 2 + 1)
    assert [op.name for op in step.optimized(flame.tensor(x)).ops].count("all_reduce") == 1
    dist.barrier()


def test_init_process_group_with_world_size_one(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    dist.init_process_group()
    try:
        assert dist.is_initialized() and dist.get_world_size() == 1 and dist.get_backend() == "nccl"
        with pytest.raises(dist.DistributedError, match="already initialised"):
            dist.init_process_group()
    finally:
        dist.destroy_process_group()
    assert not dist.is_initialized()


def test_missing_environment_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.delenv("MASTER_PORT", raising=False)
    with pytest.raises(dist.DistributedError, match="MASTER_PORT is not set"):
        dist.init_process_group()
    assert not dist.is_initialized()


def _two_buckets_graph() -> tuple[Graph, list]:
    """x -> a = exp(x) -> all_reduce(a) ... b = tanh(a) * 3 -> all_reduce(b); the results summed."""
    g = Graph("buckets")
    x = g.add_input(TensorType((4, 5), f32))
    b = Builder(g)
    a = b.exp(x)
    t = b.tanh(a)
    u = b.mul(t, 3.0)
    late = b.mul(b.sin(u), b.cos(u))  # work after both producers
    r1 = b.emit("all_reduce", a, op="sum", world_size=1)
    r2 = b.emit("all_reduce", u, x, op="avg", world_size=1)
    g.outputs = [b.add(r1, late), r2]
    return verify(g), [np.linspace(-1, 1, 20, dtype=np.float32).reshape(4, 5)]


def test_collectives_print_and_parse_back():
    g, _ = _two_buckets_graph()
    text = print_graph(g)
    assert '= all_reduce %4, %0 {op="avg", world_size=1} : f32[40]' in text
    assert print_graph(parse(text)) == text


def test_schedule_collectives_issues_each_right_after_its_inputs_in_program_order():
    g, ins = _two_buckets_graph()
    s = schedule_collectives(g)
    names = [op.name for op in s.ops]
    assert names.index("all_reduce") == names.index("exp") + 1  # before tanh, sin, cos
    second = len(names) - 1 - names[::-1].index("all_reduce")
    assert second == names.index("mul") + 1 and second < names.index("sin")
    np.testing.assert_array_equal(run_graph(s, ins)[1], run_graph(g, ins)[1])
    # a later-traced collective whose inputs are ready first still waits for the earlier one
    g2 = Graph("order")
    x = g2.add_input(TensorType((3,), f32))
    b = Builder(g2)
    slow = b.exp(b.exp(x))
    first = b.emit("all_reduce", slow, world_size=1)
    second = b.emit("all_reduce", x, world_size=1)
    g2.outputs = [first, second]
    order = [op for op in schedule_collectives(verify(g2)).ops if op.name == "all_reduce"]
    assert order[0].inputs[0].producer.name == "exp"


def test_dce_keeps_and_cse_never_merges_collectives():
    g = Graph("keep")
    x = g.add_input(TensorType((3,), f32))
    b = Builder(g)
    b.emit("all_gather", x, world_size=1)  # unread: a ZeRO rank owning a whole bucket still takes part
    r1, r2 = b.emit("all_reduce", x, world_size=1), b.emit("all_reduce", x, world_size=1)
    g.outputs = [b.add(r1, r2)]
    g = eliminate_common_subexpressions(eliminate_dead_code(verify(g)))
    assert [op.name for op in g.ops].count("all_reduce") == 2 and any(op.name == "all_gather" for op in g.ops)


def test_overlapped_collective_waits_before_its_first_reader():
    g, ins = _two_buckets_graph()
    g = schedule_collectives(g)
    plain = to_plan(g)
    assert not any(isinstance(s, Wait) for s in plain.steps)
    plan = to_plan(g, target=dataclasses.replace(Target(), comm_stream=True))
    check_plan(plan)
    kinds = [type(s).__name__ for s in plan.steps]
    calls = [i for i, s in enumerate(plan.steps) if isinstance(s, CollectiveCall)]
    waits = [i for i, s in enumerate(plan.steps) if isinstance(s, Wait)]
    assert len(calls) == len(waits) == 2 and all(
        isinstance(plan.steps[i], CollectiveCall) and plan.steps[i].overlap for i in calls
    )
    first_wait = min(waits)
    assert first_wait > calls[0] + 1, kinds  # the work after the first call runs before its wait
    assert "on comm stream" in str(plan) and "wait b" in str(plan)
    for a, b in zip(run_plan(plan, ins), run_plan(plain, ins)):
        np.testing.assert_array_equal(a, b)
    # the packed inputs stay live until the wait: no later step may take their bytes
    unplanned = build_plan(g, target=dataclasses.replace(Target(), comm_stream=True))
    call = unplanned.steps[calls[1]]
    assert unplanned.steps[waits[1]].reads == call.inputs


def test_buckets_fill_up_to_the_cap_per_dtype_and_shards_balance():
    ps = [flame.zeros(n) for n in (100, 300, 50, 500, 20)] + [flame.zeros(10, dtype=flame.bf16)]
    buckets = plan_buckets(ps, cap_bytes=2400)  # f32 sizes 400, 1200, 200, 2000, 80 bytes
    assert [b.params for b in buckets] == [(4, 3, 2), (5,), (1, 0)]  # last parameter first, one dtype each
    assert [b.nbytes for b in buckets] == [2280, 20, 1600]
    shard = shard_bucket(plan_buckets(ps[:5], 1 << 20)[0], ps, 2)
    loads = [sum(ps[i].numel() for i in owned) for owned in shard.owners]
    assert sorted(i for o in shard.owners for i in o) == [0, 1, 2, 3, 4]
    assert loads == [500, 470] and shard.chunk == 500


class _Mirror:
    """A stand-in communicator of `world_size` ranks that all hold what this one holds."""

    def __init__(self, world_size: int):
        self.rank, self.world_size = 0, world_size

    def all_reduce(self, buf, op, stream):
        if op == "sum":
            buf *= self.world_size

    def broadcast(self, buf, root, stream):
        pass

    def all_gather(self, buf, stream):
        part = buf.size // self.world_size
        buf[...] = np.tile(buf[:part], self.world_size)

    def reduce_scatter(self, send, recv, op, stream):
        recv[...] = send[: recv.size] * (self.world_size if op == "sum" else 1)

    def barrier(self):
        pass

    def check(self, signature, loc):
        pass


@pytest.fixture
def two_ranks():
    """This process as rank 0 of 2 (the other rank mirrors it)."""
    comm = _Mirror(2)
    pg._group.append(pg._Group(0, 2, 0, "store", None, None, comm, -1))
    communicator.set_communicator(comm)
    yield comm
    pg._group.clear()
    communicator.set_communicator(None)


def _mlp():
    gen = flame.Generator(0)
    return nn.Sequential(
        nn.Linear(16, 64, generator=gen),
        nn.ReLU(),
        nn.Linear(64, 64, generator=gen),
        nn.ReLU(),
        nn.Linear(64, 4, generator=gen),
    )


def _step(ddp, opt, x, y):
    def step(a, b):
        loss = F.cross_entropy(ddp(a), b)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    return flame.compile(step), (x, y)


def test_ddp_adds_one_all_reduce_per_bucket_right_after_its_gradients(two_ranks):
    from flame.nn.parallel import DistributedDataParallel

    model = _mlp()
    ddp = DistributedDataParallel(model, bucket_cap_mb=8000 / 2**20)
    assert len(ddp.buckets) >= 3
    opt = flame.optim.AdamW(ddp.parameters(), lr=1e-3)
    x, y = flame.randn(8, 16), flame.tensor([i % 4 for i in range(8)])
    step, args = _step(ddp, opt, x, y)
    g = step.optimized(*args)
    ops = [op.name for op in g.ops]
    reduces = [i for i, n in enumerate(ops) if n == "all_reduce"]
    assert len(reduces) == len(ddp.buckets)
    assert all(g.ops[i].attrs == {"op": "avg", "world_size": 2} for i in reduces)
    assert sorted(len(g.ops[i].inputs) for i in reduces) == sorted(len(b.params) for b in ddp.buckets)
    matmuls = [i for i, n in enumerate(ops) if n == "matmul"]
    assert reduces[0] < matmuls[-1]  # the first bucket is on its way while the backward still runs
    # averaged over two identical ranks: the step equals the single-process one
    ref_model = _mlp()
    ref_opt = flame.optim.AdamW(ref_model.parameters(), lr=1e-3)
    ref_step, _ = _step(ref_model, ref_opt, x, y)
    for _ in range(2):
        np.testing.assert_allclose(step(*args).item(), ref_step(*args).item(), rtol=1e-6)
    for p, q in zip(model.parameters(), ref_model.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-6, atol=1e-7)


def test_side_stream_updates_wait_for_the_all_reduce_of_their_gradients(two_ranks, monkeypatch):
    """Collectives on the communication stream and optimizer updates on the side stream (both targets'
    streams on): the same bits as neither, and an update reads an all-reduced gradient only after
    that collective's Wait."""
    from collections import OrderedDict

    from flame import compiler
    from flame.nn.parallel import DistributedDataParallel

    def run(overlap: bool):
        monkeypatch.setattr(compiler, "_CACHE", OrderedDict())
        target = dataclasses.replace(capabilities("reference"), side_stream=overlap, comm_stream=overlap)
        monkeypatch.setattr(compiler, "_target", lambda *settings: target)
        model = _mlp()
        ddp = DistributedDataParallel(model, bucket_cap_mb=8000 / 2**20)
        opt = flame.optim.AdamW(ddp.parameters(), lr=1e-3)
        x, y = flame.randn(8, 16, generator=flame.Generator(1)), flame.tensor([i % 4 for i in range(8)])
        step, args = _step(ddp, opt, x, y)
        losses = [step(*args).item() for _ in range(2)]
        return step._lookup(step._args(list(args))).plan, losses, [p.numpy().copy() for p in model.parameters()]

    _, losses0, params0 = run(False)
    plan, losses, params = run(True)
    check_plan(plan)
    assert losses == losses0
    for a, b in zip(params, params0):
        np.testing.assert_array_equal(a, b)
    calls = [i for i, s in enumerate(plan.steps) if isinstance(s, CollectiveCall) and s.overlap]
    side = [i for i, s in enumerate(plan.steps) if isinstance(s, KernelLaunch) and s.side]
    assert len(calls) >= 3 and side
    pairs = 0
    for i in side:
        reads = {root(plan.buffers, b) for b in plan.steps[i].reads}
        for c in calls:
            if root(plan.buffers, plan.steps[c].out) in reads:
                wait = next(
                    j
                    for j, s in enumerate(plan.steps)
                    if isinstance(s, Wait) and s.stream == "comm" and s.out == plan.steps[c].out
                )
                assert c < wait < i
                pairs += 1
    assert pairs >= len(side)


def test_no_sync_inside_and_outside_compile_traces_both_ways(two_ranks):
    from flame.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel(_mlp())
    x, y = flame.randn(8, 16), flame.tensor([i % 4 for i in range(8)])

    @flame.compile
    def accumulate(a, b):
        F.cross_entropy(ddp(a), b).backward()

    accumulate(x, y)  # starts every .grad from None: a program of its own
    for _ in range(2):
        with ddp.no_sync():
            accumulate(x, y)
        accumulate(x, y)
    counts = sorted(sum(op.name == "all_reduce" for op in e.graph.ops) for e in accumulate._entries())
    assert counts == [0, len(ddp.buckets), len(ddp.buckets)]  # one trace each way (and the first), reused
    assert accumulate.stats().traces == 3


def test_ddp_writes_the_average_into_each_grad_buffer(two_ranks):
    """With the .grad kept between steps, each averaged gradient is an output aliased to its .grad
    input, as torch's DistributedDataParallel writes a bucket back into the gradients: the plan writes
    it into the .grad's own buffer and returns no gradient beside it."""
    from flame.nn.parallel import DistributedDataParallel

    model = _mlp()
    ddp = DistributedDataParallel(model, bucket_cap_mb=8000 / 2**20)
    opt = flame.optim.SGD(ddp.parameters(), lr=1e-3)
    x, y = flame.randn(8, 16), flame.tensor([i % 4 for i in range(8)])

    @flame.compile
    def step(a, b):
        opt.zero_grad(set_to_none=False)
        F.cross_entropy(ddp(a), b).backward()
        opt.step()

    step(x, y)  # starts every .grad from None: a program of its own
    step(x, y)
    held = [p.grad for p in model.parameters()]
    step(x, y)
    assert all(p.grad is g for p, g in zip(model.parameters(), held))
    plan = step._lookup(step._args([x, y])).plan
    grad_inputs = [i for i, r in enumerate(plan.graph.roles) if r == "state"]
    assert len(grad_inputs) == len(held) and set(grad_inputs) <= set(plan.graph.aliases.values())
    assert all(plan.inputs[i] in plan.outputs for i in grad_inputs)  # written into the .grad's own buffer
    assert step.memory_report(x, y).bound.get("output", 0) == 0


def test_zero_keeps_about_half_the_adamw_state_per_rank(two_ranks):
    from flame.distributed.optim import ZeroRedundancyOptimizer
    from flame.nn.parallel import DistributedDataParallel

    x, y = flame.randn(8, 16), flame.tensor([i % 4 for i in range(8)])
    reports = {}
    for zero in (False, True):
        gen = flame.Generator(0)
        model = nn.Sequential(*[nn.Linear(16, 16, bias=False, generator=gen) for _ in range(6)])
        ddp = DistributedDataParallel(model, bucket_cap_mb=1.0)
        opt = (
            ZeroRedundancyOptimizer(ddp.parameters(), flame.optim.AdamW, lr=1e-3)
            if zero
            else flame.optim.AdamW(ddp.parameters(), lr=1e-3)
        )
        step, args = _step(ddp, opt, x, y)
        reports[zero] = step.memory_report(*args)
        g = step.optimized(*args)
        names = [op.name for op in g.ops]
        if zero:
            assert "reduce_scatter" in names and "all_gather" in names and "all_reduce" not in names
            assert len(opt.owned) == 3
    per_param = 2 * 16 * 16 * 4 + 4  # exp_avg, exp_avg_sq and the step counter
    assert (reports[False].bound["state"], reports[True].bound["state"]) == (6 * per_param, 3 * per_param)


def test_every_collective_between_two_processes():
    ok(run("collectives_worker.py", nproc=2))
