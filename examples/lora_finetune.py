"""Fine-tune LoRA adapters on a frozen character-level GPT (the model of examples/train_gpt.py).

    python3 examples/lora_finetune.py [--tiny] [--base runs/gpt] [--out runs/lora] [--steps N] [--rank 16]

1. The base model is the checkpoint examples/train_gpt.py writes (BASE/checkpoint.safetensors): a GPT
   trained on the code of the standard library's top-level modules. When it is missing, train_gpt.py
   trains it first (same --tiny / --device / --dtype).
2. The new text is different: the docstrings of the standard library's packages (asyncio, email,
   json, ...; read with `ast`), English prose about code, from files the base never saw.
3. Every attention and MLP projection (qkv, proj, fc, out of each block) gets a rank-r adapter
   (flame.nn.utils.lora); everything else is frozen, so the compiled training step computes no
   weight gradient of the base and AdamW holds state for the adapters only.
4. The validation loss on both texts is shown before and after; the adapters are saved (PEFT's
   names, safetensors), reloaded into a fresh model built from the base checkpoint (the same loss),
   and merged into the base weights (the same loss up to rounding, at the base model's cost).

--tiny is a configuration of a few seconds for CI (on the reference executor without a GPU).
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import os
import sys
import sysconfig
import warnings
from pathlib import Path

import numpy as np

import flame
from flame.checkpoint import load_checkpoint, load_metadata
from flame.nn.utils import lora
from flame.optim.lr_scheduler import WarmupCosineLR

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_gpt  # noqa: E402  (the model, data windows and sampling of examples/train_gpt.py)

FULL = {"steps": 600, "lr": 2e-3, "chars": 1_000_000, "rank": 16, "sample": 300}
TINY = {"steps": 30, "lr": 1e-2, "chars": 60_000, "rank": 4, "sample": 60}
TARGETS = ["qkv", "proj", "fc", "out"]  # every attention and MLP projection of a Block
_SKIP = {"site-packages", "test", "tests"}


def stdlib_docstrings(limit: int) -> str:
    """The docstrings (module, class, function) of the standard library's packages, the .py files in
    its subfolders sorted by path (train_gpt.py reads only top-level modules), ASCII only, up to
    `limit` characters."""
    root = Path(sysconfig.get_paths()["stdlib"])
    parts, size = [], 0
    for path in sorted(root.glob("*/**/*.py")):
        if _SKIP & set(path.relative_to(root).parts):
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # invalid escapes in old sources
                tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    parts.append(doc.encode("ascii", errors="replace").decode("ascii") + "\n\n")
                    size += len(parts[-1])
        if size >= limit:
            break
    return "".join(parts)[:limit]


def evaluator(model: train_gpt.GPT, base_cfg: dict):
    """data -> mean validation loss over fixed windows (the same ones at every call). Compiled for
    the model as it is now: build a new evaluator after wrapping or merging (structure is traced)."""

    @flame.compile
    def eval_loss(x, y):
        return model.loss(x, y)

    def evaluate(data: np.ndarray) -> float:
        rng = np.random.default_rng(1234)
        return float(np.mean([eval_loss(*train_gpt.batch(data, base_cfg["T"], base_cfg["batch"], rng)).item()
                              for _ in range(base_cfg["eval_batches"])]))

    return evaluate


def load_base(ckpt: str, vocab: str, cfg: dict, dtype, seed: int) -> train_gpt.GPT:
    """A GPT of the checkpoint's configuration (initialised with `seed`), with the checkpoint's weights."""
    model = train_gpt.GPT(len(vocab), cfg["d"], cfg["layers"], cfg["heads"], cfg["T"], dtype, seed)
    load_checkpoint(ckpt, model)
    return model


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="a few seconds' configuration (CI)")
    ap.add_argument("--base", default="runs/gpt", help="train_gpt.py's output folder (trained there if missing)")
    ap.add_argument("--out", default="runs/lora", help="folder for adapters.safetensors")
    ap.add_argument("--steps", type=int, default=None, help="fine-tuning steps")
    ap.add_argument("--rank", type=int, default=None, help="LoRA rank r (default 16; 4 with --tiny)")
    ap.add_argument("--alpha", type=float, default=None, help="LoRA alpha (default 2 r)")
    ap.add_argument("--dtype", choices=("bf16", "f32"), default=None, help="compute dtype (default bf16 on a GPU)")
    ap.add_argument("--device", choices=flame.runtime.device.DEVICES, default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.device:
        flame.set_device(args.device)
    cfg = dict(TINY if args.tiny else FULL)
    cfg["steps"] = args.steps if args.steps is not None else cfg["steps"]
    cfg["rank"] = args.rank or cfg["rank"]
    cfg["alpha"] = args.alpha or 2.0 * cfg["rank"]
    args.dtype = args.dtype or ("bf16" if flame.get_device() == "cuda" else "f32")
    if not args.tiny and flame.get_device() != "cuda":
        print("note: the full-size configuration is sized for a GPU; on the CPU (reference executor) it runs "
              "for hours. Pass --tiny for a configuration that runs in seconds.", flush=True)
    return args, cfg


def ensure_base(args: argparse.Namespace) -> str:
    """BASE/checkpoint.safetensors, trained by train_gpt.py first when it is missing."""
    ckpt = os.path.join(args.base, "checkpoint.safetensors")
    if not os.path.exists(ckpt):
        print(f"no base model at {ckpt}: training it with examples/train_gpt.py", flush=True)
        extra = (["--tiny"] if args.tiny else []) + (["--device", args.device] if args.device else [])
        train_gpt.main(["--out", args.base, "--dtype", args.dtype, "--seed", str(args.seed), *extra])
    return ckpt


def finetune(model: train_gpt.GPT, data: np.ndarray, base_cfg: dict, cfg: dict, seed: int) -> None:
    """cfg["steps"] AdamW steps on the trainable parameters (the adapters), one compiled graph."""
    from tqdm import tqdm

    opt = flame.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg["lr"], weight_decay=0.0)
    sched = WarmupCosineLR(opt, warmup_steps=max(1, cfg["steps"] // 20), total_steps=cfg["steps"])

    @flame.compile
    def train_step(x, y):
        loss = model.loss(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    rng = np.random.default_rng(seed)
    bar = tqdm(range(cfg["steps"]), desc="lora", mininterval=0.5)
    for step in bar:
        loss = train_step(*train_gpt.batch(data, base_cfg["T"], base_cfg["batch"], rng))
        sched.step()
        if step % 10 == 0 or step + 1 == cfg["steps"]:
            bar.set_postfix(loss=f"{loss.item():.3f}")
    bar.close()


def main(argv: list[str] | None = None) -> int:
    args, cfg = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    ckpt = ensure_base(args)
    meta = load_metadata(ckpt)
    vocab, base_cfg = json.loads(meta["vocab"]), json.loads(meta["config"])
    dtype = flame.bf16 if args.dtype == "bf16" else flame.f32
    code = train_gpt.encode(train_gpt.stdlib_text(base_cfg["chars"]), vocab)
    docs = train_gpt.encode(stdlib_docstrings(cfg["chars"]), vocab)
    split = int(0.9 * len(docs))
    texts = {"code": code[int(0.9 * len(code)):], "docstrings": docs[split:]}  # validation parts
    print(f"device: {flame.get_device()}, dtype {args.dtype}; base model {ckpt} (step {meta['step']}); "
          f"{len(docs):,} characters of standard-library docstrings to fine-tune on", flush=True)

    model = load_base(ckpt, vocab, base_cfg, dtype, args.seed)
    evaluate = evaluator(model, base_cfg)
    before = {name: evaluate(data) for name, data in texts.items()}

    config = lora.LoraConfig(r=cfg["rank"], lora_alpha=cfg["alpha"], target_modules=TARGETS)
    lora.apply_lora(model, config, generator=flame.Generator(args.seed + 1))
    n_all = sum(p.numel() for p in model.parameters())
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    wrapped = len(list(lora.lora_layers(model)))
    print(f"LoRA r={config.r}, alpha={config.lora_alpha:g} on {wrapped} projections ({', '.join(TARGETS)}): "
          f"{n_train:,} trainable parameters of {n_all:,} ({100 * n_train / n_all:.1f}%)", flush=True)
    frozen = {n: p.numpy().tobytes() for n, p in model.named_parameters() if not p.requires_grad}

    finetune(model, docs[:split], base_cfg, cfg, args.seed)
    evaluate = evaluator(model, base_cfg)
    after = {name: evaluate(data) for name, data in texts.items()}
    unchanged = all(p.numpy().tobytes() == frozen[n] for n, p in model.named_parameters() if n in frozen)
    print(f"frozen base parameters unchanged: {'yes' if unchanged else 'NO'} ({len(frozen)} tensors, bit for bit)")
    print(f"\n{'validation loss (nats per character)':<38}{'stdlib code':>14}{'stdlib docstrings':>20}")
    for label, losses in (("base model", before), ("after LoRA fine-tuning", after)):
        print(f"{label:<38}{losses['code']:>14.4f}{losses['docstrings']:>20.4f}")

    path = os.path.join(args.out, "adapters.safetensors")
    lora.save_lora(model, path, {"base": os.path.abspath(ckpt)})
    print(f"\nsaved the adapters to {path} ({os.path.getsize(path):,} bytes; base checkpoint "
          f"{os.path.getsize(ckpt):,} bytes)")
    fresh = load_base(ckpt, vocab, base_cfg, dtype, args.seed + 7)  # another init: the files supply every weight
    lora.load_lora(fresh, path)
    reloaded = evaluator(fresh, base_cfg)(texts["docstrings"])
    print(f"reloaded into a fresh model: docstrings validation loss {reloaded:.6f} "
          f"(fine-tuned model {after['docstrings']:.6f}, difference {abs(reloaded - after['docstrings']):.1e})")
    lora.merge_lora(fresh)
    merged = evaluator(fresh, base_cfg)(texts["docstrings"])
    print(f"merged into the base weights: docstrings validation loss {merged:.6f} "
          f"(difference {abs(merged - after['docstrings']):.1e})")
    ok = math.isfinite(merged) and unchanged
    print("--- sample ---\n" + train_gpt.sample(fresh, vocab, "Return the ", cfg["sample"], base_cfg["T"], args.seed))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
