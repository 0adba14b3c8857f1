"""flame.autocast("cpu") picks each op's dtype as PyTorch's CPU autocast does, op by op.

torch's CPU lists (aten/src/ATen/autocast_mode.cpp, the AutocastCPU kernels) differ from its CUDA ones:
the lower-precision list holds the GEMMs, convolutions, prelu and attention only (not addmv, addr or the
recurrent cells), the float32 list the losses, prod, cdist, trace, quantile, the 3-d pools, the
reflection / replication pads, grid_sample and the linear algebra (not exp, log, pow, softmax, sum,
cumsum or the norms, which run in their inputs' dtype), and the promote list only cat, stack and
index_copy. An op torch composes of listed ops (tensordot, inner and einsum of a matmul, affine_grid of a
bmm, the recurrent cells of linears) takes their casts. Every row of the CUDA table
(test_autocast_lists.py) and the rows below run under torch.autocast("cpu", dtype) on real CPU tensors,
the oracle, and under flame.autocast("cpu", dtype), eagerly and in @flame.compile: the same result dtype
and values (or the same kind of error, where torch refuses mixed dtypes), and for differentiable rows
the same gradients."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import flame
from tests.io_parity.test_autocast_lists import (
    LOWS,
    MODES,
    OPS,
    TOL,
    Fn,
    Op,
    _arrays,
    _dtype,
    _flame_inputs,
    _name,
    recurrent_cells,
)

CPU = "torch's CPU lists"
M, W, V = (4, 6), (6, 5), (6,)
X3 = (1, 2, 4, 4, 4)

CPU_OPS = [
    Op("tensordot_f32", CPU, (("F", M), ("F", W)), lambda lib, a, b: lib.tensordot(a, b, 1)),
    Op("inner_f32", CPU, (("F", M), ("F", M)), lambda lib, a, b: lib.inner(a, b)),
    Op("einsum_low", CPU, (("L", M), ("L", W)), lambda lib, a, b: lib.einsum("ij,jk->ik", a, b)),
    Op("multi_dot", CPU, (("F", M), ("F", W), ("F", (5, 3))), lambda lib, a, b, c: lib.linalg.multi_dot([a, b, c])),
    Op("dot_f32", CPU, (("F", V), ("F", V)), lambda lib, a, b: lib.dot(a, b)),
    Op("vdot_f32", CPU, (("F", V), ("F", V)), lambda lib, a, b: lib.vdot(a, b)),
    Op("mv_f32", CPU, (("F", M), ("F", V)), lambda lib, a, b: lib.mv(a, b)),
    Op("outer_f32", CPU, (("F", (4,)), ("F", (5,))), lambda lib, a, b: lib.outer(a, b)),
    Op("addr_f32", CPU, (("F", (4, 5)), ("F", (4,)), ("F", (5,))), lambda lib, c, a, b: lib.addr(c, a, b)),
    Op("addmv_low", CPU, (("L", (4,)), ("L", M), ("L", V)), lambda lib, c, a, b: lib.addmv(c, a, b)),
    Op("cat_mixed", CPU, (("L", M), ("F", M)), lambda lib, a, b: lib.cat([a, b])),
    Op("stack_mixed", CPU, (("L", M), ("F", M)), lambda lib, a, b: lib.stack([a, b])),
    Op("index_copy_mixed", CPU, (("F", M), ("I4", (2,)), ("L", (2, 6))),
       lambda lib, s, i, v: s.index_copy(0, i, v)),
    Op("trace_low", CPU, (("L", (4, 4)),), lambda lib, x: lib.trace(x), grad=True),
    Op("prod_low", CPU, (("P", M),), lambda lib, x: x.prod()),
    Op("quantile_low", CPU, (("L", M),), lambda lib, x: lib.quantile(x, 0.3)),
    Op("exp_low", CPU, (("L", M),), lambda lib, x: x.exp(), grad=True),
    Op("softmax_low", CPU, (("L", M),), lambda lib, x: x.softmax(-1), grad=True),
    Op("layer_norm_f32_weights", CPU, (("L", M), ("F", V), ("F", V)),
       lambda lib, x, w, b: Fn(lib).layer_norm(x, V, w, b), grad=True),
    Op("sum_low", CPU, (("L", M),), lambda lib, x: x.sum(), grad=True),
    Op("pad_reflect", CPU, (("L", (1, *M)),), lambda lib, x: Fn(lib).pad(x, (1, 1), mode="reflect")),
    Op("pad_replicate", CPU, (("L", (1, *M)),), lambda lib, x: Fn(lib).pad(x, (1, 1), mode="replicate")),
    Op("pad_circular", CPU, (("L", (1, *M)),), lambda lib, x: Fn(lib).pad(x, (1, 1), mode="circular")),
    Op("max_pool3d", CPU, (("L", X3),), lambda lib, x: Fn(lib).max_pool3d(x, 2)),
    Op("avg_pool3d", CPU, (("L", X3),), lambda lib, x: Fn(lib).avg_pool3d(x, 2)),
    Op("adaptive_avg_pool3d", CPU, (("L", X3),), lambda lib, x: Fn(lib).adaptive_avg_pool3d(x, 1)),
    Op("adaptive_max_pool3d", CPU, (("L", X3),), lambda lib, x: Fn(lib).adaptive_max_pool3d(x, 1)),
    Op("max_pool2d_low", CPU, (("L", X3[1:]),), lambda lib, x: Fn(lib).max_pool2d(x, 2)),
    Op("binary_cross_entropy", CPU, (("U", M), ("U", M)),
       lambda lib, x, y: Fn(lib).binary_cross_entropy(x.abs(), y.abs())),
    Op("grid_sample_low", CPU, (("L", (1, 2, 4, 4)), ("U", (1, 3, 3, 2))),
       lambda lib, x, g: Fn(lib).grid_sample(x, g, align_corners=False)),
]
ROWS = OPS + CPU_OPS


def _torch_inputs(op: Op, low: str, requires_grad: bool = False) -> list:
    ts = [torch.tensor(a).to(getattr(torch, _dtype(k, low))) for (k, _), a in zip(op.specs, _arrays(op, low))]
    return [t.requires_grad_() if requires_grad and t.is_floating_point() else t for t in ts]


def _run_torch(op: Op, low: str, inputs: list):
    with torch.autocast("cpu", dtype=getattr(torch, low)):
        return op.fn(torch, *inputs)


def _run_flame(op: Op, low: str, mode: str, inputs: list):
    def body(*xs):
        with flame.autocast("cpu", dtype=getattr(flame, low)):
            return op.fn(flame, *xs)

    return (body if mode == "eager" else flame.compile(body))(*inputs)


def _tol(low: str, result: str) -> float:
    """torch's CPU kernels round the steps of a low-precision op to its dtype; flame rounds once."""
    return TOL["float64"] if result == "float64" else 2 * TOL[low]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("low", LOWS)
