"""segment_sum, the gradient of index_select and so of an embedding: values and gradients against
torch (f64, eagerly and compiled), f16 / bf16 sums in f32 rounded once (torch's CUDA embedding
backward), and the plan an embedding's backward gets for the CUDA target: the 1-D index read as it
is, no broadcast index and no zero tensor materialised, its kernels compiled by NVRTC for sm_90."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from flame.codegen.nvrtc import compile_cubin
from flame.errors import IndexValueError
from flame.ir.builder import Builder
from flame.ir.dtypes import bf16, i64
from flame.ir.graph import Graph
from flame.ir.types import TensorType
from flame.runtime.reference import run_graph
from tests.ops.test_everyday_ops import check, randn

MODES = ("eager", "compiled")
IDX = np.array([3, 0, 3, 7, 3, 1, 0, 9, 9, 3])  # repeated indices; rows 2, 4, 5, 6, 8 never looked up


@pytest.mark.parametrize("mode", MODES)
def test_embedding_values_and_gradient_match_torch(mode):
    w = randn(10, 8).astype(np.float64)
    ids = IDX.reshape(2, 5)
    check(lambda t, i: flame.nn.functional.embedding(i, t) * 1.5,
          lambda t, i: torch.nn.functional.embedding(i, t) * 1.5, w, ids, mode=mode, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", MODES)
def test_index_select_gradient_along_an_inner_axis_matches_torch(mode):
    x = randn(3, 10, 5).astype(np.float64)
    check(lambda t, i: t.index_select(1, i).sin(), lambda t, i: t.index_select(1, i).sin(), x, IDX, mode=mode,
          rtol=1e-12, atol=1e-12)
    odd = randn(2, 10, 3).astype(np.float64)  # slices of 3: not the 4-wide path
    check(lambda t, i: t.index_select(1, i) ** 2, lambda t, i: t.index_select(1, i) ** 2, odd, IDX, mode=mode,
          rtol=1e-12, atol=1e-12)


def test_bf16_sums_round_once():
    """Many small bf16 gradients into one row: summed in f32 and rounded once (as torch's CUDA
    embedding backward), not rounded after each add."""
    g = Graph()
    b = Builder(g)
    idx = g.add_input(TensorType((512,), i64))
    src = g.add_input(TensorType((512, 4), bf16))
    g.outputs = [b.segment_sum(idx, src, axis=0, size=3)]
    ids = np.zeros(512, np.int64)
    ids[::2] = 2
    vals = np.full((512, 4), 1.0 + 2.0 ** -7, np.float32)  # exact in bf16; their running sum is not
    (got,) = run_graph(g, [ids, vals.astype(bf16.np_dtype)])
    want = torch.zeros(3, 4, dtype=torch.float32).index_add_(0, torch.from_numpy(ids), torch.from_numpy(vals))
    np.testing.assert_array_equal(got.astype(np.float32), want.to(torch.bfloat16).float().numpy())
    assert not got[1].any()


def test_out_of_range_index_raises_on_the_reference_executor():
    g = Graph()
    b = Builder(g)
    idx, src = g.add_input(TensorType((2,), i64)), g.add_input(TensorType((2, 4), bf16))
    g.outputs = [b.segment_sum(idx, src, axis=0, size=3)]
    with pytest.raises(IndexValueError, match="out of bounds"):
        run_graph(g, [np.array([0, 3]), np.zeros((2, 4), bf16.np_dtype)])


def _embedding_step():
    w = flame.nn.Parameter(flame.tensor(randn(64, 32)).to(flame.bfloat16))

    def body(ids):
        loss = flame.nn.functional.embedding(ids, w).float().square().sum()
        loss.backward()
        return loss

    return w, body


def test_embedding_backward_plan_reads_the_index_once_per_slice(cuda_target):
    """For the CUDA target: the weight's gradient is one segment_sum of the 1-D index (no i64
    tensor of the gradient's shape, no zero-filled table read back), its kernels compile for
    sm_90, and the reference executor running the plan gives eager's gradient."""
    w, body = _embedding_step()
    ids = flame.tensor(np.array([[3, 0, 3, 7], [3, 1, 0, 9]]))
    want = body(ids).item(), w.grad.float().numpy()
    w.grad = None
    step = flame.compile(body)
    got = step(ids).item(), w.grad.float().numpy()
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    np.testing.assert_array_equal(got[1], want[1])
    plan = step._last.plan
    graph = step._last.graph
    names = [op.name for op in graph.ops]
    assert "segment_sum" in names and "scatter_add" not in names
    wide_i64 = [op for op in graph.ops if op.out.dtype == i64 and op.out.type.rank > 1]
    assert not wide_i64, f"a broadcast index is materialised: {wide_i64}"
    (seg,) = [op for op in graph.ops if op.name == "segment_sum"]
    assert seg.inputs[0].type.rank == 1
    launches = [k for k in plan.kernels() if k.name.startswith("segment_sum")]
    assert len(launches) == 3  # zero out and the slots, add, round: no separate fill of the table
    for source in {k.source for k in plan.kernels()}:
        assert compile_cubin(source, "sm_90")[:4] == b"\x7fELF"


def test_embedding_backward_with_a_dynamic_batch(cuda_target):
    """A batch dim seen at two sizes (a dynamic size: the index's length is the kernel's parameter):
    each size's gradient is eager's, and the template's kernels compile for sm_90."""
    w, body = _embedding_step()
    step = flame.compile(body, dynamic=True)
    for n in (6, 10, 3):
        ids = flame.tensor(IDX[:n] * 6)
        want = body(ids).item(), w.grad.float().numpy()
        w.grad = None
        got = step(ids).item(), w.grad.float().numpy()
        w.grad = None
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
        np.testing.assert_array_equal(got[1], want[1])
    assert "segment_sum" in [op.name for op in step._last.graph.ops]
    for source in {k.source for k in step._last.plan.kernels()}:
        assert compile_cubin(source, "sm_90")[:4] == b"\x7fELF"
