"""The two schedules of the row kernels (codegen/fused_rows.py, Config.rows_schedule /
FLAME_ROWS_SCHEDULE): each case below picks one branch of the "new" schedule (warp rows with 16-byte
vectors, odd lengths element by element, rows shorter than a warp's vectors, block rows with one
barrier per reduction, streamed rows, column partials, carried exp values); both schedules render and
compile with NVRTC, "old" is the default ("auto": new for plain rows without column sums, or with
column sums only), and (marked
gpu) every case under both schedules matches the reference executor's computation of the same
ops, also from misaligned pointers."""

from __future__ import annotations

import re

import numpy as np
import pytest

from flame.codegen import kernel_inputs, lower
from flame.codegen.kernel import Config, rows_schedule
from flame.codegen.nvrtc import compile_many
from flame.ir import Builder, Graph, TensorType, bf16, f32
from flame.ir.graph import FusionGroup, Kind
from flame.ir.verify import verify
from flame.passes.fuse import fuse
from flame.target import Target
from tests.codegen.test_reduce_schedules import _layer_norm, _softmax, _sum_squares, layer_norm_fwd_bwd
from tests.passes.conftest import random_array
from tests.passes.fuse_cases import cross_entropy_bf16

OLD, NEW = Config(rows_schedule="old"), Config(rows_schedule="new")
SUB, NO_SUB = Config(rows_schedule="new", sub_warp_rows=True), Config(rows_schedule="new", sub_warp_rows=False)
SMALL_CACHE = Target(row_cache=1024)


def _graph(make, shape, dt):
    return lambda: make(shape, dt)


def _channel_sums(shape=(4, 6, 10, 128), dt=bf16):
    """A channels-last BatchNorm's statistics: sums of x and x*x over [N, H, W] per channel C, the
    innermost dim (column sums only: no row total). The "new" schedule runs rows of C / 8 threads."""
    g = Graph("channel_sums")
    b = Builder(g)
    x = b.cast(g.add_input(TensorType(shape, dt)), dtype=f32)
    lead = list(range(len(shape) - 1))
    g.outputs = [b.reduce_sum(x, axes=lead, keepdim=True), b.reduce_sum(b.mul(x, x), axes=lead, keepdim=True)]
    return verify(g)


def _channel_sums_broadcast(shape=(4, 6, 10, 128), dt=bf16):
    """Channel sums of x * p, with p [N, 1, 1, C] broadcast over H and W (a global average pool's
    gradient in a BatchNorm backward's statistics): read as a broadcast by the vector schedule too."""
    g = Graph("channel_sums_broadcast")
    b = Builder(g)
    x = g.add_input(TensorType(shape, dt))
    p = g.add_input(TensorType((shape[0], 1, 1, shape[-1]), dt))
    y = b.cast(b.mul(x, p), dtype=f32)
    lead = list(range(len(shape) - 1))
    g.outputs = [b.reduce_sum(y, axes=lead, keepdim=True), b.reduce_sum(b.mul(y, y), axes=lead, keepdim=True)]
    return verify(g)


def _reshaped_swiglu_amax(rows=(2, 6), C=88, dt=bf16):
    """FP8 training's SwiGLU input scale: h = silu(g) * u over [2, T, C] reshaped from the GEMMs'
    [2T, C] outputs, h written back as [2T, C] (the next GEMM's operand), and max |h| per row. The
    reshapes address memory as the row domain itself, so the vector schedule takes them (they ran
    element by element at 47 % of copy in llama7b_block_train_fp8 on an H100)."""
    g = Graph("reshaped_swiglu_amax")
    flat = (rows[0] * rows[1], C)
    gate, up = g.add_input(TensorType(flat, dt)), g.add_input(TensorType(flat, dt))
    b = Builder(g)
    h = b.mul(b.silu(b.reshape(gate, shape=[*rows, C])), b.reshape(up, shape=[*rows, C]))
    g.outputs = [b.reshape(h, shape=list(flat)), b.reduce_max(b.abs(h), axes=[2], keepdim=False)]
    return verify(g)


