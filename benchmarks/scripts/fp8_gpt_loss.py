"""Validation loss of examples/train_gpt.py's GPT trained in FP8 against the same model trained in bf16,
the same number of steps on the same batches (the data order, initialisation and learning-rate schedule
are shared; only the precision differs), on several data orders: the spread of the bf16 runs over the
orders is the noise floor any difference is judged against.

    PYTHONPATH=. python3 -m benchmarks.scripts.fp8_gpt_loss [--steps N] [--orders 3] [--config tiny|small|full]
        [--device D]

--config full is the example's own model and schedule (d 384, 6 layers, T 256, batch 64, 2000 steps):
for a GPU. --steps defaults to 2000 there and to 1200 for the small configurations.

FP8 runs flame.autocast(dtype=Float8Recipe(scaling=...)): every Linear's GEMMs in FP8 (e4m3 forward,
e5m2 gradients), the rest (attention, the tied head, norms) in bf16, f32 master weights. On the
reference executor (no GPU) the FP8 GEMMs are the exact emulation; on a GPU, cuBLASLt's FP8 GEMM.
Prints one line per run, then each precision's mean over the orders against bf16's.

On the reference executor, --config tiny (d 32, 2 layers, T 32, batch 8, lr 1e-2), 1200 steps, data
orders 0, 1, 2:

    bf16          2.4056  2.4112  2.4200   mean 2.4122
    fp8 current   2.4576  2.4204  2.3986   mean 2.4255   +0.55 % vs bf16
    fp8 delayed   2.4056  2.4346  2.4031   mean 2.4144   +0.09 % vs bf16
    (bf16 over the orders: 0.60 % from lowest to highest; one order alone moved FP8 current by -0.88 to +2.16 %)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import flame

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from train_gpt import FULL, GPT, TINY, batch, encode, stdlib_text  # noqa: E402

SMALL = {**TINY, "d": 64, "layers": 2, "heads": 4, "T": 64, "batch": 16, "lr": 3e-3, "chars": 200_000}


def train(cfg: dict, steps: int, recipe, data_seed: int, val_batches: int = 8) -> float:
    """Validation loss after `steps` AdamW steps (warmup + cosine, as the example) of a fresh GPT."""
    from flame.optim.lr_scheduler import WarmupCosineLR

    text = stdlib_text(cfg["chars"])
    vocab = "".join(sorted(set(text) | {"?"}))
    data = encode(text, vocab)
    split = int(0.9 * len(data))
    train_data, val = data[:split], data[split:]
    model = GPT(len(vocab), cfg["d"], cfg["layers"], cfg["heads"], cfg["T"], flame.bf16, 0, fp8=recipe or False)
    opt = flame.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.1, betas=(0.9, 0.95))
    sched = WarmupCosineLR(opt, warmup_steps=max(1, steps // 20), total_steps=steps)
    loss_of = model.loss  # under the recipe's autocast when fp8 is one (examples/train_gpt.py)

    @flame.compile
    def step(x, y):
        loss = loss_of(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    @flame.compile
    def evaluate(x, y):
        return loss_of(x, y)

    rng = np.random.default_rng(data_seed)
    for _ in range(steps):
        step(*batch(train_data, cfg["T"], cfg["batch"], rng))
        sched.step()
    rv = np.random.default_rng(1234)
    return float(np.mean([evaluate(*batch(val, cfg["T"], cfg["batch"], rv)).item() for _ in range(val_batches)]))


def main(argv: list[str] | None = None) -> int:
    """Run bf16 and FP8 (current and delayed scaling) on each data order; print the losses and means."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=None, help="default: 2000 for --config full, else 1200")
    ap.add_argument("--orders", type=int, default=3, help="data orders each precision trains on")
    ap.add_argument("--config", choices=("tiny", "small", "full"), default="tiny")
    ap.add_argument("--device", default=None)
    a = ap.parse_args(argv)
    if a.device:
        flame.set_device(a.device)
    cfg = dict({"tiny": TINY, "small": SMALL, "full": FULL}[a.config])
    if a.steps is None:
        a.steps = FULL["steps"] if a.config == "full" else 1200
    runs = {
        "bf16": None,
        "fp8 current": flame.amp.Float8Recipe(),
        "fp8 delayed": flame.amp.Float8Recipe(scaling="delayed"),
    }
    got: dict[str, list[float]] = {name: [] for name in runs}
    for seed in range(a.orders):
        for name, recipe in runs.items():
            t0 = time.perf_counter()
            got[name].append(train(cfg, a.steps, recipe, seed))
            print(f"{name:14s} data order {seed}: validation loss {got[name][-1]:.4f}  "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
    print(f"config {a.config} {cfg}, {a.steps} steps, {a.orders} data orders, device {flame.get_device()}")
    base = float(np.mean(got["bf16"]))
    for name, losses in got.items():
        vs = "" if name == "bf16" else f"   {100 * (np.mean(losses) - base) / base:+.2f} % vs bf16"
        print(f"{name:14s}" + "".join(f"{x:8.4f}" for x in losses) + f"   mean {np.mean(losses):.4f}{vs}")
    spread = 100 * (max(got["bf16"]) - min(got["bf16"])) / base
    print(f"(bf16 over the orders: {spread:.2f} % from lowest to highest)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
