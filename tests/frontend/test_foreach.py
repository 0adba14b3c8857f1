"""torch._foreach_* against torch: each form (a scalar, a list of scalars, a list of tensors, a 0-d tensor,
alpha=), out-of-place and in place, eager and compiled, their gradients, torch's list errors, and the EMA
update of a compiled training step."""

from __future__ import annotations

import numpy as np
import pytest

import flame

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)
SHAPES = ((3,), (2, 4))


def _data(positive: bool = False, dtype=np.float32) -> list[np.ndarray]:
    out = [RNG.standard_normal(s).astype(dtype) for s in SHAPES]
    return [np.abs(a) + 0.5 for a in out] if positive else out


def _both(arrays):
    return [flame.tensor(a) for a in arrays], [torch.tensor(a) for a in arrays]


def _close(got, want, tol=1e-5):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert str(g.dtype).split(".")[-1] == {torch.float32: "f32", torch.float64: "f64", torch.int64: "i64",
                                               torch.float16: "f16"}[w.dtype]
        np.testing.assert_allclose(g.numpy(), w.detach().numpy(), rtol=tol, atol=tol)


def _other(kind: str, lib, b):
    return {"scalar": 1.5, "scalars": [0.5, 2.0], "tensors": [lib.tensor(a) for a in b],
            "zero_dim": lib.tensor(2.5)}[kind]


CASES = [(op, kind) for op in ("add", "sub", "mul", "div", "maximum", "minimum", "clamp_min", "clamp_max", "pow")
         for kind in ("scalar", "scalars", "tensors", "zero_dim")]


@pytest.mark.parametrize("op,kind", CASES)
@pytest.mark.parametrize("in_place", [False, True])
def test_binary_forms_match_torch(op, kind, in_place):
    f, t = _both(_data(positive=op == "pow"))
    name = f"_foreach_{op}{'_' if in_place else ''}"
    b = _data(positive=True)
    fo, to = _other(kind, flame, b), _other(kind, torch, b)
    want = getattr(torch, name)(t, to)
    got = getattr(flame, name)(f, fo)
    if in_place:
        assert got is f and want is t
    else:
        assert isinstance(got, tuple)
    _close(got, want)


@pytest.mark.parametrize("op", ["add", "sub"])
@pytest.mark.parametrize("in_place", [False, True])
def test_alpha_with_tensors(op, in_place):
    f, t = _both(_data())
    fo, to = _both(_data())
    name = f"_foreach_{op}{'_' if in_place else ''}"
    _close(getattr(flame, name)(f, fo, alpha=-0.3), getattr(torch, name)(t, to, alpha=-0.3))
    if op == "add":
        _close(getattr(flame, name)(f, flame.tensor(2.0), alpha=2), getattr(torch, name)(t, torch.tensor(2.0), alpha=2))


def test_pow_of_a_scalar_base():
    f, t = _both(_data())
    _close(flame._foreach_pow(2.0, f), torch._foreach_pow(2.0, t))


@pytest.mark.parametrize("name", ["sqrt", "neg", "abs", "exp", "sign", "reciprocal", "log", "sigmoid", "tanh",
                                  "floor", "trunc", "rsqrt", "expm1", "sin"])
@pytest.mark.parametrize("in_place", [False, True])
def test_unary_match_torch(name, in_place):
    f, t = _both(_data(positive=name in ("sqrt", "log", "rsqrt")))
    fn = f"_foreach_{name}{'_' if in_place else ''}"
    _close(getattr(flame, fn)(f), getattr(torch, fn)(t), tol=1e-5)


def test_unary_of_integers_keeps_torch_dtypes():
    ints = [np.array([1, -4, 9], dtype=np.int64)]
    for name in ("sqrt", "abs", "sign", "reciprocal", "exp", "neg"):
        f, t = _both(ints)
        _close(getattr(flame, f"_foreach_{name}")(f), getattr(torch, f"_foreach_{name}")(t))


@pytest.mark.parametrize("weight", ["scalar", "scalars", "tensors", "zero_dim"])
@pytest.mark.parametrize("in_place", [False, True])
def test_lerp_match_torch(weight, in_place):
    f, t = _both(_data())
    fe, te = _both(_data())
    w = {"scalar": 0.3, "scalars": [0.1, 0.9], "zero_dim": np.float32(0.25)}.get(weight) or _data(positive=True)
    fw, tw = (_both(w) if weight == "tensors" else (flame.tensor(w), torch.tensor(w)) if weight == "zero_dim"
              else (w, w))
    name = f"_foreach_lerp{'_' if in_place else ''}"
    _close(getattr(flame, name)(f, fe, fw), getattr(torch, name)(t, te, tw))


