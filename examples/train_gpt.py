"""Train a character-level GPT on Python's own standard library source (read from disk; no download).

    python3 examples/train_gpt.py [--steps 2000] [--out runs/gpt] [--resume] [--tiny]

A decoder-only transformer (token + position embedding, pre-LayerNorm blocks with causal attention
written by hand and a GELU MLP, final LayerNorm, output head tied to the token embedding) learns to
continue Python code. The whole training step -- forward, loss.backward(), AdamW.step(), zero_grad()
-- is one @flame.compile graph, traced once and replayed. A tqdm bar shows the loss and tokens/s;
every --eval-every steps the validation loss is measured and the checkpoint (safetensors: model,
optimizer, step, vocabulary, loss history) is saved, so --resume continues where a run stopped. At
the end it writes loss.png and prints a sample of generated text; generation runs a compiled forward
over a fixed context window, so it is traced once too.

On a GPU the matmuls run in bf16 (--dtype bf16, the default there) with f32 master weights; on the
reference executor (no GPU) everything is f32. --dtype fp8 trains the Linear layers' GEMMs in FP8
(flame.autocast(dtype=flame.float8_e4m3fn): e4m3 forward, e5m2 gradients, per-tensor current scaling)
and the rest in bf16; the FP8 GEMMs run on the reference executor (an exact emulation) and, on a GPU,
through cuBLASLt's FP8 GEMM. --tiny is a configuration of a few seconds for CI.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np

import flame
import flame.nn as nn
import flame.nn.functional as F
from flame.checkpoint import load_checkpoint, load_metadata, save_checkpoint
from flame.nn.utils import lora
from flame.optim.lr_scheduler import WarmupCosineLR

FULL = {"d": 384, "layers": 6, "heads": 6, "T": 256, "batch": 64, "steps": 2000, "eval_every": 250,
        "eval_batches": 8, "lr": 1e-3, "chars": 4_000_000, "sample": 500}
TINY = {"d": 32, "layers": 2, "heads": 2, "T": 32, "batch": 8, "steps": 30, "eval_every": 10,
        "eval_batches": 2, "lr": 1e-2, "chars": 60_000, "sample": 80}


# ---- data ----------------------------------------------------------------------------------------


def stdlib_text(limit: int) -> str:
    """The first `limit` characters of the standard library's .py files (sorted by path), ASCII only
    (anything else becomes '?', so the vocabulary stays small)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    parts, size = [], 0
    for path in sorted(root.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        parts.append(text.encode("ascii", errors="replace").decode("ascii"))
        size += len(parts[-1])
        if size >= limit:
            break
    return "".join(parts)[:limit]


def encode(text: str, vocab: str) -> np.ndarray:
    table = {c: i for i, c in enumerate(vocab)}
    return np.array([table.get(c, table["?"]) for c in text], dtype=np.int64)


def batch(data: np.ndarray, T: int, size: int, rng: np.random.Generator) -> tuple[flame.Tensor, flame.Tensor]:
    """`size` random windows of T tokens and the same windows shifted by one (the targets)."""
    starts = rng.integers(0, len(data) - T - 1, size)
    x = np.stack([data[s:s + T] for s in starts])
    y = np.stack([data[s + 1:s + T + 1] for s in starts])
    return flame.tensor(x), flame.tensor(y)


# ---- the model -----------------------------------------------------------------------------------


def _linear(x, layer: nn.Linear | lora.Linear):
    """A Linear in x's dtype: the f32 master weights are cast (bf16 matmuls on the GPU). The cast comes
    after the transpose: a compiled forward-only `x @ w.to(bf16).T` fails to plan today. A layer
    wrapped with a LoRA adapter (examples/lora_finetune.py) is its base plus the adapter's path."""
    if isinstance(layer, lora.Linear):
        base = _linear(x, layer.base_layer)
        return base if layer.merged else base + layer.lora_delta(x)
    if flame.amp.get_fp8_recipe() is not None:  # FP8 training: F.linear casts the f32 weights to FP8 itself
        return F.linear(x, layer.weight, layer.bias)
    return x @ layer.weight.transpose(0, 1).to(x.dtype) + layer.bias.to(x.dtype)


def _norm(x, ln: nn.LayerNorm):
    return F.layer_norm(x, ln.normalized_shape, ln.weight.to(x.dtype), ln.bias.to(x.dtype))


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln1(x)), then x + mlp(ln2(x))."""

    def __init__(self, d: int, heads: int, gen: flame.Generator):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d, generator=gen), nn.Linear(d, d, generator=gen)
        self.fc, self.out = nn.Linear(d, 4 * d, generator=gen), nn.Linear(4 * d, d, generator=gen)

    def forward(self, x, mask):
        B, T, C = x.shape
        H, D = self.heads, C // self.heads
        qkv = _linear(_norm(x, self.ln1), self.qkv).reshape(B, T, 3, H, D).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = F.softmax(q @ k.transpose(-1, -2) * (D**-0.5) + mask, dim=-1)  # attention, written by hand
        x = x + _linear((att @ v).transpose(1, 2).reshape(B, T, C), self.proj)
        return x + _linear(F.gelu(_linear(_norm(x, self.ln2), self.fc)), self.out)


class GPT(nn.Module):
    """Token + position embedding, `layers` blocks, final LayerNorm, head tied to the token embedding."""

    def __init__(self, vocab: int, d: int, layers: int, heads: int, T: int, dtype, seed: int = 0, fp8=False):
        super().__init__()
        gen = flame.Generator(seed)
        # fp8: True or a flame.amp.Float8Recipe: the Linear layers' GEMMs in FP8 (dtype bf16: the rest)
        self.dtype, self.fp8 = dtype, fp8
        self.wte = nn.Embedding(vocab, d, generator=gen)
        self.wpe = nn.Parameter(flame.zeros(T, d))
        nn.init.normal_(self.wte.weight, std=0.02, generator=gen)
        nn.init.normal_(self.wpe, std=0.01, generator=gen)
        self.blocks = nn.ModuleList([Block(d, heads, gen) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.T = T

    def forward(self, idx):
        # any sequence length up to self.T: a compiled step called at several lengths traces twice and
        # then instantiates its graph per length (flame.compile's dynamic dims).
        # The causal additive mask (-inf above the diagonal), built in the step: a graph constant, so
        # flame sees that the hand-written attention is causal and runs cuDNN's fused causal attention
        T = idx.shape[1]
        mask = flame.full((T, T), float("-inf")).triu(1).to(self.dtype)
        x = (self.wte(idx) + self.wpe[:T]).to(self.dtype)
        for block in self.blocks:
            x = block(x, mask)
        return _norm(x, self.ln_f) @ self.wte.weight.transpose(0, 1).to(self.dtype)  # the tied head

    def loss(self, idx, targets):
        recipe = self.fp8 if isinstance(self.fp8, flame.amp.Float8Recipe) else flame.float8_e4m3fn
        with flame.autocast(dtype=recipe, enabled=bool(self.fp8)):
            logits = self(idx).float()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


# ---- training, evaluation, checkpoints, sampling -------------------------------------------------


def sample(model: GPT, vocab: str, prompt: str, n: int, T: int, seed: int, temperature: float = 0.8) -> str:
    """Continue `prompt` by n characters. The compiled forward always sees a [1, T] window (right-padded
    while the text is shorter; causal attention makes the padding invisible to earlier positions), so it
    is traced once."""

    @flame.compile
    def logits_of(idx):
        return model(idx).float()

    rng = np.random.default_rng(seed)
    tokens = list(encode(prompt, vocab))
    for _ in range(n):
        window = tokens[-T:]
        last = len(window) - 1
        idx = np.zeros((1, T), dtype=np.int64)
        idx[0, :len(window)] = window
        z = logits_of(flame.tensor(idx)).numpy()[0, last] / temperature
        p = np.exp(z - z.max())
        tokens.append(int(rng.choice(len(vocab), p=p / p.sum())))
    return "".join(vocab[t] for t in tokens)


def plot(history: dict, path: str) -> None:
    """The training and validation loss against the step, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(*zip(*history["train"]), lw=0.8, label="train")
    if history["val"]:
        ax.plot(*zip(*history["val"]), "o-", label="validation")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats per character)")
    ax.set_title("character-level GPT on the Python standard library")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="a few seconds' configuration (CI)")
    ap.add_argument("--steps", type=int, default=None, help="train until this step (counting resumed ones)")
    ap.add_argument("--out", default="runs/gpt", help="folder for checkpoint.safetensors and loss.png")
    ap.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.safetensors")
    ap.add_argument("--dtype", choices=("bf16", "f32", "fp8"), default=None,
                    help="compute dtype (default bf16 on a GPU; fp8: the Linear GEMMs in FP8, the rest bf16)")
    ap.add_argument("--device", choices=flame.runtime.device.DEVICES, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--activation-budget", type=float, default=None, metavar="F",
                    help="keep at most F (0..1) of the activations the plan without a budget keeps for the backward: "
                         "flame recomputes or offloads the rest and prints its choice")
    args = ap.parse_args(argv)
    if args.device:
        flame.set_device(args.device)
    cfg = dict(TINY if args.tiny else FULL)
    cfg["steps"] = args.steps if args.steps is not None else cfg["steps"]
    args.dtype = args.dtype or ("bf16" if flame.get_device() == "cuda" else "f32")
    if not args.tiny and flame.get_device() != "cuda":
        print("note: the full-size configuration is sized for a GPU; on the CPU (reference executor) it runs "
              "for many hours. Pass --tiny for a configuration that runs in seconds.", flush=True)
    return args, cfg


