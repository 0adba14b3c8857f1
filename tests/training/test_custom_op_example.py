"""examples/custom_op.py runs end to end on the reference executor: both gradient checks pass, the
compiled training step's loss falls, and its `flame explain` lines show the user's kernels (the leaky
gate fused with the scale after it, squared_relu and its backward as launches of their own)."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_custom_op_example_runs_and_shows_its_kernels():
    env = dict(
        os.environ,
        FLAME_DEVICE="reference",
        OPENBLAS_NUM_THREADS="1",
        OMP_NUM_THREADS="1",
        PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "custom_op.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=ROOT,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    gaps = [float(g) for g in re.findall(r"gradcheck \w+: max gap (\S+)", out)]
    assert len(gaps) == 2 and max(gaps) < 1e-6
    assert re.search(r"over 60 compiled steps \(1 trace\)", out)
    launches = [line for line in out.splitlines() if line.lstrip().startswith("[")]
    assert any(re.search(r"fused_user_leaky_gate_mul_f32_\w+: user_leaky_gate \+ mul ", x) for x in launches)
    assert any(": user_squared_relu  in" in x for x in launches)
    assert any(": user_squared_relu_backward  in" in x for x in launches)
