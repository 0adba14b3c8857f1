"""Programs thousands of ops deep (a long elementwise chain, a recurrence unrolled by a Python loop, a
deep stack of small layers) compile and train as torch computes them: no pass, no kernel generator
and no plan step walks the graph by recursion as deep as the program."""

import numpy as np
import pytest
import torch

import flame

DEPTH = 1200  # deeper than Python's default recursion limit (1000) in every program below


def _chain(lib, x, w):
    y = x
    for _ in range(DEPTH):
        y = y * w + x  # one fused elementwise kernel thousands of ops long
    return (y * y).mean()


def _scan(lib, x, w):
    h = x[0] * 0
    for t in range(x.shape[0]):
        h = h * w + x[t]  # an exponential moving average unrolled over time, as tutorials write it
    return h.square().sum()


def _layers(lib, x, w):
    for _ in range(DEPTH // 3):
        x = lib.tanh(x @ w) + x  # small residual layers: matmuls between the elementwise kernels
    return x.square().mean()


PROGRAMS = {"chain": (_chain, (4, 8), (8,)), "scan": (_scan, (DEPTH, 8), (8,)), "layers": (_layers, (4, 8), (8, 8))}


def _data(xshape, wshape):
    rng = np.random.default_rng(0)
    return rng.standard_normal(xshape) * 0.1, 0.5 + rng.standard_normal(wshape) * (0.1 if len(wshape) == 1 else 0.02)


def _torch(fn, x, w):
    x, w = torch.tensor(x), torch.tensor(w, requires_grad=True)
    loss = fn(torch, x, w)
    loss.backward()
    return loss.item(), w.grad.numpy()


def _flame(fn, x, w, compiled: bool):
    x, w = flame.tensor(x, dtype=flame.float32), flame.tensor(w, dtype=flame.float32, requires_grad=True)

    def step(x, w):
        loss = fn(flame, x, w)
        loss.backward()
        return loss

    loss = (flame.compile(step) if compiled else step)(x, w)
    return loss.item(), w.grad.numpy()


@pytest.mark.parametrize("name", list(PROGRAMS))
@pytest.mark.parametrize("compiled", [False, True])
def test_deep_programs_compute_what_torch_does(name, compiled):
    fn, xshape, wshape = PROGRAMS[name]
    x, w = _data(xshape, wshape)
    want, got = _torch(fn, x, w), _flame(fn, x, w, compiled)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-3, atol=1e-6)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_deep_programs_plan_for_the_gpu_and_their_kernels_compile(name, cuda_target):
    from flame.codegen.nvrtc import compile_cubin

    fn, xshape, wshape = PROGRAMS[name]
    x, w = _data(xshape, wshape)
    want, got = _torch(fn, x, w), _flame(fn, x, w, compiled=True)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-3, atol=1e-6)
    step = flame.compile(lambda x, w: fn(flame, x, w))
    step(flame.tensor(x, dtype=flame.float32), flame.tensor(w, dtype=flame.float32))
    for source in {k.source for k in step._last.plan.kernels()}:
        assert compile_cubin(source, "sm_90")[:4] == b"\x7fELF"
