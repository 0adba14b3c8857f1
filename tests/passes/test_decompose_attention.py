"""decompose_attention: an attention op (forward, softmax statistics or backward) the backend cannot run
becomes primitive ops that compute what the op's NumPy reference computes, for every mask kind,
grouped-query attention, f32, f16 and bf16; the ops carry the reason on their source line; a supported
op stays one op; the statistics reuse the decomposed forward's row max and sums. The bias gradient
always decomposes, for every mask broadcast; an attention with no keys or no queries becomes constants."""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import pytest

from flame import compiler
from flame.codegen.nvrtc import compile_many
from flame.compiler import compile_graph
from flame.ir import Graph, parse, print_graph, verify
from flame.ir.builder import Builder
from flame.ir.dtypes import DType, bf16, boolean, f16, f32
from flame.ir.ops.attention import stats_type
from flame.ir.types import TensorType
from flame.passes.decompose_attention import (
    ATTENTION_OPS,
    BACKWARD,
    BIAS_GRAD,
    DECOMPOSE_ALL,
    FORWARD,
    NO_BIAS_CALL,
    STATS,
    decompose_attention,
    note,
)
from flame.passes.pipeline import legalize, lower
from flame.plan.build import to_plan
from flame.plan.steps import KernelLaunch
from flame.runtime.reference import ReferenceExecutor, run_graph
from flame.target import DEFAULT_TARGET

B, H, E, EV = 2, 4, 8, 6
LOC = "model.py:7  y = F.scaled_dot_product_attention(q, k, v)"
MASKS = ("none", "bool", "additive", "causal", "causal-rect")
TOL = {f32: 1e-5, f16: 4e-3, bf16: 3e-2}


def _attention_graph(backward: bool | str, mask: str, gqa: bool, dtype: DType) -> Graph:
    """One attention op (forward, "stats", or backward with its out, grad_out and stats as inputs)."""
    length, keys = (5, 7) if mask in ("causal-rect", "bool", "additive") else (5, 5)
    if mask == "causal-rect":
        length, keys = 7, 4  # more queries than keys: top-left aligned, every row keeps key 0
    hkv = 2 if gqa else H
    g = Graph("attention")
    q = g.add_input(TensorType((B, H, length, E), dtype))
    k = g.add_input(TensorType((B, hkv, keys, E), dtype))
    v = g.add_input(TensorType((B, hkv, keys, EV), dtype))
    extra = []
    if backward is True:
        extra = [g.add_input(TensorType((B, H, length, EV), dtype)) for _ in range(2)]
        extra.append(g.add_input(stats_type(q.type)))
    masks = {"bool": TensorType((B, 1, length, keys), boolean), "additive": TensorType((length, keys), dtype)}
    operands = [g.add_input(masks[mask])] if mask in masks else []
    b = Builder(g, LOC)
    name = {True: BACKWARD, False: FORWARD, "stats": STATS}[backward]
    g.outputs = [b.emit(name, q, k, v, *extra, *operands, scale=0.35, is_causal=mask.startswith("causal"),
                        enable_gqa=gqa)]
    return g


def _inputs(g: Graph, rng: np.random.Generator) -> list[np.ndarray]:
    arrays = []
    for v in g.inputs:
        t = v.type
        if t.dtype == boolean:
            keep = rng.random(t.shape) < 0.6
            keep[0, 0, 1, :] = False  # a row with no key taking part: the reference gives 0
            arrays.append(keep)
        elif len(t.shape) == 2:  # additive mask: some -inf (a whole row of them too), some finite
            m = np.where(rng.random(t.shape) < 0.3, -np.inf, rng.standard_normal(t.shape))
            m[2, :] = -np.inf
            arrays.append(m.astype(t.dtype.np_dtype))
        else:
            arrays.append(rng.standard_normal(t.shape).astype(t.dtype.np_dtype))
    op = g.ops[-1]
    if op.name == BACKWARD:  # the statistics the forward computes for these q, k (and mask)
        fwd = [arrays[i] for i in (0, 1, 2, *range(6, len(arrays)))]
        arrays[5] = run_graph(_stats_of(op), fwd)[0]
    return arrays