@pytest.mark.parametrize("op", ["addcmul", "addcdiv"])
@pytest.mark.parametrize("value", ["default", "value", "scalars", "packed"])
@pytest.mark.parametrize("in_place", [False, True])
def test_pointwise_match_torch(op, value, in_place):
    f, t = _both(_data())
    f1, t1 = _both(_data())
    f2, t2 = _both(_data(positive=True))
    name = f"_foreach_{op}{'_' if in_place else ''}"
    args = {"default": ((), {}), "value": ((), {"value": -0.5}), "scalars": (([0.5, 2.0],), {})}
    if value == "packed":
        fg = getattr(flame, name)(f, f1, f2, flame.tensor([0.5, 2.0]))
        tg = getattr(torch, name)(t, t1, t2, torch.tensor([0.5, 2.0]))
    else:
        a, k = args[value]
        fg, tg = getattr(flame, name)(f, f1, f2, *a, **k), getattr(torch, name)(t, t1, t2, *a, **k)
    _close(fg, tg)


@pytest.mark.parametrize("ord", [2, 1, 3, 0, float("inf"), -float("inf"), -1])
def test_norm_match_torch(ord):
    f, t = _both(_data())
    _close(flame._foreach_norm(f, ord), torch._foreach_norm(t, ord))
    _close(flame._foreach_norm(f, ord, dtype=flame.float64), torch._foreach_norm(t, ord, dtype=torch.float64))


def test_zero_copy_clone_max_powsum():
    f, t = _both(_data())
    fs, ts = _both(_data())
    _close(flame._foreach_clone(f), torch._foreach_clone(t))
    _close(flame._foreach_max(f), torch._foreach_max(t))
    _close(flame._foreach_powsum(f, 3), torch._foreach_powsum(t, 3))
    assert flame._foreach_copy_(f, fs) is f
    _close(f, torch._foreach_copy_(t, ts))
    ints, tints = _both([np.array([1, 2], dtype=np.int64)])
    src = [2.7, -1.5]
    _close(flame._foreach_copy_(ints, [flame.tensor(src)]), torch._foreach_copy_(tints, [torch.tensor(src)]))
    assert flame._foreach_zero_(f) is f
    _close(f, torch._foreach_zero_(t))


def _raises_like(call_flame, call_torch):
    with pytest.raises(Exception) as want:
        call_torch()
    with pytest.raises(Exception) as got:
        call_flame()
    # torch's TypeError is one here, its RuntimeError too (flame's DTypeError is both)
    assert isinstance(got.value, TypeError if isinstance(want.value, TypeError) else RuntimeError), (got, want)
    return str(got.value), str(want.value)


@pytest.mark.parametrize("call", [
    lambda m, a, b: m._foreach_add([], 1),
    lambda m, a, b: m._foreach_add(a, b[:1]),
    lambda m, a, b: m._foreach_add(a, [1.0]),
    lambda m, a, b: m._foreach_add(a, 2, alpha=2),
    lambda m, a, b: m._foreach_add(a, [1, a[0]]),
    lambda m, a, b: m._foreach_add([a[0], 3], 1),
    lambda m, a, b: m._foreach_add(a[0], 1),
    lambda m, a, b: m._foreach_add(a, "x"),
    lambda m, a, b: m._foreach_mul(a, m.ones(2)),
    lambda m, a, b: m._foreach_sub(a, m.ones(2)),
    lambda m, a, b: m._foreach_lerp(a, b, [0.5]),
    lambda m, a, b: m._foreach_lerp(a, b[:1], 0.5),
    lambda m, a, b: m._foreach_addcmul(a, b, b[:1]),
    lambda m, a, b: m._foreach_addcmul(a, b, b, m.ones(3)),
    lambda m, a, b: m._foreach_addcmul(a, b, b, m.ones(1, 2)),
    lambda m, a, b: m._foreach_copy_(a, b[:1]),
    lambda m, a, b: m._foreach_norm([]),
    lambda m, a, b: m._foreach_norm(a, "fro"),
    lambda m, a, b: m._foreach_norm([m.ones(0)], float("inf")),
    lambda m, a, b: m._foreach_max([m.ones(0)]),
    lambda m, a, b: m._foreach_add_([m.ones(2, dtype=m.int64)], 1.5),
    lambda m, a, b: m._foreach_div_([m.ones(2, dtype=m.int64)], 2),
    lambda m, a, b: m._foreach_norm([m.ones(2, dtype=m.int64)]),
    lambda m, a, b: m._foreach_neg([m.ones(2, dtype=m.bool)]),
])
def test_errors_as_torch(call):
    fa, ta = _both(_data())
    fb, tb = _both(_data())
    got, want = _raises_like(lambda: call(flame, fa, fb), lambda: call(torch, ta, tb))
    for words in ("Tensor list", "element", "invalid combination", "0 dim", "scalars", "empty tensor",
                  "can't be cast"):
        if words in want:
            assert words in got, (got, want)


