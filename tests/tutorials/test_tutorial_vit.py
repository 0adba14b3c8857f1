"""A ViT classifier as the usual from-scratch ports write it (timm's layout on nn.TransformerEncoder): a
PatchEmbed of `nn.Conv2d(in_chans, embed_dim, kernel_size=patch, stride=patch)` then
`x.flatten(2).transpose(1, 2)`, a cls token and a learned position embedding as `nn.Parameter(torch.zeros(...))`
drawn by `nn.init.trunc_normal_(std=.02)`, `self.cls_token.expand(B, -1, -1)` concatenated in front,
`nn.TransformerEncoder(nn.TransformerEncoderLayer(..., activation="gelu", batch_first=True,
norm_first=True), depth)`, a final LayerNorm and a Linear head on `x[:, 0]`, `_init_weights` through
`self.apply` (trunc_normal_ for Linear weights, zeros / ones for biases and LayerNorm), AdamW with
weight decay, `F.cross_entropy(..., label_smoothing=0.1)`, and the learning rate from OneCycleLR
(which cycles Adam's beta1 too) or from a LambdaLR linear warmup + cosine decay, stepped per batch.
flame starts from torch's weights (f64) and must give the same losses, accuracies, learning rates,
betas, gradients and parameters, eagerly and with the step under @flame.compile."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import flame
from tests.training_idioms.common import assert_same_params, numpy_of

IMG, PATCH, CHANS, DIM, DEPTH, HEADS, MLP, CLASSES, BATCH, STEPS = 8, 4, 3, 16, 2, 2, 32, 5, 6, 5


def _vit(lib):
    nn, torch = lib.nn, lib

    class PatchEmbed(nn.Module):
        def __init__(self, img_size=224, patch_size=16, in_chans=3, embed_dim=768):
            super().__init__()
            self.num_patches = (img_size // patch_size) ** 2
            self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

        def forward(self, x):
            x = self.proj(x)  # (B, E, H/P, W/P)
            x = x.flatten(2).transpose(1, 2)  # (B, N, E)
            return x

    class ViT(nn.Module):
        def __init__(self, img_size, patch_size, in_chans, num_classes, embed_dim, depth, num_heads, mlp_dim):
            super().__init__()
            self.patch_embed = PatchEmbed(img_size, patch_size, in_chans, embed_dim)
            num_patches = self.patch_embed.num_patches
            self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
            self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, embed_dim))
            encoder_layer = nn.TransformerEncoderLayer(
                d_model=embed_dim,
                nhead=num_heads,
                dim_feedforward=mlp_dim,
                dropout=0.0,
                activation="gelu",
                batch_first=True,
                norm_first=True,
            )
            self.encoder = nn.TransformerEncoder(encoder_layer, num_layers=depth)
            self.norm = nn.LayerNorm(embed_dim)
            self.head = nn.Linear(embed_dim, num_classes)
            nn.init.trunc_normal_(self.pos_embed, std=0.02)
            nn.init.trunc_normal_(self.cls_token, std=0.02)
            self.apply(self._init_weights)

        def _init_weights(self, m):
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.LayerNorm):
                nn.init.constant_(m.bias, 0)
                nn.init.constant_(m.weight, 1.0)

        def forward(self, x):
            B = x.shape[0]
            x = self.patch_embed(x)
            cls_tokens = self.cls_token.expand(B, -1, -1)
            x = torch.cat((cls_tokens, x), dim=1)
            x = x + self.pos_embed
            x = self.encoder(x)
            x = self.norm(x)
            return self.head(x[:, 0])

    return ViT(IMG, PATCH, CHANS, CLASSES, DIM, DEPTH, HEADS, MLP)


def _schedule(lib, optimizer, which):
    if which == "onecycle":
        return lib.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=STEPS, pct_start=0.4)
    warmup = 2

    def lr_lambda(step):
        if step < warmup:
            return float(step + 1) / float(warmup)
        progress = float(step - warmup) / float(max(1, STEPS - warmup))
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return lib.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


def _run(lib, model, data, which, compiled):
    """(losses, accuracies, lrs, beta1s, first step's gradients)."""
    F = lib.nn.functional
    optimizer = lib.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    scheduler = _schedule(lib, optimizer, which)

    def train_step(images, labels):
        optimizer.zero_grad()
        logits = model(images)
        loss = F.cross_entropy(logits, labels, label_smoothing=0.1)
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters()]
        optimizer.step()
        acc = (logits.argmax(dim=1) == labels).float().mean()
        return loss, acc, grads

    step = flame.compile(train_step) if compiled else train_step
    model.train()
    losses, accs, lrs, betas, first = [], [], [], [], None
    for images, labels in data:
        loss, acc, grads = step(lib.tensor(images), lib.tensor(labels))
        scheduler.step()
        losses.append(loss.item())
        accs.append(acc.item())
        lrs.append(scheduler.get_last_lr()[0])
        betas.append(optimizer.param_groups[0]["betas"][0])
        first = first or [numpy_of(g) for g in grads]
    if compiled:
        assert step.stats().traces == 1, step.stats()
    return losses, accs, lrs, betas, first


def _data():
    r = np.random.default_rng(0)
    return [(r.standard_normal((BATCH, CHANS, IMG, IMG)), r.integers(0, CLASSES, BATCH)) for _ in range(STEPS)]


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")  # torch's note on norm_first=True
@pytest.mark.parametrize("which", ["onecycle", "warmup_cosine"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_vit_trains_as_torch(which, compiled):
    torch.manual_seed(0)
    theirs = _vit(torch).double()
    flame.manual_seed(0)
    mine = _vit(flame).double()
    assert [n for n, _ in mine.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    mine.load_state_dict({k: flame.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    data = _data()
    want = _run(torch, theirs, data, which, False)
    got = _run(flame, mine, data, which, compiled)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-9, err_msg="losses")
    np.testing.assert_allclose(got[1], want[1], rtol=0, atol=0, err_msg="accuracies")
    np.testing.assert_allclose(got[2], want[2], rtol=1e-12, err_msg="learning rates")
    np.testing.assert_allclose(got[3], want[3], rtol=1e-12, err_msg="AdamW's beta1")
    for g, w, (name, _) in zip(got[4], want[4], theirs.named_parameters()):
        np.testing.assert_allclose(g, w, rtol=1e-8, atol=1e-12, err_msg=f"first gradient of {name}")
    assert_same_params(mine, theirs, rtol=1e-7, atol=1e-10)


def test_vit_init_draws_truncated_normals():
    flame.manual_seed(0)
    m = _vit(flame)
    w = np.concatenate([m.pos_embed.numpy().ravel(), m.head.weight.numpy().ravel()])
    assert np.abs(w).max() <= 2.0 and 0.015 < w.std() < 0.025  # trunc_normal_'s default bounds are +-2 (absolute)
    assert (m.head.bias.numpy() == 0).all() and (m.norm.weight.numpy() == 1).all()
    assert m.encoder.layers[0].norm_first and m.encoder.layers[1] is not m.encoder.layers[0]
