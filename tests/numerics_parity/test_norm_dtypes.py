"""The dtypes of the normalisations against torch's CPU kernels, eagerly and inside @flame.compile: layer_norm,
group_norm, batch_norm (training and evaluation) and instance_norm return the input's dtype, with weight and
bias of the input's dtype or, for an f16/bf16 input, f32 (computed in f32), and raise for any other mix, as
torch's "mixed dtype (CPU)"; rms_norm takes a weight of any float dtype and returns the input's, its default
eps the machine epsilon of f32 for f16/bf16 inputs. Values and gradients (input and weight) against torch's,
the nn modules too."""

import itertools

import numpy as np
import pytest
import torch

import flame
from tests.tensor_parity.common import check, gradients

rng = np.random.default_rng(0)
X = rng.standard_normal((4, 6, 5)).astype(np.float32) * 2 + 0.5
WEIGHT = {5: rng.standard_normal(5).astype(np.float32), 6: rng.standard_normal(6).astype(np.float32)}
BIAS = {5: rng.standard_normal(5).astype(np.float32), 6: rng.standard_normal(6).astype(np.float32)}
DTYPES = ("f32", "bf16", "f16")
NAMES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}


def _params(L, n: int, wd: str | None, bias: bool = True):
    if wd is None:
        return None, None
    w = L.tensor(WEIGHT[n]).to(getattr(L, NAMES[wd]))
    return w, (L.tensor(BIAS[n]).to(getattr(L, NAMES[wd])) if bias else None)


def _norm(name: str, xd: str, wd: str | None):
    """fn(L, x) applying the normalisation `name` to x in dtype xd with parameters in wd (None: none)."""

    def fn(L, x):
        F = L.nn.functional
        x = x.to(getattr(L, NAMES[xd]))
        if name == "layer_norm":
            return F.layer_norm(x, (5,), *_params(L, 5, wd))
        if name == "rms_norm":
            return F.rms_norm(x, (5,), _params(L, 5, wd)[0])
        if name == "group_norm":
            return F.group_norm(x, 2, *_params(L, 6, wd))
        if name == "instance_norm":
            return F.instance_norm(x, weight=_params(L, 6, wd)[0], bias=_params(L, 6, wd)[1])
        stats = getattr(L, NAMES[wd or "f32"])
        mean, var = L.zeros(6, dtype=stats) + 0.25, L.ones(6, dtype=stats) * 1.5
        out = F.batch_norm(x, mean, var, *_params(L, 6, wd), training=name == "batch_norm train")
        return out, mean, var

    return fn


NORMS = ("layer_norm", "rms_norm", "group_norm", "instance_norm", "batch_norm train", "batch_norm eval")
COMBOS = list(itertools.product(NORMS, DTYPES, DTYPES + (None,)))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name,xd,wd", COMBOS, ids=[f"{n}-{x}-{w}" for n, x, w in COMBOS])
def test_result_dtype_and_value(name, xd, wd, compiled):
    low = xd != "f32" or wd not in ("f32", None)
    check(_norm(name, xd, wd), X, compiled=compiled, rtol=2e-2 if low else 1e-5, atol=3e-2 if low else 1e-5)


def test_a_mixed_dtype_error_names_the_op_and_line():
    x = flame.tensor(X)
    with pytest.raises(flame.DTypeError, match=r"layer_norm: mixed dtypes(.|\n)*test_norm_dtypes"):
        flame.nn.functional.layer_norm(x, (5,), flame.ones(5, dtype=flame.bf16))


