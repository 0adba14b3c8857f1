"""examples/lora_finetune.py --tiny on the reference executor: it trains the base with train_gpt.py,
fine-tunes adapters on the docstrings with the base frozen (bit for bit), the docstrings' validation
loss falls, the adapters file holds only PEFT-named adapters, and reloading them into a fresh model
gives exactly the same loss (merged: the same up to rounding)."""

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import safetensors.numpy

from flame.checkpoint import load_metadata

ROOT = Path(__file__).resolve().parents[2]


def test_tiny_lora_finetune(tmp_path):
    env = dict(os.environ, FLAME_DEVICE="reference", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "lora_finetune.py"), "--tiny", "--steps", "25",
                           "--base", str(tmp_path / "base"), "--out", str(tmp_path / "lora")],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log
    assert "training it with examples/train_gpt.py" in log and (tmp_path / "base" / "checkpoint.safetensors").exists()
    assert "frozen base parameters unchanged: yes" in log
    rows = {label.strip(): (float(code), float(docs)) for label, code, docs in
            re.findall(r"^(base model|after LoRA fine-tuning)\s+([\d.]+)\s+([\d.]+)$", log, re.M)}
    assert set(rows) == {"base model", "after LoRA fine-tuning"}
    assert all(math.isfinite(v) for pair in rows.values() for v in pair)
    assert rows["after LoRA fine-tuning"][1] < rows["base model"][1] - 0.02  # the docstrings' loss falls

    reloaded = re.search(r"reloaded into a fresh model: docstrings validation loss ([\d.]+) \(fine-tuned model "
                         r"([\d.]+), difference ([\d.e+-]+)\)", log)
    assert reloaded and float(reloaded.group(3)) == 0.0  # the same plans on the same weights: bit for bit
    merged = re.search(r"merged into the base weights: docstrings validation loss [\d.]+ "
                       r"\(difference ([\d.e+-]+)\)", log)
    assert merged and float(merged.group(1)) < 1e-4

    path = tmp_path / "lora" / "adapters.safetensors"
    names = sorted(safetensors.numpy.load_file(str(path)))
    layers = json.loads(load_metadata(tmp_path / "base" / "checkpoint.safetensors")["config"])["layers"]
    assert names == sorted(f"base_model.model.blocks.{i}.{m}.lora_{ab}.weight" for i in range(layers)
                           for m in ("qkv", "proj", "fc", "out") for ab in "AB")
    config = json.loads(load_metadata(path)["adapter_config"])
    assert config["r"] == 4 and config["lora_alpha"] == 8 and config["peft_type"] == "LORA"
    assert log.split("--- sample ---\n")[-1].startswith("Return the ")
