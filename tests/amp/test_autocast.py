"""flame.autocast: the dtype every op gets under autocast (PyTorch's CUDA autocast lists), values and
gradients against torch.autocast on the CPU (bf16) within bf16 tolerance, master weights staying f32,
casts visible in the IR, the compiled cache keyed by the autocast state."""

from __future__ import annotations

import numpy as np
import pytest

import flame
import flame.nn as nn
import flame.nn.functional as F
from flame.ir.ops.attention import STATS
from flame.ir.registry import REGISTRY
from flame.passes.autodiff import is_backward

torch = pytest.importorskip("torch")

B, T, D = 2, 8, 16


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# (name, function of (a, b, w) -> tensor, expected dtype under autocast(dtype=low); None = low).
# PyTorch's CUDA lists: lower precision: matmul, linear, scaled_dot_product_attention; float32:
# softmax, log_softmax, layer_norm, the losses, exp, log, pow, rsqrt, reciprocal, sum; anything else (mean
# included) keeps its input dtype (the widest of several). tests/io_parity/test_autocast_lists.py: every op.
POLICY = [
    ("matmul", lambda a, b, w: a @ w, None),
    ("linear", lambda a, b, w: F.linear(a, w.T, b[0, :D]), None),
    ("sdpa", lambda a, b, w: F.scaled_dot_product_attention(a.reshape(1, 2, D, D), b.reshape(1, 2, D, D),
                                                             a.reshape(1, 2, D, D), is_causal=True), None),
    ("softmax", lambda a, b, w: (a @ w).softmax(-1), flame.f32),
    ("log_softmax", lambda a, b, w: (a @ w).log_softmax(-1), flame.f32),
    ("layer_norm", lambda a, b, w: F.layer_norm(a @ w, (D,)), flame.f32),
    ("rms_norm", lambda a, b, w: F.rms_norm(a @ w, (D,)), flame.f32),
    ("mse_loss", lambda a, b, w: F.mse_loss(a @ w, b), flame.f32),
    ("cross_entropy", lambda a, b, w: F.cross_entropy(a @ w, flame.tensor([1] * (2 * D))), flame.f32),
    ("exp", lambda a, b, w: (a @ w).exp(), flame.f32),
    ("log", lambda a, b, w: (a @ w).abs().log(), flame.f32),
    ("pow", lambda a, b, w: (a @ w) ** 2, flame.f32),
    ("rsqrt", lambda a, b, w: (a @ w).abs().rsqrt(), flame.f32),
    ("sum", lambda a, b, w: (a @ w).sum(), flame.f32),
    ("mean", lambda a, b, w: (a @ w).mean(-1), None),
    ("relu", lambda a, b, w: (a @ w).relu(), None),
    ("gelu", lambda a, b, w: F.gelu(a @ w), None),
    ("tanh", lambda a, b, w: (a @ w).tanh(), None),
    ("amax", lambda a, b, w: (a @ w).amax(-1), None),
    ("add_widest", lambda a, b, w: (a @ w) + b, flame.f32),
    ("mul_same", lambda a, b, w: (a @ w) * (a @ w), None),
    ("where_widest", lambda a, b, w: flame.where(b > 0, a @ w, b), flame.f32),
    ("embedding", lambda a, b, w: F.embedding(flame.tensor([[0, 3]]), w), flame.f32),
]


def _inputs():
    return flame.tensor(_x(2 * D, D)), flame.tensor(_x(2 * D, D, seed=1)), flame.tensor(_x(D, D, seed=2))


@pytest.mark.parametrize("low", [flame.bf16, flame.f16], ids=str)
@pytest.mark.parametrize("name,fn,want", POLICY, ids=[p[0] for p in POLICY])
def test_result_dtype_follows_pytorchs_lists(name, fn, want, low):
    a, b, w = _inputs()
    with flame.autocast(dtype=low):
        eager = fn(a, b, w)
    traced = flame.compile(lambda a, b, w: fn(a, b, w), name=f"ac_{name}")
    with flame.autocast("cuda", dtype=low):
        graph = traced.trace(a, b, w)
        compiled = traced(a, b, w)
    expected = low if want is None else want
    assert eager.dtype == expected and compiled.dtype == expected
    assert graph.outputs[0].dtype == expected
    np.testing.assert_allclose(compiled.float().numpy(), eager.float().numpy(), rtol=2e-2, atol=2e-2)


