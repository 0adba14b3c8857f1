"""Mixed precision against torch. flame.autocast's arguments (device_type, dtype, enabled, cache_enabled),
nesting and autocast(enabled=False) inside, compared with torch.autocast's state functions; the dtype
each common op returns under autocast, checked against PyTorch's documented CUDA autocast lists (flame
follows the CUDA policy; torch's CPU autocast has other lists, so the expected dtypes are written from
torch's CUDA op reference: "CUDA Ops that can autocast to float16 / to float32 / that promote to the
widest input type"), eagerly and compiled; GradScaler against torch.amp.GradScaler("cpu"): scale,
unscale_, step skipped on inf/NaN, growth_interval, backoff and growth factors, get_scale, state_dict,
unscale_ then clip_grad_norm_ then step, and step's return value."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import flame

F = flame.nn.functional


# ---- autocast's arguments and state ----------------------------------------------------------------


def _state(lib, device):
    if lib is torch:
        return torch.is_autocast_enabled(device), str(torch.get_autocast_dtype(device)).split(".")[-1]
    return flame.amp.is_autocast_enabled(), {"bf16": "bfloat16", "f16": "float16"}[flame.amp.get_autocast_dtype().name]


def _nesting(lib, device, low):
    seen = []
    with lib.autocast(device, dtype=low):
        seen.append(_state(lib, device))
        with lib.autocast(device, enabled=False):
            seen.append(_state(lib, device)[0])
        seen.append(_state(lib, device))
        with lib.autocast(device, dtype=low, cache_enabled=False):
            seen.append(_state(lib, device))
    seen.append(_state(lib, device)[0])
    return seen


@pytest.mark.parametrize("low", ["bfloat16", "float16"])
def test_nesting_and_enabled_false_inside_as_torch(low):
    """torch's CPU autocast stands in for the state functions (the CUDA ones need a GPU)."""
    theirs = _nesting(torch, "cpu", getattr(torch, low))
    mine = _nesting(flame, "cuda", getattr(flame, low))
    assert mine == theirs


def test_device_type_picks_torchs_default_dtype():
    with flame.autocast("cuda"):
        assert flame.amp.get_autocast_dtype() == flame.float16  # torch.get_autocast_dtype("cuda")
    with flame.autocast("cpu"):
        assert flame.amp.get_autocast_dtype() == flame.bfloat16
    assert torch.get_autocast_dtype("cuda") == torch.float16 and torch.get_autocast_dtype("cpu") == torch.bfloat16


def test_autocast_as_a_decorator_and_disabled_region():
    @flame.autocast("cuda", dtype=flame.bfloat16)
    def lowered(a, b):
        return a @ b

    a = flame.ones(2, 2)
    assert lowered(a, a).dtype == flame.bfloat16
    with flame.autocast("cuda", dtype=flame.bfloat16, enabled=False):
        assert (a @ a).dtype == flame.float32
    assert not flame.amp.is_autocast_enabled()


# ---- what dtype each op returns: PyTorch's CUDA lists ---------------------------------------------