# name -> (graph maker, Config of the new schedule, Target, fragments the new kernel's source must hold)
CASES = {
    "warp_vectors": (_graph(_layer_norm, (16, 40), f32), NEW, None,
                     ["32 threads per row", "flame_vec<float, 4>", "4-element vectors"]),
    "odd_length": (_graph(_layer_norm, (24, 37), f32), NEW, None, ["32 threads per row", "1-element vectors"]),
    # 9 rows of 3 vectors: not whole warps of 4-lane rows (a warp's lanes all reach its shuffles), so a warp each
    "shorter_than_warp_bf16": (_graph(_softmax, (9, 24), bf16), NEW, None,
                               ["32 threads per row", "flame_vec<__nv_bfloat16, 8>", "1 value(s) carried"]),
    # rows of at most 16 vectors, whole warps of them: several rows to a warp (Config.sub_warp_rows, on by
    # default), the totals folded by shuffles among each row's lanes
    "sub_warp_rows": (_graph(_softmax, (64, 128), bf16), SUB, None,
                      ["16 threads per row, 16 rows per block", "for (int d = 8; d > 0;", ", 0, 16);"]),
    "sub_warp_rows_f32": (_graph(_layer_norm, (16, 40), f32), SUB, None,
                          ["16 threads per row", "4-element vectors", ", 0, 16);"]),
    "sub_warp_rows_two_lanes": (_graph(_sum_squares, (96, 16), bf16), SUB, None,
                                ["2 threads per row, 128 rows per block", "8-element vectors", ", 0, 2);"]),
    "sub_warp_rows_one_lane": (_graph(_softmax, (256, 8), bf16), SUB, None,
                               ["1 threads per row, 256 rows per block", "8-element vectors"]),
    "sub_warp_rows_off": (_graph(_softmax, (64, 128), bf16), NO_SUB, None, ["32 threads per row, 8 rows per block"]),
    "softmax_carry": (_graph(_softmax, (8, 1000), bf16), NEW, None, ["y0[j * 8 + v]", "1 value(s) carried"]),
    "softmax_no_carry": (_graph(_softmax, (8, 1000), bf16), Config(rows_schedule="new", row_carry=False), None,
                         ["8-element vectors, 3 passes over the row)"]),
    "block_rows": (_graph(_softmax, (6, 4096), f32), Config(rows_schedule="new", row_regs=16), None,
                   ["512 threads per row", "row_red + 1 * slot"]),
    "block_rows_one_reduction": (_graph(_sum_squares, (6, 3000), f32), Config(rows_schedule="new", row_regs=8),
                                 None, ["threads per row", "row_red + 0 * slot"]),
    "streamed": (_graph(_softmax, (4, 5000), f32), NEW, SMALL_CACHE, ["1024 threads per row", "(streamed, 4-"]),
    "columns_warp": (lambda: layer_norm_fwd_bwd((64, 96))[0], Config(rows_schedule="new", row_regs=200), None,
                     ["32 threads per row", "column reduction(s)"]),
    "columns_block": (lambda: layer_norm_fwd_bwd((64, 96))[0], Config(rows_schedule="new", row_regs=8), None,
                      ["rows per block", "column reduction(s)"]),
    # column sums beside row totals over rows of at least Config.columns_new_min elements: "auto" takes
    # the new schedule, with Config.columns_row_regs registers of held data
    "columns_long_rows": (lambda: layer_norm_fwd_bwd((64, 2048))[0], Config(rows_schedule="auto"), None,
                          ["new schedule", "8-element vectors", "2 column reduction(s)"]),
    "cross_entropy_bf16": (lambda: cross_entropy_bf16(True, vocab=40)[0], NEW, None, ["1 value(s) carried"]),
    "reshaped_rows": (_reshaped_swiglu_amax, NEW, None, ["flame_vec<__nv_bfloat16, 8>", "8-element vectors"]),
    # few long rows split into chunks of 2048 across blocks (a whole-tensor loss), each chunk by vectors
    "split_rows": (_graph(_sum_squares, (2, 600000), bf16), NEW, None,
                   ["in 293 chunks of 2048 (registers, 8-element vectors, 1 pass over the row)", "cb + (off_t)t * 8"]),
    "split_rows_odd_length": (_graph(_sum_squares, (4, 300001), f32), NEW, None,
                              ["chunks of 2048", "1-element vectors"]),
    # many rows (at least Target.sm_count) of at least Config.row_stream_min elements re-read their inputs
    # in each pass, Config.row_stream_threads (512) each
    "streamed_long_rows": (lambda: _reshaped_swiglu_amax((2, 70)), Config(rows_schedule="new", row_stream_min=64),
                           None, ["512 threads per row", "(streamed, 8-element vectors, 1 pass over the row)"]),
    # ... and twice as many where a thread would take more than fused_rows.STREAM_VECTORS vectors a pass
    "streamed_wide_rows": (_graph(_softmax, (1024, 16384), f32), Config(rows_schedule="new", row_stream_min=64),
                           None, ["1024 threads per row", "(streamed, 4-element vectors, 3 passes over the row)"]),
    # ... and half as many where that leaves fewer threads idle in a row's last step (688 vectors: 3 steps
    # of 256 threads rather than 2 of 512)
    "streamed_fit_rows": (_graph(_softmax, (256, 5504), bf16), Config(rows_schedule="new", row_stream_min=64),
                          None, ["256 threads per row", "(streamed, 8-element vectors, 3 passes over the row)"]),
    "streamed_unfit_rows": (_graph(_softmax, (256, 5504), bf16),
                            Config(rows_schedule="new", row_stream_min=64, row_stream_fit=False), None,
                            ["512 threads per row", "(streamed, 8-element vectors"]),
    "columns_only": (_channel_sums, NEW, None, ["16 threads per row, 32 rows per block", "8-element vectors"]),
    "columns_only_broadcast": (_channel_sums_broadcast, NEW, None, ["16 threads per row", "8-element vectors"]),
    "columns_only_short": (lambda: _channel_sums((3, 5, 7, 24)), NEW, None,
                           ["4 threads per row", "flame_vec<__nv_bfloat16, 8>"]),
    # rows of over 16 vectors: a warp or more per row, one vector per thread (idle threads past a row
    # of 96 vectors; 2-element vectors where a row's length is not a multiple of 8)
    "columns_only_wide": (lambda: _channel_sums((3, 5, 768)), NEW, None,
                          ["128 threads per row, 4 rows per block", "8-element vectors"]),
    "columns_only_one_row_per_block": (lambda: _channel_sums((2, 9, 4096)), NEW, None,
                                       ["512 threads per row", "8-element vectors"]),
    "columns_only_wide_pairs": (lambda: _channel_sums((5, 3, 1030)), NEW, None,
                                ["1024 threads per row", "2-element vectors"]),
}


