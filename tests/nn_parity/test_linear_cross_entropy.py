"""F.linear_cross_entropy and nn.LinearCrossEntropyLoss against torch in f64: values and gradients
(input, weight, bias), eager and compiled, class indices (ignore_index), probabilities, class weights,
label smoothing, K-dimensional logits, unbatched input, and torch's shape errors."""

import numpy as np
import pytest

import flame
import flame.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

CASES = [
    dict(batch=(5,), out=(), target="index", kw={}),
    dict(batch=(5,), out=(), target="index", kw=dict(reduction="sum", label_smoothing=0.2, weighted=True)),
    dict(batch=(5,), out=(), target="index", kw=dict(reduction="none", ignore_index=2)),
    dict(batch=(5,), out=(), target="ignored", kw=dict(weighted=True)),
    dict(batch=(5,), out=(), target="probs", kw=dict(label_smoothing=0.1)),
    dict(batch=(), out=(), target="index", kw={}),
    dict(batch=(4,), out=(3,), target="index", kw=dict(reduction="mean", weighted=True)),
    dict(batch=(4,), out=(2, 3), target="probs", kw=dict(reduction="sum")),
]


def _data(case, seed=0):
    rng = np.random.default_rng(seed)
    c, d = 6, 7
    x = rng.standard_normal((*case["batch"], d))
    w = rng.standard_normal((c, *case["out"], d)) * 0.5
    b = rng.standard_normal((c, *case["out"]))
    if case["target"] == "probs":
        p = rng.random((*case["batch"], c, *case["out"]))
        t = p / p.sum(axis=len(case["batch"]), keepdims=True)
    else:
        t = rng.integers(0, c, (*case["batch"], *case["out"]))
        if case["target"] == "ignored":
            t[0] = -100
    cw = rng.random(c) + 0.5
    return x, w, b, t, cw


def _run(lib, fn, x, w, b, t, cw, kw):
    kw = dict(kw)
    weighted = kw.pop("weighted", False)
    return fn(x, w, t, linear_bias=b, weight=lib.tensor(cw) if weighted else None, **kw)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("case", CASES)
def test_values_and_gradients(case, compiled):
    x, w, b, t, cw = _data(case)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    want = _run(torch, TF.linear_cross_entropy, tx, tw, tb, torch.tensor(t), cw, case["kw"])
    want.sum().backward()
    fx, fw, fb = (flame.tensor(a, requires_grad=True) for a in (x, w, b))

    def loss(x, w, b, t):
        return _run(flame, F.linear_cross_entropy, x, w, b, t, cw, case["kw"]).sum()

    fn = flame.compile(loss) if compiled else loss
    got = fn(fx, fw, fb, flame.tensor(t))
    got.backward()
    np.testing.assert_allclose(got.numpy(), want.sum().detach().numpy(), rtol=1e-10, atol=1e-12)
    for mine, theirs in ((fx, tx), (fw, tw), (fb, tb)):
        np.testing.assert_allclose(mine.grad.numpy(), theirs.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_module_matches_torch():
    torch.manual_seed(0)
    ref = torch.nn.LinearCrossEntropyLoss(7, 4, out_features=(3,), bias=True, dtype=torch.float64,
                                          label_smoothing=0.1, weight=torch.rand(4, dtype=torch.float64))
    mod = flame.nn.LinearCrossEntropyLoss(7, 4, out_features=(3,), bias=True, dtype=flame.float64,
                                          label_smoothing=0.1, weight=flame.tensor(ref.weight.numpy()))
    mod.load_state_dict({k: flame.tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    assert set(mod.state_dict()) == set(ref.state_dict())
    x, t = np.random.default_rng(1).standard_normal((5, 7)), np.random.default_rng(2).integers(0, 4, (5, 3))
    want = ref(torch.tensor(x), torch.tensor(t))
    want.backward()
    got = mod(flame.tensor(x), flame.tensor(t))
    got.backward()
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(mod.linear.weight.grad.numpy(), ref.linear.weight.grad.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(mod.linear.bias.grad.numpy(), ref.linear.bias.grad.numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("args,kw", [
    (((2, 3, 4), (5, 4), (2, 3)), {}),
    (((2, 4), (5,), (2,)), {}),
    (((2, 4), (5, 3), (2,)), {}),
    (((2, 4), (5, 4), (2,)), dict(linear_bias=(4,))),
    (((4,), (5, 2, 4), (2,)), {}),
    (((2, 4), (5, 4), (2, 5)), dict(ignore_index=1)),
])
def test_errors_are_torchs(args, kw):
    def call(lib, fn):
        x, w, t = (lib.ones(*s) for s in args)
        extra = {k: lib.ones(*v) for k, v in kw.items() if k == "linear_bias"}
        extra.update({k: v for k, v in kw.items() if k != "linear_bias"})
        return fn(x, w, t.long() if t.shape != (2, 5) else t, **extra)

    with pytest.raises(RuntimeError) as want:
        call(torch, TF.linear_cross_entropy)
    with pytest.raises(RuntimeError) as got:
        call(flame, F.linear_cross_entropy)
    assert str(want.value) in str(got.value)
