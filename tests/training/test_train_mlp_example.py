"""examples/train_mlp.py runs end to end on the reference executor and reaches >= 95% test accuracy."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_train_mlp_example_reaches_95_percent():
    env = dict(os.environ, FLAME_DEVICE="reference", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "train_mlp.py"), "--epochs", "15"],
                          capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert out.splitlines()[0] == "device: reference"
    assert "graph train_step" not in out  # the IR is printed only with --print-ir
    epochs = [line for line in out.splitlines() if line.startswith("epoch")]
    assert len(epochs) == 15 and "steps/s" in epochs[0] and "loss" in epochs[0]
    acc = float(re.search(r"final test accuracy ([\d.]+)%", out).group(1))
    assert acc >= 95.0
    assert "(1 trace(s) of the training step" in out


def test_train_mlp_example_prints_ir_on_request(capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_mlp_example", ROOT / "examples" / "train_mlp.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main(["--epochs", "1", "--print-ir"])
    out = capsys.readouterr().out
    assert "graph train_step(" in out and " scalar" in out and " -> " in out