def _rows_groups(g):
    return [grp for grp in fuse(g).groups if grp.kind == "rows" and len(grp.ops) > 1]  # fused: codegen/fused_rows.py


def _lower(grp, cfg, target):
    return lower(grp, cfg, target) if target is not None else lower(grp, cfg)


def test_default_schedule_is_auto_and_env_selects(monkeypatch):
    """auto by default: the new schedule for plain row kernels without column sums or with long rows,
    old for the others."""
    monkeypatch.delenv("FLAME_ROWS_SCHEDULE", raising=False)
    assert rows_schedule() == "auto"
    (grp,) = _rows_groups(_softmax((8, 1000), f32))
    assert "new schedule" in lower(grp)[0].source
    assert "new schedule" not in lower(grp, OLD)[0].source
    (grp,) = _rows_groups(layer_norm_fwd_bwd((64, 96))[0])
    assert "new schedule" not in lower(grp)[0].source  # carries column sums beside row sums: old ...
    (grp,) = _rows_groups(layer_norm_fwd_bwd((64, 1024))[0])
    assert "new schedule" in lower(grp)[0].source  # ... but over rows of Config.columns_new_min or more: new
    assert "new schedule" not in lower(grp, Config(columns_new_min=1025))[0].source
    (grp,) = _rows_groups(layer_norm_fwd_bwd((528, 8192), "f32")[0])
    assert "(streamed" in lower(grp, NEW)[0].source  # ... where it holds the rows in registers: rows it
    assert "new schedule" not in lower(grp)[0].source  # would stream keep the old schedule
    (grp,) = _rows_groups(_reshaped_swiglu_amax())
    assert "new schedule" in lower(grp)[0].source  # reshapes addressed as the row domain: new
    (grp,) = _rows_groups(_channel_sums())
    assert "new schedule" in lower(grp)[0].source  # column sums only: new, a vector per thread
    (grp,) = _rows_groups(_channel_sums_broadcast())
    assert "new schedule" in lower(grp)[0].source  # ... also with a value broadcast over kept dims
    (grp,) = _rows_groups(_channel_sums((4, 6, 10, 1024)))
    assert "128 threads per row" in lower(grp)[0].source  # wider rows: whole warps, a vector per thread
    (grp,) = _rows_groups(_channel_sums((2, 3, 8192), f32))
    assert "new schedule" not in lower(grp)[0].source  # rows of over 1024 vectors: old (not measured)
    assert "new schedule" in lower(grp, NEW)[0].source
    monkeypatch.setenv("FLAME_ROWS_SCHEDULE", "new")
    assert rows_schedule() == "new" and rows_schedule(OLD) == "old"
    (grp,) = _rows_groups(_softmax((8, 1000), f32))
    assert "new schedule" in lower(grp)[0].source
    monkeypatch.setenv("FLAME_ROWS_SCHEDULE", "fast")
    with pytest.raises(ValueError, match="FLAME_ROWS_SCHEDULE='fast'"):
        rows_schedule()


