"""The CUDA executor end to end: a compiled MLP training loop matches the reference executor's loss
curve, outputs are fresh arrays, DLPack is zero-copy, and the NVRTC cache survives a restart and
recovers from corruption."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import flame
from flame.runtime import device

ROOT = Path(__file__).resolve().parents[2]


def _use(name: str) -> None:
    device._chosen[:] = [name]
    device.executor.cache_clear()


def _train(dev: str, steps: int = 30) -> list[float]:
    """A 2-layer tanh MLP, forward + backward + manual SGD (p.copy_) in one compiled step."""
    _use(dev)
    rng = np.random.default_rng(0)
    x = flame.tensor(rng.standard_normal((64, 10)).astype(np.float32))
    y = flame.tensor(rng.standard_normal((64, 1)).astype(np.float32))
    params = [flame.tensor((rng.standard_normal((10, 32)) * 0.3).astype(np.float32), requires_grad=True),
              flame.tensor(np.zeros(32, np.float32), requires_grad=True),
              flame.tensor((rng.standard_normal((32, 1)) * 0.3).astype(np.float32), requires_grad=True),
              flame.tensor(np.zeros(1, np.float32), requires_grad=True)]
    w1, b1, w2, b2 = params

    @flame.compile
    def step(x, y):
        h = (x @ w1 + b1).tanh()
        loss = ((h @ w2 + b2 - y) ** 2).mean()
        loss.backward()
        with flame.no_grad():  # an update of a leaf that requires grad, as in torch
            for p in params:
                p.copy_(p - 0.05 * p.grad)
                p.grad = None
        return loss

    return [float(step(x, y)) for _ in range(steps)]


@pytest.mark.gpu
def test_mlp_training_matches_reference():
    ref = _train("reference")
    got = _train("cuda")
    assert ref[-1] < ref[0]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_outputs_are_fresh_and_dlpack_is_zero_copy():
    import cupy

    x = flame.tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    y = (x * 2.0).exp()
    z = (x * 2.0).exp()
    assert y._data.data.ptr != z._data.data.ptr
    np.testing.assert_allclose(y.numpy(), np.exp(2 * np.arange(12, dtype=np.float32)).reshape(3, 4), rtol=1e-6)
    c = cupy.from_dlpack(y)
    assert c.data.ptr == y._data.data.ptr
    back = flame.from_dlpack(c)
    assert back._data.data.ptr == c.data.ptr and back.dtype == flame.float32


_RESTART = """
import sys, numpy as np, flame
from flame.codegen import nvrtc
calls = []
real = nvrtc._compile
def spy(*a, **k):
    calls.append(1)
    return real(*a, **k)
nvrtc._compile = spy
x = flame.tensor(np.linspace(-1, 1, 1001, dtype=np.float32))
y = ((x * 3.0).tanh() + 1.0).sum()
assert abs(float(y) - float(np.sum(np.tanh(3 * np.linspace(-1, 1, 1001)) + 1))) < 1e-2
print("compiles", len(calls))
"""


def _fresh_process(cache: Path) -> int:
    env = dict(os.environ, FLAME_CACHE_DIR=str(cache), FLAME_DEVICE="cuda",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", _RESTART], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split("compiles")[-1])


@pytest.mark.gpu
def test_nvrtc_cache_hits_after_restart_and_recovers_from_corruption(tmp_path):
    cache = tmp_path / "cache"
    first = _fresh_process(cache)
    assert first > 0
    assert _fresh_process(cache) == 0  # a new process compiles nothing
    files = [p for p in cache.rglob("*") if p.is_file()]
    assert files
    for p in files:
        p.write_bytes(b"garbage" + p.read_bytes()[:10])
    assert _fresh_process(cache) == first  # corrupted entries are detected and rebuilt
    assert _fresh_process(cache) == 0


def _ce_grad(dev: str, logits: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Compiled cross-entropy's loss and logits gradient: its one-hot is `arange == targets`, an
    arange (positional op) fused into the softmax rows kernel."""
    import flame.nn.functional as F

    _use(dev)
    x = flame.tensor(logits, requires_grad=True)

    @flame.compile
    def step(t):
        loss = F.cross_entropy(x.reshape(-1, logits.shape[-1]), t.reshape(-1))
        loss.backward()
        return loss, x.grad

    loss, grad = step(flame.tensor(targets))
    return loss.numpy(), grad.numpy()


@pytest.mark.gpu
@pytest.mark.parametrize("vocab", [16, 256, 1000])
def test_positional_ops_read_their_own_index(vocab):
    """Regression: a positional op whose index was the loop's own `i` rendered `const idx_t i =
    (idx_t)(i)`, reading the new, uninitialised i: arange gave garbage on the GPU, so cross-entropy's
    one-hot missed the targets and every gradient of a GPT step was wrong while its loss was right."""
    _use("cuda")
    for n in (vocab, 2 * vocab + 1):
        np.testing.assert_array_equal(flame.arange(n).numpy(), np.arange(n))
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((2, 64, vocab)).astype(np.float32)
    targets = rng.integers(0, vocab, (2, 64)).astype(np.int64)
    want = _ce_grad("reference", logits, targets)
    got = _ce_grad("cuda", logits, targets)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-7)