D = 8
LOW = "low"  # the region's dtype
# (name, fn(lib, x, y, w, img, cw, tgt), torch's CUDA autocast result for f32 inputs)
OPS = [
    # lower-precision list
    ("matmul", lambda lib, x, y, w, img, cw, t: x @ w, LOW),
    ("mm", lambda lib, x, y, w, img, cw, t: lib.mm(x, w), LOW),
    ("bmm", lambda lib, x, y, w, img, cw, t: lib.bmm(x[None], w[None]), LOW),
    ("addmm", lambda lib, x, y, w, img, cw, t: lib.addmm(y, x, w), LOW),
    ("baddbmm", lambda lib, x, y, w, img, cw, t: lib.baddbmm(y[None], x[None], w[None]), LOW),
    ("linear", lambda lib, x, y, w, img, cw, t: lib.nn.functional.linear(x, w, y[0]), LOW),
    ("einsum", lambda lib, x, y, w, img, cw, t: lib.einsum("ij,jk->ik", x, w), LOW),
    ("conv2d", lambda lib, x, y, w, img, cw, t: lib.nn.functional.conv2d(img, cw, padding=1), LOW),
    ("conv1d", lambda lib, x, y, w, img, cw, t: lib.nn.functional.conv1d(img[:, :, 0], cw[:, :, 0]), LOW),
    (
        "conv_transpose2d",
        lambda lib, x, y, w, img, cw, t: lib.nn.functional.conv_transpose2d(img, cw.transpose(0, 1)),
        LOW,
    ),
    ("prelu", lambda lib, x, y, w, img, cw, t: lib.nn.functional.prelu(x, lib.ones(1)), LOW),
    (
        "sdpa",
        lambda lib, x, y, w, img, cw, t: lib.nn.functional.scaled_dot_product_attention(
            x[None, None], y[None, None], x[None, None]
        ),
        LOW,
    ),
    # float32 list
    ("softmax", lambda lib, x, y, w, img, cw, t: lib.nn.functional.softmax(x @ w, -1), "float32"),
    ("log_softmax", lambda lib, x, y, w, img, cw, t: lib.nn.functional.log_softmax(x @ w, -1), "float32"),
    ("softmin", lambda lib, x, y, w, img, cw, t: lib.nn.functional.softmin(x @ w, -1), "float32"),
    ("layer_norm", lambda lib, x, y, w, img, cw, t: lib.nn.functional.layer_norm(x @ w, (D,)), "float32"),
    (
        "group_norm",
        lambda lib, x, y, w, img, cw, t: lib.nn.functional.group_norm(lib.nn.functional.conv2d(img, cw), 2),
        "float32",
    ),
    ("cross_entropy", lambda lib, x, y, w, img, cw, t: lib.nn.functional.cross_entropy(x @ w, t), "float32"),
    ("nll_loss", lambda lib, x, y, w, img, cw, t: lib.nn.functional.nll_loss(x @ w, t), "float32"),
    ("mse_loss", lambda lib, x, y, w, img, cw, t: lib.nn.functional.mse_loss(x @ w, y), "float32"),
    ("l1_loss", lambda lib, x, y, w, img, cw, t: lib.nn.functional.l1_loss(x @ w, y), "float32"),
    ("smooth_l1_loss", lambda lib, x, y, w, img, cw, t: lib.nn.functional.smooth_l1_loss(x @ w, y), "float32"),
    ("kl_div", lambda lib, x, y, w, img, cw, t: lib.nn.functional.kl_div(x @ w, y, reduction="batchmean"), "float32"),
    (
        "bce_with_logits",
        lambda lib, x, y, w, img, cw, t: lib.nn.functional.binary_cross_entropy_with_logits(x @ w, y.sigmoid()),
        "float32",
    ),
    ("exp", lambda lib, x, y, w, img, cw, t: (x @ w).exp(), "float32"),
    ("log", lambda lib, x, y, w, img, cw, t: (x @ w).abs().log(), "float32"),
    ("log1p", lambda lib, x, y, w, img, cw, t: (x @ w).abs().log1p(), "float32"),
    ("expm1", lambda lib, x, y, w, img, cw, t: (x @ w).expm1(), "float32"),
    ("pow", lambda lib, x, y, w, img, cw, t: (x @ w) ** 2, "float32"),
    ("rsqrt", lambda lib, x, y, w, img, cw, t: (x @ w).abs().rsqrt(), "float32"),
    ("reciprocal", lambda lib, x, y, w, img, cw, t: (x @ w).reciprocal(), "float32"),
    ("sum", lambda lib, x, y, w, img, cw, t: (x @ w).sum(), "float32"),
    ("prod", lambda lib, x, y, w, img, cw, t: (x @ w).prod(-1), "float32"),
    ("cumsum", lambda lib, x, y, w, img, cw, t: (x @ w).cumsum(0), "float32"),
    ("softplus", lambda lib, x, y, w, img, cw, t: lib.nn.functional.softplus(x @ w), "float32"),
    ("logsumexp", lambda lib, x, y, w, img, cw, t: (x @ w).logsumexp(-1), "float32"),
    ("norm", lambda lib, x, y, w, img, cw, t: (x @ w).norm(), "float32"),
    ("cosine_similarity", lambda lib, x, y, w, img, cw, t: lib.nn.functional.cosine_similarity(x @ w, y), "float32"),
    ("cdist", lambda lib, x, y, w, img, cw, t: lib.cdist(x @ w, y), "float32"),
    # promote list: the widest input
    ("dot", lambda lib, x, y, w, img, cw, t: lib.dot(x[0], w[0]), "float32"),
    ("tensordot", lambda lib, x, y, w, img, cw, t: lib.tensordot(x, w, 1), "float32"),
    ("cat", lambda lib, x, y, w, img, cw, t: lib.cat([x @ w, y]), "float32"),
    ("stack", lambda lib, x, y, w, img, cw, t: lib.stack([x @ w, y]), "float32"),
    ("addcmul", lambda lib, x, y, w, img, cw, t: lib.addcmul(y, x @ w, y), "float32"),
    # on no list: the input's dtype, type promotion between inputs
    ("relu", lambda lib, x, y, w, img, cw, t: lib.nn.functional.relu(x @ w), LOW),
    ("gelu", lambda lib, x, y, w, img, cw, t: lib.nn.functional.gelu(x @ w), LOW),
    ("tanh", lambda lib, x, y, w, img, cw, t: (x @ w).tanh(), LOW),
    ("sigmoid", lambda lib, x, y, w, img, cw, t: (x @ w).sigmoid(), LOW),
    ("amax", lambda lib, x, y, w, img, cw, t: (x @ w).amax(-1), LOW),
    ("mean", lambda lib, x, y, w, img, cw, t: (x @ w).mean(-1), LOW),
    ("dropout eval", lambda lib, x, y, w, img, cw, t: lib.nn.functional.dropout(x @ w, 0.5, training=False), LOW),
    ("add f32", lambda lib, x, y, w, img, cw, t: (x @ w) + y, "float32"),
    ("mul scalar", lambda lib, x, y, w, img, cw, t: (x @ w) * 2.0, LOW),
    ("where", lambda lib, x, y, w, img, cw, t: lib.where(y > 0, x @ w, y), "float32"),
    ("embedding", lambda lib, x, y, w, img, cw, t: lib.nn.functional.embedding(t, w), "float32"),
    ("relu of f32", lambda lib, x, y, w, img, cw, t: lib.nn.functional.relu(x), "float32"),
    ("matmul of f64", lambda lib, x, y, w, img, cw, t: x.double() @ w.double(), "float64"),
    ("softmax of f64", lambda lib, x, y, w, img, cw, t: lib.nn.functional.softmax(x.double(), -1), "float64"),
]


