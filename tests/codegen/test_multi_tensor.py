"""Multi-tensor updates (the horizontal kernels of codegen/fused.py): the update of every tensor one
balanced kernel (equal contiguous chunks of all tensors' vectors per block, one body for all), scalar
work one segment per block, and (from the matmul VJP) weight gradients that arrive in the weights'
layout. The structure is checked on the rendered CUDA (no GPU needed), the kernels compile with NVRTC
(one or several items per thread per step), and (marked gpu) the balanced kernel matches the
side-by-side one bit for bit and the reference."""

from __future__ import annotations

import math
import re

import ml_dtypes
import numpy as np
import pytest

from flame.codegen import Config, lower
from flame.codegen.fused import _lower_balanced, balanced_chunks, group_inputs, prepare, segment_blocks
from flame.codegen.kernel import DEFAULT_CONFIG
from flame.codegen.nvrtc import compile_many
from flame.ir import Graph, dtype_of
from flame.ir.indexmap import is_view
from flame.passes.fuse import fuse
from flame.runtime.reference import run_graph
from flame.target import DEFAULT_TARGET, Target
from tests.passes.fuse_cases import GPT_SHAPES, build, mlp_adamw, multi_adamw

_RANGE = re.compile(r"segment (\d+) on blocks \[(\d+), (\d+)\): (.*)")


def _horizontal(g: Graph) -> list:
    """The kernels of g's groups with several segments (name suffix _xN)."""
    kernels = [k for grp in fuse(g).groups if len(grp.ops) > 1 and grp.kind != "matmul" for k in lower(grp)]
    return [k for k in kernels if re.search(r"_x\d+_[0-9a-f]{8}$", k.name)]


def test_segment_blocks_fill_the_grid_in_proportion():
    assert segment_blocks([3, 1, 0], 8192) == [3, 1, 1]  # a segment always has a block
    assert segment_blocks([20000], 8192) == [8192]  # one segment: the capped grid, grid-stride
    got = segment_blocks([12000, 6000, 1, 1], 8192)
    assert got[0] == 2 * got[1] and got[2:] == [1, 1] and sum(got) <= 8192


@pytest.fixture
def side_by_side(monkeypatch):
    """Scalar segments side by side, a branch each (the form FLAME_BALANCED_SCALARS=0 asks for)."""
    monkeypatch.setenv("FLAME_BALANCED_SCALARS", "0")


def test_scalar_segments_run_side_by_side_on_their_own_blocks(side_by_side):
    (k,) = [k for k in _horizontal(multi_adamw()[0]) if "_f32_x" in k.name]  # the 0-d bias corrections
    n = int(re.search(r"_x(\d+)_", k.name).group(1))
    ranges = [tuple(map(int, m.groups()[:3])) for m in _RANGE.finditer(k.source)]
    assert [r[0] for r in ranges] == list(range(n))
    assert ranges[0][1] == 0 and ranges[-1][2] == k.grid  # contiguous, covering the grid
    assert all(a[2] == b[1] and a[1] < a[2] for a, b in zip(ranges, ranges[1:]))
    assert "gridDim.x" not in k.source  # a segment strides over its own blocks only


def test_scalar_work_is_one_segment_per_block(side_by_side):
    (scalars,) = [k for k in _horizontal(multi_adamw()[0]) if "_f32_x" in k.name]
    whats = [m.group(4) for m in _RANGE.finditer(scalars.source)]
    assert whats and all(w.endswith("over []") for w in whats) and scalars.grid == len(whats)
    assert "pow(" in scalars.source  # the bias corrections 1 - beta**t (in f64, as torch's) live here, not per element


@pytest.mark.parametrize("items", [[1], [5, 0, 7], [96, 98304, 1, 96, 12288, 3], [10**6] * 3, [3] * 400])
@pytest.mark.parametrize("cap", [1, 528, 1056])
@pytest.mark.parametrize("step", [0, 256, 512])
def test_balanced_chunks_give_every_item_to_one_block(items, cap, step):
    offsets, grid, per = balanced_chunks(items, 256, cap, step)
    total = sum(items)
    assert offsets == [0, *np.cumsum(items).tolist()]
    assert 1 <= grid <= cap if not step else (per == step and grid == -(-total // step))
    chunks = [(b * per, min((b + 1) * per, total)) for b in range(grid)]
    assert chunks[0][0] == 0 and chunks[-1][1] == total and all(lo < hi for lo, hi in chunks)
    assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:]))  # contiguous: each item once
    assert all(hi - lo == per for lo, hi in chunks[:-1])  # equal shares, whatever the segment sizes


