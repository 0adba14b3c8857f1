"""On a GPU: CUDA-graph replay equals plain launches over calls with changing inputs, a plan that
cannot be captured falls back, the planned memory matches what CuPy's pool hands out, transposed and
epilogue matmuls match NumPy, and an in-place parameter update keeps the parameter's device pointer."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import flame
from flame.ir import Builder, Graph, TensorType, dtype_of, verify
from flame.plan.build import to_plan
from tests.passes.test_plan_memory import _mlp_step

pytestmark = pytest.mark.gpu
f32 = dtype_of("f32")


def _graph() -> Graph:
    g = Graph("g")
    b = Builder(g)
    x = g.add_input(TensorType((64, 32), f32))
    w = g.add_input(TensorType((16, 32), f32), "param")
    h = b.tanh(b.matmul(x, b.transpose_last(w)))
    g.aliases[1] = 1
    g.outputs = [b.reduce_sum(h, axes=[1], keepdim=False), b.mul(w, 0.5)]
    return verify(g)


def _compile(monkeypatch, graphs: bool):
    from flame.runtime.cuda import CudaExecutor

    monkeypatch.setenv("FLAME_CUDA_GRAPHS", "1" if graphs else "0")
    return CudaExecutor().compile(to_plan(_graph()))


def _calls(run, n=5):
    import cupy

    rng = np.random.default_rng(0)
    w = cupy.asarray(rng.standard_normal((16, 32)).astype(np.float32))
    outs = []
    for _ in range(n):
        x = cupy.asarray(rng.standard_normal((64, 32)).astype(np.float32))
        o = run([x, w])
        assert o[1] is w  # updated in place
        outs.append((cupy.asnumpy(o[0]), cupy.asnumpy(w)))
    return outs


def test_graph_replay_equals_plain_launches(monkeypatch):
    plain, graphed = _compile(monkeypatch, False), _compile(monkeypatch, True)
    want, got = _calls(plain), _calls(graphed)
    # x arrives at another address each call: staged from the first capture (the second call) on; one
    # input-pointer set, two output slabs in turn (_calls holds the last call's outputs during the next)
    assert len(graphed._graphs) == 1 and graphed._staged == {0} and graphed.why_no_graph == ""
    assert graphed.captures == 2 and plain.captures == 0
    for (a, wa), (b, wb) in zip(want, got):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(wb, wa)


def test_same_batch_array_replays_without_staging(monkeypatch):
    """An input passed again at the same address is read in place (no copy into a stage buffer)."""
    run = _compile(monkeypatch, True)
    import cupy

    rng = np.random.default_rng(0)
    w = cupy.asarray(rng.standard_normal((16, 32)).astype(np.float32))
    x = cupy.asarray(rng.standard_normal((64, 32)).astype(np.float32))
    for _ in range(4):
        run([x, w])
    assert run.captures == 1 and not run._staged and not run._stage
    x[...] = cupy.asarray(rng.standard_normal((64, 32)).astype(np.float32))  # new contents, same address
    w0 = w.copy()
    got = cupy.asnumpy(run([x, w])[0])
    want = cupy.asnumpy(_compile(monkeypatch, False)([x, w0])[0])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_bound_input_that_moves_after_identical_replays_is_noticed(monkeypatch):
    """The replay reads the inputs' pointers again only when an array is not the one of the last call:
    the same x for several replays, then another x, must still re-capture (and stage x)."""
    import cupy

    run, plain = _compile(monkeypatch, True), _compile(monkeypatch, False)
    rng = np.random.default_rng(0)
    w = cupy.asarray(rng.standard_normal((16, 32)).astype(np.float32))
    w_plain = w.copy()
    xs = [cupy.asarray(rng.standard_normal((64, 32)).astype(np.float32)) for _ in range(2)]
    for x in [xs[0]] * 3 + [xs[1]] * 3 + [xs[0]]:
        got, want = run([x, w]), plain([x, w_plain])
        assert got[1] is w
        np.testing.assert_allclose(cupy.asnumpy(got[0]), cupy.asnumpy(want[0]), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(cupy.asnumpy(w), cupy.asnumpy(w_plain))
    # x0's graph (two slabs: `got` holds the last call's outputs), then x staged: one graph, two slabs
    assert run.captures == 4 and len(run._graphs) == 1 and run._staged == {0}


def test_outputs_are_never_overwritten_while_held(monkeypatch):
    """Replays hand out output slabs, each only while nothing holds its earlier outputs: outputs
    dropped at once reuse one slab; `out = run(...)` in a loop alternates two slabs without copies;
    outputs kept in a list get a slab each (up to OUTPUT_SLABS), then copies of an internal slab;
    every kept output keeps its values."""
    import cupy

    import flame.runtime.cuda_graphs as cuda_graphs

    run, plain = _compile(monkeypatch, True), _compile(monkeypatch, False)
    rng = np.random.default_rng(2)
    w = cupy.asarray(rng.standard_normal((16, 32)).astype(np.float32))
    w_plain = w.copy()
    x = cupy.asarray(rng.standard_normal((64, 32)).astype(np.float32))
    run([x, w])
    plain([x, w_plain])
    for _ in range(3):  # dropped at once: slot 0 every time
        run([x, w])
        plain([x, w_plain])
    assert run.captures == 1
    ptrs, out = set(), None
    for _ in range(4):  # held until the next call returns: two slabs in turn
        out = run([x, w])[0]
        plain([x, w_plain])
        ptrs.add(out.data.ptr)
    assert run.captures == 2 and len(ptrs) == 2

    def keep(n):
        kept, want = [], []
        for _ in range(n):
            kept.append(run([x, w])[0])
            want.append(cupy.asnumpy(plain([x, w_plain])[0]))
        assert len({k.data.ptr for k in kept}) == n
        for k, v in zip(kept, want):
            np.testing.assert_allclose(cupy.asnumpy(k), v, rtol=1e-5, atol=1e-5)

    keep(4)  # slot 0 (out holds slot 1), then three new slabs
    assert run.captures == 5 and len(run._slabs) == 5
    keep(4)  # the same five slabs again (one held by out): no capture
    assert run.captures == 5
    monkeypatch.setattr(cuda_graphs, "OUTPUT_SLABS", 5)
    keep(6)  # past OUTPUT_SLABS: the internal slab's graph, copied out
    assert run.captures == 6 and cuda_graphs._INTERNAL in run._slabs
    del out
    assert run._free_slot({}) == 0  # all dropped: the slabs are free again


def test_output_slabs_hold_a_share_of_the_device_memory(monkeypatch):
    """Held outputs get slabs while they hold at most OUTPUT_SLAB_SHARE of the device's memory (at least
    OUTPUT_SLAB_BYTES), then copies of the internal slab."""
    import cupy

    import flame.runtime.cuda_graphs as cuda_graphs

    run = _compile(monkeypatch, True)
    rng = np.random.default_rng(4)
    w = cupy.asarray(rng.standard_normal((16, 32)).astype(np.float32))
    x = cupy.asarray(rng.standard_normal((64, 32)).astype(np.float32))
    run([x, w])
    run([x, w])  # captured: slot 0, dropped at once
    slab = run._slab_size
    total = cupy.cuda.Device().mem_info[1]
    monkeypatch.setattr(cuda_graphs, "OUTPUT_SLAB_BYTES", 2 * slab)
    monkeypatch.setattr(cuda_graphs, "OUTPUT_SLAB_SHARE", 3.5 * slab / total)  # three slabs: more than the bytes
    kept = [run([x, w])[0] for _ in range(5)]
    assert len(run._slabs) == 4 and cuda_graphs._INTERNAL in run._slabs  # slots 0-2, then the internal one
    assert len({k.data.ptr for k in kept}) == 5
    monkeypatch.setattr(cuda_graphs, "OUTPUT_SLAB_SHARE", 0.0)  # the bytes alone: two slabs
    run2 = _compile(monkeypatch, True)
    run2([x, w])
    run2([x, w])
    kept2 = [run2([x, w])[0] for _ in range(4)]
    assert len(run2._slabs) == 3 and cuda_graphs._INTERNAL in run2._slabs
    del kept, kept2


def test_calls_on_streams_in_turn_wait_for_each_other(monkeypatch):
    """Replays run on the caller's stream; a call on another stream than the last one waits for the
    last one's work first (the calls share the arena, the stage buffers and the output slabs)."""
    import cupy

    run, plain = _compile(monkeypatch, True), _compile(monkeypatch, False)
    rng = np.random.default_rng(3)
    w = cupy.asarray(rng.standard_normal((16, 32)).astype(np.float32))
    w_plain = w.copy()
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(2)]
    for k in range(8):
        x = cupy.asarray(rng.standard_normal((64, 32)).astype(np.float32))
        cupy.cuda.Device().synchronize()
        with streams[k % 2]:
            got = run([x, w])[0]
            total = float(got.sum())  # read on the call's stream (the next call may reuse the slab)
            streams[k % 2].synchronize()
        want = plain([x, w_plain])[0]
        np.testing.assert_allclose(total, float(want.sum()), rtol=1e-4, atol=1e-3)
        np.testing.assert_array_equal(cupy.asnumpy(w), cupy.asnumpy(w_plain))
    assert run._shared.last_stream.ptr == streams[1].ptr and run.captures >= 1


