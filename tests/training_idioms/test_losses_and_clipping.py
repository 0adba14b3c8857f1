"""Loss and gradient-tool idioms against torch, eagerly and inside @flame.compile: F.cross_entropy
with label_smoothing, ignore_index, class weights (also torch's positional spelling
CrossEntropyLoss(weight)), reduction, [N, C, d] inputs and class-probability targets; Embedding's
padding_idx (no gradient, but lookups give what the row holds); clip_grad_norm_ and clip_grad_value_
with torch's keywords."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from flame.errors import FlameError, TraceError
from tests.training_idioms.common import assert_same_params, maybe_compile, numpy_of, twin

R = np.random.default_rng(0)
X, Y, W = R.standard_normal((6, 5)), np.array([0, 2, 4, 2, 1, 3]), R.random(5) + 0.5
X3, Y3 = R.standard_normal((2, 5, 3)), R.integers(0, 5, (2, 3))
P = R.random((6, 5))
P /= P.sum(1, keepdims=True)

CASES = {
    "label_smoothing": (X, Y, dict(label_smoothing=0.2)),
    "ignore_index": (X, Y, dict(ignore_index=2)),
    "weight": (X, Y, dict(weight=W)),
    "weight+ignore+smoothing": (X, Y, dict(weight=W, ignore_index=2, label_smoothing=0.1)),
    "sum+weight+smoothing": (X, Y, dict(weight=W, reduction="sum", label_smoothing=0.3)),
    "none+ignore+smoothing": (X, Y, dict(reduction="none", ignore_index=2, label_smoothing=0.3)),
    "NCd+weight+ignore": (X3, Y3, dict(weight=W, ignore_index=1, label_smoothing=0.1)),
    "probabilities+weight+smoothing": (X, P, dict(weight=W, label_smoothing=0.1)),
    "probabilities none": (X, P, dict(reduction="none")),
}


def _ce(lib, compiled, x, y, kw):
    kw = {k: lib.tensor(v) if k == "weight" else v for k, v in kw.items()}
    xt = lib.tensor(x, requires_grad=True)

    @maybe_compile(lib, compiled)
    def f(x, y):
        loss = lib.nn.functional.cross_entropy(x, y, **kw)
        loss.sum().backward()
        return loss

    return numpy_of(f(xt, lib.tensor(y))), numpy_of(xt.grad)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("case", list(CASES))
def test_cross_entropy_options(case, compiled):
    x, y, kw = CASES[case]
    (tl, tg), (fl, fg) = _ce(torch, False, x, y, kw), _ce(flame, compiled, x, y, kw)
    np.testing.assert_allclose(fl, tl, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(fg, tg, rtol=1e-12, atol=1e-14)


def test_cross_entropy_loss_module_takes_torchs_positional_weight():
    for lib in (torch, flame):
        loss = lib.nn.CrossEntropyLoss(lib.tensor(W), None, 2)(lib.tensor(X), lib.tensor(Y))
        if lib is torch:
            want = loss.item()
    assert abs(loss.item() - want) < 1e-12
    with pytest.raises(ValueError, match="reduction="):
        flame.nn.CrossEntropyLoss(size_average=False)


def _emb_model(lib):
    nn = lib.nn
    return nn.Sequential(nn.Embedding(7, 4, padding_idx=0), nn.Flatten(), nn.Linear(12, 1))


@pytest.mark.parametrize("compiled", [False, True])
def test_embedding_padding_idx_after_an_init_that_fills_the_row(compiled):
    """model.apply(init) writes the padding row too (torch's init does not skip it): lookups of it give
    those values and it never gets a gradient; AdamW's weight decay still moves it, as in torch."""

    def init(m):
        if isinstance(m, (torch.nn.Embedding, flame.nn.Embedding)):
            (torch.nn.init if isinstance(m, torch.nn.Module) else flame.nn.init).normal_(m.weight, std=0.5)

    theirs, mine = twin(_emb_model)
    theirs.apply(init)
    mine.load_state_dict({k: flame.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    assert numpy_of(mine[0].weight)[0].any()
    idx = np.array([[0, 3, 0], [5, 0, 6]])

    def run(lib, model, compiled):
        opt = lib.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.1)

        @maybe_compile(lib, compiled)
        def step(i):
            loss = model(i).square().mean()
            loss.backward()
            g = model[0].weight.grad.clone()
            opt.step()
            opt.zero_grad()
            return loss, g

        return [step(lib.tensor(idx)) for _ in range(3)]

    for (tl, tg), (fl, fg) in zip(run(torch, theirs, False), run(flame, mine, compiled)):
        assert abs(tl.item() - fl.item()) < 1e-12
        np.testing.assert_allclose(numpy_of(fg), numpy_of(tg), rtol=1e-10, atol=1e-14)
        assert not numpy_of(fg)[0].any()
    assert_same_params(mine, theirs)


def test_functional_embedding_padding_idx_and_sparse():
    w0 = R.standard_normal((5, 3))
    idx = np.array([1, 2, 1, 4])
    tw, fw = torch.tensor(w0, requires_grad=True), flame.tensor(w0, requires_grad=True)
    torch.nn.functional.embedding(torch.tensor(idx), tw, padding_idx=1).square().sum().backward()
    out = flame.nn.functional.embedding(flame.tensor(idx), fw, padding_idx=1)
    out.square().sum().backward()
    np.testing.assert_array_equal(out.numpy()[0], w0[1])
    np.testing.assert_allclose(fw.grad.numpy(), tw.grad.numpy(), rtol=1e-12)
    with pytest.raises(NotImplementedError, match="sparse"):
        flame.nn.Embedding(5, 3, sparse=True)
    with pytest.raises(NotImplementedError, match="sparse"):
        flame.nn.functional.embedding(flame.tensor(idx), fw, sparse=True)


def _grads(lib, gs):
    ps = [lib.nn.Parameter(lib.tensor(np.zeros_like(g))) for g in gs]
    for p, g in zip(ps, gs):
        p.grad = lib.tensor(g.copy())
    return ps


GRADS = [R.standard_normal((3, 4)), R.standard_normal(4) * 5]


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf"), "inf"])
def test_clip_grad_norm_returns_the_norm_and_clips_as_torch(norm_type, compiled):
    def run(lib, compiled):
        ps = _grads(lib, GRADS)

        @maybe_compile(lib, compiled)
        def clip():
            return lib.nn.utils.clip_grad_norm_(ps, 2.5, norm_type=norm_type, foreach=True)

        return numpy_of(clip()), [numpy_of(p.grad) for p in ps]

    (tn, tg), (fn, fg) = run(torch, False), run(flame, compiled)
    np.testing.assert_allclose(fn, tn, rtol=1e-12)
    for a, b in zip(fg, tg):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_clip_grad_norm_error_if_nonfinite():
    bad = [GRADS[0], np.array([1.0, np.nan])]
    with pytest.raises(RuntimeError, match="non-finite"):
        torch.nn.utils.clip_grad_norm_(_grads(torch, bad), 1.0, error_if_nonfinite=True)
    with pytest.raises(FlameError, match=r"total norm of order 2.0 .* is non-finite"):
        flame.nn.utils.clip_grad_norm_(_grads(flame, bad), 1.0, error_if_nonfinite=True)
    ps = _grads(flame, GRADS)
    assert flame.nn.utils.clip_grad_norm_(ps, 1.0, error_if_nonfinite=True).item() > 1.0

    @flame.compile
    def clip():
        return flame.nn.utils.clip_grad_norm_(ps, 1.0, error_if_nonfinite=True)

    with pytest.raises(TraceError, match="return the norm clip_grad_norm_ returns and check it after the call"):
        clip()


@pytest.mark.parametrize("compiled", [False, True])
def test_clip_grad_value(compiled):
    def run(lib, compiled):
        ps = _grads(lib, GRADS)
        maybe_compile(lib, compiled)(lambda: lib.nn.utils.clip_grad_value_(ps, 0.7, foreach=None))()
        return [numpy_of(p.grad) for p in ps]

    for a, b in zip(run(flame, compiled), run(torch, False)):
        np.testing.assert_array_equal(a, b)