def _inputs(lib):
    r = np.random.default_rng(0)
    arrays = [r.standard_normal(s).astype(np.float32) for s in [(D, D), (D, D), (D, D), (2, 3, 6, 6), (4, 3, 3, 3)]]
    return [lib.tensor(a) for a in arrays] + [lib.tensor([1, 0, 3, 2, 5, 4, 7, 6])]


def _name(dt) -> str:
    return {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "f64": "float64"}.get(
        getattr(dt, "name", ""), str(dt).split(".")[-1]
    )


@pytest.mark.parametrize("low", ["bfloat16", "float16"])
@pytest.mark.parametrize("name,fn,want", OPS, ids=[o[0] for o in OPS])
def test_op_dtypes_under_autocast_follow_torchs_cuda_lists(name, fn, want, low):
    args = _inputs(flame)
    expected = low if want == LOW else want
    with flame.autocast("cuda", dtype=getattr(flame, low)):
        eager = fn(flame, *args)
    compiled_fn = flame.compile(lambda *a: fn(flame, *a), name=f"io_ac_{name.replace(' ', '_')}")
    with flame.autocast("cuda", dtype=getattr(flame, low)):
        compiled = compiled_fn(*args)
    assert (_name(eager.dtype), _name(compiled.dtype)) == (expected, expected)
    # values: the compiled step agrees with eager (torch's values on cast inputs: the test below)
    np.testing.assert_allclose(compiled.float().numpy(), eager.float().numpy(), rtol=3e-2, atol=3e-2)