def test_every_op_of_an_autocast_graph_runs_in_its_policys_dtype():
    """Walk the traced training step: ops with the "lower" trait compute in bf16, ops with "f32" in
    f32, the rest in their inputs' one dtype; parameters stay f32 inputs, their gradients f32; every
    change of dtype is a visible cast op."""
    model = _block(flame)
    opt = flame.optim.AdamW(model.parameters(), lr=1e-3)

    @flame.compile
    def step(x):
        with flame.autocast(dtype=flame.bf16):
            loss = (model(x) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    x = flame.tensor(_x(B, T, D))
    g = step.trace(x)
    kinds = {}
    for op in g.ops:
        policy = REGISTRY[op.name].autocast
        # the attention backward reads the forward's softmax statistics, which are f32 by definition
        floats = {v.dtype for v in op.inputs if v.dtype.is_float and not (v.producer and v.producer.name == STATS)}
        kinds.setdefault(op.name, set()).add(op.out.dtype.name)
        if op.name == "cast":
            continue
        assert len(floats) <= 1, f"{op.name} mixes {floats}: a cast is missing"
        if policy == "lower" and not is_backward(op):
            assert op.out.dtype == flame.bf16, op
        if policy == "f32" and not is_backward(op):  # (an optimizer's step-count arithmetic is f64, as torch's)
            assert op.out.dtype in (flame.f32, flame.f64), op
    assert kinds["matmul"] == {"bf16"}
    assert "cast" in kinds and "bf16" in kinds["cast"] and "f32" in kinds["cast"]
    params = [v for v, r in zip(g.inputs, g.roles) if r == "param"]
    assert params and all(v.dtype == flame.f32 for v in params)
    loss = step(x)
    assert loss.dtype == flame.f32
    assert all(p.dtype == flame.f32 for p in model.parameters())


def test_casts_of_computed_values_fuse_into_neighbour_kernels():
    model = _block(flame)

    @flame.compile
    def step(x):
        with flame.autocast(dtype=flame.bf16):
            loss = (model(x) ** 2).mean()
        loss.backward()
        return loss

    g = step.optimized(flame.tensor(_x(B, T, D)))
    for grp in g.groups:
        if all(op.name == "cast" for op in grp.ops):  # a kernel of casts alone: master weights only
            assert all(op.inputs[0].producer is None for op in grp.ops), [str(o) for o in grp.ops]


# ---- against torch.autocast on the CPU --------------------------------------------------------------


class _Block:
    """A pre-LayerNorm transformer block with a causal attention written by hand (flame or torch)."""

    def __init__(self, lib, nn_mod, params):
        self.lib, self.p = lib, params

    def __call__(self, x):
        lib, p = self.lib, self.p
        Fn = F if lib is flame else torch.nn.functional
        h = Fn.layer_norm(x, (D,), p["ln_w"], p["ln_b"])
        qkv = Fn.linear(h, p["w_qkv"], p["b_qkv"]).reshape(B, T, 3, 2, D // 2).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        mask = lib.full((T, T), float("-inf")).triu(1)
        att = Fn.softmax(q @ k.transpose(-1, -2) * (D // 2) ** -0.5 + mask, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, D)
        x = x + Fn.linear(y, p["w_o"], p["b_o"])
        return x + Fn.linear(Fn.gelu(Fn.linear(Fn.layer_norm(x, (D,)), p["w_fc"], p["b_fc"])), p["w_pr"], p["b_pr"])

    def parameters(self):
        return list(self.p.values())


SHAPES = {"ln_w": (D,), "ln_b": (D,), "w_qkv": (3 * D, D), "b_qkv": (3 * D,), "w_o": (D, D), "b_o": (D,),
          "w_fc": (4 * D, D), "b_fc": (4 * D,), "w_pr": (D, 4 * D), "b_pr": (D,)}


def _arrays():
    rng = np.random.default_rng(7)
    return {n: (rng.standard_normal(s) * 0.2 + (1.0 if n == "ln_w" else 0.0)).astype(np.float32)
            for n, s in SHAPES.items()}


def _block(lib):
    a = _arrays()
    if lib is flame:
        return _Block(flame, nn, {n: nn.Parameter(flame.tensor(v)) for n, v in a.items()})
    return _Block(torch, torch.nn, {n: torch.nn.Parameter(torch.tensor(v)) for n, v in a.items()})


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_block_forward_and_gradients_match_torch_autocast_in_bf16(compiled):
    x = _x(B, T, D, seed=3)
    fb, tb = _block(flame), _block(torch)

    def flame_step(x):
        with flame.autocast("cpu", dtype=flame.bf16):
            y = fb(x)
            loss = (y.float() ** 2).mean()
        loss.backward()
        return y, loss

    run = flame.compile(flame_step) if compiled else flame_step
    y, loss = run(flame.tensor(x))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ty = tb(torch.tensor(x))
        tloss = (ty.float() ** 2).mean()
    tloss.backward()
    assert y.dtype == flame.f32 and ty.dtype == torch.float32  # the residual stream stays f32 in both
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=3e-2, atol=3e-2)
    assert abs(loss.item() - tloss.item()) <= 2e-2 * abs(tloss.item())
    for name, p in fb.p.items():
        want = tb.p[name].grad.numpy()
        assert p.grad.dtype == flame.f32, name  # f32 master weights get f32 gradients
        err = np.linalg.norm(p.grad.numpy() - want) / max(np.linalg.norm(want), 1e-12)
        assert err < 5e-2, (name, err)


def test_compiled_function_retraces_when_autocast_changes():
    w = nn.Parameter(flame.tensor(_x(D, D)))
    f = flame.compile(lambda x: x @ w, name="mm")
    x = flame.tensor(_x(4, D))
    assert f(x).dtype == flame.f32
    with flame.autocast(dtype=flame.bf16):
        assert f(x).dtype == flame.bf16
        assert "cast" in str(f.trace(x))
        with flame.autocast(enabled=False):
            assert f(x).dtype == flame.f32
    with flame.autocast(dtype=flame.f16):
        assert f(x).dtype == flame.f16
    assert f(x).dtype == flame.f32
    assert f.stats().traces == 3


def test_autocast_inside_the_compiled_function_and_as_decorator():
    w = nn.Parameter(flame.tensor(_x(D, D)))

    @flame.autocast(dtype=flame.bf16)
    def inner(x):
        return x @ w

    @flame.compile
    def outer(x):
        return inner(x), x @ w

    low, full = outer(flame.tensor(_x(4, D)))
    assert low.dtype == flame.bf16 and full.dtype == flame.f32
    assert flame.amp.autocast is flame.autocast
    assert not flame.amp.is_autocast_enabled()


def test_f64_is_never_cast_and_bad_arguments_say_why():
    a = flame.tensor(_x(4, 4)).double()
    with flame.autocast(dtype=flame.bf16):
        assert (a @ a).dtype == flame.f64 and a.exp().dtype == flame.f64
    with pytest.raises(flame.DTypeError, match="floating dtype"):
        flame.autocast(dtype=flame.int32)
    with pytest.raises(ValueError, match="device_type"):
        flame.autocast("tpu")
    assert flame.autocast("cpu").fast_dtype == flame.bf16 and flame.autocast().fast_dtype == flame.f16


def test_autocast_state_queries_at_the_top_level_as_torch():
    """flame.is_autocast_enabled(device_type) / get_autocast_dtype(device_type) / get_autocast_gpu_dtype,
    torch's names: the innermost region's dtype, enabled or not; each device type's default outside any
    region (float16 for cuda, bfloat16 for cpu); an unknown device type raises."""
    assert not flame.is_autocast_enabled() and not flame.is_autocast_enabled("cuda")
    assert flame.get_autocast_dtype("cuda") == flame.float16 and flame.get_autocast_dtype("cpu") == flame.bfloat16
    with flame.autocast("cuda", dtype=flame.bfloat16, enabled=False):
        assert not flame.is_autocast_enabled("cuda") and flame.get_autocast_dtype("cuda") == flame.bfloat16
    with flame.autocast("cuda", dtype=flame.bfloat16):
        assert flame.is_autocast_enabled("cuda") and flame.is_autocast_enabled()
        with pytest.warns(DeprecationWarning, match="get_autocast_gpu_dtype"):
            assert flame.get_autocast_gpu_dtype() == flame.bfloat16
    with pytest.raises(ValueError, match="unsupported device_type 'tpu'"):
        flame.is_autocast_enabled("tpu")
    with pytest.raises(ValueError, match="unsupported device_type 'tpu'"):
        flame.get_autocast_dtype("tpu")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cpu_autocast_of_an_unsupported_dtype_warns_and_turns_off_as_torch(dtype):
    """torch's CPU autocast takes only bfloat16 / float16: another dtype warns and disables the region
    (ops run as outside it), where it used to raise."""
    seen = []
    for lib in (torch, flame):
        a = lib.tensor(_x(4, 4)).to(lib.bfloat16)
        with pytest.warns(UserWarning, match="target dtype is not supported. Disabling autocast"):
            ctx = lib.autocast("cpu", dtype=getattr(lib, dtype))
        with ctx:
            seen.append((lib.is_autocast_enabled("cpu"), str((a @ a).dtype).split(".")[-1],
                         str(a.float().exp().dtype).split(".")[-1]))
    assert seen[1] == (False, "bf16", "f32") and seen[0] == (False, "bfloat16", "float32")


def test_cuda_autocast_in_float32_runs_lower_ops_in_float32():
    """torch's CUDA autocast accepts a float32 fast dtype (nanoGPT's dtype='float32' on cuda): the region is
    enabled and the "lower" ops cast their f16/bf16 inputs to float32; on f32 inputs the results are torch's
    without autocast."""
    x, w = _x(4, 8), _x(3, 8)
    want = torch.nn.functional.linear(torch.tensor(x), torch.tensor(w)).numpy()
    with flame.autocast("cuda", dtype=flame.float32):
        assert flame.is_autocast_enabled("cuda") and flame.get_autocast_dtype("cuda") == flame.f32
        got = flame.nn.functional.linear(flame.tensor(x), flame.tensor(w))
        half = flame.tensor(x).half()
        assert (half @ half.T).dtype == flame.f32
    assert got.dtype == flame.f32
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6)