GRAD_CASES = [
    (n, xd)
    for n in ("layer_norm", "rms_norm", "group_norm", "instance_norm", "batch_norm train")
    for xd in ("bf16", "f16")
]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name,xd", GRAD_CASES, ids=[f"{n}-{x}" for n, x in GRAD_CASES])
def test_gradients_of_a_half_input_with_f32_parameters(name, xd, compiled):
    n = 5 if name in ("layer_norm", "rms_norm") else 6
    weights = np.linspace(-1.0, 2.0, X.size).reshape(X.shape).astype(np.float32)

    def loss(out, L):
        out = out[0] if isinstance(out, tuple) else out
        assert out.dtype == getattr(L, NAMES[xd])
        return (out.float() * L.tensor(weights)).sum()

    def of_input(L, x):
        return loss(_norm(name, xd, "f32")(L, x), L)

    def of_weight(L, w):
        F = L.nn.functional
        x = L.tensor(X).to(getattr(L, NAMES[xd]))
        b = L.tensor(BIAS[n])
        out = {
            "layer_norm": lambda: F.layer_norm(x, (5,), w, b),
            "rms_norm": lambda: F.rms_norm(x, (5,), w),
            "group_norm": lambda: F.group_norm(x, 2, w, b),
            "instance_norm": lambda: F.instance_norm(x, weight=w, bias=b),
            "batch_norm train": lambda: F.batch_norm(x, None, None, w, b, training=True),
        }[name]()
        return loss(out, L)

    got, want = gradients(of_input, X, compiled)
    np.testing.assert_allclose(got, want, rtol=5e-2, atol=5e-2 * np.abs(want).max())
    got, want = gradients(of_weight, WEIGHT[n], compiled)
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2 * np.abs(want).max())


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_modules_with_f32_parameters_keep_a_half_inputs_dtype(dt, compiled):
    mods = {
        "LayerNorm": lambda L: L.nn.LayerNorm(5),
        "RMSNorm": lambda L: L.nn.RMSNorm(5),
        "GroupNorm": lambda L: L.nn.GroupNorm(2, 6),
        "BatchNorm1d": lambda L: L.nn.BatchNorm1d(6),
        "InstanceNorm1d": lambda L: L.nn.InstanceNorm1d(6, affine=True),
    }
    for name, make in mods.items():
        tm, fm = make(torch), make(flame)
        with torch.no_grad():
            for p in tm.parameters():
                p.copy_(torch.linspace(0.5, 1.5, p.numel()).reshape(p.shape))
        fm.load_state_dict({k: flame.tensor(v.numpy()) for k, v in tm.state_dict().items()})
        want = tm(torch.tensor(X).to(getattr(torch, NAMES[dt])))
        run = flame.compile(lambda x, fm=fm: fm(x)) if compiled else fm
        got = run(flame.tensor(X).to(flame.ir.dtypes.dtype_of(dt)))
        assert str(got.dtype) == dt, name
        np.testing.assert_allclose(
            got.float().numpy(), want.float().detach().numpy(), rtol=2e-2, atol=3e-2, err_msg=name
        )


def test_rms_norm_default_eps_of_a_half_input_is_f32s():
    x = (X * 1e-3).astype(np.float32)  # mean(x^2) ~ 1e-6: bf16's epsilon (0.0078) would dominate it
    check(
        lambda L, x: (L.nn.functional.rms_norm(x.bfloat16(), (5,)), L.nn.RMSNorm(5)(x.half())),
        x,
        compiled=False,
        rtol=2e-2,
        atol=2e-2,
    )


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_half_rms_norm_and_batch_norm_evaluation_round_once_as_torch(dt, compiled):
    """A bf16/f16 rms_norm (weight of its dtype) and batch_norm in evaluation compute in f32 and round the
    result once, as torch's kernels: all but a rare last bit, on rows whose mean is far from zero (where
    rounding each step to the input's dtype loses most)."""
    x = rng.standard_normal((32, 64)).astype(np.float32) * 3 + 5
    w, b = 1 + 0.1 * rng.standard_normal(64).astype(np.float32), 0.1 * rng.standard_normal(64).astype(np.float32)
    stats = x.mean(0), x.var(0) + 0.5

    def fn(L, x, w, b, m, v):
        half = getattr(L, NAMES[dt])
        x, w, b, m, v = (t.to(half) for t in (x, w, b, m, v))
        F = L.nn.functional
        return F.rms_norm(x, (64,), w).float(), F.batch_norm(x, m, v, w, b, training=False).float()

    args = [x, w, b, *stats]
    want = fn(torch, *map(torch.tensor, args))
    step = flame.compile(lambda *a: fn(flame, *a)) if compiled else (lambda *a: fn(flame, *a))
    got = step(*map(flame.tensor, args))
    ulp = 2.0**-10 if dt == "f16" else 2.0**-7
    for g, t in zip(got, want):  # f32 arithmetic in another order (torch's batch_norm: x * a + c): a rare last bit
        np.testing.assert_allclose(g.numpy(), t.numpy(), rtol=ulp, atol=0)
        assert (g.numpy() != t.numpy()).mean() < 0.01  # rounding each step to the input's dtype: a quarter


