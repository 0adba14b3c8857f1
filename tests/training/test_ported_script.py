"""A PyTorch training script run unchanged against flame: the same source, written once against a
`lib` namespace (torch or flame), trains a small Transformer classifier with the habits a PyTorch
user brings (nn.TransformerEncoder with a padding mask, label-smoothed cross-entropy, AdamW with
OneCycleLR, clip_grad_norm_, an EMA of the weights through lerp_). flame starts from PyTorch's
weights (its state_dict, loaded as it is) and compiles the step; both libraries' losses, learning
rates and EMA weights must agree step by step."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame

VOCAB, D, HEADS, T, BATCH, CLASSES, STEPS = 24, 32, 4, 10, 6, 3, 12


class _Model:
    """The model, built from lib.nn; its modules' names match between the libraries."""

    def __init__(self, lib):
        nn = lib.nn
        self.lib = lib
        self.embed = nn.Embedding(VOCAB, D)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(D, HEADS, dim_feedforward=64, dropout=0.0,
                                                                        batch_first=True, norm_first=True), 2)
        self.head = nn.Linear(D, CLASSES)
        self.modules = {"embed": self.embed, "encoder": self.encoder, "head": self.head}

    def parameters(self):
        return [p for m in self.modules.values() for p in m.parameters()]

    def state(self) -> dict:
        return {f"{k}.{n}": v for k, m in self.modules.items() for n, v in m.state_dict().items()}

    def load(self, state: dict) -> None:
        for k, m in self.modules.items():
            m.load_state_dict({n[len(k) + 1:]: v for n, v in state.items() if n.startswith(k + ".")})

    def __call__(self, tokens, pad):
        h = self.encoder(self.embed(tokens), src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).to(h.dtype)
        return self.head((h * keep).sum(1) / keep.sum(1))  # the mean over the tokens that are not padding


def _train(lib, model: _Model, batches, compile_step):
    F = lib.nn.functional
    params = model.parameters()
    opt = lib.optim.AdamW(params, lr=1e-3, weight_decay=0.01)
    sched = lib.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=STEPS)
    ema = [p.detach().clone() for p in params]

    def step(tokens, pad, labels):
        logits = model(tokens, pad)
        loss = F.cross_entropy(logits, labels, label_smoothing=0.1)
        loss.backward()
        lib.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad()
        with lib.no_grad():
            for e, p in zip(ema, params):
                e.lerp_(p, 0.1)
        return loss

    step = compile_step(step)
    losses, lrs = [], []
    for tokens, pad, labels in batches:
        losses.append(float(step(tokens, pad, labels).item()))
        lrs.append(sched.get_last_lr()[0])
        sched.step()
    return losses, lrs, [np.array(e.detach().numpy() if hasattr(e, "detach") else e.numpy()) for e in ema]


def _batches(lib):
    rng = np.random.default_rng(0)
    out = []
    for _ in range(STEPS):
        tokens = rng.integers(0, VOCAB, (BATCH, T))
        lengths = rng.integers(3, T + 1, BATCH)
        pad = np.arange(T)[None, :] >= lengths[:, None]
        labels = rng.integers(0, CLASSES, BATCH)
        out.append(tuple(lib.tensor(a) for a in (tokens, pad, labels)))
    return out


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")  # PyTorch's note about norm_first
def test_the_same_script_trains_alike_in_both():
    torch.manual_seed(0)
    theirs = _Model(torch)
    mine = _Model(flame)
    mine.load({k: flame.tensor(v.detach().numpy()) for k, v in theirs.state().items()})
    want = _train(torch, theirs, _batches(torch), lambda f: f)
    got = _train(flame, mine, _batches(flame), flame.compile)
    np.testing.assert_allclose(got[0], want[0], rtol=2e-4, atol=2e-5)  # losses
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6)  # learning rates
    for g, w in zip(got[2], want[2]):
        if g.shape == (3 * D,):  # an in_proj_bias: its key third has a zero gradient in exact arithmetic
            # (softmax ignores a constant added to a row of scores), so AdamW moves it by the sign of
            # rounding noise, differently in each library; it changes no output
            g, w = np.delete(g, np.s_[D:2 * D]), np.delete(w, np.s_[D:2 * D])
        np.testing.assert_allclose(g, w, rtol=2e-3, atol=2e-5)  # EMA weights after every step
