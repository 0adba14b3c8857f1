"""examples/train_cnn.py and examples/train_diffusion.py --tiny run end to end on the reference
executor: the loss falls, the training step is traced once, the checkpoint and the PNGs are written
(and the CNN's checkpoint reloads to the same test accuracy)."""

import os
import re
import subprocess
import sys
from pathlib import Path

from flame.checkpoint import load, load_metadata

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str, out: Path) -> str:
    env = dict(os.environ, FLAME_DEVICE="reference", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / script), "--tiny", "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=300, cwd=out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def _png(path: Path) -> bool:
    return path.read_bytes()[:4] == b"\x89PNG"


def test_tiny_cnn_trains_saves_and_reloads(tmp_path):
    log = _run("train_cnn.py", tmp_path)
    assert "device: reference" in log
    losses = [float(v) for v in re.findall(r"epoch +\d+ +loss ([\d.]+)", log)]
    assert len(losses) == 3 and losses[-1] < losses[0]
    acc = float(re.search(r"final test accuracy ([\d.]+)%", log).group(1))
    assert acc >= 50.0  # three short epochs on 384 digits; the full run reaches 99 %
    assert "(1 trace(s) of the training step)" in log
    assert f"test accuracy {acc:.2f}%" in log.split("reloaded", 1)[1]
    ckpt = tmp_path / "checkpoint.safetensors"
    assert "stem.1.num_batches_tracked" in load(ckpt) and load_metadata(ckpt)["epochs"] == "3"
    assert _png(tmp_path / "curves.png")


def test_tiny_diffusion_trains_and_samples(tmp_path):
    log = _run("train_diffusion.py", tmp_path)
    assert "device: reference" in log and "16x16" in log
    first, last = (float(v) for v in re.search(r"loss ([\d.]+) -> ([\d.]+)", log).groups())
    assert last < first
    assert "(1 trace(s) of the training step)" in log
    assert load_metadata(tmp_path / "checkpoint.safetensors")["T"] == "20"
    assert _png(tmp_path / "loss.png") and _png(tmp_path / "samples.png")