@pytest.mark.parametrize("name", sorted(CASES))
def test_schedules_render_and_compile(name):
    make, cfg, target, fragments = CASES[name]
    sources = []
    for grp in _rows_groups(make()):
        old, new = _lower(grp, OLD, target), _lower(grp, cfg, target)
        assert "new schedule" not in old[0].source and "new schedule" in new[0].source
        assert len(old) == len(new)  # the same fold kernels follow
        sources += [k.source for k in old + new]
    text = "\n".join(sources)
    assert all(f in text for f in fragments), [f for f in fragments if f not in text]
    assert len(compile_many(sources, "sm_90")) == len(sources)


def test_new_schedule_vector_path_checks_alignment_and_keeps_an_element_path():
    (grp,) = _rows_groups(_layer_norm((16, 40), f32))
    src = lower(grp, NEW)[0].source
    assert "% 16u == 0" in src and "one by one" in src
    assert src.count("*reinterpret_cast<const flame_vec<float, 4>*>") == 1  # one load site of x, aligned path
    (grp,) = _rows_groups(_layer_norm((24, 37), f32))
    assert "one by one" not in lower(grp, NEW)[0].source  # V = 1: no alignment to check


def test_carried_exp_is_computed_once_per_element():
    (grp,) = _rows_groups(_softmax((8, 1000), f32))
    assert lower(grp, OLD)[0].source.count("expf(") == 2
    src = lower(grp, NEW)[0].source
    assert src.count("expf(") == 2 and "one by one" in src  # once per path (aligned / element by element)
    assert lower(grp, Config(rows_schedule="new", row_carry=False))[0].source.count("expf(") == 4


# ------------------------------------------------------------------------------------------------
# GPU: each case's kernels under each schedule vs the reference computation of the group's ops


