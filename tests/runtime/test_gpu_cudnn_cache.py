"""The cache of built cuDNN graphs (flame.runtime.cudnn_cache) on the GPU: a convolution (forward, data
and weight gradient) and an attention graph pair (forward with statistics, backward) are built and
stored, the in-process graph caches are emptied, and the graphs read back from disk (nothing built)
run with the results of the graphs that were built, bit for bit wherever the built graph itself
reproduces its results bit for bit (an engine that adds in a varying order is held to the tolerance of
tests/runtime/test_gpu_conv.py instead); and a new process loads the graphs another process stored
without building any. The CPU half, with a stand-in cudnn module, is tests/runtime/test_cudnn_cache.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
CONV_CASE = "2d-groups-stride"


def _new_process() -> None:
    from flame.runtime import cudnn_attention, cudnn_conv

    cudnn_conv.cudnn_conv.cache_clear()
    cudnn_conv.refusal.cache_clear()
    cudnn_attention.cudnn_attention.cache_clear()


@pytest.fixture
def graph_cache(tmp_path, monkeypatch):
    pytest.importorskip("cupy")
    pytest.importorskip("cudnn")
    from flame.runtime import cudnn_cache

    monkeypatch.setenv("FLAME_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FLAME_CACHE_SIZE")  # the default size: the cache is on
    monkeypatch.setattr(cudnn_cache, "COUNTS", cudnn_cache.Counts())
    _new_process()
    yield tmp_path / "cache"
    _new_process()


def _conv_runs(cupy) -> dict:
    """Each convolution kind of CONV_CASE in f16, run twice: {kind: (first, second) host arrays}."""
    from flame.ir.dtypes import f16
    from flame.ir.ops.conv import CONV_OPS
    from tests.passes.test_decompose_conv import conv_graph
    from tests.runtime.test_gpu_conv import _inputs, _run

    runs = {}
    for which in CONV_OPS:
        op = conv_graph(which, CONV_CASE, f16).ops[0]
        arrays = _inputs(op)
        runs[which] = tuple(cupy.asnumpy(_run(cupy, op, arrays)[1]) for _ in range(2))
    return runs


def _attention_runs(cupy) -> dict:
    """Causal attention forward and backward with a mask, run twice: {result: (first, second)}."""
    from tests.runtime.test_gpu_attention import _run, _setup

    _, _, dev, att = _setup(True, mask=True, seed=2)
    done = [[cupy.asnumpy(a) for a in _run(cupy, dev, att)[:3]] for _ in range(2)]
    return {name: (done[0][i], done[1][i]) for i, name in enumerate(("out", "stats", "grads"))}


def _values(a: np.ndarray) -> np.ndarray:
    """A result as float64 (uint16 arrays hold bf16 bits)."""
    from flame.ir.dtypes import bf16

    return (a.view(bf16.np_dtype) if a.dtype == np.uint16 else a).astype(np.float64)


def _agree(built: dict, loaded: dict) -> None:
    """Loaded results equal the built graph's bit for bit where the built graph reproduces itself."""
    for name, (first, second) in built.items():
        got = loaded[name][0]
        if first.tobytes() == second.tobytes():
            assert got.tobytes() == first.tobytes(), f"{name}: the graph read back computes other bits"
        else:
            want = _values(first)
            err = np.abs(_values(got) - want).max() / max(np.abs(want).max(), 1e-30)
            assert err <= 2e-2, f"{name}: max error {err:.3g} of max |want|"


@pytest.mark.gpu
def test_graphs_read_back_run_bit_for_bit_like_the_built_ones(graph_cache, monkeypatch):
    import cupy

    from flame.runtime import cudnn_attention, cudnn_cache, cudnn_conv

    conv_built, att_built = _conv_runs(cupy), _attention_runs(cupy)
    c = cudnn_cache.COUNTS
    assert c.built == 5 and c.stored == 5, (
        f"{c}: graphs without a serialized form are not stored (the flame logger says why at DEBUG)"
    )
    assert len(list(graph_cache.glob("*.cudnn"))) == 5
    _new_process()

    def no_build(*a, **kw):
        raise AssertionError("a graph was built instead of read back")

    for cls, names in (
        (cudnn_conv.CudnnConv, ("_build",)),
        (cudnn_attention.CudnnAttention, ("_build_forward", "_build_backward")),
    ):
        for name in names:
            monkeypatch.setattr(cls, name, no_build)
    conv_loaded, att_loaded = _conv_runs(cupy), _attention_runs(cupy)
    assert (c.built, c.loaded) == (5, 5) and c.load_seconds > 0
    _agree(conv_built, conv_loaded)
    _agree(att_built, att_loaded)


_SCRIPT = """
import hashlib, json, warnings
warnings.filterwarnings("error", message="flame:", category=RuntimeWarning)
import cupy
from flame.runtime import cudnn_cache
from tests.runtime.test_gpu_cudnn_cache import _attention_runs, _conv_runs
runs = {**_conv_runs(cupy), **_attention_runs(cupy)}
c = cudnn_cache.COUNTS
print(json.dumps({"built": c.built, "loaded": c.loaded, "stored": c.stored, "rebuilt": c.rebuilt,
                  "seconds": c.seconds,
                  "digests": {k: hashlib.sha256(a.tobytes()).hexdigest() for k, (a, b) in runs.items()
                              if a.tobytes() == b.tobytes()}}))
"""


def _process(cache: Path) -> dict:
    env = dict(os.environ, FLAME_CACHE_DIR=str(cache), FLAME_CACHE_SIZE="")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.gpu
def test_a_new_process_loads_the_graphs_without_building(tmp_path):
    pytest.importorskip("cupy")
    pytest.importorskip("cudnn")
    one = _process(tmp_path / "cache")
    assert one["built"] == 5 and one["stored"] == 5, one
    two = _process(tmp_path / "cache")
    assert (two["built"], two["loaded"], two["stored"], two["rebuilt"]) == (0, 5, 0, 0), two
    same = set(one["digests"]) & set(two["digests"])
    assert {"conv", "out", "stats"} <= same, (one["digests"], two["digests"])
    assert all(one["digests"][k] == two["digests"][k] for k in same)
