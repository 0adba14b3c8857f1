"""Train a denoising diffusion model (DDPM) with a small U-Net on the 8x8 digits upsampled to 16x16.

    python3 examples/train_diffusion.py [--steps 4000] [--out runs/diffusion] [--tiny] [--resume]

Data: scikit-learn's bundled digits (no download), upsampled bilinearly to 16x16 with
F.interpolate and scaled to [-1, 1]. Training (Ho et al., 2020): draw a timestep t and Gaussian noise
eps, form x_t = sqrt(abar_t) x_0 + sqrt(1 - abar_t) eps (cosine schedule, Nichol & Dhariwal 2021) and
regress eps with the MSE over the whole image. The U-Net: convolutions, GroupNorm and SiLU, a
sinusoidal time embedding added inside every residual block, two strided-convolution downsamplings,
one self-attention layer at the lowest resolution (4x4, F.scaled_dot_product_attention), nearest
upsampling and skip connections. The training step (forward, backward, AdamW, zero_grad) is one
@flame.compile graph; an exponential moving average of the weights is kept for sampling. At the end
ancestral sampling draws a grid of digits from noise with a compiled forward (traced once), written
as samples.png next to loss.png. Every save_every steps (250; 5 with --tiny) and at the end it saves
the EMA weights (checkpoint.safetensors) and the training state (train_state.safetensors: the model,
AdamW's state, the step and the loss history); --resume continues a stopped run from them. --tiny is
a configuration of a few seconds for CI.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np
from sklearn.datasets import load_digits

import flame
import flame.nn as nn
import flame.nn.functional as F
from flame.checkpoint import load_checkpoint, load_metadata, save_checkpoint
from flame.optim.lr_scheduler import WarmupCosineLR

FULL = {"width": 32, "T": 200, "steps": 4000, "batch": 64, "lr": 2e-3, "grid": 8, "ema": 0.995, "save_every": 250}
TINY = {"width": 8, "T": 20, "steps": 12, "batch": 8, "lr": 2e-3, "grid": 2, "ema": 0.9, "save_every": 5}


def load_images() -> np.ndarray:
    """The 1797 digits as [N, 1, 16, 16] in [-1, 1] (bilinear upsampling of the 8x8 originals)."""
    x = load_digits().images.astype(np.float32)[:, None] / 16.0
    up = F.interpolate(flame.tensor(x), size=(16, 16), mode="bilinear", align_corners=False)
    return np.clip(up.numpy(), 0.0, 1.0) * 2.0 - 1.0


def cosine_schedule(T: int) -> tuple[np.ndarray, np.ndarray]:
    """betas and abar (the cumulative product of 1 - beta) of the cosine schedule, beta <= 0.999."""
    s = 0.008
    f = np.cos((np.arange(T + 1) / T + s) / (1 + s) * math.pi / 2) ** 2
    betas = np.clip(1 - f[1:] / f[:-1], 0, 0.999)
    return betas, np.cumprod(1 - betas)


# ---- the U-Net ----------------------------------------------------------------------------------


def timestep_embedding(t: flame.Tensor, dim: int) -> flame.Tensor:
    """[N] timesteps -> [N, dim] sin/cos features at geometrically spaced frequencies (Transformer's)."""
    freqs = flame.tensor(np.exp(-math.log(10000.0) * np.arange(dim // 2) / (dim // 2)).astype(np.float32))
    angles = t.unsqueeze(1) * freqs.unsqueeze(0)
    return flame.cat([angles.sin(), angles.cos()], dim=1)


class ResBlock(nn.Module):
    """GroupNorm-SiLU-conv, plus the projected time embedding, GroupNorm-SiLU-conv, plus the skip (a
    1x1 convolution when the channel count changes)."""

    def __init__(self, c_in: int, c_out: int, t_dim: int):
        super().__init__()
        self.norm1, self.conv1 = nn.GroupNorm(min(8, c_in // 4), c_in), nn.Conv2d(c_in, c_out, 3, padding=1)
        self.time = nn.Linear(t_dim, c_out)
        self.norm2, self.conv2 = nn.GroupNorm(min(8, c_out // 4), c_out), nn.Conv2d(c_out, c_out, 3, padding=1)
        self.skip = nn.Conv2d(c_in, c_out, 1) if c_in != c_out else nn.Identity()

    def forward(self, x, temb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.time(temb).reshape(temb.shape[0], -1, 1, 1)
        h = self.conv2(F.silu(self.norm2(h)))
        return self.skip(x) + h


class SelfAttention(nn.Module):
    """Multi-head self-attention over the H*W positions of a feature map, with a residual."""

    def __init__(self, c: int, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.norm = nn.GroupNorm(min(8, c // 4), c)
        self.qkv, self.proj = nn.Conv2d(c, 3 * c, 1), nn.Conv2d(c, c, 1)

    def forward(self, x):
        n, c, h, w = x.shape
        qkv = self.qkv(self.norm(x)).reshape(n, 3, self.heads, c // self.heads, h * w)
        q, k, v = (qkv[:, i].transpose(-1, -2) for i in range(3))  # [N, heads, HW, c/heads]
        a = F.scaled_dot_product_attention(q, k, v)
        return x + self.proj(a.transpose(-1, -2).reshape(n, c, h, w))


class UNet(nn.Module):
    """16x16 -> 8x8 -> 4x4 (attention) -> 8x8 -> 16x16, skip connections concatenated on the way up."""

    def __init__(self, c: int):
        super().__init__()
        self.c, t_dim = c, 4 * c
        self.time = nn.Sequential(nn.Linear(c, t_dim), nn.SiLU(), nn.Linear(t_dim, t_dim))
        self.inp = nn.Conv2d(1, c, 3, padding=1)
        self.down1, self.pool1 = ResBlock(c, c, t_dim), nn.Conv2d(c, c, 3, stride=2, padding=1)
        self.down2, self.pool2 = ResBlock(c, 2 * c, t_dim), nn.Conv2d(2 * c, 2 * c, 3, stride=2, padding=1)
        self.mid1, self.attn, self.mid2 = ResBlock(2 * c, 2 * c, t_dim), SelfAttention(2 * c), ResBlock(2 * c, 2 * c,
                                                                                                      t_dim)
        self.up2 = nn.Sequential(nn.Upsample(scale_factor=2), nn.Conv2d(2 * c, 2 * c, 3, padding=1))
        self.dec2 = ResBlock(4 * c, 2 * c, t_dim)
        self.up1 = nn.Sequential(nn.Upsample(scale_factor=2), nn.Conv2d(2 * c, c, 3, padding=1))
        self.dec1 = ResBlock(2 * c, c, t_dim)
        self.out = nn.Sequential(nn.GroupNorm(min(8, c // 4), c), nn.SiLU(), nn.Conv2d(c, 1, 3, padding=1))

    def forward(self, x, t):
        temb = self.time(timestep_embedding(t, self.c))
        s1 = self.down1(self.inp(x), temb)  # 16x16
        s2 = self.down2(self.pool1(s1), temb)  # 8x8
        h = self.mid2(self.attn(self.mid1(self.pool2(s2), temb)), temb)  # 4x4
        h = self.dec2(flame.cat([self.up2(h), s2], dim=1), temb)
        h = self.dec1(flame.cat([self.up1(h), s1], dim=1), temb)
        return self.out(h)


# ---- sampling and pictures ----------------------------------------------------------------------


def sample(model: UNet, n: int, betas: np.ndarray, abar: np.ndarray, seed: int) -> np.ndarray:
    """DDPM ancestral sampling: x_T ~ N(0, I), then x_{t-1} = (x_t - beta_t / sqrt(1 - abar_t) eps) /
    sqrt(1 - beta_t) + sigma_t z with sigma_t^2 = beta_t (1 - abar_{t-1}) / (1 - abar_t)."""

    @flame.compile
    def predict(x, t):
        return model(x, t)

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 1, 16, 16)).astype(np.float32)
    for t in range(len(betas) - 1, -1, -1):
        eps = predict(flame.tensor(x), flame.tensor(np.full(n, t, np.float32))).numpy()
        x = (x - betas[t] / np.sqrt(1 - abar[t]) * eps) / np.sqrt(1 - betas[t])
        if t > 0:
            var = betas[t] * (1 - abar[t - 1]) / (1 - abar[t])
            x = x + np.sqrt(var) * rng.standard_normal(x.shape)
        x = np.clip(x, -1.5, 1.5).astype(np.float32)
    return np.clip(x, -1, 1)


def save_pictures(history: list[float], images: np.ndarray, out: str) -> tuple[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    loss_png, grid_png = os.path.join(out, "loss.png"), os.path.join(out, "samples.png")
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(history, lw=0.6, alpha=0.5, label="step")
    k = max(1, len(history) // 50)
    ax.plot(np.arange(k - 1, len(history)), np.convolve(history, np.ones(k) / k, "valid"), label=f"mean of {k}")
    ax.set_xlabel("step")
    ax.set_ylabel("noise-prediction MSE")
    ax.set_yscale("log")
    ax.set_title("DDPM U-Net on the digits (16x16)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(loss_png, dpi=110)
    plt.close(fig)
    g = int(math.sqrt(len(images)))
    fig, axes = plt.subplots(g, g, figsize=(g, g))
    for a, img in zip(np.ravel(axes), images):
        a.imshow(img[0], cmap="gray_r", vmin=-1, vmax=1)
        a.axis("off")
    fig.suptitle("generated digits")
    fig.tight_layout()
    fig.savefig(grid_png, dpi=110)
    plt.close(fig)
    return loss_png, grid_png


# ---- training -----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    from tqdm import tqdm

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="a few seconds' configuration (CI)")
    ap.add_argument("--steps", type=int, default=None, help="train until this step (counting resumed ones)")
    ap.add_argument("--width", type=int, default=None, help="channels at the top level of the U-Net")
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--out", default="runs/diffusion", help="folder for checkpoint.safetensors and the PNGs")
    ap.add_argument("--resume", action="store_true", help="continue from OUT/train_state.safetensors")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", choices=flame.runtime.device.DEVICES, default=None)
    args = ap.parse_args(argv)
    if args.device:
        flame.set_device(args.device)
    cfg = dict(TINY if args.tiny else FULL)
    cfg.update({k: v for k, v in (("steps", args.steps), ("width", args.width), ("batch", args.batch)) if v})
    os.makedirs(args.out, exist_ok=True)
    ckpt, state = os.path.join(args.out, "checkpoint.safetensors"), os.path.join(args.out, "train_state.safetensors")
    resume = args.resume and os.path.exists(state)
    if resume:  # the saved run's model shape and noise schedule
        saved = load_metadata(state)
        cfg.update(width=int(saved["width"]), T=int(saved["T"]))
    if not args.tiny and flame.get_device() != "cuda":
        print("note: the full-size configuration is sized for a GPU; on the CPU (reference executor) it runs "
              "for about an hour. Pass --tiny for a configuration that runs in seconds.", flush=True)

    data = load_images()
    betas, abar = cosine_schedule(cfg["T"])
    print(f"device: {flame.get_device()}; {len(data)} digits at 16x16, {cfg['T']} diffusion steps", flush=True)
    flame.manual_seed(args.seed)
    model, ema = UNet(cfg["width"]), UNet(cfg["width"])
    ema.load_state_dict(model.state_dict())
    print(f"U-Net with {sum(p.numel() for p in model.parameters()):,} parameters", flush=True)
    opt = flame.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.0)
    start, history = 0, []
    if resume:
        meta = load_checkpoint(state, model, opt)
        load_checkpoint(ckpt, ema)
        start, history = int(meta["step"]), list(meta["history"])
        print(f"resumed from step {start} ({state})", flush=True)
    sched = WarmupCosineLR(opt, warmup_steps=max(1, cfg["steps"] // 20), total_steps=cfg["steps"])
    for _ in range(start):
        sched.step()
    pairs = list(zip(ema.parameters(), model.parameters()))

    def save(at: int) -> None:
        shape = {"width": str(cfg["width"]), "T": str(cfg["T"])}
        save_checkpoint(ckpt, ema, None, {"steps": str(at), **shape})
        save_checkpoint(state, model, opt, {"step": at, "history": history, **shape})

    @flame.compile
    def train_step(x_t, t, eps):
        loss = F.mse_loss(model(x_t, t), eps)
        loss.backward()
        opt.step()
        opt.zero_grad()
        with flame.no_grad():
            for e, p in pairs:  # the moving average, updated inside the same compiled step
                e.copy_(e * cfg["ema"] + p * (1 - cfg["ema"]))
        return loss

    rng = np.random.default_rng(args.seed + start)
    t0 = time.perf_counter()
    bar = tqdm(range(start, cfg["steps"]), initial=start, total=cfg["steps"], desc="train", mininterval=0.5)
    losses = []
    for step in bar:
        x0 = data[rng.integers(0, len(data), cfg["batch"])]
        t = rng.integers(0, cfg["T"], cfg["batch"])
        eps = rng.standard_normal(x0.shape).astype(np.float32)
        a = abar[t].reshape(-1, 1, 1, 1)
        x_t = (np.sqrt(a) * x0 + np.sqrt(1 - a) * eps).astype(np.float32)
        losses.append(train_step(flame.tensor(x_t), flame.tensor(t.astype(np.float32)), flame.tensor(eps)))
        sched.step()
        if (step + 1) % 25 == 0 or step + 1 == cfg["steps"]:  # .item() waits for the device: not every step
            history += [v.item() for v in losses]
            losses = []
            bar.set_postfix(loss=f"{np.mean(history[-25:]):.4f}")
        if (step + 1) % cfg["save_every"] == 0 and step + 1 < cfg["steps"]:
            history += [v.item() for v in losses]
            losses = []
            save(step + 1)
    bar.close()
    history += [v.item() for v in losses]
    if not history:
        print(f"nothing to train: the run is at step {start} of {cfg['steps']} (raise --steps)", file=sys.stderr)
        return 1
    first, last = np.mean(history[:5]), np.mean(history[-max(5, len(history) // 10):])
    print(f"trained to step {cfg['steps']} in {time.perf_counter() - t0:.1f} s ({train_step.stats().traces} trace(s) "
          f"of the training step); loss {first:.4f} -> {last:.4f}", flush=True)
    save(cfg["steps"])
    images = sample(ema, cfg["grid"] ** 2, betas, abar, args.seed)
    loss_png, grid_png = save_pictures(history, images, args.out)
    print(f"wrote {ckpt}, {loss_png} and {grid_png}", flush=True)
    return 0 if np.isfinite(images).all() and last < first else 1


if __name__ == "__main__":
    sys.exit(main())
