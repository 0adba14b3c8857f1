"""A DDPM training step as "The Annotated Diffusion Model" and its many copies write it, on a tiny U-Net:
`SinusoidalPositionEmbeddings` (`torch.exp(torch.arange(half_dim, device=device) * -embeddings)`,
`time[:, None] * embeddings[None, :]`, `torch.cat((embeddings.sin(), embeddings.cos()), dim=-1)`) on the
integer timesteps, blocks of Conv2d + GroupNorm + SiLU with the time embedding added as
`time_emb[(...,) + (None,) * 2]`, MaxPool2d down, ConvTranspose2d and nn.Upsample(bilinear) up with skip
`torch.cat((x, h), dim=1)`, the schedule from `torch.linspace` / `torch.cumprod(alphas, axis=0)`,
`extract` through `a.gather(-1, t.cpu())` and `.reshape(batch_size, *((1,) * (len(x_shape) - 1)))`,
`q_sample`, `F.mse_loss(noise, predicted_noise)`, Adam, and an EMA copy made by `copy.deepcopy(model)`
with `requires_grad_(False)`, updated under `torch.no_grad()` by `ema_p.mul_(decay).add_(p, alpha=1 - decay)`
or by `ema_p.lerp_(p, 1 - decay)`. The timesteps and the noise are drawn once and given to both (the
one change). The sinusoidal embedding is made in the default dtype whatever the model's, so the program
runs in f32: flame starts from torch's weights and must give the same losses, parameters and EMA
parameters to f32's precision, eagerly and with the step (EMA update included) under @flame.compile."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

import flame
from tests.training_idioms.common import assert_same_params, numpy_of

T, BATCH, SIZE, STEPS, DECAY = 50, 4, 8, 4, 0.9


def _unet(lib):
    nn, torch = lib.nn, lib

    class SinusoidalPositionEmbeddings(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.dim = dim

        def forward(self, time):
            device = time.device
            half_dim = self.dim // 2
            embeddings = math.log(10000) / (half_dim - 1)
            embeddings = torch.exp(torch.arange(half_dim, device=device) * -embeddings)
            embeddings = time[:, None] * embeddings[None, :]
            embeddings = torch.cat((embeddings.sin(), embeddings.cos()), dim=-1)
            return embeddings

    class Block(nn.Module):
        def __init__(self, in_ch, out_ch, time_emb_dim, groups=4):
            super().__init__()
            self.time_mlp = nn.Linear(time_emb_dim, out_ch)
            self.conv1 = nn.Conv2d(in_ch, out_ch, 3, padding=1)
            self.norm1 = nn.GroupNorm(groups, out_ch)
            self.conv2 = nn.Conv2d(out_ch, out_ch, 3, padding=1)
            self.norm2 = nn.GroupNorm(groups, out_ch)
            self.act = nn.SiLU()

        def forward(self, x, t):
            h = self.act(self.norm1(self.conv1(x)))
            time_emb = self.act(self.time_mlp(t))
            h = h + time_emb[(...,) + (None,) * 2]
            h = self.act(self.norm2(self.conv2(h)))
            return h

    class TinyUNet(nn.Module):
        def __init__(self, channels=1, dim=8, time_dim=16):
            super().__init__()
            self.time_mlp = nn.Sequential(
                SinusoidalPositionEmbeddings(time_dim),
                nn.Linear(time_dim, time_dim),
                nn.GELU(),
                nn.Linear(time_dim, time_dim),
            )
            self.init_conv = nn.Conv2d(channels, dim, 1)
            self.down1 = Block(dim, dim, time_dim)
            self.down2 = Block(dim, 2 * dim, time_dim)
            self.pool = nn.MaxPool2d(2)
            self.mid = Block(2 * dim, 2 * dim, time_dim)
            self.up_t = nn.ConvTranspose2d(2 * dim, 2 * dim, 4, 2, 1)
            self.up2 = Block(4 * dim, dim, time_dim)
            self.up_s = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
            self.up1 = Block(2 * dim, dim, time_dim)
            self.final_conv = nn.Conv2d(dim, channels, 1)

        def forward(self, x, time):
            t = self.time_mlp(time)
            x = self.init_conv(x)
            h1 = self.down1(x, t)  # 8x8
            h2 = self.down2(self.pool(h1), t)  # 4x4
            m = self.mid(self.pool(h2), t)  # 2x2
            x = self.up2(torch.cat((self.up_t(m), h2), dim=1), t)  # 4x4
            x = self.up1(torch.cat((self.up_s(x), h1), dim=1), t)  # 8x8
            return self.final_conv(x)

    return TinyUNet()


def _diffusion(lib):
    """The schedule and q_sample / p_losses of the annotated DDPM."""
    torch, F = lib, lib.nn.functional
    betas = torch.linspace(0.0001, 0.02, T)
    alphas = 1.0 - betas
    alphas_cumprod = torch.cumprod(alphas, axis=0)
    sqrt_alphas_cumprod = torch.sqrt(alphas_cumprod)
    sqrt_one_minus_alphas_cumprod = torch.sqrt(1.0 - alphas_cumprod)

    def extract(a, t, x_shape):
        batch_size = t.shape[0]
        out = a.gather(-1, t.cpu())
        return out.reshape(batch_size, *((1,) * (len(x_shape) - 1))).to(t.device)

    def q_sample(x_start, t, noise=None):
        if noise is None:
            noise = torch.randn_like(x_start)
        sqrt_alphas_cumprod_t = extract(sqrt_alphas_cumprod, t, x_start.shape)
        sqrt_one_minus_alphas_cumprod_t = extract(sqrt_one_minus_alphas_cumprod, t, x_start.shape)
        return sqrt_alphas_cumprod_t * x_start + sqrt_one_minus_alphas_cumprod_t * noise

    def p_losses(denoise_model, x_start, t, noise=None, loss_type="l2"):
        if noise is None:
            noise = torch.randn_like(x_start)
        x_noisy = q_sample(x_start=x_start, t=t, noise=noise)
        predicted_noise = denoise_model(x_noisy, t)
        if loss_type == "l1":
            loss = F.l1_loss(noise, predicted_noise)
        elif loss_type == "l2":
            loss = F.mse_loss(noise, predicted_noise)
        else:
            raise NotImplementedError()
        return loss

    return p_losses, alphas_cumprod


def _train(lib, model, data, ema_rule, compiled):
    """(losses, the EMA model)."""
    torch = lib
    p_losses, _ = _diffusion(lib)
    optimizer = lib.optim.Adam(model.parameters(), lr=1e-3)
    ema_model = copy.deepcopy(model)
    ema_model.requires_grad_(False)
    ema_model.eval()

    def train_step(batch, t, noise):
        optimizer.zero_grad()
        loss = p_losses(model, batch, t, noise=noise, loss_type="l2")
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            for ema_p, p in zip(ema_model.parameters(), model.parameters()):
                if ema_rule == "mul_add":
                    ema_p.mul_(DECAY).add_(p, alpha=1 - DECAY)
                else:
                    ema_p.lerp_(p, 1 - DECAY)
        return loss

    step = flame.compile(train_step) if compiled else train_step
    losses = [step(*(lib.tensor(a) for a in arrays)).item() for arrays in data]
    if compiled:
        assert step.stats().traces == 1, step.stats()
    return losses, ema_model


def _data():
    r = np.random.default_rng(0)
    return [
        (
            np.tanh(r.standard_normal((BATCH, 1, SIZE, SIZE))).astype(np.float32),
            r.integers(0, T, BATCH),  # torch.randint(0, timesteps, (batch_size,)).long()
            r.standard_normal((BATCH, 1, SIZE, SIZE)).astype(np.float32),
        )
        for _ in range(STEPS)
    ]


def test_schedule_and_time_embedding_as_torch():
    _, want = _diffusion(torch)
    _, got = _diffusion(flame)
    assert got.dtype == flame.float32
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    t = np.array([0, 7, 49])
    emb = [m(lib.tensor(t)) for lib, m in ((flame, _unet(flame).time_mlp[0]), (torch, _unet(torch).time_mlp[0]))]
    assert emb[0].dtype == flame.float32 and tuple(emb[0].shape) == (3, 16)
    np.testing.assert_allclose(emb[0].numpy(), emb[1].numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("ema_rule", ["mul_add", "lerp"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_ddpm_step_with_ema_trains_as_torch(compiled, ema_rule):
    torch.manual_seed(0)
    theirs = _unet(torch)
    mine = _unet(flame)
    mine.load_state_dict({k: flame.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    data = _data()
    want, t_ema = _train(torch, theirs, data, ema_rule, False)
    got, f_ema = _train(flame, mine, data, ema_rule, compiled)
    np.testing.assert_allclose(got, want, rtol=2e-5, err_msg="losses")
    # Adam's first steps move each weight by about lr (1e-3) whatever its gradient's size, so a gradient
    # near 0 whose f32 rounding differs moves its weight differently: compare at a tenth of lr
    assert_same_params(mine, theirs, rtol=1e-3, atol=1e-4, what="model")
    assert_same_params(f_ema, t_ema, rtol=1e-3, atol=1e-4, what="EMA")
    close = [np.abs(numpy_of(p) - numpy_of(q)).max() < 2e-6 for p, q in zip(mine.parameters(), theirs.parameters())]
    assert sum(close) >= len(close) - 2, close  # all but a stray weight or two agree to f32's precision
    assert all(not p.requires_grad for p in f_ema.parameters()) and not f_ema.training
    assert all(a is not b for a, b in zip(f_ema.parameters(), mine.parameters()))
    # the EMA moved towards the model and is not the model
    w0 = theirs.init_conv.weight.detach().numpy()
    assert not np.allclose(f_ema.init_conv.weight.numpy(), w0, rtol=0, atol=1e-9)