def _stats_of(op) -> Graph:
    """The graph of the statistics op of backward op `op`'s attention."""
    g = Graph("stats")
    ins = [g.add_input(v.type) for v in (*op.inputs[:3], *op.inputs[6:])]
    g.outputs = [Builder(g).emit(STATS, *ins, **op.attrs)]
    return g


def _assert_close(got: np.ndarray, want: np.ndarray, dtype: DType) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    want, got = want.astype(np.float64), got.astype(np.float64)
    assert not np.isnan(want).any()  # -inf: the statistics of a row with no key (assert_allclose matches them)
    finite = np.abs(want[np.isfinite(want)])
    tol = TOL[dtype] * (1.0 if dtype == f32 else max(1.0, finite.max()))  # half types: relative to the largest
    np.testing.assert_allclose(got, want, atol=tol, rtol=0)


@pytest.mark.parametrize("dtype", [f32, f16, bf16], ids=str)
@pytest.mark.parametrize("gqa", [False, True], ids=["mha", "gqa"])
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("backward", [False, "stats", True], ids=["forward", "stats", "backward"])
def test_decomposed_equals_reference(backward, mask, gqa, dtype):
    g = _attention_graph(backward, mask, gqa, dtype)
    text = print_graph(g)
    d = decompose_attention(g)
    verify(d)
    assert print_graph(g) == text, "the input graph was modified"
    assert not any(op.name in ATTENTION_OPS for op in d.ops)
    assert all(note(DECOMPOSE_ALL) in op.loc and op.loc.startswith(LOC) for op in d.ops)
    assert print_graph(parse(print_graph(d))) == print_graph(d)
    arrays = _inputs(g, np.random.default_rng(0))
    (want,), (got,) = run_graph(g, arrays), run_graph(d, arrays)
    _assert_close(got, want, dtype)


def test_masked_rows_are_zero():
    """Every key masked out of a row: the output row is 0 and so are its gradients, as the reference."""
    g = _attention_graph(False, "bool", False, f32)
    arrays = _inputs(g, np.random.default_rng(1))
    arrays[3][:] = False
    (got,) = run_graph(decompose_attention(g), arrays)
    assert np.array_equal(got, np.zeros_like(got))


def test_stats_reuse_the_forward_rows():
    """A forward and its statistics decompose with one q @ k^T and one row max (the statistics add a log
    and an add); each alone gives its reference's values."""
    g = _attention_graph(False, "additive", True, f32)
    b = Builder(g, LOC)
    fwd = g.outputs[0].producer
    g.outputs.append(b.emit(STATS, *fwd.inputs, **fwd.attrs))
    d = decompose_attention(g)
    names = [op.name for op in d.ops]
    assert names.count("matmul") == 2 and names.count("reduce_max") == 1 and names.count("log") == 1
    arrays = _inputs(g, np.random.default_rng(4))
    for got, want in zip(run_graph(d, arrays), run_graph(g, arrays)):
        _assert_close(got, want, f32)
    assert np.isneginf(run_graph(d, arrays)[1][:, :, 2]).all()  # the row with every key masked


def test_supported_op_stays():
    g = _attention_graph(True, "causal", True, bf16)
    assert decompose_attention(g, lambda op: "") is g
    mixed = Graph("two")
    q = mixed.add_input(TensorType((1, 2, 4, 8), f32))
    b = Builder(mixed)
    low = b.cast(q, dtype=bf16)
    kept = b.scaled_dot_product_attention(low, low, low, scale=1.0)
    gone = b.scaled_dot_product_attention(q, q, q, scale=1.0)
    mixed.outputs = [kept, gone]
    d = decompose_attention(mixed, lambda op: "f32 is not supported" if op.inputs[0].dtype == f32 else "")
    assert [op.name for op in d.ops].count(FORWARD) == 1
    assert d.outputs[0].producer.name == FORWARD and d.outputs[0].producer.loc is None
    assert d.outputs[1].producer.loc == note("f32 is not supported")


