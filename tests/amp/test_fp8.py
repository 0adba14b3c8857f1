"""FP8 training on the reference executor: the FP8 dtypes and ops against NumPy/ml_dtypes, FP8 GEMMs
against an f32 GEMM of FP8-rounded inputs, the FP8 linear's values, gradients and scale/amax updates
against a NumPy model of the recipe (current and delayed scaling; eager and compiled), the dtype of
every op under the FP8 policy, the plan (casts fused, one library call per FP8 GEMM), the kernels
rendered and compiled by NVRTC for sm_90, and clear errors. GPU runs: tests/runtime/test_fp8_gpu.py."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import flame
import flame.nn.functional as F
from flame.codegen import lower, single
from flame.codegen.nvrtc import compile_cubin
from flame.errors import ArgumentError, DTypeError, ShapeError, UnverifiedError
from flame.ir import REGISTRY, Builder, Graph, TensorType
from flame.ir.dtypes import bf16, f8e4m3, f8e5m2, f32, f64, promote
from flame.ir.graph import Kind, is_backward, is_recompute
from flame.plan.steps import KernelLaunch, MatmulCall
from tests.conftest import on_device

E4M3, E5M2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
MAX = {E4M3: 448.0, E5M2: 57344.0}


@pytest.fixture(autouse=True)
def _reference():
    with on_device("reference"):
        yield


def _rng(seed=0):
    return np.random.default_rng(seed)


# ---- a NumPy model of the recipe ------------------------------------------------------------------


def _q(x, scale, fmt):
    """x * scale saturated and rounded to FP8 (ml_dtypes), as float32 values."""
    y = np.clip(x.astype(np.float32) * np.float32(scale), -MAX[fmt], MAX[fmt])
    return y.astype(fmt).astype(np.float32)


def _scale(amax, fmt, margin=0):
    return np.float32(np.float32(MAX[fmt] / 2.0**margin) / np.maximum(np.float32(amax), np.float32(1e-12)))


def _bf16(x):
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def _model_linear(x, w, c, sx, sw):
    """y (bf16) and dx, dw of sum(y * c) under the FP8 linear with scales sx, sw (f32 numbers)."""
    x8, w8 = _q(x, sx, E4M3), _q(w, sw, E4M3)
    y = _bf16((x8 @ w8.T) * np.float32(np.float32(1 / sx) * np.float32(1 / sw)))
    g = _bf16(c)
    sg = _scale(np.abs(g).max(), E5M2)
    g8 = _q(g, sg, E5M2)
    dx = (g8 @ w8) * np.float32(np.float32(1 / sg) * np.float32(1 / sw))
    dw = (g8.T @ x8) * np.float32(np.float32(1 / sg) * np.float32(1 / sx))
    return y, dx, dw


# ---- dtypes and ops -------------------------------------------------------------------------------


def test_fp8_dtypes_are_named_like_torch_and_do_not_promote():
    assert flame.float8_e4m3fn is f8e4m3 and flame.float8_e5m2 is f8e5m2
    assert flame.ir.dtype_of("float8_e4m3fn") is f8e4m3 and flame.ir.dtype_of(np.dtype(E5M2)) is f8e5m2
    with pytest.raises(DTypeError, match="float8"):
        promote(f8e4m3, f32)
    x = flame.tensor(np.array([1.0, 3.3, 500.0, -70000.0, np.nan], np.float32))
    for dt, fmt in ((flame.float8_e4m3fn, E4M3), (flame.float8_e5m2, E5M2)):  # torch/ml_dtypes: no saturation
        got = x.to(dt).float().numpy()
        want = x.numpy().astype(fmt).astype(np.float32)
        np.testing.assert_array_equal(got, want)
    with pytest.raises(DTypeError):
        x.to(flame.float8_e4m3fn) + 1.0


@pytest.mark.parametrize("fmt,dt", [(E4M3, f8e4m3), (E5M2, f8e5m2)])
def test_scaled_cast_saturates_and_rounds_like_ml_dtypes(fmt, dt):
    x = np.concatenate([_rng().standard_normal(200).astype(np.float32) * 300, [1e9, -1e9, np.nan, 0.0]])
    s = np.float32(7.5)
    got = REGISTRY["scaled_cast"].ref(x, np.array(s), dtype=dt)
    want = np.clip(x * s, -MAX[fmt], MAX[fmt]).astype(fmt)
    assert got.dtype == np.dtype(fmt)
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))
    assert abs(float(got[-4])) == MAX[fmt] and np.isnan(got[-2].astype(np.float32))


@pytest.mark.parametrize("fa,fb", [(E4M3, E4M3), (E5M2, E4M3), (E4M3, E5M2)])
def test_fp8_gemm_matches_an_f32_gemm_of_fp8_rounded_inputs(fa, fb):
    """A compiled graph (reference executor) of scaled casts and an fp8_matmul against f32 NumPy."""
    rng = _rng(1)
    a, b = rng.standard_normal((24, 64)).astype(np.float32), rng.standard_normal((40, 64)).astype(np.float32) * 0.05
    sa, sb = _scale(np.abs(a).max(), fa), _scale(np.abs(b).max(), fb)
    g = Graph()
    bld = Builder(g)
    va, vb = g.add_input(TensorType(a.shape, f32)), g.add_input(TensorType(b.shape, f32))
    vsa, vsb = g.add_input(TensorType((), f32)), g.add_input(TensorType((), f32))
    dts = {E4M3: f8e4m3, E5M2: f8e5m2}
    a8, b8 = bld.scaled_cast(va, vsa, dtype=dts[fa]), bld.scaled_cast(vb, vsb, dtype=dts[fb])
    g.outputs = [bld.fp8_matmul(a8, b8, bld.reciprocal(vsa), bld.reciprocal(vsb), out_dtype=f32)]
    from flame.compiler import compile_graph

    (got,) = compile_graph(g).run([a, b, np.array(sa), np.array(sb)])
    want = (_q(a, sa, fa).astype(np.float64) @ _q(b, sb, fb).T.astype(np.float64)) / (np.float64(sa) * sb)
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    exact = a.astype(np.float64) @ b.T.astype(np.float64)  # and FP8 is close to the unrounded product
    assert np.linalg.norm(got - exact) / np.linalg.norm(exact) < 0.1


def test_fp8_matmul_rejects_bad_operands():
    infer = REGISTRY["fp8_matmul"].infer
    s = TensorType((), f32)
    with pytest.raises(DTypeError, match="e5m2"):
        infer([TensorType((4, 16), f8e5m2), TensorType((8, 16), f8e5m2), s, s], out_dtype=bf16)
    with pytest.raises(ShapeError, match="inner"):
        infer([TensorType((4, 16), f8e4m3), TensorType((8, 32), f8e4m3), s, s], out_dtype=bf16)
    with pytest.raises(DTypeError, match="FP8"):
        infer([TensorType((4, 16), bf16), TensorType((8, 16), f8e4m3), s, s], out_dtype=bf16)
    with pytest.raises(DTypeError, match="scalar"):
        infer([TensorType((4, 16), f8e4m3), TensorType((8, 16), f8e4m3), TensorType((1,), f32), s], out_dtype=bf16)


# ---- the FP8 linear against the NumPy model ---------------------------------------------------------


def _linear_case(seed=0, shape=(2, 8, 32), n=48):
    rng = _rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    w = (rng.standard_normal((n, shape[-1])) * 0.1).astype(np.float32)
    c = rng.standard_normal((*shape[:-1], n)).astype(np.float32)
    return x, w, c


@pytest.mark.parametrize("compiled", [False, True])
def test_fp8_linear_current_scaling_matches_the_model(compiled):
    x, w, c = _linear_case()
    xt, ct = flame.tensor(x, requires_grad=True), flame.tensor(c)
    wt = flame.nn.Parameter(flame.tensor(w))

    def step(xi, ci):
        with flame.autocast(dtype=flame.float8_e4m3fn):
            y = F.linear(xi, wt)
        (y.float() * ci).sum().backward()
        return y

    y = (flame.compile(step) if compiled else step)(xt, ct)
    x2, c2 = x.reshape(-1, 32), c.reshape(-1, 48)
    want_y, want_dx, want_dw = _model_linear(x2, w, c2, _scale(np.abs(x).max(), E4M3), _scale(np.abs(w).max(), E4M3))
    assert y.dtype == flame.bf16 and wt.grad.dtype == flame.f32 and xt.grad.dtype == flame.f32
    np.testing.assert_allclose(y.float().numpy().reshape(-1, 48), want_y, rtol=8e-3, atol=1e-6)
    np.testing.assert_allclose(wt.grad.numpy(), want_dw, rtol=1e-4, atol=1e-5 * np.abs(want_dw).max())
    np.testing.assert_allclose(xt.grad.numpy().reshape(-1, 32), want_dx, rtol=1e-4, atol=1e-5 * np.abs(want_dx).max())


def test_fp8_linear_gradients_are_close_to_torch():
    torch = pytest.importorskip("torch")
    x, w, c = _linear_case(3)
    xt, wt = flame.tensor(x, requires_grad=True), flame.nn.Parameter(flame.tensor(w))
    bt = flame.nn.Parameter(flame.tensor(np.full(48, 0.5, np.float32)))
    with flame.autocast(dtype=flame.float8_e4m3fn):
        y = F.linear(xt, wt, bt)
    (y.float() * flame.tensor(c)).sum().backward()
    tx, tw = (
        torch.tensor(x, dtype=torch.float64, requires_grad=True),
        torch.tensor(w, dtype=torch.float64, requires_grad=True),
    )
    tb = torch.full((48,), 0.5, dtype=torch.float64, requires_grad=True)
    ty = torch.nn.functional.linear(tx, tw, tb)
    (ty * torch.tensor(c, dtype=torch.float64)).sum().backward()
    for got, want, tol in (
        (y.float(), ty, 0.06),
        (xt.grad, tx.grad, 0.1),
        (wt.grad, tw.grad, 0.1),
        (bt.grad, tb.grad, 0.01),
    ):
        want = want.detach().numpy()
        assert np.linalg.norm(got.numpy() - want) / np.linalg.norm(want) < tol


@pytest.mark.parametrize("compiled", [False, True])
def test_delayed_scaling_updates_match_the_model(compiled):
    recipe = flame.amp.Float8Recipe(scaling="delayed", amax_history_len=3, margin=1)
    _, w, _ = _linear_case()
    wt = flame.nn.Parameter(flame.tensor(w))

    def step(xi):
        with flame.autocast(dtype=recipe):
            return F.linear(xi, wt)

    run = flame.compile(step) if compiled else step
    hist = {"x": np.zeros(3, np.float32), "w": np.zeros(3, np.float32)}
    scale = {"x": np.float32(1.0), "w": np.float32(1.0)}
    for k in range(5):
        x = _rng(10 + k).standard_normal((16, 32)).astype(np.float32) * (k + 1)
        y = run(flame.tensor(x))
        want = _bf16(
            (_q(x, scale["x"], E4M3) @ _q(w, scale["w"], E4M3).T)
            * np.float32(np.float32(1 / scale["x"]) * np.float32(1 / scale["w"]))
        )
        np.testing.assert_allclose(y.float().numpy(), want, rtol=8e-3, atol=1e-6)
        for role, t in (("x", x), ("w", w)):  # the model: push this step's amax, scale from the history
            hist[role] = np.concatenate([[np.abs(t).max()], hist[role][:-1]]).astype(np.float32)
            scale[role] = _scale(hist[role].max(), E4M3, margin=1)
        st = flame.amp.float8_state(wt)
        for role, meta in (("x", st.input), ("w", st.weight)):
            np.testing.assert_array_equal(meta.amax_history.numpy(), hist[role])
            np.testing.assert_allclose(meta.scale.numpy(), scale[role], rtol=1e-6)


@pytest.mark.parametrize("compiled", [False, True])
def test_delayed_gradient_scales_and_shared_inputs_match_the_model(compiled):
    """Two Linears reading one input under delayed scaling: each gradient is cast with its stored e5m2
    scale and its amax goes into the gradient's history once the backward made it; in a compiled step
    the two share one input state (one cast of the input), which takes the input's amax once a step."""
    recipe = flame.amp.Float8Recipe(scaling="delayed", amax_history_len=2)
    rng = _rng(20)
    w1, w2 = (rng.standard_normal((48, 32)).astype(np.float32) for _ in range(2))
    p1, p2 = flame.nn.Parameter(flame.tensor(w1)), flame.nn.Parameter(flame.tensor(w2))

    def step(xi, ci, di):
        with flame.autocast(dtype=recipe):
            y1, y2 = F.linear(xi, p1), F.linear(xi, p2)
        ((y1.float() * ci).sum() + (y2.float() * di).sum()).backward()
        return y1

    run = flame.compile(step) if compiled else step
    hist = {k: np.zeros(2, np.float32) for k in ("x", "w1", "w2", "g1", "g2")}
    scale = {k: np.float32(1.0) for k in hist}
    fmt = {"x": E4M3, "w1": E4M3, "w2": E4M3, "g1": E5M2, "g2": E5M2}
    for k in range(4):
        x = rng.standard_normal((16, 32)).astype(np.float32) * (k + 1)
        c, d = (rng.standard_normal((16, 48)).astype(np.float32) * 10.0 ** (k - 1) for _ in range(2))
        p1.grad = p2.grad = None
        run(flame.tensor(x), flame.tensor(c), flame.tensor(d))
        x8 = _q(x, scale["x"], E4M3)
        for p, gk, cot in ((p1, "g1", c), (p2, "g2", d)):
            g8 = _q(_bf16(cot), scale[gk], E5M2)
            want = (g8.T @ x8) * np.float32(np.float32(1 / scale[gk]) * np.float32(1 / scale["x"]))
            np.testing.assert_allclose(p.grad.numpy(), want, rtol=1e-4, atol=1e-5 * np.abs(want).max())
        for key, t in (("x", x), ("w1", w1), ("w2", w2), ("g1", _bf16(c)), ("g2", _bf16(d))):
            hist[key] = np.concatenate([[np.abs(t).max()], hist[key][:-1]]).astype(np.float32)
            scale[key] = _scale(hist[key].max(), fmt[key])
        s1, s2 = flame.amp.float8_state(p1), flame.amp.float8_state(p2)
        assert (s1.input is s2.input) == compiled
        for meta, key in ((s1.input, "x"), (s2.input, "x"), (s1.weight, "w1"), (s2.weight, "w2"),
                          (s1.grad, "g1"), (s2.grad, "g2")):
            np.testing.assert_array_equal(meta.amax_history.numpy(), hist[key])
            np.testing.assert_allclose(meta.scale.numpy(), scale[key], rtol=1e-6)
    if compiled:
        g = run.optimized(flame.tensor(x), flame.tensor(c), flame.tensor(d))
        forward_x = [op for op in g.ops
                     if op.name == "scaled_cast" and not is_backward(op) and op.out.shape == (16, 32)]
        assert len(forward_x) == 1  # one cast of the input, the two GEMMs read it