def test_mean_of_a_low_precision_tensor_keeps_its_dtype_as_torch():
    """mean is on none of torch's CUDA lists: a bf16 input gives a bf16 mean, eagerly and compiled."""
    x = flame.tensor(np.random.default_rng(1).standard_normal((D, D)).astype(np.float32)).to(flame.bfloat16)
    compiled = flame.compile(lambda a: a.mean(-1), name="io_ac_mean_low")
    with flame.autocast("cuda", dtype=flame.bfloat16):
        assert _name(x.mean(-1).dtype) == _name(compiled(x).dtype) == "bfloat16"
        want = torch.tensor(x.float().numpy()).mean(-1).to(torch.bfloat16).float().numpy()
        np.testing.assert_allclose(x.mean(-1).float().numpy(), want, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("low", ["bfloat16", "float16"])
def test_lowered_values_are_torchs_on_the_cast_inputs(low):
    """matmul, addmm and conv under autocast equal torch's op on inputs cast to the low dtype (as its
    CUDA autocast casts them), to the low dtype's precision."""
    fa, ta = _inputs(flame), _inputs(torch)
    tl = getattr(torch, low)
    cases = [
        (
            lambda lib, a: lib.addmm(a[1], a[0], a[2]),
            lambda a: torch.addmm(a[1].to(tl).float(), a[0].to(tl).float(), a[2].to(tl).float()),
        ),
        (
            lambda lib, a: lib.nn.functional.conv2d(a[3], a[4], padding=1),
            lambda a: torch.nn.functional.conv2d(a[3].to(tl).float(), a[4].to(tl).float(), padding=1),
        ),
    ]
    for fl, tf in cases:
        with flame.autocast("cuda", dtype=getattr(flame, low)):
            mine = fl(flame, fa)
        want = tf(ta).to(tl).float()
        np.testing.assert_allclose(mine.float().numpy(), want.numpy(), rtol=2e-2, atol=5e-2)


def test_binary_cross_entropy_is_refused_under_autocast_as_torchs_cuda_autocast():
    p = flame.tensor([0.2, 0.7])
    assert F.binary_cross_entropy(p, p).dtype == flame.float32  # outside: fine
    with flame.autocast("cuda", dtype=flame.bfloat16), pytest.raises(RuntimeError, match="unsafe to autocast"):
        F.binary_cross_entropy(p, p)
    with flame.autocast("cuda", dtype=flame.bfloat16), pytest.raises(RuntimeError, match="unsafe to autocast"):
        flame.nn.BCELoss()(p, p)


# ---- GradScaler against torch.amp.GradScaler("cpu") -----------------------------------------------

DATA = [
    (np.random.default_rng(i).standard_normal((4, 3)), np.random.default_rng(i + 50).standard_normal((4, 2)))
    for i in range(10)
]
BAD_STEPS = {2: math.inf, 5: math.nan, 6: math.inf}  # the loss is multiplied by this at these steps


def _twins():
    torch.manual_seed(0)
    tm = torch.nn.Linear(3, 2).double()
    fm = flame.nn.Linear(3, 2).double()
    fm.load_state_dict(tm.state_dict())
    return tm, fm


def _train(lib, model, compiled=False, clip=None, **scaler_kw):
    opt = lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", **scaler_kw) if lib is torch else flame.amp.GradScaler(**scaler_kw)

    def step(x, y, bad):
        loss = ((model(x) - y) ** 2).mean() * bad
        scaler.scale(loss).backward()
        if clip is not None:
            scaler.unscale_(opt)
            lib.nn.utils.clip_grad_norm_(model.parameters(), clip)
        out = scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        return out

    run = flame.compile(step) if compiled else step
    scales, outs = [], []
    for i, (x, y) in enumerate(DATA):
        bad = lib.tensor(BAD_STEPS.get(i, 1.0), dtype=lib.float64)
        outs.append(run(lib.tensor(x), lib.tensor(y), bad))
        scales.append(scaler.get_scale())
    return scales, outs, scaler


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize(
    "kw",
    [
        dict(init_scale=2.0**10, growth_interval=2),
        dict(init_scale=8.0, growth_factor=3.0, backoff_factor=0.25, growth_interval=3),
        dict(enabled=False),
    ],
)
@pytest.mark.parametrize("clip", [None, 0.5])
def test_grad_scaler_steps_skips_and_scales_as_torch(kw, clip, compiled):
    tm, fm = _twins()
    tscales, touts, tscaler = _train(torch, tm, clip=clip, **kw)
    fscales, fouts, fscaler = _train(flame, fm, compiled=compiled, clip=clip, **kw)
    assert fscales == tscales
    assert fouts == touts == [None] * len(DATA)
    for k, v in tm.state_dict().items():
        np.testing.assert_allclose(fm.state_dict()[k].numpy(), v.detach().numpy(), rtol=1e-12, atol=1e-14)
    assert fscaler.state_dict() == tscaler.state_dict()


def test_grad_scaler_state_dict_round_trip_as_torch(tmp_path):
    tm, fm = _twins()
    kw = dict(init_scale=2.0**10, growth_interval=3)
    _, _, tscaler = _train(torch, tm, **kw)
    _, _, fscaler = _train(flame, fm, **kw)
    sd = fscaler.state_dict()
    flame.save(sd, tmp_path / "scaler.safetensors")
    back = flame.load(tmp_path / "scaler.safetensors")
    fresh, tfresh = flame.amp.GradScaler(), torch.amp.GradScaler("cpu")
    fresh.load_state_dict(back)
    tfresh.load_state_dict(tscaler.state_dict())
    assert fresh.state_dict() == tfresh.state_dict() == tscaler.state_dict()
    assert fresh.get_scale() == tfresh.get_scale()
    assert fresh.get_growth_interval() == tfresh.get_growth_interval() == 3


def test_grad_scaler_step_with_a_closure_as_torch():
    for lib in (torch, flame):
        model = lib.nn.Linear(2, 1)
        opt = lib.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu") if lib is torch else flame.amp.GradScaler()
        scaler.scale(model(lib.ones(1, 2)).sum()).backward()
        with pytest.raises(RuntimeError, match="Closure use is not currently supported"):
            scaler.step(opt, closure=lambda: 1.0)
        assert scaler.step(opt, lambda: 7.0) == 7.0  # positional: passed to optimizer.step, its value back
        scaler.update()


def test_grad_scaler_misuse_raises_as_torch():
    msgs = []
    for lib in (torch, flame):
        model = lib.nn.Linear(2, 1)
        opt = lib.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu") if lib is torch else flame.amp.GradScaler()
        scaler.scale(model(lib.ones(1, 2)).sum()).backward()
        scaler.unscale_(opt)
        seen = []
        try:
            scaler.unscale_(opt)
        except RuntimeError as e:
            seen.append(str(e))
        scaler.step(opt)
        try:
            scaler.step(opt)
        except RuntimeError as e:
            seen.append(str(e))
        msgs.append(seen)
    assert msgs[1] == msgs[0] and len(msgs[0]) == 2


def _conv_step(model, x):
    with flame.autocast("cuda", dtype=flame.bfloat16):
        y = model(x)
    loss = y.float().square().mean()
    loss.backward()
    return loss


def test_an_autocast_conv_step_plans_and_compiles_for_the_gpu(cuda_target):
    """Under autocast a convolution runs in bf16 (PyTorch's lower-precision list): the GPU's plan of a
    training step of it agrees with the eager step, and every kernel compiles with NVRTC for sm_90."""
    from flame.codegen.nvrtc import compile_cubin

    flame.manual_seed(0)
    model = flame.nn.Sequential(flame.nn.Conv2d(3, 4, 3, padding=1), flame.nn.ReLU(), flame.nn.Conv2d(4, 2, 1))
    x = flame.tensor(np.random.default_rng(0).standard_normal((2, 3, 6, 6)).astype(np.float32))
    want = _conv_step(model, x).item(), model[0].weight.grad.numpy()
    model.zero_grad()
    step = flame.compile(_conv_step)
    got = step(model, x).item(), model[0].weight.grad.numpy()
    assert model[0].weight.grad.dtype == flame.float32
    np.testing.assert_allclose(got[0], want[0], rtol=2e-2)
    np.testing.assert_allclose(got[1], want[1], rtol=5e-2, atol=5e-2)
    sources = {k.source for k in step._last.plan.kernels()}
    for source in sources:
        assert compile_cubin(source, "sm_90")[:4] == b"\x7fELF"


@pytest.mark.gpu
@pytest.mark.parametrize("low", ["bfloat16", "float16"])
def test_autocast_conv_on_the_gpu_is_torchs_on_cast_inputs(low):
    """On a GPU: conv2d / conv_transpose2d under autocast (cuDNN in the low dtype) against torch's conv of
    the inputs cast as its CUDA autocast casts them."""
    fa, ta = _inputs(flame), _inputs(torch)
    tl = getattr(torch, low)
    with flame.autocast("cuda", dtype=getattr(flame, low)):
        mine = F.conv2d(fa[3], fa[4], padding=1)
        mine_t = F.conv_transpose2d(fa[3], fa[4].transpose(0, 1))
    assert mine.dtype == getattr(flame, low) and mine_t.dtype == getattr(flame, low)
    want = torch.nn.functional.conv2d(ta[3].to(tl).float(), ta[4].to(tl).float(), padding=1).to(tl).float()
    want_t = torch.nn.functional.conv_transpose2d(ta[3].to(tl).float(), ta[4].transpose(0, 1).to(tl).float())
    np.testing.assert_allclose(mine.float().numpy(), want.numpy(), rtol=2e-2, atol=5e-2)
    np.testing.assert_allclose(mine_t.float().numpy(), want_t.to(tl).float().numpy(), rtol=2e-2, atol=5e-2)