def test_large_inputs_get_a_graph_per_address_that_recurs(monkeypatch):
    """Inputs too large to stage (here: any, STAGE_BYTES 0): three arrays in turn get a graph each,
    replayed without copies; arrays at new addresses run plain launches (never staged); those that
    come back get a graph too, the least recently replayed graph making room."""
    import cupy

    import flame.runtime.cuda_graphs as cuda_graphs

    monkeypatch.setattr(cuda_graphs, "STAGE_BYTES", 0)
    run, plain = _compile(monkeypatch, True), _compile(monkeypatch, False)
    rng = np.random.default_rng(1)
    w = cupy.asarray(rng.standard_normal((16, 32)).astype(np.float32))
    w_plain = w.copy()
    xs = [cupy.asarray(rng.standard_normal((64, 32)).astype(np.float32)) for _ in range(8)]

    def check(x):
        got, want = run([x, w]), plain([x, w_plain])
        np.testing.assert_allclose(cupy.asnumpy(got[0]), cupy.asnumpy(want[0]), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(cupy.asnumpy(w), cupy.asnumpy(w_plain))

    for x in xs[:3] * 4:
        check(x)
    assert run.captures == 3 and len(run._graphs) == 3 and not run._staged and not run._stage
    for x in xs[3:]:  # new addresses, call after call: plain launches
        check(x)
    assert run.captures == 3 and not run._staged
    for x in xs[3:5] * 2:  # two of them again: a graph each, at most GRAPH_VARIANTS in all
        check(x)
    assert run.captures == 5 and len(run._graphs) == cuda_graphs.GRAPH_VARIANTS and not run._staged


def test_capture_failure_falls_back(monkeypatch, caplog):
    from flame.runtime.cuda import CompiledPlan

    def boom(self, arrays, slot):
        raise RuntimeError("cannot capture this")

    monkeypatch.setattr(CompiledPlan, "_capture", boom)
    run = _compile(monkeypatch, True)
    with caplog.at_level(logging.DEBUG, logger="flame"):
        got = _calls(run)
    assert not run.use_graphs and "cannot capture this" in run.why_no_graph
    assert "without a CUDA graph" in caplog.text
    want = _calls(_compile(monkeypatch, False))
    for (a, _), (b, _) in zip(want, got):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)


