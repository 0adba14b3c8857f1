"""The generated CUDA side of the convolutional layers: the fused kernels of compiled pooling,
interpolation and normalisation steps (forward and backward) compile with NVRTC (no GPU needed), and
on a GPU (`gpu` marker) the layers match PyTorch. The convolutions themselves are cuDNN calls
(ConvCall steps), tested with the cuDNN lowering."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import flame
import flame.nn as nn
import flame.nn.functional as F
from flame.codegen.nvrtc import compile_cubin
from flame.plan.steps import ConvCall, KernelLaunch

LAYERS = {  # name -> (flame function, torch function, input shape)
    "max_pool2d": (lambda x: F.max_pool2d(x, 3, 2, 1), lambda x: TF.max_pool2d(x, 3, 2, 1), (2, 3, 9, 8)),
    "avg_pool2d": (lambda x: F.avg_pool2d(x, 2), lambda x: TF.avg_pool2d(x, 2), (2, 3, 8, 8)),
    "avg_pool2d_pad": (lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
                       lambda x: TF.avg_pool2d(x, 3, 2, 1, count_include_pad=False), (2, 3, 7, 7)),
    "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, (3, 2)), lambda x: TF.adaptive_avg_pool2d(x, (3, 2)),
                            (2, 3, 7, 5)),
    "nearest": (lambda x: F.interpolate(x, scale_factor=2), lambda x: TF.interpolate(x, scale_factor=2), (2, 3, 4, 5)),
    "bilinear": (lambda x: F.interpolate(x, size=(7, 9), mode="bilinear", align_corners=True),
                 lambda x: TF.interpolate(x, size=(7, 9), mode="bilinear", align_corners=True), (2, 3, 4, 5)),
    "group_norm": (lambda x: F.group_norm(x, 2), lambda x: TF.group_norm(x, 2), (2, 6, 5, 5)),
}


def _step(fn):
    def step(x):
        y = fn(x)
        (y * y).sum().backward()
        return y, x.grad
    return flame.compile(step)


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_fused_kernels_compile_with_nvrtc(name, tmp_path, monkeypatch):
    monkeypatch.setenv("FLAME_CACHE_DIR", str(tmp_path))
    fn, _, shape = LAYERS[name]
    step = _step(fn)
    step(flame.randn(*shape).requires_grad_())
    (entry,) = step._entries()
    sources = {s.source: s.name for s in entry.plan.steps if isinstance(s, KernelLaunch) and s.grid}
    assert sources
    cubin = compile_cubin("\n".join(sources), "sm_90", name)
    assert cubin[:4] == b"\x7fELF" and all(k.encode() in cubin for k in sources.values())


def test_group_norm_forward_is_one_kernel():
    gn = nn.GroupNorm(4, 16)
    fwd = flame.compile(lambda x: gn(x))
    fwd(flame.randn(2, 16, 6, 6))
    (entry,) = fwd._entries()
    assert len([s for s in entry.plan.steps if isinstance(s, KernelLaunch) and s.grid]) == 1


def test_convolutions_are_library_calls_in_the_plan():
    conv = nn.Conv2d(3, 4, 3, padding=1)
    step = _step(conv)
    step(flame.randn(2, 3, 6, 6).requires_grad_())
    (entry,) = step._entries()
    calls = [s.op.name for s in entry.plan.steps if isinstance(s, ConvCall)]
    assert sorted(calls) == ["conv", "conv_grad_input", "conv_grad_weight"]
    assert "call conv_grad_weight" in str(entry.plan)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_on_the_gpu_matches_torch(name):
    fn, th, shape = LAYERS[name]
    a = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    y, gx = _step(fn)(flame.tensor(a, requires_grad=True))
    xt = torch.tensor(a, requires_grad=True)
    yt = th(xt)
    (yt * yt).sum().backward()
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gx.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_batchnorm_running_stats_on_the_gpu():
    fl, th = nn.BatchNorm2d(4), torch.nn.BatchNorm2d(4)
    fwd = flame.compile(lambda x: fl(x))
    rng = np.random.default_rng(1)
    for _ in range(3):
        x = rng.standard_normal((8, 4, 5, 5)).astype(np.float32) * 2 + 1
        np.testing.assert_allclose(fwd(flame.tensor(x)).numpy(), th(torch.tensor(x)).detach().numpy(), rtol=1e-4,
                                   atol=1e-4)
    for k, v in th.state_dict().items():
        np.testing.assert_allclose(fl.state_dict()[k].numpy(), v.numpy(), rtol=1e-5, atol=1e-6, err_msg=k)