def _run(kernels, ins, outs):
    import cupy

    from flame.codegen import nvrtc

    scratch = cupy.empty(max([k.scratch for k in kernels] + [1]), np.uint8)
    for k in kernels:
        mod = cupy.cuda.function.Module()
        mod.load(nvrtc.compile_cubin(k.source, nvrtc.device_arch()))
        mod.get_function(k.name)((k.grid,), (k.block,), (*ins, *outs, *([scratch] if k.scratch else [])))
    cupy.cuda.runtime.deviceSynchronize()


def _device(a: np.ndarray, shift: int):
    """a on the device at `shift` elements past an aligned allocation (bf16 as its bits)."""
    import cupy

    host = a.view(np.uint16) if a.dtype.itemsize == 2 and a.dtype.kind not in "iu" else a
    buf = cupy.empty(host.size + shift, host.dtype)
    out = buf[shift:].reshape(host.shape)
    out.set(host)
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("shift", [0, 1])
@pytest.mark.parametrize("name", sorted(CASES))
def test_gpu_schedules_match_reference(name, shift):
    make, cfg, target, _ = CASES[name]
    for grp in _rows_groups(make()):
        _check_on_gpu(grp, (OLD, cfg), target, shift, name)


def _check_on_gpu(grp, configs, target, shift: int, name: str) -> None:
    """The group's kernels under each config, from pointers `shift` elements past alignment, against
    the reference computation of its ops."""
    from flame.ir.evaluate import compute_op

    rng = np.random.default_rng(0)
    vals = kernel_inputs(grp)
    length = max(v.shape[-1] for v in vals if v.shape)
    arrays = [rng.standard_normal(v.shape).astype(np.float32).astype(v.dtype.np_dtype) if v.dtype.is_float
              else rng.integers(0, length, v.shape).astype(v.dtype.np_dtype) for v in vals]
    env = dict(zip(vals, arrays))
    with np.errstate(all="ignore"):
        for op in grp.ops:
            env[op.out] = compute_op(op, [env[v] for v in op.inputs])
    for c in configs:
        outs = [_device(np.full(v.shape, np.nan, np.float32).astype(v.dtype.np_dtype) if v.dtype.is_float
                        else np.zeros(v.shape, v.dtype.np_dtype), shift) for v in grp.outputs]
        _run(_lower(grp, c, target), [_device(a, shift) for a in arrays], outs)
        for o, v in zip(outs, grp.outputs):
            got = o.get().view(v.dtype.np_dtype).astype(np.float64)
            tol = 2e-2 if v.dtype == bf16 else 1e-4
            np.testing.assert_allclose(got, env[v].astype(np.float64), rtol=tol, atol=tol,
                                       err_msg=f"{name} {c.rows_schedule} output {v}")


def _whole_sum_plus_vector():
    """x [2, 3] summed whole, added to a [3] vector: the [3] output is written per element of the one
    row only where the first reduced coordinate is 0 (found by the random-graph test)."""
    g = Graph("broadcast_store")
    x, w = g.add_input(TensorType((2, 3), f32)), g.add_input(TensorType((3,), f32))
    b = Builder(g)
    g.outputs = [b.add(b.add(w, w), b.reduce_sum(x, axes=[0, 1], keepdim=False))]
    return g


def _biased_mean_square():
    """y = x + bias [16] over x [2, 8, 16], and mean(y * y) over all of it (an autocast GPT block's
    output and loss): the bias is read at the row's element t % 16, not t."""
    g = Graph("biased_mean_square")
    x, bias = g.add_input(TensorType((2, 8, 16), f32)), g.add_input(TensorType((16,), f32))
    b = Builder(g)
    y = b.add(x, bias)
    g.outputs = [y, b.reduce_mean(b.mul(y, y), axes=[0, 1, 2], keepdim=False)]
    return g


@pytest.mark.parametrize("make", [_whole_sum_plus_vector, _biased_mean_square])
def test_a_value_not_walking_the_row_keeps_the_old_schedule(make):
    """The new schedule addresses a row's element t as `row base + t`; a value read or written per
    element that does not walk the row so (broadcast over a reduced dim) takes the old schedule
    under every setting. Before: the [3] store did not compile, and the [16] bias was read past its
    end (the autocast GPT block's output wrong and unet_train NaN on the GPU, 2026-11-27)."""
    (grp,) = _rows_groups(make())
    for cfg in (OLD, NEW, Config(rows_schedule="auto")):
        (k,) = lower(grp, cfg)
        assert "new schedule" not in k.source
        compile_many([k.source], "sm_90")