def test_reason_logged_once(caplog):
    reason = "test reason logged once"
    with caplog.at_level(logging.INFO, logger="flame"):
        for _ in range(2):
            decompose_attention(_attention_graph(False, "none", False, f32), lambda op: reason)
    assert sum(reason in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize("mask", ["bool", "causal"])
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_legalize_then_fuse_plan_and_run(backward, mask):
    """The compile path: legalize (a stage in dumps), fusion, a plan whose kernels NVRTC compiles, and
    the reference executor running that plan."""
    g = _attention_graph(backward, mask, True, bf16)
    stages = []
    d = legalize(g, lambda op: "test: not one call", dump=lambda stage, graph, sec: stages.append(stage))
    assert stages == ["decompose_attention"]
    plan = to_plan(lower(d))
    sources = {s.source for s in plan.steps if isinstance(s, KernelLaunch)}
    assert len(compile_many(sorted(sources), "sm_90")) == len(sources)  # NVRTC, no GPU needed
    run = ReferenceExecutor().compile(plan)
    arrays = _inputs(g, np.random.default_rng(2))
    _assert_close(np.asarray(run(arrays)[0]), run_graph(g, arrays)[0], bf16)


@pytest.mark.parametrize("optimize", [False, True], ids=["eager", "optimized"])
def test_compile_graph_legalizes_every_graph(monkeypatch, optimize):
    """compile_graph legalizes optimised graphs and eager one-op graphs alike (here for a backend that
    runs no attention op as one call, as its Target says); legalize's default runs every attention op as it is."""
    g = _attention_graph(True, "additive", False, f32)
    assert legalize(g) is g
    backend = replace(DEFAULT_TARGET, attention_unsupported=lambda op: "test backend: no attention call")
    monkeypatch.setattr(compiler, "_target", lambda *settings: backend)
    compiled = compile_graph(g, key=("test_compile_graph_legalizes_every_graph", optimize), optimize=optimize)
    assert not any(op.name in ATTENTION_OPS for op in compiled.graph.ops)
    assert "decompose_attention" in dict(compiled.timings)
    arrays = _inputs(g, np.random.default_rng(3))
    _assert_close(np.asarray(compiled.run(arrays)[0]), run_graph(g, arrays)[0], f32)


def _bias_graph(mask_shape, gqa: bool, dtype: DType, length: int = 5, keys: int = 7) -> Graph:
    """One bias-gradient op: q, k, v, out, grad_out, stats and an additive mask of `mask_shape`."""
    hkv = 2 if gqa else H
    g = Graph("bias")
    shapes = [(B, H, length, E), (B, hkv, keys, E), (B, hkv, keys, EV), (B, H, length, EV), (B, H, length, EV)]
    q, k, v, out, gout = (g.add_input(TensorType(s, dtype)) for s in shapes)
    stats = g.add_input(stats_type(q.type))
    mask = g.add_input(TensorType(mask_shape, dtype))
    g.outputs = [Builder(g, LOC).emit(BIAS_GRAD, q, k, v, out, gout, stats, mask, scale=0.35, enable_gqa=gqa)]
    return verify(g)


def _bias_inputs(g: Graph, rng: np.random.Generator) -> list[np.ndarray]:
    """Finite inputs, and the statistics the forward computes for its q, k and mask."""
    arrays = [rng.standard_normal(v.type.shape).astype(v.type.dtype.np_dtype) for v in g.inputs]
    op = g.ops[-1]
    arrays[5] = run_graph(_stats_of(op), [arrays[i] for i in (0, 1, 2, 6)])[0]
    return arrays


@pytest.mark.parametrize("dtype", [f32, f16, bf16], ids=str)
@pytest.mark.parametrize("gqa", [False, True], ids=["mha", "gqa"])
@pytest.mark.parametrize("mask_shape", [(5, 7), (B, 1, 5, 7), (1, H, 5, 7), (B, H, 5, 7), (H, 1, 7)], ids=str)
def test_decomposed_bias_gradient_equals_reference(mask_shape, gqa, dtype):
    """The bias gradient decomposes (whatever the backend says: no library call computes it, NO_BIAS_CALL
    on its ops' lines) into primitive ops that give the reference's dS summed to the mask's shape."""
    g = _bias_graph(mask_shape, gqa, dtype)
    d = decompose_attention(g, lambda op: "")
    verify(d)
    assert not any(op.name in ATTENTION_OPS for op in d.ops)
    assert all(note(NO_BIAS_CALL) in op.loc for op in d.ops)
    arrays = _bias_inputs(g, np.random.default_rng(5))
    (want,), (got,) = run_graph(g, arrays), run_graph(d, arrays)
    _assert_close(got, want, dtype)


def test_bias_gradient_reasons():
    """legalize decomposes the bias gradient on the reference target too; the CUDA target says why cuDNN
    does not compute it."""
    from flame.runtime.cudnn_attention import op_unsupported

    g = _bias_graph((5, 7), False, bf16)
    assert not any(op.name == BIAS_GRAD for op in legalize(g).ops)
    assert "dBias" in op_unsupported(g.ops[-1])


@pytest.mark.parametrize("backward", [False, "stats", True, "bias"], ids=["forward", "stats", "backward", "bias"])
@pytest.mark.parametrize("lengths", [(5, 0), (0, 7)], ids=["no-keys", "no-queries"])
def test_empty_attention_decomposes_to_the_references_constants(lengths, backward):
    """No keys or no queries: zeros (the statistics -inf), without a reduction over an empty axis."""
    length, keys = lengths
    if backward == "bias":
        g = _bias_graph((length, keys), False, f32, length, keys)
    else:
        g = Graph("empty")
        q = g.add_input(TensorType((B, H, length, E), f32))
        k, v = (g.add_input(TensorType((B, H, keys, n), f32)) for n in (E, EV))
        extra = [g.add_input(TensorType((B, H, length, EV), f32)) for _ in range(2)] if backward is True else []
        extra += [g.add_input(stats_type(q.type))] if backward is True else []
        name = {True: BACKWARD, False: FORWARD, "stats": STATS}[backward]
        g.outputs = [Builder(g, LOC).emit(name, q, k, v, *extra, scale=0.35)]
    d = decompose_attention(g)
    assert {op.name for op in d.ops} <= {"full"}
    arrays = [np.random.default_rng(6).standard_normal(v.type.shape).astype(v.type.dtype.np_dtype) for v in g.inputs]
    (want,), (got,) = run_graph(g, arrays), run_graph(d, arrays)
    np.testing.assert_array_equal(got, want)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("where_mask", [False, True])
@pytest.mark.parametrize("mask", MASKS)
def test_a_nan_gradient_at_dropped_scores_follows_where_mask(mask, where_mask):
    """A NaN in the result's gradient makes dP - D NaN along its row: a dropped score's gradient is then
    p * NaN = NaN (torch's scaled_dot_product_attention), or 0 under where_mask for is_causal and a bool
    mask (torch's where); the decomposition gives the reference's values and NaNs, and keys dropped from
    that row keep a finite gradient only under where_mask."""
    g = _attention_graph(True, mask, False, f32)
    op = g.ops[-1]
    op.attrs = {**op.attrs, "where_mask": where_mask}
    arrays = _inputs(g, np.random.default_rng(2))
    arrays[4][0, 0, 3, 0] = np.nan
    (want,), (got,) = run_graph(g, arrays), run_graph(decompose_attention(g), arrays)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)
    q, k = (v.type for v in g.inputs[:2])
    dk = want[q.numel : q.numel + k.numel].reshape(k.shape)[0, 0]
    dropped = {
        "bool": lambda: ~arrays[-1][0, 0, 3],
        "causal": lambda: np.arange(k.shape[-2]) > 3,
        "causal-rect": lambda: np.arange(k.shape[-2]) > 3,
    }.get(mask, lambda: np.zeros(k.shape[-2], bool))()
    finite = np.isfinite(dk).all(-1)
    assert finite[dropped].all() == where_mask or not dropped.any(), (dropped, finite)
    assert not finite[~dropped].any()
