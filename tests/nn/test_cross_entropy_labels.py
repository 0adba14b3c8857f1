"""cross_entropy with labels outside [0, C): ignore_index (-100) as PyTorch, others raise."""

import numpy as np
import pytest
import torch

import flame
import flame.nn.functional as F

LOGITS = np.array([[0.5, -1.0, 2.0], [1.0, 0.0, -0.5], [0.1, 0.2, 0.3]], np.float32)


def _flame(target, reduction, compiled, ignore_index=None):
    x = flame.tensor(LOGITS, requires_grad=True)
    t = flame.tensor(np.array(target, np.int64))

    def loss_of(x, t):
        loss = F.cross_entropy(x, t, reduction=reduction, ignore_index=ignore_index)
        return loss if reduction != "none" else loss.sum()

    if compiled:
        @flame.compile
        def step(x, t):
            loss = loss_of(x, t)
            loss.backward()
            return loss

        loss = step(x, t)
    else:
        loss = loss_of(x, t)
        loss.backward()
    return loss.item(), x.grad.numpy()


def _torch(target, reduction):
    x = torch.tensor(LOGITS, requires_grad=True)
    loss = torch.nn.functional.cross_entropy(x, torch.tensor(target), reduction=reduction)
    loss = loss if reduction != "none" else loss.sum()
    loss.backward()
    return loss.item(), x.grad.numpy()


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_ignore_index_matches_torch(reduction, compiled):
    target = [-100, 0, 2]
    got = _flame(target, reduction, compiled)  # torch's default ignore_index, traced labels included
    want = _torch(target, reduction)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("target", [[-1, 0, 1], [0, 3, 1]])
def test_out_of_range_label_raises_eagerly(target):
    x = flame.tensor(LOGITS, requires_grad=True)
    with pytest.raises(IndexError, match="out of bounds"):
        F.cross_entropy(x, flame.tensor(np.array(target, np.int64)))


def test_out_of_range_label_gives_nan_when_traced():
    loss, _ = _flame([-1, 0, 1], "mean", compiled=True)
    assert np.isnan(loss)


@pytest.mark.parametrize("compiled", [False, True])
def test_a_language_models_padding_labels_are_ignored_by_default(compiled):
    """The idiom of language-model training: padded positions labelled -100 and the logits flattened."""
    rng = np.random.default_rng(0)
    logits, labels = rng.standard_normal((2, 5, 7)).astype(np.float32), rng.integers(0, 7, (2, 5))
    labels[0, 3:] = labels[1, 4:] = -100
    x, t = torch.tensor(logits, requires_grad=True), torch.tensor(labels)
    want = torch.nn.functional.cross_entropy(x.view(-1, 7), t.view(-1))
    want.backward()
    fx, ft = flame.tensor(logits, requires_grad=True), flame.tensor(labels)

    def step(x, t):
        loss = F.cross_entropy(x.view(-1, 7), t.view(-1))
        loss.backward()
        return loss

    got = (flame.compile(step) if compiled else step)(fx, ft)
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)
    np.testing.assert_allclose(fx.grad.numpy(), x.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_a_dynamic_batch_plans_kernels_nvrtc_compiles_for_the_gpu(cuda_target):
    """The count of kept labels is a row as long as the batch: once the batch size is dynamic, its kernel
    streams the row (a register array's length must be fixed when NVRTC compiles), so the kernels of
    every batch size's plan compile for sm_90 and the sizes share their sources."""
    from flame.codegen.nvrtc import compile_cubin

    flame.manual_seed(0)
    model = flame.nn.Sequential(flame.nn.Linear(12, 24), flame.nn.LayerNorm(24), flame.nn.GELU(),
                                flame.nn.Linear(24, 5))
    opt = flame.optim.AdamW(model.parameters(), lr=1e-2)

    @flame.compile
    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    rng = np.random.default_rng(1)
    for n in (8, 5, 11, 7):
        step(flame.tensor(rng.standard_normal((n, 12)).astype(np.float32)), flame.tensor(rng.integers(0, 5, n)))
    plans = [e.plan for es in step._cache.values() for e in es if e.template is not None]
    assert len(plans) >= 2  # the sizes after the first two come from the dynamic template
    sources = [{k.source for k in p.kernels()} for p in plans]
    assert all(s == sources[0] for s in sources)
    for source in sources[0]:
        assert compile_cubin(source, "sm_90")[:4] == b"\x7fELF"