@pytest.mark.gpu
@pytest.mark.parametrize("make", [_whole_sum_plus_vector, _biased_mean_square])
def test_gpu_a_value_not_walking_the_row_matches_the_reference(make):
    from tests.codegen.test_fused import _gpu_check

    g = make()
    _gpu_check(g, [random_array(v.type, np.random.default_rng(3)) for v in g.inputs])


def _frozen_layer_norm_backward(R: int = 64, C: int = 96):
    """A LayerNorm backward whose weight and bias are frozen (a LoRA fine-tune: no column sums), in one
    group with the LayerNorm output recomputed for an adapter's weight gradient, which does not touch
    the reduction: one segment over the rows. Before: the output ran as its own segment of R * C
    one-element rows, a row's threads each, 2.1 ms instead of ~20 us per layer of gpt_lora_train on
    an H200 (2026-11-27)."""
    g = Graph("frozen_layer_norm_backward")
    x, rstd = g.add_input(TensorType((R, C), bf16)), g.add_input(TensorType((R, 1), bf16))
    w, bias = g.add_input(TensorType((C,), bf16)), g.add_input(TensorType((C,), bf16))
    dy = g.add_input(TensorType((R, C), bf16))
    b = Builder(g)
    y = b.add(b.mul(b.mul(x, rstd), w), bias)
    gw = b.mul(dy, w)
    total = b.reduce_sum(b.mul(gw, x), axes=[1], keepdim=True)
    g.outputs = [y, b.sub(b.mul(gw, rstd), b.mul(x, b.mul(total, rstd)))]
    return FusionGroup(tuple(g.ops), Kind.ROWS, "test", tuple(g.outputs))


def test_an_elementwise_part_over_the_rows_runs_in_the_row_loop():
    grp = _frozen_layer_norm_backward()
    for cfg in (OLD, NEW):
        (k,) = lower(grp, cfg)
        assert "64 rows x 96" in k.source and "rows x 1 " not in k.source and k.grid <= 64, k.source[:600]
        compile_many([k.source], "sm_90")


@pytest.mark.gpu
@pytest.mark.parametrize("shift", [0, 1])
def test_gpu_an_elementwise_part_over_the_rows_matches_the_reference(shift):
    _check_on_gpu(_frozen_layer_norm_backward(), (OLD, NEW), None, shift, "frozen_layer_norm_backward")


# Config.row_unroll: the row loop of a kernel carrying column partials unrolled (a knob to time; default 1)
UNROLLED = (Config(rows_schedule="old", row_unroll=4), Config(rows_schedule="new", row_unroll=4, row_regs=200))


def test_row_unroll_marks_only_kernels_carrying_columns_and_compiles():
    (cols,) = _rows_groups(layer_norm_fwd_bwd((64, 96))[0])
    (plain,) = _rows_groups(_softmax((8, 1000), f32))
    loop = "#pragma unroll 4\n  for (idx_t u"
    assert "unroll 4\n  for (idx_t u" not in lower(cols)[0].source  # default 1: no pragma, sources as before
    sources = [k.source for c in UNROLLED for k in lower(cols, c)]
    assert all(loop in s for s in sources[::2])  # (each row kernel's fold kernel follows it)
    assert all(loop not in k.source for c in UNROLLED for k in lower(plain, c))
    assert len(compile_many(sources, "sm_90")) == len(sources)


@pytest.mark.gpu
@pytest.mark.parametrize("shift", [0, 1])
def test_gpu_row_unroll_matches_reference(shift):
    (grp,) = _rows_groups(layer_norm_fwd_bwd((64, 96))[0])
    _check_on_gpu(grp, UNROLLED, None, shift, "row_unroll")


