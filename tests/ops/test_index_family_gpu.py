"""The gather/scatter family on the CUDA executor: duplicate write positions give the last write
(as eagerly and on the reference executor), negative indices wrap where torch wraps them, and an
out-of-bounds index inside a compiled step stops the kernel at a device-side assertion (in a child
process: the assertion leaves the process's CUDA context unusable)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import flame
from tests.ops.test_everyday_ops import check, randn

pytestmark = pytest.mark.gpu
MODES = ("eager", "compiled")


def _write(lib):
    def fn(t, v, i):
        y = t * 1
        y[i, -1] = v
        return y

    return fn


@pytest.mark.parametrize("mode", MODES)
def test_duplicates_and_negative_indices_on_gpu(mode):
    x = randn(300, 7)
    dup = np.array([5, -1, 5, 299, 0, 5] * 50)  # many writes to few positions: the last one wins
    check(_write(flame), _write(torch), x, randn(dup.size, key=1), dup, mode=mode)
    check(lambda t, i: t[i], lambda t, i: t[i], x, dup, mode=mode)
    idx = np.random.default_rng(0).integers(0, 300, (600, 7))
    check(
        lambda t, s, i: t.scatter(0, i, s),
        lambda t, s, i: t.scatter(0, i, s),
        x,
        randn(600, 7, key=2),
        np.sort(idx, axis=0),
        mode=mode,
    )
    check(lambda t, i: t.scatter(0, i, 7.0), lambda t, i: t.scatter(0, i, 7.0), x, idx, mode=mode)
    check(lambda t, i: t.take_along_dim(i, 1), lambda t, i: t.take_along_dim(i, 1), x, -(idx[:300] % 7) - 1, mode=mode)


def test_compiled_duplicate_write_on_gpu():
    @flame.compile
    def step(y, i):
        y[i, 2] = 7.0
        return y.sum()

    y = flame.zeros(4, 4)
    assert step(y, flame.tensor([1, 1, 3])).item() == 14.0
    assert y.numpy()[:, 2].tolist() == [0.0, 7.0, 0.0, 7.0]


SCRIPT = """
import flame
x = flame.ones(4, 3)
f = flame.compile(lambda x, i: x.gather(0, i).sum())
print(f(x, flame.tensor([[0, 1, 2]])).item(), flush=True)
print(f(x, flame.tensor([[0, {bad}, 2]])).item(), flush=True)
"""


@pytest.mark.parametrize("bad", [-1, 4])
def test_out_of_bounds_index_stops_the_compiled_kernel(bad):
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT.format(bad=bad))], capture_output=True, text=True, timeout=300
    )
    out = r.stdout + r.stderr
    assert r.returncode != 0 and r.stdout.startswith("3.0"), out
    assert "gather: index out of bounds" in out, out  # the assertion's text, printed by the device


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_embedding_gradient_on_gpu(dtype):
    """An embedding's compiled backward on the CUDA executor (segment_sum: slots zeroed, 16-byte f32
    atomics, rounded once) against torch's sums in f32 of the same cotangent, one row looked up
    many times."""
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 1000, (8, 512))
    ids[:, ::7] = 5
    w0 = rng.standard_normal((1000, 768)).astype(np.float32)
    ct = rng.standard_normal((8, 512, 768)).astype(np.float32)
    w = flame.nn.Parameter(flame.tensor(w0).to(getattr(flame, dtype)))
    g = flame.tensor(ct)

    @flame.compile
    def step(i):
        loss = (flame.nn.functional.embedding(i, w).float() * g).sum()
        loss.backward()
        return loss

    step(flame.tensor(ids))
    low = getattr(torch, dtype)
    src = torch.from_numpy(ct).to(low).float().reshape(-1, 768)
    want = torch.zeros(1000, 768).index_add_(0, torch.from_numpy(ids).reshape(-1), src).to(low).float().numpy()
    if dtype == "bfloat16":
        np.testing.assert_allclose(w.grad.float().numpy(), want, rtol=1e-2, atol=1e-2)
    else:  # f32 atomics add in any order: within the recursive-summation bound n * eps * sum |x| of f64's sum
        flat = torch.from_numpy(ids).reshape(-1)
        exact = torch.zeros(1000, 768, dtype=torch.float64).index_add_(0, flat, src.double()).numpy()
        mass = torch.zeros(1000, 768, dtype=torch.float64).index_add_(0, flat, src.double().abs()).numpy()
        n = np.bincount(ids.reshape(-1), minlength=1000)[:, None]
        assert (np.abs(w.grad.numpy() - exact) <= n * 2.0**-24 * mass + 1e-30).all()
    assert not w.grad.float().numpy()[np.setdiff1d(np.arange(1000), ids)].any()