def test_gradients_match_torch():
    arrays, ends = _data(), _data()
    fx = [flame.tensor(a, requires_grad=True) for a in arrays]
    fy = [flame.tensor(a, requires_grad=True) for a in ends]
    tx = [torch.tensor(a, requires_grad=True) for a in arrays]
    ty = [torch.tensor(a, requires_grad=True) for a in ends]
    for lib, x, y in ((flame, fx, fy), (torch, tx, ty)):
        out = lib._foreach_lerp(x, y, 0.3)
        out = lib._foreach_addcmul(out, x, y, value=0.5)
        tmp = lib._foreach_mul(x, 1.0)
        lib._foreach_mul_(tmp, y)  # in place on non-leaves: differentiated, as torch's
        norms = lib._foreach_norm(out)
        sum(n for n in norms).backward() if lib is torch else flame.stack(list(norms)).sum().add(
            sum(t.sum() for t in tmp)).backward()
        if lib is torch:
            sum(t.sum() for t in tmp).backward()
    for a, b in zip(fx + fy, tx + ty):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_in_place_on_a_leaf_that_requires_grad_is_refused():
    x = flame.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        flame._foreach_mul_([x], 2)
    with flame.no_grad():
        flame._foreach_mul_([x], 2)
    np.testing.assert_array_equal(x.numpy(), [2.0, 2.0])


def test_compiled_matches_eager():
    arrays = _data()
    xs = [flame.tensor(a) for a in arrays]

    @flame.compile
    def f(a, b):
        out = flame._foreach_addcdiv([a, b], [a, b], [b.abs() + 1, a.abs() + 1], [0.5, 2.0])
        flame._foreach_clamp_max_(list(out), 1.0)
        return (*flame._foreach_norm(out), *flame._foreach_sqrt(flame._foreach_abs(out)))

    # (a, b) pairs each with the other: same shapes needed, so use matching shapes
    a, b = flame.tensor(arrays[1]), flame.tensor(_data()[1])
    got = f(a, b)
    ta, tb = torch.tensor(a.numpy()), torch.tensor(b.numpy())
    tout = list(torch._foreach_addcdiv([ta, tb], [ta, tb], [tb.abs() + 1, ta.abs() + 1], [0.5, 2.0]))
    torch._foreach_clamp_max_(tout, 1.0)
    _close(got, [*torch._foreach_norm(tout), *torch._foreach_sqrt(torch._foreach_abs(tout))])
    del xs


def test_ema_of_a_compiled_training_step_matches_torch():
    flame.manual_seed(0)
    model, ema = flame.nn.Linear(3, 2), flame.nn.Linear(3, 2)
    tmodel, tema = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    with torch.no_grad():
        for tp, fp in zip(tmodel.parameters(), model.parameters()):
            tp.copy_(torch.from_numpy(fp.numpy()))
    opt, topt = flame.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(tmodel.parameters(), lr=0.1)
    with flame.no_grad():
        flame._foreach_copy_(list(ema.parameters()), list(model.parameters()))
    with torch.no_grad():
        torch._foreach_copy_(list(tema.parameters()), list(tmodel.parameters()))

    @flame.compile
    def step(x, y):
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        with flame.no_grad():
            flame._foreach_lerp_(list(ema.parameters()), list(model.parameters()), 1 - 0.9)
        return loss

    for _ in range(3):
        xn, yn = RNG.standard_normal((4, 3)).astype(np.float32), RNG.standard_normal((4, 2)).astype(np.float32)
        step(flame.tensor(xn), flame.tensor(yn))
        tloss = ((tmodel(torch.from_numpy(xn)) - torch.from_numpy(yn)) ** 2).mean()
        topt.zero_grad()
        tloss.backward()
        topt.step()
        with torch.no_grad():
            torch._foreach_lerp_(list(tema.parameters()), list(tmodel.parameters()), 1 - 0.9)
    for p, tp in zip(ema.parameters(), tema.parameters()):
        np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-5, atol=1e-6)