def test_planned_memory_matches_the_pool():
    import cupy

    step, params, x, y = _mlp_step()
    rep = step.memory_report(x, y)
    from cupy.cuda import memory_hook

    class Requested(memory_hook.MemoryHook):
        """Bytes requested from CuPy's pool (whether or not it had them cached: order-independent)."""

        name = "flame_requested"

        def __init__(self):
            self.total = 0

        def malloc_preprocess(self, device_id, size, mem_size):
            self.total += mem_size

    cupy.cuda.Device().synchronize()
    hook = Requested()
    with hook:
        step(x, y)  # first call: the arena and fresh outputs
        cupy.cuda.Device().synchronize()
    got = hook.total
    planned = rep.arena + rep.bound["output"]
    print(f"planned arena+outputs {planned} B, requested from the pool {got} B; report:\n{rep}")
    assert planned <= got <= planned + 64 * 1024 + 512 * len(params) + 2 * 1024 * 1024  # slack: 2 MiB


def test_graph_replay_keeps_no_copy_of_parameters(monkeypatch):
    """Replaying a CUDA graph copies the data inputs into fixed buffers, never the parameters (they
    are bound by pointer): steady-state calls hold no more than the batch and the outputs."""
    import cupy

    monkeypatch.setenv("FLAME_CUDA_GRAPHS", "1")
    rng = np.random.default_rng(0)
    w = flame.tensor((rng.standard_normal((1024, 1024)) * 0.01).astype(np.float32), requires_grad=True)

    @flame.compile
    def step(x):
        loss = (x @ w).tanh().mean()
        loss.backward()
        with flame.no_grad():  # an update of a leaf that requires grad, as in torch
            w.copy_(w - 0.1 * w.grad)
        w.grad = None
        return loss

    x = flame.tensor(rng.standard_normal((8, 1024)).astype(np.float32))
    pool = cupy.get_default_memory_pool()
    step(x).item()
    before = pool.used_bytes()
    losses = [step(x).item() for _ in range(3)]
    grown = pool.used_bytes() - before
    assert losses[-1] < losses[0]
    assert grown <= x.numel() * 4 + 64 * 1024, (grown, "a parameter-sized copy is 4 MiB")


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("epilogue", ["none", "bias", "relu", "bias_relu"])
@pytest.mark.parametrize("batch", [(), (3,)])
def test_matmul_transposes_and_epilogues(ta, tb, epilogue, batch):
    import cupy

    from flame.runtime.matmul import matmul_into

    rng = np.random.default_rng(0)
    m, n, k = 33, 20, 17
    a = rng.standard_normal(batch + ((k, m) if ta else (m, k))).astype(np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32) if "bias" in epilogue else None
    want = np.swapaxes(a, -1, -2) @ b.T if ta and tb else (np.swapaxes(a, -1, -2) @ b if ta else
                                                           (a @ b.T if tb else a @ b))
    want = want + bias if bias is not None else want
    want = np.maximum(want, 0) if "relu" in epilogue else want
    out = cupy.empty(batch + (m, n), cupy.float32)
    matmul_into(out, cupy.asarray(a), cupy.asarray(b), ta, tb, epilogue,
                None if bias is None else cupy.asarray(bias))
    np.testing.assert_allclose(cupy.asnumpy(out), want, rtol=1e-4, atol=1e-4)