def main(argv: list[str] | None = None) -> int:
    from tqdm import tqdm

    args, cfg = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    ckpt, png = os.path.join(args.out, "checkpoint.safetensors"), os.path.join(args.out, "loss.png")
    text = stdlib_text(cfg["chars"])
    vocab = "".join(sorted(set(text) | {"?"}))
    if args.resume and os.path.exists(ckpt):
        vocab = json.loads(load_metadata(ckpt)["vocab"])  # the saved model's vocabulary
    data = encode(text, vocab)
    split = int(0.9 * len(data))
    train, val = data[:split], data[split:]
    print(f"device: {flame.get_device()}, dtype {args.dtype}; {len(text):,} characters of the standard library, "
          f"vocabulary {len(vocab)} (ln {math.log(len(vocab)):.2f})", flush=True)

    dtype = flame.bf16 if args.dtype in ("bf16", "fp8") else flame.f32
    model = GPT(len(vocab), cfg["d"], cfg["layers"], cfg["heads"], cfg["T"], dtype, args.seed, fp8=args.dtype == "fp8")
    opt = flame.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.1, betas=(0.9, 0.95))
    step, history = 0, {"train": [], "val": []}
    if args.resume and os.path.exists(ckpt):
        meta = load_checkpoint(ckpt, model, opt)
        step, history = int(meta["step"]), json.loads(meta["history"])
        print(f"resumed from step {step} ({ckpt})", flush=True)
    sched = WarmupCosineLR(opt, warmup_steps=max(1, cfg["steps"] // 20), total_steps=cfg["steps"])
    for _ in range(step):
        sched.step()

    @flame.compile(activation_budget=args.activation_budget)
    def train_step(x, y):
        loss = model.loss(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    if args.activation_budget is not None:  # the plan's choice, before the first step runs
        report = train_step.memory_report(*batch(train, cfg["T"], cfg["batch"], np.random.default_rng(0)))
        a = report.activation
        kinds = {k: sum(1 for c in a.choices if c[0] == k) for k in ("recompute", "offload")}
        print(f"activation budget {a.requested:g}: activations kept for the backward {a.kept / 2**20:.1f} MiB of "
              f"{a.unconstrained / 2**20:.1f} MiB without it; {kinds['recompute']} values recomputed, "
              f"{kinds['offload']} offloaded to host memory, about {sum(c[3] for c in a.choices) * 1e3:.2f} ms "
              f"per step; planned peak {report.peak / 2**20:.1f} MiB", flush=True)

    @flame.compile
    def eval_loss(x, y):
        return model.loss(x, y)

    def validate(at: int) -> float:
        rng_val = np.random.default_rng(1234)  # the same validation windows every time
        loss = float(np.mean([eval_loss(*batch(val, cfg["T"], cfg["batch"], rng_val)).item()
                              for _ in range(cfg["eval_batches"])]))
        history["val"].append((at, loss))
        return loss

    def save(at: int) -> None:
        save_checkpoint(ckpt, model, opt, {"step": str(at), "vocab": json.dumps(vocab), "history": json.dumps(history),
                                           "config": json.dumps(cfg)})

    rng = np.random.default_rng(args.seed + step)
    tokens_per_step = cfg["batch"] * cfg["T"]
    bar = tqdm(range(step, cfg["steps"]), initial=step, total=cfg["steps"], desc="train", mininterval=0.5)
    t0, done, val_loss = time.perf_counter(), 0, float("nan")
    for step in bar:
        loss = train_step(*batch(train, cfg["T"], cfg["batch"], rng))
        sched.step()
        done += 1
        if done == 1:  # tokens/s from the second step on: the first one traces and compiles
            t0 = time.perf_counter()
        if done == 1 or (step + 1) % 10 == 0 or step + 1 == cfg["steps"]:  # .item() waits for the GPU: not every step
            history["train"].append((step + 1, loss.item()))
            rate = (done - 1) * tokens_per_step / max(time.perf_counter() - t0, 1e-9)
            bar.set_postfix(loss=f"{history['train'][-1][1]:.3f}", val=f"{val_loss:.3f}", tok_s=f"{rate:,.0f}")
        if (step + 1) % cfg["eval_every"] == 0 or step + 1 == cfg["steps"]:
            val_loss = validate(step + 1)
            bar.write(f"step {step + 1}: train loss {history['train'][-1][1]:.4f}  validation loss {val_loss:.4f}")
            save(step + 1)
    bar.close()
    if history["train"]:
        plot(history, png)
    print(f"trained to step {cfg['steps']} ({train_step.stats().traces} trace(s) of the training step); "
          f"wrote {ckpt} and {png}", flush=True)
    print("--- sample ---\n" + sample(model, vocab, "def ", cfg["sample"], cfg["T"], args.seed), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
