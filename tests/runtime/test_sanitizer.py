"""The GPU suite under NVIDIA's compute-sanitizer: memcheck over the GPU tests of the kernels,
reductions, attention and the runtime (every planned buffer its own allocation, FLAME_SANITIZE=1, so
an access past a buffer is caught), and racecheck over the reduction and attention kernels. Skipped,
saying why, where the sanitizer or a GPU is absent. The whole GPU suite under memcheck:
docs/writing_an_op.md (Compute-sanitizer)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# the GPU tests of flame's own kernels (every schedule), attention and the runtime (not
# test_gpu_graphs_memory: with the pool off it measures nothing)
MEMCHECK_TESTS = ["tests/codegen", "tests/runtime/test_gpu_runtime.py", "tests/runtime/test_gpu_attention.py",
                  "tests/runtime/test_gpu_matmul.py"]


def sanitizer() -> str | None:
    """compute-sanitizer on PATH, or in the CUDA toolkit ($CUDA_HOME, /usr/local/cuda)."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "compute-sanitizer").is_file():
            return str(Path(home) / "bin" / "compute-sanitizer")
    return None


def _run(tool: str, args: list[str], timeout: int, exclude: str = "") -> subprocess.CompletedProcess:
    exe = sanitizer()
    if exe is None:
        pytest.skip("compute-sanitizer not found (not on PATH, $CUDA_HOME/bin or /usr/local/cuda/bin): the "
                    "memory and race checks did not run")
    env = {**os.environ, "FLAME_SANITIZE": "1", "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    # API errors are not kernel faults: cuda-bindings probes driver entry points that may not exist
    cmd = [exe, "--tool", tool, "--error-exitcode", "97", "--report-api-errors", "no",
           *(["--leak-check", "no"] if tool == "memcheck" else []),
           *(["--kernel-name-exclude", exclude] if exclude else []), sys.executable, *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def _clean(res: subprocess.CompletedProcess) -> None:
    tail = (res.stdout + res.stderr)[-6000:]
    assert res.returncode == 0, f"compute-sanitizer found errors (exit {res.returncode}):\n{tail}"
    # memcheck ends with "ERROR SUMMARY: 0 errors", racecheck with "RACECHECK SUMMARY: ... (0 errors, 0 warnings)"
    assert "ERROR SUMMARY: 0 errors" in res.stdout + res.stderr or "(0 errors, 0 warnings)" in res.stdout, tail


@pytest.mark.gpu
def test_gpu_kernels_pass_memcheck():
    _clean(_run("memcheck", ["-m", "pytest", "-q", "-m", "gpu", "-p", "no:randomly", "-p", "no:cacheprovider",
                             *MEMCHECK_TESTS], timeout=1800))


RACE_SCRIPT = """
import numpy as np, flame, flame.nn.functional as F
rng = np.random.default_rng(0)
def t(*shape, dt=flame.f32):
    return flame.tensor(rng.standard_normal(shape).astype(np.float32)).to(dt)
# one shape per reduction schedule: rows in a block, rows split across blocks, columns (split over
# the reduced axis), a whole-tensor reduction, a row softmax and norms
for x, axis in [(t(64, 1000), -1), (t(4, 1 << 16), -1), (t(4096, 96), 0), (t(300, 7), 0), (t(1 << 20), None)]:
    x.sum() if axis is None else x.sum(axis)
    x.amax() if axis is None else x.amax(axis)
F.softmax(t(64, 3000), dim=-1)
F.layer_norm(t(64, 1024), (1024,))
@flame.compile
def loss_and_grad(x):
    x.requires_grad = True
    y = (x * x).mean()
    y.backward()
    return y, x.grad
loss_and_grad(t(512, 4096))
for causal in (True, False):
    q, k, v = (t(2, 4, 128, 64, dt=flame.bf16) for _ in range(3))
    for a in (q, k, v):
        a.requires_grad = True
    F.scaled_dot_product_attention(q, k, v, is_causal=causal).float().sum().backward()
    att = F.softmax((q @ k.transpose(-1, -2)).float() * 0.125, dim=-1)  # the unfused form's kernels
    (att.to(flame.bf16) @ v).float().sum().backward()
flame.runtime.device.executor()  # the GPU executor ran all of it
print("race script done")
"""


@pytest.mark.gpu
def test_reduction_and_attention_kernels_pass_racecheck():
    # flame's kernels only: racecheck does not model the asynchronous (TMA/wgmma, mbarrier) copies of
    # cuDNN's Hopper flash-attention kernels and reports hazards in them that are not races
    res = _run("racecheck", ["-c", RACE_SCRIPT], timeout=1200, exclude="kns=cudnn_generated")
    _clean(res)
    assert "race script done" in res.stdout