def test_delayed_gradient_state_takes_the_largest_amax_of_a_steps_backwards():
    """Gradient accumulation in one compiled step (two backward calls): the gradient's history takes one
    entry a step, the larger of the two amaxes."""
    recipe = flame.amp.Float8Recipe(scaling="delayed", amax_history_len=3)
    w = _rng(30).standard_normal((8, 16)).astype(np.float32)
    p = flame.nn.Parameter(flame.tensor(w))

    @flame.compile
    def step(x, c1, c2):
        for c in (c1, c2):
            with flame.autocast(dtype=recipe):
                y = F.linear(x, p)
            (y.float() * c).sum().backward()

    x = flame.tensor(_rng(31).standard_normal((4, 16)).astype(np.float32))
    want = []
    for k in range(3):
        c1, c2 = (_rng(32 + 2 * k + j).standard_normal((4, 8)).astype(np.float32) * (1 + 3 * j) for j in range(2))
        step(x, flame.tensor(c1), flame.tensor(c2))
        want.insert(0, max(np.abs(_bf16(c1)).max(), np.abs(_bf16(c2)).max()))
        got = flame.amp.float8_state(p).grad.amax_history.numpy()
        np.testing.assert_array_equal(got, np.array((want + [0.0, 0.0, 0.0])[:3], np.float32))