@pytest.mark.parametrize("op", ROWS, ids=[o.name for o in ROWS])
def test_result_dtype_and_values_follow_torchs_cpu_autocast(op, low, mode):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            want = _run_torch(op, low, _torch_inputs(op, low))
        except RuntimeError as e:  # mixed dtypes an op off torch's CPU lists refuses: flame refuses them too
            with pytest.raises(RuntimeError):
                _run_flame(op, low, mode, _flame_inputs(op, low))
            assert "dtype" in str(e) or "scalar type" in str(e)
            return
        out = _run_flame(op, low, mode, _flame_inputs(op, low))
    result = str(want.dtype).split(".")[-1]
    assert _name(out.dtype) == result, f"{op.name} under CPU autocast {low}, {mode}"
    mine = out.double().numpy() if out.dtype.is_float else out.numpy()
    tol = _tol(low, result)
    np.testing.assert_allclose(mine, want.double().numpy(), rtol=tol, atol=tol, err_msg=op.name)


def _refused(op: Op, low: str) -> bool:
    try:
        _run_torch(op, low, _torch_inputs(op, low))
    except RuntimeError:
        return True
    return False


GRAD_ROWS = [o for o in ROWS if o.grad]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("low", LOWS)
@pytest.mark.parametrize("op", GRAD_ROWS, ids=[o.name for o in GRAD_ROWS])
def test_gradients_follow_torchs_cpu_autocast(op, low, mode):
    """loss = sum(y.double() * g) with y the op's result under CPU autocast: every floating input's gradient
    has the input's dtype and torch's value (rows torch refuses: the dtype test above)."""
    if _refused(op, low):
        pytest.skip(f"torch's CPU autocast refuses {op.name}'s mixed dtypes")
    leaves = _torch_inputs(op, low, requires_grad=True)
    y = _run_torch(op, low, leaves)
    g = np.random.default_rng(5).standard_normal(tuple(y.shape))
    (y.double() * torch.tensor(g)).sum().backward()

    def step(*xs):
        with flame.amp.autocast(device_type="cpu", dtype=getattr(flame, low)):  # flame.autocast's other spelling
            out = op.fn(flame, *xs)
        (out.double() * flame.tensor(g)).sum().backward()
        return out

    inputs = _flame_inputs(op, low, requires_grad=True)
    (step if mode == "eager" else flame.compile(step))(*inputs)
    for i, (x, t) in enumerate(zip(inputs, leaves)):
        if not t.is_floating_point():
            continue
        assert x.grad is not None and _name(x.grad.dtype) == _name(x.dtype), f"{op.name}: input {i}'s gradient"
        want = t.grad.double().numpy()
        tol = 4 * TOL[low]
        np.testing.assert_allclose(x.grad.double().numpy(), want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()),
                                   err_msg=f"{op.name}: input {i}'s gradient")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("low", LOWS)
@pytest.mark.parametrize("cell", ["RNNCell", "GRUCell", "LSTMCell"])
def test_recurrent_cells_follow_torchs_cpu_autocast(cell, low, mode):
    """The cells are on none of torch's CPU lists: their linears run in the low dtype, the f32 state is
    not cast, so the results take torch's promotion of the two."""
    theirs, mine, x, h = recurrent_cells(cell)
    state = (torch.tensor(h),) * (2 if cell == "LSTMCell" else 1)
    with torch.no_grad(), torch.autocast("cpu", dtype=getattr(torch, low)):
        want = theirs(torch.tensor(x), state if len(state) == 2 else state[0])

    def step(x, *hx):
        with flame.autocast("cpu", dtype=getattr(flame, low)):
            return mine(x, tuple(hx) if len(hx) == 2 else hx[0])

    out = (step if mode == "eager" else flame.compile(step))(flame.tensor(x), *[flame.tensor(h)] * len(state))
    outs, wants = (out, want) if isinstance(out, tuple) else ((out,), (want,))
    assert [_name(o.dtype) for o in outs] == [str(w.dtype).split(".")[-1] for w in wants]
    for o, w in zip(outs, wants):
        np.testing.assert_allclose(o.double().numpy(), w.double().numpy(), rtol=4 * TOL[low], atol=4 * TOL[low])
