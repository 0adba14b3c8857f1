"""cuDNN graphs built in builder processes (flame.runtime.cudnn_builders) on the GPU: in a new process
with an empty cache, the graphs of a convolution (forward, data and weight gradient) and of an
attention pair (forward with statistics, backward) handed to builder processes are read back, none
built in the process, and compute what a process building them itself computes, bit for bit wherever
that process's results repeat; and a compiled convolutional step hands its graphs over. The CPU half,
with a stand-in cudnn module, is tests/runtime/test_cudnn_builders.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent

_SCRIPT = """
import hashlib, json, warnings
warnings.filterwarnings("error", message="flame:", category=RuntimeWarning)
import cupy
from flame.ir.dtypes import f16
from flame.ir.ops.conv import CONV_OPS
from flame.runtime import cudnn_builders, cudnn_cache, cudnn_conv, determinism
from tests.passes.test_decompose_conv import conv_graph
from tests.runtime.test_gpu_attention import _setup
from tests.runtime.test_gpu_cudnn_cache import CONV_CASE, _attention_runs, _conv_runs
det = determinism.cudnn()
requests = [cudnn_builders.Request("conv", cudnn_conv.spec_of(conv_graph(w, CONV_CASE, f16).ops[0]), det,
                                   cudnn_conv.allow_tf32) for w in CONV_OPS]
spec = _setup(True, mask=True, seed=2)[3].spec
requests += [cudnn_builders.Request(f"attention {d}", spec, det) for d in ("forward", "backward")]
with cudnn_builders.session():
    handed = cudnn_builders.prefetch(requests)
    runs = {**_conv_runs(cupy), **_attention_runs(cupy)}
c = cudnn_cache.COUNTS
print(json.dumps({"handed_over": handed, "built": c.built, "handed": c.handed, "stored": c.stored,
                  "digests": {k: hashlib.sha256(a.tobytes()).hexdigest() for k, (a, b) in runs.items()
                              if a.tobytes() == b.tobytes()}}))
"""


def _process(cache: Path, builders: str) -> dict:
    env = dict(os.environ, FLAME_CACHE_DIR=str(cache), FLAME_CACHE_SIZE="", FLAME_CUDNN_BUILDERS=builders)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.gpu
def test_graphs_built_by_builder_processes_compute_what_graphs_built_here_do(tmp_path):
    pytest.importorskip("cupy")
    pytest.importorskip("cudnn")
    here = _process(tmp_path / "here", "0")
    assert (here["handed_over"], here["built"], here["handed"]) == (0, 5, 0), here
    there = _process(tmp_path / "there", "3")
    assert (there["handed_over"], there["built"], there["handed"], there["stored"]) == (5, 0, 5, 5), there
    same = set(here["digests"]) & set(there["digests"])
    assert {"conv", "out", "stats"} <= same, (here["digests"], there["digests"])
    assert all(here["digests"][k] == there["digests"][k] for k in same)


_COMPILE = """
import json
import numpy as np
import flame
from flame import nn
from flame.runtime import cudnn_cache
flame.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 8, 3, padding=1))
x = flame.tensor(np.random.default_rng(0).standard_normal((4, 3, 16, 16)).astype(np.float32))
@flame.compile
def step(x):
    loss = model(x).square().mean()
    loss.backward()
    return loss
loss = float(step(x).item())
c = cudnn_cache.COUNTS
print(json.dumps({"loss": loss, "built": c.built, "handed": c.handed}))
"""


@pytest.mark.gpu
def test_a_compiled_convolutional_step_hands_its_graphs_over(tmp_path):
    pytest.importorskip("cupy")
    pytest.importorskip("cudnn")
    runs = {}
    for builders in ("0", "2"):
        env = dict(os.environ, FLAME_CACHE_DIR=str(tmp_path / builders), FLAME_CACHE_SIZE="",
                   FLAME_CUDNN_BUILDERS=builders)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        r = subprocess.run([sys.executable, "-c", _COMPILE], capture_output=True, text=True, env=env, timeout=600,
                           cwd=ROOT)
        assert r.returncode == 0, r.stderr
        runs[builders] = json.loads(r.stdout.strip().splitlines()[-1])
    assert runs["0"]["handed"] == 0 and runs["0"]["built"] >= 3, runs
    assert runs["2"]["handed"] >= 3, runs
    assert runs["2"]["loss"] == pytest.approx(runs["0"]["loss"], rel=1e-5)
