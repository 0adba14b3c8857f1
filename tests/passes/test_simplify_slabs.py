"""simplify_algebra's slab rules: a sum of zero pads tiling an axis becomes one concat, a concat of
adjacent pieces of one tensor becomes that tensor; partial or overlapping slabs stay as they were.
The `check` fixture also runs both graphs on the reference executor and compares them bit for bit."""

import numpy as np
import pytest
import torch

import flame
from flame.passes.simplify import simplify_algebra


def run(check, text, expect=None):
    return check(text, simplify_algebra, expect)


def _pads(dtype: str, axis: int, pieces: list[tuple[int, int]], n: int, inner: int = 2) -> str:
    """IR text: input i padded into slab pieces[i] of an axis of length n, summed left to right."""
    def shape(k):
        return [k, inner] if axis == 0 else [inner, k]

    ins = ", ".join(f"%{i}: {dtype}[{','.join(map(str, shape(b - a)))}] data" for i, (a, b) in enumerate(pieces))
    out = f"{dtype}[{','.join(map(str, shape(n)))}]"
    lines, k = [], len(pieces)
    for i, (a, b) in enumerate(pieces):
        pads = [[a, n - b], [0, 0]] if axis == 0 else [[0, 0], [a, n - b]]
        lines.append(f"  %{k + i} = pad %{i} {{pads={pads}, value=0}} : {out}")
    acc = k
    for i in range(1, len(pieces)):
        lines.append(f"  %{2 * k + i - 1} = add %{acc}, %{k + i} : {out}")
        acc = 2 * k + i - 1
    return f"graph f({ins}) {{\n" + "\n".join(lines) + f"\n  return %{acc}\n}}"


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("dtype", ["f32", "i32"])
def test_pads_tiling_an_axis_become_one_concat(check, axis, dtype):
    # slabs given out of order: the concat lists them by position
    out = run(check, _pads(dtype, axis, [(4, 6), (0, 1), (1, 4)], 6))
    assert f"concat %1, %2, %0 {{axis={axis}}}" in out
    assert " pad " not in out.split("concat")[1]
    assert ("add" in out.split("concat")[1]) == (dtype == "f32")  # + (+0.0) keeps -0.0 -> +0.0 exact


def test_float_sum_keeps_signed_zero_semantics(check):
    out = run(check, _pads("f32", 0, [(0, 1), (1, 2)], 2))
    assert "%5 = full {shape=[], value=0.0, dtype=f32} : f32[]" in out
    assert "%6 = add %4, %5 : f32[2,2]" in out and "return %6" in out


@pytest.mark.parametrize("pieces", [[(0, 1), (2, 3)], [(0, 2), (1, 3)]], ids=["gap", "overlap"])
def test_partial_or_overlapping_slabs_stay_pads(check, pieces):
    out = run(check, _pads("f32", 0, pieces, 3))
    assert "concat" not in out and out.count(" pad ") == 2


def test_pads_on_different_axes_or_nonzero_fill_are_kept(check):
    out = run(check, """
        graph f(%0: f32[1,2] data, %1: f32[2,1] data, %2: f32[1,2] data) {
          %3 = pad %0 {pads=[[0,1],[0,0]], value=0} : f32[2,2]
          %4 = pad %1 {pads=[[0,0],[1,0]], value=0} : f32[2,2]
          %5 = add %3, %4 : f32[2,2]
          %6 = pad %2 {pads=[[1,0],[0,0]], value=1} : f32[2,2]
          %7 = add %3, %6 : f32[2,2]
          return %5, %7
        }""")
    assert "concat" not in out


def test_concat_of_adjacent_slices_is_the_tensor(check):
    run(check, """
        graph f(%0: f32[12] data) {
          %1 = slice %0 {starts=[0], stops=[4], steps=[1]} : f32[4]
          %2 = slice %0 {starts=[4], stops=[8], steps=[1]} : f32[4]
          %3 = slice %0 {starts=[8], stops=[12], steps=[1]} : f32[4]
          %4 = reshape %1 {shape=[1,2,2]} : f32[1,2,2]
          %5 = reshape %2 {shape=[1,2,2]} : f32[1,2,2]
          %6 = reshape %3 {shape=[1,2,2]} : f32[1,2,2]
          %7 = concat %4, %5, %6 {axis=0} : f32[3,2,2]
          return %7
        }""", """
        graph f(%0: f32[12] data) {
          %1 = slice %0 {starts=[0], stops=[4], steps=[1]} : f32[4]
          %2 = slice %0 {starts=[4], stops=[8], steps=[1]} : f32[4]
          %3 = slice %0 {starts=[8], stops=[12], steps=[1]} : f32[4]
          %4 = reshape %1 {shape=[1, 2, 2]} : f32[1,2,2]
          %5 = reshape %2 {shape=[1, 2, 2]} : f32[1,2,2]
          %6 = reshape %3 {shape=[1, 2, 2]} : f32[1,2,2]
          %7 = reshape %0 {shape=[3, 2, 2]} : f32[3,2,2]
          return %7
        }""")


_KEPT_CONCATS = {
    "swapped": ("[2,0]", "[4,2]", "f32[2,2]", "[0,0]", "[2,2]", "f32[2,2]", 0, "f32[4,2]"),
    "partial": ("[0,0]", "[2,2]", "f32[2,2]", "[2,0]", "[3,2]", "f32[1,2]", 0, "f32[3,2]"),
    "inner_axis": ("[0,0]", "[4,1]", "f32[4,1]", "[0,1]", "[4,2]", "f32[4,1]", 1, "f32[4,2]"),
}


@pytest.mark.parametrize("case", sorted(_KEPT_CONCATS))
def test_concat_of_pieces_out_of_order_partial_or_inner_is_kept(check, case):
    a0, a1, ta, b0, b1, tb, axis, t = _KEPT_CONCATS[case]
    out = run(check, f"""
        graph f(%0: f32[4,2] data) {{
          %1 = slice %0 {{starts={a0}, stops={a1}, steps=[1,1]}} : {ta}
          %2 = slice %0 {{starts={b0}, stops={b1}, steps=[1,1]}} : {tb}
          %3 = concat %1, %2 {{axis={axis}}} : {t}
          return %3
        }}""")
    assert "concat" in out


def _qkv_loss(qkv, w):
    b, t = qkv.shape[0], qkv.shape[1]
    parts = qkv.reshape(b, t, 3, 2, 4).permute(2, 0, 3, 1, 4)
    q, k, v = parts[0], parts[1], parts[2]
    return ((q * w[0]).sum() + (k * w[1]).sum() * 2.0 + (v * w[2]).sum() * 3.0)


def test_qkv_split_gradient_is_one_kernel_and_matches_torch():
    rng = np.random.default_rng(0)
    qkv, w = rng.standard_normal((2, 5, 24)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    x = flame.tensor(qkv, requires_grad=True)

    @flame.compile
    def step(w):
        _qkv_loss(x, w).backward()
        g = x.grad * 1.0
        x.grad = None
        return g

    got = step(flame.tensor(w)).numpy()
    opt = step.optimized(flame.tensor(w))
    assert [op.name for op in opt.ops if op.name in ("pad", "concat")] == ["concat"]
    tx = torch.tensor(qkv, requires_grad=True)
    _qkv_loss(tx, torch.tensor(w)).backward()
    np.testing.assert_allclose(got, tx.grad.numpy(), rtol=1e-6, atol=1e-6)