def test_in_place_update_keeps_the_device_pointer():
    step, params, x, y = _mlp_step()
    ptrs = [p._data.data.ptr for p in params]
    losses = [float(step(x, y)) for _ in range(4)]
    assert [p._data.data.ptr for p in params] == ptrs
    assert losses[-1] < losses[0]
    assert isinstance(flame.tensor(1.0), flame.Tensor)


@pytest.mark.parametrize("graphs", [False, True])
def test_an_executor_holds_no_input_but_parameters_and_state(monkeypatch, graphs):
    """A call's data inputs are not kept alive by the executor (an eager cast's source, a batch):
    once the caller drops them, CuPy's pool has their bytes back. Parameters stay held (their owners
    keep them anyway), so a step over hundreds of them checks them by identity."""
    import gc

    import cupy

    pool = cupy.get_default_memory_pool()
    run = _compile(monkeypatch, graphs)
    rng = np.random.default_rng(0)
    w = cupy.asarray(rng.standard_normal((16, 32)).astype(np.float32))
    for _ in range(4):  # plain launches, then the captures and replays
        x = cupy.asarray(rng.standard_normal((64, 32)).astype(np.float32))
        out = run([x, w])
        assert out[1] is w
        cupy.cuda.Device().synchronize()
        before = pool.used_bytes()
        del x
        gc.collect()
        assert pool.used_bytes() <= before - 64 * 32 * 4, "the executor kept the call's data input alive"


