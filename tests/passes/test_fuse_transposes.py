"""passes/fuse_transposes.py: a transposed copy that an FP8 GEMM reads joins the kernel casting its input,
which writes both (one tiled kernel), except where the backward also reads the forward's value as it is
(the copy would be written in the forward and kept beside it). Planned for the CUDA target; the fused
step computes what the unfused ops do on the reference executor."""

from __future__ import annotations

import numpy as np
import pytest

import flame
from flame.autograd import Function
from flame.frontend.dispatch import apply
from flame.ir.dtypes import f8e4m3, f8e5m2


def _cast(x, s, dtype):
    return apply("scaled_cast", x, s, dtype=dtype)


def _gemm(a8, b8, inv):
    return apply("fp8_matmul", a8, b8, inv, inv, out_dtype=flame.bf16)


class _Linear(Function):
    """y = x8 @ w8^T; the backward takes dx from w8^T and dw from x8^T, and with `reads_x8` adds x8
    itself to dx (a backward reader of the forward's cast as it is)."""

    reads_x8 = False

    @staticmethod
    def forward(ctx, x, w, s):
        x8, w8 = _cast(x, s, f8e4m3), _cast(w, s, f8e4m3)
        ctx.save_for_backward(x8, w8, s)
        return _gemm(x8, w8, s.reciprocal())

    @staticmethod
    def backward(ctx, g):
        x8, w8, s = ctx.saved_tensors
        g8, inv = _cast(g, s, f8e5m2), s.reciprocal()
        dx = _gemm(g8, w8.transpose(0, 1), inv)
        if _Linear.reads_x8:
            dx = dx + x8.to(flame.bf16)
        return dx, _gemm(g8.transpose(0, 1), x8.transpose(0, 1), inv), None


def _step():
    """A training step of a GEMM then the FP8 linear: x = a @ b is not kept for the backward (the GEMM's
    gradient reads a and b), so x8 is, rather than recomputed there from x."""
    rng = np.random.default_rng(0)
    a, b, w = (
        flame.nn.Parameter(flame.tensor(rng.standard_normal(shape).astype(np.float32)).to(flame.bf16))
        for shape in ((96, 32), (32, 64), (80, 64))
    )
    s = flame.tensor(np.float32(4.0))

    @flame.compile
    def step(s):
        loss = _Linear.apply(a @ b, w, s).float().square().mean()
        loss.backward()
        grads = [p.grad * 1.0 for p in (a, b, w)]
        a.grad, b.grad, w.grad = None, None, None
        return (loss, *grads)

    return step, s


def _groups_of_permutes(step, s):
    g = step.optimized(s)
    group = {op: grp for grp in g.groups for op in grp.ops}
    perms = [op for op in g.ops if op.name == "permute" and op.out.dtype.is_float8]
    return {
        op.inputs[0].producer.inputs[0].shape: op.inputs[0] in group[op].outputs
        for op in perms
        if op.inputs[0].producer.name == "scaled_cast"
    }


@pytest.mark.parametrize("reads_x8", [False, True])
def test_a_transposed_copy_joins_its_cast_unless_the_backward_reads_the_value(cuda_target, monkeypatch, reads_x8):
    monkeypatch.setattr(_Linear, "reads_x8", reads_x8)
    step, s = _step()
    paired = _groups_of_permutes(step, s)  # the cast's input shape -> written with its transpose
    assert paired[(80, 64)]  # w8 and w8^T: one kernel
    assert paired[(96, 64)] == (not reads_x8)  # x8^T stays in the backward where the backward reads x8
    got = [v.float().numpy() for v in step(s)]
    monkeypatch.setenv("FLAME_FUSE", "0")
    step0, s0 = _step()
    want = [v.float().numpy() for v in step0(s0)]
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