def _half_norms(dt: str):
    """fn(L, x, w, b) -> (layer_norm, group_norm) of x in dt with weight and bias of dt (f32 results), on
    rows and groups whose mean is far from zero (where rounding each step to dt loses most)."""

    def fn(L, x, w, b):
        half = getattr(L, NAMES[dt])
        x, w, b = (t.to(half) for t in (x, w, b))
        F = L.nn.functional
        return F.layer_norm(x, (64,), w, b).float(), F.group_norm(x.reshape(4, 16, 8), 4, w[:16], b[:16]).float()

    return fn


HALF_X = rng.standard_normal((8, 64)).astype(np.float32) * 3 + 5
HALF_W = 1 + 0.1 * rng.standard_normal(64).astype(np.float32)
HALF_B = 0.1 * rng.standard_normal(64).astype(np.float32)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_half_layer_norm_and_group_norm_round_once_as_torch(dt, compiled):
    """A bf16/f16 layer_norm and group_norm with weight and bias of the input's dtype compute in f32 and
    round the result once, as torch's kernels: torch's bits but for a rare last one (f32 arithmetic in
    another order), and torch's error against the exact (f64) result."""
    fn = _half_norms(dt)
    args = [HALF_X, HALF_W, HALF_B]
    want = fn(torch, *map(torch.tensor, args))
    step = flame.compile(lambda *a: fn(flame, *a)) if compiled else (lambda *a: fn(flame, *a))
    got = step(*map(flame.tensor, args))
    half = getattr(torch, NAMES[dt])
    x, w, b = (torch.tensor(a).to(half).double() for a in args)
    exact = (torch.nn.functional.layer_norm(x, (64,), w, b), torch.nn.functional.group_norm(
        x.reshape(4, 16, 8), 4, w[:16], b[:16]))
    ulp = 2.0**-10 if dt == "f16" else 2.0**-7
    for g, t, e in zip(got, want, exact):
        g, t, e = g.numpy(), t.numpy(), e.numpy()
        np.testing.assert_allclose(g, t, rtol=ulp, atol=0)
        assert (g != t).mean() < 0.02  # rounding each step to the input's dtype: most elements differ
        assert np.abs(g - e).mean() <= 1.02 * np.abs(t - e).mean()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_half_layer_norm_and_group_norm_gradients_as_torch(dt, compiled):
    """The gradients of the input, weight and bias of a bf16/f16 layer_norm and group_norm (weights of the
    input's dtype) against torch's CPU kernels' (within a few of the dtype's ulps of the largest) and
    against the exact gradients of the same rounded inputs (f64): at least as close as torch's."""
    fn = _half_norms(dt)
    up = np.linspace(-1.0, 2.0, HALF_X.size).reshape(HALF_X.shape).astype(np.float32)

    def loss(L, x, w, b):
        ln, gn = fn(L, x, w, b)
        g = L.tensor(up)
        return (ln * g).sum() + (gn.reshape(8, 64) * g.flip(0)).sum()

    def torch_grads(dtype):
        leaves = [torch.tensor(a).to(getattr(torch, NAMES[dt])).to(dtype).requires_grad_()
                  for a in (HALF_X, HALF_W, HALF_B)]
        if dtype == torch.float64:  # the exact gradient: the same computation in f64 throughout
            F = torch.nn.functional
            x, w, b = leaves
            ln, gn = F.layer_norm(x, (64,), w, b), F.group_norm(x.reshape(4, 16, 8), 4, w[:16], b[:16])
            g = torch.tensor(up, dtype=dtype)
            ((ln * g).sum() + (gn.reshape(8, 64) * g.flip(0)).sum()).backward()
        else:
            loss(torch, *leaves).backward()
        return [t.grad.double().numpy() for t in leaves]

    want, exact = torch_grads(getattr(torch, NAMES[dt])), torch_grads(torch.float64)
    args = [flame.tensor(a).to(flame.ir.dtypes.dtype_of(dt)) for a in (HALF_X, HALF_W, HALF_B)]
    grads = flame.grad(lambda *a: loss(flame, *a), argnums=(0, 1, 2))
    got = (flame.compile(grads) if compiled else grads)(*args)
    ulp = 2.0**-10 if dt == "f16" else 2.0**-7
    for name, g, t, e in zip(("input", "weight", "bias"), got, want, exact):
        assert str(g.dtype) == dt, name
        g = g.float().numpy().astype(np.float64)
        np.testing.assert_allclose(g, t, rtol=0, atol=8 * ulp * np.abs(t).max(), err_msg=name)
        assert np.abs(g - e).mean() <= 1.05 * np.abs(t - e).mean() + 1e-12, name