def test_an_eager_cast_frees_its_source():
    """flame's eager ops run through cached executors: the f32 source of a bf16 cast is freed when the
    caller drops it, not kept by the cast's executor (it was, 48 MiB of a bench case's parameters)."""
    import gc

    import cupy

    pool = cupy.get_default_memory_pool()
    src = flame.from_dlpack(cupy.ones((1024, 1024), cupy.float32))
    low = src.to(flame.bf16)
    cupy.cuda.Device().synchronize()
    before = pool.used_bytes()
    del src
    gc.collect()
    assert pool.used_bytes() <= before - 4 * 1024 * 1024, (before, pool.used_bytes())
    assert low.dtype == flame.bf16


@pytest.mark.parametrize("graphs", [False, True])
def test_a_data_input_passed_again_is_checked_once(monkeypatch, graphs):
    """A data input that is the array of the last call skips the check (remembered weakly, not held);
    another array is checked again (a wrong shape raises), and a NumPy array is converted at every call."""
    import cupy

    from flame.errors import FlameError
    from flame.runtime.cuda import CompiledPlan

    run, plain = _compile(monkeypatch, graphs), _compile(monkeypatch, False)
    checked = []
    real = CompiledPlan._checked
    monkeypatch.setattr(CompiledPlan, "_checked",
                        lambda self, a, i: (self is run and checked.append(i)) or real(self, a, i))
    rng = np.random.default_rng(0)
    w = cupy.asarray(rng.standard_normal((16, 32)).astype(np.float32))
    w_plain = w.copy()
    x = cupy.asarray(rng.standard_normal((64, 32)).astype(np.float32))
    for _ in range(3):
        got, want = run([x, w]), plain([x, w_plain])
        np.testing.assert_allclose(cupy.asnumpy(got[0]), cupy.asnumpy(want[0]), rtol=1e-5, atol=1e-5)
    assert checked.count(0) == 1 and checked.count(1) == 1
    with pytest.raises(FlameError, match="input 0 should be float32"):
        run([cupy.zeros((32, 64), np.float32), w])
    host = rng.standard_normal((64, 32)).astype(np.float32)
    for _ in range(2):
        got, want = run([host, w]), plain([host, w_plain])
        np.testing.assert_allclose(cupy.asnumpy(got[0]), cupy.asnumpy(want[0]), rtol=1e-5, atol=1e-5)
    assert checked.count(0) == 4


def _wide_graph(rows: int) -> Graph:
    """x[rows, 256] -> sum over rows of tanh(x @ w) * 2, through temporaries of rows x 256 floats."""
    g = Graph("wide")
    b = Builder(g)
    x = g.add_input(TensorType((rows, 256), f32))
    w = g.add_input(TensorType((256, 256), f32), "param")
    h = b.mul(b.tanh(b.matmul(x, w)), 2.0)
    g.outputs = [b.reduce_sum(b.exp(h), axes=[0], keepdim=False)]
    return verify(g)


