"""Train a small residual CNN with BatchNorm on scikit-learn's bundled 8x8 digits (no download).

    python3 examples/train_cnn.py [--epochs 30] [--out runs/cnn] [--tiny]

The network: a 3x3 convolution stem, residual blocks (conv-BN-ReLU-conv-BN plus the skip), a strided
convolution down to 4x4, global average pooling and a linear head. The whole training step --
forward, loss.backward(), AdamW.step(), zero_grad() and BatchNorm's running statistics -- is one
@flame.compile graph traced once and replayed (the running statistics are state the step updates in
place). Evaluation runs a second compiled function traced in eval mode (BatchNorm then uses the
running statistics). A tqdm bar shows the loss; the loss and accuracy curves are saved as a PNG; the
checkpoint (model, optimizer) is saved, reloaded into a fresh model and checked to give the same test
accuracy. Exits with status 1 below the target accuracy (97 %; --tiny only checks that it learns).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import flame
import flame.nn as nn
import flame.nn.functional as F
from flame.checkpoint import load_checkpoint, save_checkpoint
from flame.optim.lr_scheduler import WarmupCosineLR

FULL = {"width": 32, "blocks": 2, "epochs": 30, "batch": 64, "lr": 3e-3, "train": None, "target": 0.97}
TINY = {"width": 8, "blocks": 1, "epochs": 3, "batch": 32, "lr": 1e-2, "train": 384, "target": 0.5}


def load_data(seed: int):
    """Digits as [N, 1, 8, 8] images scaled to [0, 1], split 80/20 (stratified)."""
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    return train_test_split(x, y.astype(np.int64), test_size=0.2, random_state=seed, stratify=y)


def shift(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each image moved by up to one pixel in each direction (zero fill): cheap augmentation."""
    out = np.zeros_like(x)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    for i, (dy, dx) in enumerate(rng.integers(0, 3, (len(x), 2))):
        out[i] = padded[i, :, dy:dy + 8, dx:dx + 8]
    return out


class ResBlock(nn.Module):
    """x + BN(conv(ReLU(BN(conv(x))))), then ReLU (the convolutions carry no bias: BN follows)."""

    def __init__(self, c: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        return F.relu(x + self.bn2(self.conv2(h)))


class ResNet(nn.Module):
    def __init__(self, width: int, blocks: int, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.stage1 = nn.Sequential(*[ResBlock(width) for _ in range(blocks)])
        self.down = nn.Sequential(nn.Conv2d(width, 2 * width, 3, stride=2, padding=1, bias=False),
                                  nn.BatchNorm2d(2 * width), nn.ReLU())
        self.stage2 = nn.Sequential(*[ResBlock(2 * width) for _ in range(blocks)])
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(2 * width, classes)

    def forward(self, x):
        h = self.stage2(self.down(self.stage1(self.stem(x))))
        return self.head(self.pool(h).flatten(1))


def plot(history: dict, path: str) -> None:
    """Training loss per step and test accuracy per epoch, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    a.plot(history["loss"], lw=0.8)
    a.set_xlabel("step")
    a.set_ylabel("cross-entropy")
    a.set_yscale("log")
    a.set_title("training loss")
    b.plot(range(1, len(history["acc"]) + 1), [100 * v for v in history["acc"]], "o-")
    b.set_xlabel("epoch")
    b.set_ylabel("test accuracy (%)")
    b.set_title("residual CNN on the 8x8 digits")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def evaluator(model: nn.Module):
    """accuracy(x, y) in eval mode through a compiled forward. The mode is structural (BatchNorm uses
    the running statistics): the forward is traced in eval mode on its first call and replayed after."""

    @flame.compile
    def predict(xb):
        return model(xb).argmax(1)

    def accuracy(x: np.ndarray, y: np.ndarray) -> float:
        was = model.training
        model.eval()
        acc = float((predict(flame.tensor(x)).numpy() == y).mean())
        model.train(was)
        return acc

    return accuracy


def main(argv: list[str] | None = None) -> int:
    from tqdm import tqdm

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="a few seconds' configuration (CI)")
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--out", default="runs/cnn", help="folder for checkpoint.safetensors and curves.png")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", choices=flame.runtime.device.DEVICES, default=None)
    args = ap.parse_args(argv)
    if args.device:
        flame.set_device(args.device)
    cfg = dict(TINY if args.tiny else FULL)
    cfg["epochs"] = args.epochs or cfg["epochs"]
    os.makedirs(args.out, exist_ok=True)
    ckpt, png = os.path.join(args.out, "checkpoint.safetensors"), os.path.join(args.out, "curves.png")

    x_train, x_test, y_train, y_test = load_data(args.seed)
    if cfg["train"]:
        x_train, y_train = x_train[:cfg["train"]], y_train[:cfg["train"]]
    print(f"device: {flame.get_device()}; {len(x_train)} training and {len(x_test)} test digits", flush=True)
    flame.manual_seed(args.seed)
    model = ResNet(cfg["width"], cfg["blocks"])
    opt = flame.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=5e-4)
    steps_per_epoch = len(x_train) // cfg["batch"]  # a fixed batch shape: one trace
    total = cfg["epochs"] * steps_per_epoch
    sched = WarmupCosineLR(opt, warmup_steps=max(1, total // 20), total_steps=total)

    @flame.compile
    def train_step(x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    accuracy = evaluator(model)
    rng = np.random.default_rng(args.seed)
    history, t0 = {"loss": [], "acc": []}, time.perf_counter()
    bar = tqdm(total=total, desc="train", mininterval=0.5)
    for epoch in range(1, cfg["epochs"] + 1):
        order = rng.permutation(len(x_train))
        losses = []
        for i in range(steps_per_epoch):
            idx = order[i * cfg["batch"]:(i + 1) * cfg["batch"]]
            losses.append(train_step(flame.tensor(shift(x_train[idx], rng)), flame.tensor(y_train[idx])))
            sched.step()
            bar.update()
        history["loss"] += [t.item() for t in losses]  # .item() waits for the device: once per epoch
        history["acc"].append(accuracy(x_test, y_test))
        bar.set_postfix(loss=f"{np.mean(history['loss'][-steps_per_epoch:]):.4f}", acc=f"{history['acc'][-1]:.3f}")
        bar.write(f"epoch {epoch:3d}  loss {np.mean(history['loss'][-steps_per_epoch:]):.4f}  "
                  f"test accuracy {100 * history['acc'][-1]:.2f}%")
    bar.close()
    acc = history["acc"][-1]
    print(f"final test accuracy {100 * acc:.2f}% in {time.perf_counter() - t0:.1f} s "
          f"({train_step.stats().traces} trace(s) of the training step)", flush=True)

    save_checkpoint(ckpt, model, opt, {"epochs": str(cfg["epochs"]), "width": str(cfg["width"]),
                                       "blocks": str(cfg["blocks"])})
    fresh = ResNet(cfg["width"], cfg["blocks"])
    load_checkpoint(ckpt, fresh)  # parameters and BatchNorm's running statistics
    reloaded = evaluator(fresh)(x_test, y_test)
    print(f"reloaded {ckpt}: test accuracy {100 * reloaded:.2f}%", flush=True)
    plot(history, png)
    print(f"wrote {png}", flush=True)
    if reloaded != acc:
        print("the reloaded model does not reproduce the trained model's accuracy", file=sys.stderr)
        return 1
    return 0 if acc >= cfg["target"] else 1


if __name__ == "__main__":
    sys.exit(main())