def test_recipe_arguments_and_computed_weights_give_clear_errors():
    with pytest.raises(ArgumentError, match="scaling"):
        flame.amp.Float8Recipe(scaling="sometimes")
    with pytest.raises(ArgumentError, match="amax_history_len"):
        flame.amp.Float8Recipe(amax_history_len=0)
    w = flame.nn.Parameter(flame.tensor(np.ones((8, 16), np.float32)))
    with pytest.raises(ArgumentError, match="parameter"):

        @flame.compile
        def step(x):
            with flame.autocast(dtype=flame.amp.Float8Recipe(scaling="delayed")):
                return F.linear(x, w * 2.0)

        step(flame.tensor(np.ones((4, 16), np.float32)))
    with pytest.raises(DTypeError, match="Float8Recipe"):
        flame.autocast(dtype=flame.float8_e5m2)


# ---- the FP8 policy in a training step: dtypes and the plan ------------------------------------------


def _block(recipe, d=32):
    rng = _rng(5)
    ws = [
        flame.nn.Parameter(flame.tensor((rng.standard_normal(s) * 0.1).astype(np.float32)))
        for s in ((3 * d, d), (d, d), (4 * d, d), (d, 4 * d))
    ]
    opt = flame.optim.AdamW(ws, lr=1e-3)

    @flame.compile
    def step(x):
        with flame.autocast(dtype=recipe):
            B, T, C = x.shape
            h = F.layer_norm(x, (C,))
            q, k, v = F.linear(h, ws[0]).reshape(B, T, 3, 4, C // 4).permute(2, 0, 3, 1, 4)
            att = F.softmax(q @ k.transpose(-1, -2) * 0.5, dim=-1)
            x = x + F.linear((att @ v).transpose(1, 2).reshape(B, T, C), ws[1])
            y = x + F.linear(F.gelu(F.linear(F.layer_norm(x, (C,)), ws[2])), ws[3])
            loss = (y.float() ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    return step, ws, flame.tensor(_rng(6).standard_normal((2, 8, d)).astype(np.float32))


@pytest.mark.parametrize("scaling", ["current", "delayed"])
def test_every_op_has_its_fp8_policy_dtype(scaling):
    step, ws, x = _block(flame.amp.Float8Recipe(scaling=scaling))
    g = step.trace(x)
    fwd_gemms = [op for op in g.ops if op.name == "fp8_matmul" and not is_backward(op)]
    bwd_gemms = [op for op in g.ops if op.name == "fp8_matmul" and is_backward(op)]
    # each Linear: forward, dgrad and wgrad in FP8; the first one's dgrad is dead (x, the data, needs none)
    assert len(fwd_gemms) == 4 and len(bwd_gemms) == 7
    for op in fwd_gemms:
        assert [v.dtype for v in op.inputs[:2]] == [f8e4m3, f8e4m3] and op.out.dtype == bf16
    for op in bwd_gemms:
        assert [v.dtype for v in op.inputs[:2]] == [f8e5m2, f8e4m3] and op.out.dtype in (f32, bf16)
    assert {op.out.dtype for op in g.ops if op.name == "matmul" and not is_backward(op)} == {bf16}  # attention
    for op in g.ops:
        policy = REGISTRY[op.name].autocast
        if policy == "f32" and not is_backward(op):  # (an optimizer's step-count arithmetic is f64, as torch's)
            assert op.out.dtype in (f32, f64), op
        if op.name == "scaled_cast":
            assert op.inputs[1].dtype == f32 and op.out.dtype in (f8e4m3, f8e5m2)
    params = [v for v, r in zip(g.inputs, g.roles) if r == "param"]
    assert len(params) == 4 and all(v.dtype == f32 for v in params)  # f32 master weights
    states = [v for v, r in zip(g.inputs, g.roles) if r == "state" and v.dtype == f32 and v.type.rank <= 1]
    assert (len(states) >= 16) == (scaling == "delayed")  # 4 Linears x (input, weight) x (history, scale)
    loss = step(x)
    assert np.isfinite(loss.item()) and all(w.dtype == flame.f32 for w in ws)


@pytest.mark.parametrize("scaling", ["current", "delayed"])
def test_plan_fuses_the_casts_and_calls_one_fp8_gemm_each(scaling):
    step, _, x = _block(flame.amp.Float8Recipe(scaling=scaling))
    g = step.optimized(x)
    casts = [op for op in g.ops if op.name == "scaled_cast"]
    group = {op: grp for grp in g.groups for op in grp.ops}
    with_casts = {id(group[op]) for op in casts}
    users = g.users()
    # an elementwise kernel's cast whose transposed copy a backward GEMM reads writes that copy too (one
    # tiled kernel, passes/fuse_transposes.py), unless the cast joined the kernel computing its input (its
    # scale made before it), whose transposed copy is then a 1-byte transpose of the cast; casts share
    # kernels, with one another, with their input's kernel or with such a copy
    paired = [op for op in casts
              if group[op].kind == Kind.ELEMENTWISE and any(u.name == "permute" for u in users[op.out])]
    for op in paired:
        src = op.inputs[0].producer
        while src is not None and src.name == "reshape":
            src = src.inputs[0].producer
        joined = src is not None and group.get(src) is group[op]
        assert joined or all(group[u] is group[op] for u in users[op.out] if u.name == "permute"), str(op)
    assert len(with_casts) < len(casts) or paired
    for op in casts:  # no kernel is a lone cast of a value a kernel computes (a library call's result may be,
        grp = group[op]  # and the backward's recomputation of a cast beside the transposed copy it feeds)
        if is_recompute(op) and any(o.name == "permute" and o.inputs[0] is op.out for o in grp.ops):
            continue
        others = [o for o in grp.ops if o.name not in ("scaled_cast", "permute", "reshape")]
        lone = not others and sum(o.name == "scaled_cast" for o in grp.ops) == 1
        src = op.inputs[0].producer
        while src is not None and src.name == "reshape":
            src = src.inputs[0].producer
        library = src is not None and bool(REGISTRY[src.name].library)
        assert not lone or src is None or src.name == "permute" or library, str(op)
    if scaling == "current":  # each amax is computed in a kernel that scales and casts with it (a transposed
        by_scale: dict = {}  # copy of the same tensor may be a kernel of its own: it reads in another order)
        for op in casts:
            by_scale.setdefault(op.inputs[1], []).append(op)
        for scale, users in by_scale.items():
            straight = [u for u in users if u.inputs[0].producer is None or u.inputs[0].producer.name != "permute"]
            if scale.producer is not None and scale.producer.name == "div" and straight:
                assert any(any(o.name == "reduce_max" for o in group[u].ops) for u in straight), str(straight[0])
    else:  # the forward casts use stored scales: a weight's cast shares a kernel with other casts or writes
        # its transposed copy too (the first Linear's has no other: the data needs no gradient)
        fwd = [op for op in casts if not is_backward(op) and op.out.dtype == f8e4m3 and op.inputs[0].producer is None]
        alone = [op for op in fwd if op not in paired and sum(group[o] is group[op] for o in casts) == 1]
        assert len(fwd) == 4 and len(alone) <= 1
    plan = step.plan(x) if hasattr(step, "plan") else None
    calls = [s for s in (plan.steps if plan else []) if isinstance(s, MatmulCall) and s.a_scale is not None]
    assert plan is None or (len(calls) == 11 and not any(s.ta or s.tb for s in calls))


def test_fp8_kernels_render_and_compile_for_sm_90():
    """Every kernel with an FP8 cast that the training step plans, and each op alone on every dtype."""
    step, _, x = _block(flame.amp.Float8Recipe(scaling="current"))
    g = step.optimized(x)
    kernels = [grp for grp in g.groups if any(op.name == "scaled_cast" for op in grp.ops)]
    assert kernels
    for grp in kernels:
        for k in lower(grp):
            assert compile_cubin(k.source, "sm_90")[:4] == b"\x7fELF", k.name
    for src in (f32, bf16):
        for dst in (f8e4m3, f8e5m2):
            gr = Graph()
            b = Builder(gr)
            v, s = gr.add_input(TensorType((5, 33), src)), gr.add_input(TensorType((), f32))
            y = b.scaled_cast(v, s, dtype=dst)
            gr.outputs = [y, b.cast(y, dtype=bf16), b.cast(v, dtype=dst)]
            for op in gr.ops:
                for k in lower(single(op)):
                    assert compile_cubin(k.source, "sm_90")[:4] == b"\x7fELF", k.name


def test_cuda_fp8_gemm_is_behind_its_switch(monkeypatch):
    from flame.runtime import matmul

    monkeypatch.setattr(matmul, "fp8_gemm", False)
    with pytest.raises(UnverifiedError, match="FLAME_FP8_GEMM=0"):
        matmul.fp8_matmul_into(None, None, None, None, None, formats=("float8_e4m3fn",) * 2)


def test_plan_steps_read_the_scales():
    step, _, x = _block(flame.amp.Float8Recipe())
    rec = []
    from flame import debug

    with debug.observe(rec.append):
        step.optimized(x)
    plan = rec[-1].plan
    calls = [s for s in plan.steps if isinstance(s, MatmulCall) and s.a_scale is not None]
    assert len(calls) == 11 and all(not (s.ta or s.tb) for s in calls)
    assert all({s.a_scale, s.b_scale} <= set(s.reads) for s in calls)
    assert any(isinstance(s, KernelLaunch) for s in plan.steps)