def test_update_is_one_balanced_kernel_with_one_body():
    """The AdamW update of every tensor: one body (class) however many tensors; each tensor's items
    in the offsets table (16-byte vectors of 8 bf16); one block per balanced_steps steps of 256 vectors."""
    (update,) = [k for k in _horizontal(multi_adamw()[0]) if "_bf16_x" in k.name]
    src = update.source
    assert f"_x{len(GPT_SHAPES)}_" in update.name and "struct row0" in src and "struct row1" not in src
    assert src.count("vl") and src.count("for (int j = 0; j < 8; ++j)") == 1  # the vector path, once
    table = re.search(r"_off\[(\d+)\] = \{ ([^}]*) \}", src)
    offsets = [int(x.rstrip("u")) for x in table.group(2).split(", ")]
    assert np.diff(offsets).tolist() == [-(-math.prod(s) // 8) for s in GPT_SHAPES]
    per = 256 * DEFAULT_CONFIG.balanced_steps
    assert update.block == 256 and update.grid == -(-offsets[-1] // per)
    assert f"lo = (idx_t)blockIdx.x * {per}u;" in src
    body = src.split("const idx_t v = g - seg_lo;")[1]
    assert "% " not in body.split("aligned")[-1] and " c0 " not in body  # no coordinate decomposition
    assert "__isGlobal(p_in" in body and not re.search(r"\bin\d+\[", body)  # pointers from the table


def test_update_source_does_not_grow_with_the_tensors():
    shapes = [(7, 5), (1000,), (3,), (64, 17)]
    small, big = ([k for k in _horizontal(multi_adamw(s)[0]) if "_bf16_x" in k.name][0].source
                  for s in (shapes, shapes * 13))
    code = [re.sub(r"//[^\n]*", "", src) for src in (small, big)]  # without the comments (the IR ops)
    per_segment = (len(code[1]) - len(code[0])) / (len(shapes) * 12)
    assert per_segment < 1000  # its parameters, a switch case and an offset, not a body (~15000)
    assert big.count("sqrtf") == small.count("sqrtf")


def test_fifty_two_tensors_are_one_update_kernel():
    """gpt_train's 52 parameters (here small, same count): one update kernel, not 32 + 20; a tight
    parameter space splits it, each kernel's pointers within it."""
    shapes = [(3 + i % 5, 8) if i % 3 else (5 + i,) for i in range(52)]
    g = multi_adamw(shapes)[0]
    assert [k.name.split("_x")[1].split("_")[0] for k in _horizontal(g) if "_bf16_x" in k.name] == ["52"]
    tight = Target(kernel_param_bytes=8 * 100)
    groups = [grp for grp in fuse(g, tight).groups if grp.ops and grp.outputs[0].dtype.name == "bf16"]
    assert len(groups) > 1
    for grp in groups:
        assert len(group_inputs(grp)) + len(grp.outputs) <= 100


def test_odd_sizes_and_several_classes_compile():
    """Mixed dtypes and odd sizes: f32 and bf16 updates cannot share a body, scalar tails."""
    shapes = [(1000,), (3, 5), (17,), (768, 3), (1,), (33, 7)]
    kernels = _horizontal(multi_adamw(shapes, "f32")[0]) + _horizontal(multi_adamw(shapes)[0])
    for arch in ("sm_80", "sm_90"):
        assert len(compile_many([k.source for k in kernels], arch)) == len(kernels)
    two = _two_classes()
    assert "struct row1" in two.source
    assert len(compile_many([two.source], "sm_90")) == 1


def _two_classes(config=DEFAULT_CONFIG):
    """One horizontal kernel whose segments differ in more than their pointers (a broadcast operand in
    one, a same-shape one in the other): two classes, two bodies."""
    r = np.random.default_rng(3)
    arrays = [r.standard_normal(s).astype(np.float32) for s in [(33, 8), (8,), (1001,), (1001,), (7, 4), (4,)]]
    g, _ = build(lambda a, b, c, d, e, f: ((a + 1.5) * b, (c + 1.5) * d, (e + 1.5) * f), *arrays)
    (k,) = [k for grp in fuse(g).groups if grp.ops for k in lower(grp, config)]
    return k


def test_weight_gradients_arrive_in_the_weights_layout():
    """x @ w.T: the gradient of w comes out of one GEMM as [out, in] (its operand transposes are
    cuBLASLt flags), so the update reads it contiguously: no permute left in the update kernel."""
    g, _, _ = mlp_adamw(dtype="bf16")
    fused = fuse(g)
    index = {i for i, r in enumerate(fused.roles) if r == "param"}
    params = [fused.inputs[i] for i in index]
    new_params = {fused.outputs[o] for o, i in fused.aliases.items() if i in index}
    # the update kernels (a bf16 LayerNorm's f32 weight gradients may take one of their own)
    updates = [grp for grp in fused.groups if new_params & set(grp.outputs)]
    assert updates and not [op for grp in updates for op in grp.ops if op.name == "permute"]
    inside = {op.out for grp in updates for op in grp.ops}
    read = {v for grp in updates for op in grp.ops for v in op.inputs if v not in inside and v.producer is not None}
    grads = [v for v in read if v.producer.name == "matmul"]
    weights = sorted(tuple(p.shape) for p in params if len(p.shape) == 2)
    assert sorted(tuple(v.shape) for v in grads) == weights
    assert not any(is_view(v.producer) and v.producer.name == "permute" for v in read)


def test_multi_tensor_kernels_compile():
    kernels = _horizontal(multi_adamw()[0]) + _horizontal(mlp_adamw(dtype="bf16")[0])
    for arch in ("sm_80", "sm_90"):
        assert len(compile_many([k.source for k in kernels], arch)) == len(kernels)


@pytest.mark.parametrize("unroll", [1, 2, 4])
def test_unrolled_balanced_kernels_compile(unroll):
    """U items per thread per step: all their loads before the first is used where the U items are full
    aligned vectors of one segment, else one item at a time; every class, odd sizes, both archs."""
    config = Config(balanced_unroll=unroll)
    shapes = [(1000,), (3, 5), (17,), (768, 3), (1,), (33, 7)]
    kernels = [_balanced(_update_group(shapes, dtype), config) for dtype in ("f32", "bf16")]
    kernels += [_balanced(_update_group([(4097, 3)], "bf16"), config), _two_classes(config)]
    for k in kernels:
        assert f"constexpr int U = {unroll};" in k.source
        assert ("all their loads first" in k.source) == (unroll > 1)
    assert "if (cls == 1) {  // class 1" in kernels[-1].source  # the second class in both paths
    for arch in ("sm_80", "sm_90"):
        assert len(compile_many([k.source for k in kernels], arch)) == len(kernels)


def test_balanced_kernels_stream_unless_told_not_to():
    """The balanced update's vector loads and stores carry the streaming cache hint (every byte is
    touched once) through flame_ldcs / flame_stcs, in 16-byte pieces for any vector size; with
    Config(balanced_streaming=False) plain ones. Both compile, f32, bf16 and mixed-dtype updates."""
    shapes = [(1000,), (3, 5), (17,), (768, 3), (1,), (33, 7)]
    groups = [_update_group(shapes, dtype) for dtype in ("f32", "bf16")]
    mixed = [grp for grp in fuse(mlp_adamw(dtype="bf16")[0]).groups if len(grp.outputs) > 3]
    r = np.random.default_rng(4)  # bf16 times f32 into bf16: 4-element vectors, 8 bytes of bf16 each
    arrays = [r.standard_normal(s).astype(dt) for s in [(64, 8), (100,), (3, 40)]
              for dt in (ml_dtypes.bfloat16, np.float32)]
    g, _ = build(lambda *xs: tuple((x * y).to(x.dtype) for x, y in zip(xs[::2], xs[1::2])), *arrays)
    mixed += [grp for grp in fuse(g).groups if grp.ops]
    for streaming in (True, False):
        config = Config(balanced_streaming=streaming, balanced_scalars=False)  # vector updates only
        kernels = [_balanced(grp, config) for grp in groups]
        kernels += [k for grp in mixed for k in lower(grp, config) if "struct row0" in k.source]
        assert len(kernels) == 4 and "flame_vec<__nv_bfloat16, 4>" in kernels[-1].source
        for k in kernels:
            assert ("= flame_ldcs(&reinterpret_cast<const flame_vec<" in k.source) == streaming
            assert ("flame_stcs(&reinterpret_cast<flame_vec<" in k.source) == streaming
        for arch in ("sm_80", "sm_90"):
            assert len(compile_many([k.source for k in kernels], arch)) == len(kernels)


MIXED = [(4096, 1024)] * 2 + [(1000,), (3, 5), (17,), (768, 3), (1,), (8192, 768), (768,), (33, 7)]


@pytest.mark.gpu
def test_gpu_multi_tensor_adamw_matches_reference():
    """Large and tiny tensors in one balanced update; odd sizes take the scalar tails."""
    from tests.codegen.test_fused import _gpu_check

    g, inputs = multi_adamw(MIXED)
    (update,) = [k for k in _horizontal(g) if "_bf16_x" in k.name]
    assert update.grid > 132 * 4  # a few steps per block: many waves
    _gpu_check(g, inputs, 1e-2, 1e-2)
    assert np.isfinite(inputs[0].astype(np.float32)).all()


def _update_group(shapes, dtype):
    """The update kernel's group (the bias corrections' group may carry one-element tensors too)."""
    return max(fuse(multi_adamw(shapes, dtype)[0]).groups, key=lambda grp: sum(v.type.numel for v in grp.outputs))


def _balanced(grp, config=DEFAULT_CONFIG):
    """grp's balanced kernel, also for one segment (lower takes it for several)."""
    inputs, segs, lays, _ = prepare(grp)
    return _lower_balanced(grp, inputs, list(grp.outputs), segs, lays, config, DEFAULT_TARGET)


def _launch(grp, kernel, values, misalign=False) -> list[np.ndarray]:
    """kernel run on the GPU over values[v] for each input of grp (outputs poisoned with NaN first);
    misalign: every buffer starts one element past a 256-byte boundary (no vector path)."""
    import cupy

    from flame.codegen import nvrtc

    def device(a):
        raw = a.view(np.uint16) if a.dtype == np.dtype(ml_dtypes.bfloat16) else a
        flat = cupy.empty(raw.size + 1, raw.dtype)
        d = flat[1:] if misalign else flat[:-1]
        d[...] = cupy.asarray(raw.ravel())
        return d

    ins = [device(values[v]) for v in group_inputs(grp)]
    outs = [device(np.full(v.shape, np.nan, v.dtype.np_dtype)) for v in grp.outputs]
    mod = cupy.cuda.function.Module()
    mod.load(nvrtc.compile_cubin(kernel.source, nvrtc.device_arch()))
    mod.get_function(kernel.name)((kernel.grid,), (kernel.block,), (*ins, *outs))
    cupy.cuda.runtime.deviceSynchronize()
    return [o.get().view(v.dtype.np_dtype).reshape(v.shape) for v, o in zip(grp.outputs, outs)]


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _check_matches_side_by_side(grp, config, misalign):
    """grp's balanced kernel under config writes every output element (they start as NaN; the 0-d
    inputs, betas and rates, are drawn in [0.5, 1), so no update is NaN), each what the side-by-side
    kernel writes up to contraction: within 4 units of the dtype's epsilon of the output's scale (f32
    outputs differ in about a fifth of their elements, by an ulp or two; bf16 in a few)."""
    r = np.random.default_rng(5)
    values = {v: (r.uniform(0.5, 1.0, v.shape) if not v.shape else np.abs(r.standard_normal(v.shape) + 0.5))
              .astype(v.dtype.np_dtype) for v in group_inputs(grp)}
    (old,) = lower(grp, Config(balanced=0))
    new = _balanced(grp, config)
    for a, b in zip(_launch(grp, old, values, misalign), _launch(grp, new, values, misalign)):
        x, y = a.astype(np.float64), b.astype(np.float64)
        assert np.isfinite(x).all() and np.isfinite(y).all()  # every element written by both
        eps = float(ml_dtypes.finfo(a.dtype).eps)
        np.testing.assert_allclose(y, x, rtol=4 * eps, atol=4 * eps * float(np.abs(x).max()))


@pytest.mark.gpu
@pytest.mark.parametrize("misalign", [False, True])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("shapes", [MIXED, [(4097, 3)]], ids=["mixed", "one"])
def test_gpu_balanced_update_matches_side_by_side(shapes, dtype, misalign):
    """The balanced AdamW update computes what the side-by-side kernel computes (the same arithmetic
    per element, as source), over many mixed, odd-sized tensors and over a single one, up to the
    compiler's multiply-add contraction: NVRTC fuses `a * b + c` (as nvcc does for PyTorch's kernels),
    and which product of `v * b2 + g * g * (1 - b2)` it fuses depends on the surrounding code (the PTX
    of the two kernels, 2026-11-27: fma(g * g, 1 - b2, v * b2) in one, fma(v, b2, g * g * (1 - b2)) in
    the other). On an H100 282 of 106M elements of the bench's update differed, by up to 3 ulp."""
    _check_matches_side_by_side(_update_group(shapes, dtype), DEFAULT_CONFIG, misalign)


@pytest.mark.gpu
@pytest.mark.parametrize("misalign", [False, True])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("unroll", [2, 4])
def test_gpu_unrolled_balanced_update_matches_side_by_side(unroll, dtype, misalign):
    """U items per thread per step: the U-vector path (aligned), the one-item path (steps that straddle
    one of the many odd-sized segments, a block's last items, every step when misaligned)."""
    shapes = MIXED + [(5, 3), (4099,), (1, 7), (2047, 9)]
    grp = _update_group(shapes, dtype)
    config = Config(balanced_unroll=unroll)
    assert "all their loads first" in _balanced(grp, config).source
    _check_matches_side_by_side(grp, config, misalign)


@pytest.mark.gpu
@pytest.mark.parametrize("steps", [1, 3, 0])
@pytest.mark.parametrize("unroll", [1, 2, 4])
@pytest.mark.parametrize("misalign", [False, True])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_gpu_balanced_kernel_matches_reference(dtype, misalign, unroll, steps):
    """Independent (x + 1.5) * y over mixed sizes: f32 bit for bit, bf16 within one unit in the last
    place, aligned or not, one or several items per thread per step, one or three steps per block or
    one wave of blocks."""
    r = np.random.default_rng(6)
    shapes = [(1000, 33), (3, 5), (17,), (2,), (768, 3), (4096, 64), (8,)]
    arrays = [r.standard_normal(s).astype(dtype_of(dtype).np_dtype) for s in shapes for _ in range(2)]

    def step(*xs):
        return tuple((x + 1.5) * y for x, y in zip(xs[::2], xs[1::2]))

    g, inputs = build(step, *arrays)
    fused = fuse(g)
    (grp,) = [grp for grp in fused.groups if grp.ops]
    (k,) = lower(grp, Config(balanced_unroll=unroll, balanced_steps=steps))
    assert f"_x{len(shapes)}_" in k.name and "struct row0" in k.source
    got = _launch(grp, k, dict(zip(fused.inputs, inputs)), misalign)
    want = run_graph(g, inputs)
    for v, h in zip(grp.outputs, got):
        w = want[fused.outputs.index(v)]
        diff = np.abs(_bits(h).astype(np.int64) - _bits(w).astype(np.int64))
        assert diff.max() <= (0 if dtype == "f32" else 1)


def _bf16_block_adamw(monkeypatch, stored: bool, steps: int = 2):
    """(the optimized graph, every kernel source, the bf16 parameters as float32 after `steps` steps)
    of a bf16 GPT-style block (pre-LayerNorm sublayers with residuals: Linear -> GELU -> Linear, then
    Linear) trained with AdamW, planned for CUDA and run on the reference executor; `stored`: with the rule
    that stores a LayerNorm's f32 weight and bias gradients as bf16 in their row kernel's fold (False:
    fuse_columns.store_conversions patched to do nothing, the conversions stay in the update)."""
    import flame
    import flame.nn as nn
    from flame.passes import fuse

    flame.manual_seed(0)
    ln1, ln2 = nn.LayerNorm(32), nn.LayerNorm(32)
    fc1, fc2, fc3 = nn.Linear(32, 128), nn.Linear(128, 32), nn.Linear(32, 32)
    mods = [ln1, fc1, fc2, ln2, fc3]
    for m in mods:
        m.to(flame.bf16)
    params = [p for m in mods for p in m.parameters()]
    opt = flame.optim.AdamW(params, lr=1e-2)
    x = flame.tensor(np.random.default_rng(3).standard_normal((2, 16, 32)).astype(np.float32)).to(flame.bf16)

    def step(x):
        opt.zero_grad()
        h = x + fc2(flame.nn.functional.gelu(fc1(ln1(x))))
        loss = ((h + fc3(ln2(h))).float() ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    with monkeypatch.context() as m:
        if not stored:
            m.setattr(fuse, "store_conversions", lambda st: None)
        f = flame.compile(step, name=f"bf16_block_adamw_{stored}")
        g = f.optimized(x)
        for _ in range(steps):
            f(x)
        sources = {k.source for k in f._last.plan.kernels()}
    return g, sources, [p.float().numpy().copy() for p in params]


def _updates(g: Graph) -> list:
    """The kernels of g that update parameters or optimizer state in place (fusion_state.updates_only)."""
    from flame.passes.fusion_state import updates_only

    users, updated = g.users(), g.updated()
    return [k for k in g.groups if updates_only(k.kind, k.ops, k.outputs, g, updated, users)]


def test_a_bf16_layer_norm_block_updates_every_parameter_in_one_kernel(monkeypatch, cuda_target):
    """A bf16 LayerNorm computes in f32: its weight and bias gradients are f32 column sums, rounded to
    bf16 for the update. The row kernel carrying those sums stores them rounded (its fold), so every
    parameter's update reads a bf16 gradient and AdamW is one multi-tensor kernel (without the rule:
    two). The parameters after two steps are those of the plan without the rule, bit for bit, and every
    kernel compiles with NVRTC for sm_90."""
    from flame.codegen.nvrtc import compile_cubin

    g, sources, params = _bf16_block_adamw(monkeypatch, True)
    g0, _, params0 = _bf16_block_adamw(monkeypatch, False)
    assert len(_updates(g0)) == 2  # the LayerNorms' parameters apart: the conversion in their update
    (update,) = _updates(g)
    assert not any(op.name == "cast" and op.out.dtype.name == "bf16" and op.inputs[0].dtype.name == "f32"
                   and op.inputs[0].producer.name == "reduce_sum" for op in update.ops)
    folds = [k for k in g.groups if any(op.name == "cast" and op.inputs[0].producer in k.ops for op in k.ops)
             and any(op.name == "reduce_sum" for op in k.ops)]
    assert folds, "no row kernel stores a converted column sum"
    assert len(g.groups) == len(g0.groups) - 1
    for x, y in zip(params, params0):
        assert x.tobytes() == y.tobytes()
    assert any("__float2bfloat16_rn(__bfloat162float(__float2bfloat16_rn(folded)))" in s for s in sources)
    for source in sources:
        assert compile_cubin(source, "sm_90")[:4] == b"\x7fELF"


def _bf16_ulps(a, b) -> int:
    """The largest distance, in bf16 units in the last place, between two float32 arrays of bf16 values."""
    bits = [np.asarray(x, np.float32).view(np.int32).astype(np.int64) >> 16 for x in (a, b)]
    return int(np.abs(bits[0] - bits[1]).max())


@pytest.mark.gpu
def test_gpu_a_bf16_layer_norm_block_trains_as_with_its_gradients_converted_in_the_update(monkeypatch):
    """The fold kernels that store a bf16 LayerNorm's weight and bias gradients rounded run on the GPU
    and give what the plan converting them in the optimizer's update gives: parameters after three
    steps within one bf16 unit (the two plans' AdamW kernels may contract different multiply-adds)."""
    _, _, params = _bf16_block_adamw(monkeypatch, True, steps=3)
    _, _, params0 = _bf16_block_adamw(monkeypatch, False, steps=3)
    for x, y in zip(params, params0):
        assert _bf16_ulps(x, y) <= 1
