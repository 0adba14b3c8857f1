"""Plans on the reference executor: the same Plan the CUDA executor runs, with the arena as one NumPy
byte buffer, must match run_graph (the oracle) for every op and for random graphs; a wrong memory
plan must show."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import pytest

from flame.errors import FlameError
from flame.ir import Builder, Graph, TensorType, dtype_of, verify
from flame.passes.pipeline import legalize
from flame.plan.build import to_plan
from flame.plan.memory import check_plan
from flame.plan.steps import ALIGN, Alias, Copy, KernelLaunch, LibraryCall
from flame.runtime.reference import ReferenceExecutor, run_graph, run_plan
from tests.runtime.cases import all_cases, one_op_graph, permuted_inputs, random_graph

CASES = all_cases()
f32 = dtype_of("f32")


@dataclass(frozen=True)
class FakeKernel:
    """codegen's Kernel contract, for testing plans without codegen: reductions take two kernels
    and a scratch buffer, zero-size outputs none."""

    name: str
    source: str
    grid: int
    block: int
    n_inputs: int
    smem: int = 0
    scratch: int = 0
    sizes: tuple = ()  # the size parameters (none: no dynamic dim here)


def fake_lower(op):
    if op.name == "matmul":
        raise NotImplementedError("matmul is a library call")
    n = op.out.type.numel
    if n == 0:
        return []
    k = FakeKernel(f"{op.name}_{op.out.type.dtype}", f"// {op.name}", -(-n // 256), 256, len(op.inputs))
    if op.name.startswith("reduce_") or op.name == "argmax":
        k = dataclasses.replace(k, scratch=4 * 64)
        return [dataclasses.replace(k, name=k.name + "_partial"), dataclasses.replace(k, name=k.name + "_final")]
    return [k]


def _check(g, inputs, lower=fake_lower):
    plan = to_plan(legalize(g), lower)  # as compile_graph plans: ops with no step of their own decomposed
    check_plan(plan)
    want = run_graph(g, inputs)
    got = run_plan(plan, inputs)
    assert len(got) == len(want)
    for w, o in zip(want, got):
        assert o.shape == w.shape and o.dtype == w.dtype
        if o.dtype.kind == "f" or o.dtype.itemsize == 2:  # sums may add in another order
            np.testing.assert_allclose(o.astype(np.float64), w.astype(np.float64), rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(o, w)
    return plan


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_every_op_plan_matches_oracle(case):
    _, name, _, inputs, attrs = case
    _check(one_op_graph(name, inputs, attrs), inputs)


@pytest.mark.parametrize("case", CASES[::7], ids=[c[0] for c in CASES[::7]])
def test_every_op_on_permuted_inputs(case):
    _, name, _, inputs, attrs = case
    _check(one_op_graph(name, inputs, attrs, permuted=True), permuted_inputs(inputs))


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_every_op_with_codegen_kernels(case):
    pytest.importorskip("flame.codegen.lower")
    _, name, _, inputs, attrs = case
    _check(one_op_graph(name, inputs, attrs), inputs, lower=None)


@pytest.mark.parametrize("seed", range(40))
def test_random_graphs(seed):
    g, inputs = random_graph(np.random.default_rng(seed), n_ops=int(8 + seed % 13))
    _check(g, inputs)


def _chain(n_ops: int, size: int = 1000) -> tuple[Graph, list[np.ndarray]]:
    g = Graph("chain")
    b = Builder(g)
    v = g.add_input(TensorType((size,), f32))
    for i in range(n_ops):
        v = b.tanh(v) if i % 2 else b.sin(v)
    g.outputs = [v]
    return verify(g), [np.linspace(-1, 1, size, dtype=np.float32)]


def test_elementwise_chain_reuses_one_slot():
    g, inputs = _chain(10)
    plan = _check(g, inputs)
    assert plan.arena_size == math.ceil(4000 / ALIGN) * ALIGN  # each step overwrites its dead input
    offsets = {b.offset for b in plan.buffers.values() if b.role == "temporary"}
    assert offsets == {0}


def test_overlapping_plan_breaks_results_on_cpu():
    g = Graph("diamond")
    b = Builder(g)
    x = g.add_input(TensorType((64,), f32))
    y, z = b.sin(x), b.cos(x)
    g.outputs = [b.add(b.mul(y, 2.0), z)]
    verify(g)
    inputs = [np.linspace(0, 3, 64, dtype=np.float32)]
    plan = _check(g, inputs)
    squashed = {k: dataclasses.replace(v, offset=0) if v.role == "temporary" else v for k, v in plan.buffers.items()}
    bad = dataclasses.replace(plan, buffers=squashed)
    with pytest.raises(FlameError, match="live together"):
        check_plan(bad)
    assert not np.allclose(run_plan(bad, inputs)[0], run_graph(g, inputs)[0])


def test_views_copies_and_outputs():
    g = Graph("views")
    b = Builder(g)
    x = g.add_input(TensorType((2, 3), f32))
    y = b.exp(x)
    r = b.reshape(y, shape=[3, 2])
    g.outputs = [r, y, b.reshape(x, shape=[6]), x, r]
    verify(g)
    plan = _check(g, [np.arange(6, dtype=np.float32).reshape(2, 3)])
    kinds = [type(s) for s in plan.steps]
    assert kinds.count(KernelLaunch) == 1 and kinds.count(Alias) == 2
    assert kinds.count(Copy) == 4  # y shares r's bytes; the input views and the repeated r are copied
    assert plan.arena_size == 0  # the only temporary became output 0's buffer
    outs = run_plan(plan, [np.ones((2, 3), np.float32)])
    outs[0][...] = 7
    assert not np.shares_memory(outs[0], outs[4])


def test_plan_prints_like_the_ir():
    g = Graph("step")
    b = Builder(g)
    x = g.add_input(TensorType((8, 16), f32))
    w = g.add_input(TensorType((16, 4), f32), "param")
    h = b.relu(b.matmul(x, w))
    g.outputs = [b.reduce_sum(b.reshape(h, shape=[32]), axes=[0], keepdim=False)]
    verify(g)
    plan = to_plan(g, fake_lower)
    text = str(plan)
    assert text.startswith("plan step (arena 512 bytes) {\n")
    for line in ["  b0: f32[8,16] input 0", "  b1: f32[16,4] param 1", "  b2: f32[8,4] temporary @0+128",
                 "  b3: f32[8,4] temporary @0+128", "  b4: f32[32] view = b3", "  b5: f32[] output 0",
                 "  b6: u8[256] scratch @256+256",
                 "  b2 = call matmul (b0, b1) {m=8, n=4, k=16, batch_a=[], batch_b=[], batch=[], ta=false, "
                 "tb=false}  # %2 = matmul %0, %1 : f32[8,4]",
                 "  b3 = launch relu_f32 <<<1, 256, 0>>> (b2)  # %3 = relu %2 : f32[8,4]",
                 "  b4 = alias b3  # %4 = reshape %3 {shape=[32]} : f32[32]",
                 "  b5 = launch reduce_sum_f32_partial [1/2] <<<1, 256, 0>>> (b4) scratch=b6  "
                 "# %5 = reduce_sum %4 {axes=[0], keepdim=false} : f32[]",
                 "  return b5"]:
        assert line in text.splitlines(), f"{line!r} not in\n{text}"
    assert isinstance(plan.steps[0], LibraryCall)


def test_reference_executor_compiles_to_a_plan():
    g, inputs = _chain(3, 17)
    run = ReferenceExecutor().compile(to_plan(g))
    np.testing.assert_array_equal(run(inputs)[0], run_graph(g, inputs)[0])
