"""Pieces of concat and pad on the vector path of elementwise kernels (codegen/vector_pieces.py): a
rotary embedding's rotate_half (concat forward, pads backward) whose piece edges fall on whole vectors
tests each piece once per vector and loads its inputs as aligned vectors; edges inside a vector keep
the element-by-element form. Values are bit for bit those of the reference, planned and on the GPU
(aligned and misaligned pointers), and those of the element-by-element kernel."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from flame.codegen import fused, lower
from flame.codegen.kernel import DEFAULT_CONFIG
from flame.codegen.nvrtc import compile_many
from flame.ir import Builder, Graph, TensorType, bf16, verify
from flame.ir.graph import FusionGroup, Kind
from flame.target import DEFAULT_TARGET
from tests.passes.conftest import random_array
from tests.passes.test_fuse import check_fused

B, H, T = 2, 3, 16
PIECES = dataclasses.replace(DEFAULT_TARGET, fused_pieces=True)  # concat and pad fuse (the CUDA default)


def _rope(d: int, split: int, backward: bool) -> Graph:
    """y = x * cos + cat(-x[..., split:], x[..., :split]) * sin over bf16 [B, H, T, d] (cos, sin: [T, d]),
    or its gradient dx = g * cos + the pads that place the halves of g * sin back."""
    g = Graph("rope_bwd" if backward else "rope")
    x, cos, sin = g.add_input(TensorType((B, H, T, d), bf16)), *(g.add_input(TensorType((T, d), bf16)) for _ in "cs")
    b = Builder(g)

    def part(v, lo, hi):
        return b.slice(v, starts=[0, 0, 0, lo], stops=[B, H, T, hi], steps=[1] * 4)

    if not backward:
        g.outputs = [b.add(b.mul(x, cos), b.mul(b.concat(b.neg(part(x, split, d)), part(x, 0, split), axis=3), sin))]
        return verify(g)
    gs, gc, zero = b.mul(x, sin), b.mul(x, cos), [[0, 0]] * 3
    first, second = part(gs, 0, d - split), part(gs, d - split, d)
    low = b.add(gc, b.pad(b.neg(first), pads=[*zero, [split, 0]], value=0))  # the gradient of -x[..., split:]
    g.outputs = [b.add(low, b.pad(second, pads=[*zero, [0, d - split]], value=0))]  # that of x[..., :split]
    return verify(g)


def _kernel(g: Graph):
    """(group, kernel) of all of g's ops as one elementwise kernel, as the fusion pass makes of a
    rotary embedding where its input is produced (the one of llama7b_block_train's backward computes
    g * sin inside the pads' pieces)."""
    grp = FusionGroup(tuple(g.ops), Kind.ELEMENTWISE, "test", tuple(g.outputs))
    (k,) = lower(grp)
    return grp, k


def _roll_rows(d: int) -> Graph:
    """y = cat(x[:, :, 5:], x[:, :, :5], axis=2) * w + x over bf16 [B, H, T, d] (w: [T, d]): pieces along
    T, whose edge (row T - 5) falls on whole vectors where a row is (d = 128, not d = 100)."""
    g = Graph("roll_rows")
    x, w = g.add_input(TensorType((B, H, T, d), bf16)), g.add_input(TensorType((T, d), bf16))
    b = Builder(g)

    def rows(lo, hi):
        return b.slice(x, starts=[0, 0, lo, 0], stops=[B, H, hi, d], steps=[1] * 4)

    g.outputs = [b.add(b.mul(b.concat(rows(5, T), rows(0, 5), axis=2), w), x)]
    return verify(g)


CASES = {"concat": lambda: _rope(128, 64, False), "pads": lambda: _rope(128, 64, True), "rows": lambda: _roll_rows(128)}


def _balanced(grp):
    """grp's kernel in the balanced schedule (a multi-tensor update's), for its one segment."""
    inputs, segs, lays, _ = fused.prepare(grp)
    return fused._lower_balanced(grp, inputs, list(grp.outputs), segs, lays, DEFAULT_CONFIG, DEFAULT_TARGET)


def _vector_loop(source: str) -> str:
    """The vector path's loads and element loop over full steps (the vectors after the last full step
    run the same lines)."""
    return source[source.index("vector path"):source.index("// the vectors after")]


def _inputs(g: Graph, seed: int = 0) -> list[np.ndarray]:
    r = np.random.default_rng(seed)
    return [random_array(v.type, r) for v in g.inputs]


@pytest.mark.parametrize("backward", [False, True], ids=["concat", "pads"])
def test_rope_pieces_are_tested_once_per_vector_and_loaded_whole(backward):
    _, k = _kernel(_rope(128, 64, backward))
    loop = _vector_loop(k.source)
    assert "8 elements per 16-byte access" in loop
    assert re.search(r"pf0\[u\] = \(\(off_t\)\(.*\) % 128\) [<>]=? 64;", loop), loop
    vector = r"reinterpret_cast<const flame_vec<__nv_bfloat16, 8>\*>"
    loads = re.findall(r"if \(!?pf\d+\[u\]\) vp\d+_\d+\[u\] = " + vector, loop)
    assert len(loads) == (4 if backward else 2), loop  # x's two halves (and the sin table's, backward)
    assert not re.search(r"\bin\d+\[", loop), loop  # no element loads left on the vector path
    assert re.search(r"if \(pf\d+\[u\]\) \{", loop) and "% 128) < 64) {" not in loop
    # the inputs read in pieces are in the alignment check
    head = k.source[k.source.index("if ((reinterpret_cast"):k.source.index("vector path")]
    assert all(f"<unsigned long long>(in{i}) % 16 == 0" in head for i in range(3)), head
    compile_many([k.source], "sm_90")
    compile_many([k.source], "sm_80")


@pytest.mark.parametrize("backward", [False, True], ids=["concat", "pads"])
def test_balanced_kernels_load_pieces_whole_too(backward):
    k = _balanced(_kernel(_rope(128, 64, backward))[0])
    # with the streaming hint the balanced schedule gives its vector loads
    assert "if (pf0[u]) vp0_1[u] = flame_ldcs(&reinterpret_cast<const flame_vec<__nv_bfloat16, 8>*>" in k.source
    assert "(reinterpret_cast<unsigned long long>(L0_in1) % 16 == 0)" in k.source
    compile_many([k.source], "sm_90")


@pytest.mark.parametrize(("d", "split"), [(100, 50), (128, 61), (128, 60)])
@pytest.mark.parametrize("backward", [False, True], ids=["concat", "pads"])
def test_piece_edges_inside_a_vector_keep_element_loads(d, split, backward, monkeypatch):
    """An edge off the 8-element vectors of bf16 (D = 100's half, an odd or 4-aligned split): the
    kernel is the one without vector pieces, each element tested and read on its own."""
    _, k = _kernel(_rope(d, split, backward))
    assert "pf0" not in k.source and "vp" not in k.source
    if "vector path" in k.source:
        assert re.search(r"\bin0\[-?\d+ \+ ", _vector_loop(k.source))
    monkeypatch.setattr(fused.VectorPieces, "flags", lambda *a: None)
    monkeypatch.setattr(fused.VectorPieces, "load", lambda *a: None)
    assert _kernel(_rope(d, split, backward))[1].source == k.source
    compile_many([k.source], "sm_90")


@pytest.mark.parametrize("d", [128, 100])
def test_pieces_along_an_outer_dim_are_loaded_whole_where_rows_hold_whole_vectors(d):
    g = _roll_rows(d)
    k = _kernel(g)[1]
    assert ("if (pf0[u]) vp0_" in k.source) == (d == 128)
    check_fused(g, _inputs(g), PIECES)
    compile_many([k.source], "sm_90")


def test_only_a_piece_off_the_vector_keeps_its_element_loads():
    """Of two concats in one kernel, the one with an edge on whole vectors is tested per vector and
    loaded whole; the other, with an edge inside a vector, is tested and read element by element."""
    g = Graph("two_concats")
    x, y = g.add_input(TensorType((4, 64), bf16)), g.add_input(TensorType((4, 64), bf16))
    b = Builder(g)

    def cut(v, lo, hi):
        return b.slice(v, starts=[0, lo], stops=[4, hi], steps=[1, 1])

    on = b.concat(cut(x, 32, 64), cut(x, 0, 32), axis=1)
    off = b.concat(cut(y, 27, 64), cut(y, 0, 27), axis=1)
    g.outputs = [b.add(on, off)]
    _, k = _kernel(verify(g))
    loop = _vector_loop(k.source)
    assert len(re.findall(r"vp0_\d+\[u\] = ", loop)) == 2 and "vp1_" not in loop
    assert re.search(r"\bin1\[", loop) and not re.search(r"\bin0\[", loop)
    compile_many([k.source], "sm_90")


@pytest.mark.parametrize(("d", "split"), [(128, 64), (16, 8), (100, 50), (128, 61)])
@pytest.mark.parametrize("backward", [False, True], ids=["concat", "pads"])
def test_rope_plans_match_the_reference_bit_for_bit(d, split, backward):
    g = _rope(d, split, backward)
    check_fused(g, _inputs(g), PIECES)


def _same_or_nan(got: np.ndarray, want: np.ndarray) -> None:
    """bf16 bits (as uint16) equal, where any NaN matches any NaN: the GPU's NaN payloads are not NumPy's
    (0x7fff against 0x7fc0 / 0xffc0)."""
    nan_got, nan_want = ((a & 0x7FFF) > 0x7F80 for a in (got, want))
    np.testing.assert_array_equal(nan_got, nan_want)
    np.testing.assert_array_equal(np.where(nan_got, 0, got), np.where(nan_want, 0, want))


def _launch(grp, kernel, arrays: list[np.ndarray], misalign: tuple[int, ...]) -> np.ndarray:
    """kernel run over arrays (group_inputs order), each input k in `misalign` starting one
    element past an aligned address; its output's bits."""
    import cupy

    from flame.codegen import nvrtc

    def device(a, off):
        flat = cupy.zeros(a.size + 1, np.uint16)
        d = flat[1:] if off else flat[:-1]
        d[...] = cupy.asarray(a.view(np.uint16).ravel())
        return d

    ins = [device(a, k in misalign) for k, a in enumerate(arrays)]
    (v,) = grp.outputs
    out = device(np.full(v.shape, np.nan, v.dtype.np_dtype), -1 in misalign)
    mod = cupy.cuda.function.Module()
    mod.load(nvrtc.compile_cubin(kernel.source, nvrtc.device_arch()))
    mod.get_function(kernel.name)((kernel.grid,), (kernel.block,), (*ins, out))
    cupy.cuda.runtime.deviceSynchronize()
    return out.get().reshape(v.shape)


@pytest.mark.gpu
@pytest.mark.parametrize("misalign", [(), (0,), (1,), (-1,)], ids=["aligned", "x", "table", "out"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_gpu_vector_pieces_match_the_element_kernel_and_the_reference(case, misalign, monkeypatch):
    """The kernel with vector pieces against the element-by-element one and the reference, bit for bit,
    with every pointer aligned and with one of them misaligned (the element path)."""
    from flame.codegen.fused import group_inputs
    from flame.runtime.reference import run_graph

    g = CASES[case]()
    grp, k = _kernel(g)
    with monkeypatch.context() as m:
        m.setattr(fused.VectorPieces, "load", lambda *a: None)
        old = _kernel(g)[1]
    balanced = _balanced(grp)
    assert "vp0_" in k.source and "vp0_" in balanced.source and "vp0_" not in old.source
    inputs = _inputs(g, 7)
    arrays = [inputs[g.inputs.index(v)] for v in group_inputs(grp)]
    want = run_graph(g, inputs)[0].view(np.uint16)
    table = [i for i, v in enumerate(group_inputs(grp)) if v.shape == (T, 128)][0]
    off = tuple(table if i == 1 else i for i in misalign)
    got = _launch(grp, k, arrays, off)
    np.testing.assert_array_equal(got, _launch(grp, old, arrays, off))
    _same_or_nan(got, want)
    _same_or_nan(_launch(grp, balanced, arrays, off), want)