@pytest.mark.parametrize("graphs", [True, False])
def test_plans_sharing_an_arena_rebind_when_a_larger_one_grows_it(monkeypatch, graphs):
    """Two plans compiled with one Arena: the larger one's first call grows the buffer, and the smaller
    one, bound to the old buffer (with its CUDA graphs captured on it), binds the new one at its next
    call and still computes what a plan with an arena of its own computes."""
    import cupy

    from flame.runtime.cuda import CudaExecutor

    monkeypatch.setenv("FLAME_CUDA_GRAPHS", "1" if graphs else "0")
    ex = CudaExecutor()
    small_plan, large_plan = to_plan(_wide_graph(64)), to_plan(_wide_graph(4096))
    assert large_plan.arena_size > small_plan.arena_size
    arena = ex.arena()
    small, large = ex.compile(small_plan, arena), ex.compile(large_plan, arena)
    own_small, own_large = ex.compile(small_plan), ex.compile(large_plan)
    rng = np.random.default_rng(5)
    w = cupy.asarray(rng.standard_normal((256, 256)).astype(np.float32) / 16)
    xs = cupy.asarray(rng.standard_normal((64, 256)).astype(np.float32))
    xl = cupy.asarray(rng.standard_normal((4096, 256)).astype(np.float32))
    for _ in range(3):  # plain launches, then a capture and a replay
        got = small([xs, w])[0]
    np.testing.assert_array_equal(cupy.asnumpy(got), cupy.asnumpy(own_small([xs, w])[0]))
    first = arena.buffer
    assert first.nbytes == small_plan.arena_size and small._arena is first
    captured = small.captures
    for _ in range(3):
        got = large([xl, w])[0]
    np.testing.assert_array_equal(cupy.asnumpy(got), cupy.asnumpy(own_large([xl, w])[0]))
    assert arena.nbytes == large_plan.arena_size and small._arena is None and not small._graphs
    for _ in range(3):
        got = small([xs, w])[0]
    np.testing.assert_array_equal(cupy.asnumpy(got), cupy.asnumpy(own_small([xs, w])[0]))
    assert small._arena is arena.buffer and arena.nbytes == large_plan.arena_size
    assert small.captures > captured if graphs else small.captures == 0


def test_a_training_steps_traces_share_one_arena():
    """A step accumulating into .grad traces twice (its second call reads the .grad the first made);
    both plans run in one arena, the larger one's, and what the pool hands out over the calls is that
    arena and the step's outputs, not an arena per trace."""
    import cupy

    rng = np.random.default_rng(1)
    w1 = flame.tensor((rng.standard_normal((512, 1024)) * 0.05).astype(np.float32), requires_grad=True)
    w2 = flame.tensor((rng.standard_normal((1024, 1)) * 0.05).astype(np.float32), requires_grad=True)

    @flame.compile
    def step(x):
        loss = ((x @ w1).tanh() @ w2).square().mean()
        loss.backward()
        return loss

    x = flame.tensor(rng.standard_normal((2048, 512)).astype(np.float32))
    first = step.memory_report(x)
    cupy.cuda.Device().synchronize()
    flame.cuda.reset_peak_memory_stats()
    start = flame.cuda.memory_allocated()
    for _ in range(4):
        step(x)
    cupy.cuda.Device().synchronize()
    grown = flame.cuda.max_memory_allocated() - start
    variants = step.variants()
    assert len(variants) == 2
    shared = {id(v.run._shared) for v in variants}
    arenas = [v.plan.arena_size for v in variants]
    assert len(shared) == 1 and variants[0].run._shared.nbytes == max(arenas)
    # the arena, the .grad arrays twice (the steady plan writes new ones while the last call's are its
    # input), the loss's output slabs and the pool's rounding: far less than a second arena
    grads, slack = first.bound["output"], 1024 * 1024
    print(f"arenas {arenas}, grown {grown} B, .grad arrays {grads} B")
    assert grown <= max(arenas) + 2 * grads + slack < sum(arenas) + 2 * grads