# Config.row_barriers: a row's reductions wait at its own named barrier (default on)
ROW_BARRIERS = (Config(rows_schedule="old"), Config(rows_schedule="new"),
                Config(rows_schedule="old", row_barriers=False))


def _wide_layer_norm_backward():
    """A LayerNorm backward with rows of 768 (128 threads each, 4 rows per block) carrying dw and db."""
    (grp,) = _rows_groups(layer_norm_fwd_bwd((64, 768))[0])
    return grp


def test_row_barriers_name_each_rows_barrier_and_compile():
    grp = _wide_layer_norm_backward()
    assert "bar.sync" in lower(grp)[0].source  # the default
    kernels = [lower(grp, c) for c in ROW_BARRIERS]
    assert "bar.sync" not in kernels[2][0].source
    rows = [k[0] for k in kernels[:2]]
    assert all(k.block // 128 == 4 for k in rows)
    assert all("bar.sync %0, %1" in k.source and "__syncthreads" not in k.source.split("for (idx_t u")[1].split(
        "// the block's column partials")[0] for k in rows)  # no block barrier inside the row loop
    sources = [k.source for ks in kernels for k in ks]
    assert len(compile_many(sources, "sm_90")) == len(sources)


@pytest.mark.gpu
@pytest.mark.parametrize("shift", [0, 1])
def test_gpu_row_barriers_match_reference(shift):
    _check_on_gpu(_wide_layer_norm_backward(), ROW_BARRIERS, None, shift, "row_barriers")


def test_a_row_with_no_other_rows_beside_it_takes_enough_threads_to_hold_few_vectors():
    """One row of 8192 (a loss's count of kept labels among i64 labels, stored beside bool masks):
    fewer rows than multiprocessors, so the row's threads are all the kernel has; each holds at most
    FEW_ROWS_VECTORS vectors (32 threads of 256 elements each made unrolled code NVRTC took 27 s on)."""
    from flame.codegen.row_threads import FEW_ROWS_VECTORS
    from flame.ir.dtypes import i64

    g = Graph("labels")
    b = Builder(g)
    y = g.add_input(TensorType((8192,), i64))
    kept = b.ne(y, b.full(shape=[], value=-100, dtype=i64))
    count = b.reduce_sum(b.cast(kept, dtype=f32), axes=[0], keepdim=False)
    g.outputs = [kept, b.div(b.cast(kept, dtype=f32), count)]
    (grp,) = [grp for grp in fuse(g).groups if any(op.name == "reduce_sum" for op in grp.ops)]
    (k,) = lower(grp)
    held = [int(n) for n in re.findall(r"for \(int j = 0; j < (\d+); \+\+j\)", k.source)]
    assert held and max(held) <= FEW_ROWS_VECTORS, held
    assert len(compile_many([k.source], "sm_90")) == 1


def test_row_stream_min_reads_the_environment_and_keys_the_kernels(monkeypatch):
    from flame.codegen.kernel import codegen_settings, row_stream_min

    monkeypatch.delenv("FLAME_ROW_STREAM_MIN", raising=False)
    assert row_stream_min() == 8192
    before = codegen_settings()
    monkeypatch.setenv("FLAME_ROW_STREAM_MIN", "0")
    assert row_stream_min() == 0 and codegen_settings() != before
    (grp,) = _rows_groups(_reshaped_swiglu_amax((2, 70)))
    assert "(registers" in lower(grp, Config(rows_schedule="new", row_stream_min=None))[0].source  # never
    (few,) = _rows_groups(_reshaped_swiglu_amax((2, 6)))  # fewer rows than multiprocessors: held
    assert "(registers" in lower(few, Config(rows_schedule="new", row_stream_min=64))[0].source
    assert row_stream_min(Config(row_stream_min=0)) == 0
    monkeypatch.setenv("FLAME_ROW_STREAM_MIN", "long")
    with pytest.raises(Exception, match="FLAME_ROW_STREAM_MIN='long'"):
        row_stream_min()
