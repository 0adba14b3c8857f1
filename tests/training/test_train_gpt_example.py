"""examples/train_gpt.py --tiny on the reference executor: the loss falls below ln(vocabulary), the
loss curve and the checkpoint are written, and --resume continues from the saved step."""

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

from flame.checkpoint import load_metadata

ROOT = Path(__file__).resolve().parents[2]


def _run(out: Path, *args: str) -> str:
    env = dict(os.environ, FLAME_DEVICE="reference", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "train_gpt.py"), "--tiny", "--out", str(out),
                           *args], capture_output=True, text=True, env=env, timeout=300, cwd=out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def _evals(log: str) -> list[tuple[int, float, float]]:
    return [(int(s), float(t), float(v)) for s, t, v in
            re.findall(r"step (\d+): train loss ([\d.naif]+)\s+validation loss ([\d.naif]+)", log)]


def test_tiny_gpt_trains_saves_and_resumes(tmp_path):
    log = _run(tmp_path, "--steps", "20")
    assert "device: reference, dtype f32" in log
    ln_vocab = float(re.search(r"vocabulary \d+ \(ln ([\d.]+)\)", log).group(1))
    evals = _evals(log)
    assert [s for s, _, _ in evals] == [10, 20]
    for _, train, val in evals:
        assert math.isfinite(train) and math.isfinite(val) and val < ln_vocab - 0.5
    assert evals[-1][2] < evals[0][2]  # validation loss falls
    assert "(1 trace(s) of the training step" in log
    sample = log.split("--- sample ---\n", 1)[1]
    assert sample.startswith("def ") and len(sample.strip()) >= 40
    ckpt = tmp_path / "checkpoint.safetensors"
    assert ckpt.stat().st_size > 0 and (tmp_path / "loss.png").read_bytes()[:4] == b"\x89PNG"
    assert load_metadata(ckpt)["step"] == "20"

    log = _run(tmp_path, "--steps", "30", "--resume")
    assert f"resumed from step 20 ({ckpt})" in log
    assert [s for s, _, _ in _evals(log)] == [30]  # only the steps after the checkpoint ran
    meta = load_metadata(ckpt)
    assert meta["step"] == "30"
    assert [s for s, _ in json.loads(meta["history"])["val"]] == [10, 20, 30]  # the history carries on
    assert _evals(log)[0][2] < ln_vocab - 0.5
