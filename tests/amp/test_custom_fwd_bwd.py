"""flame.amp.custom_fwd / custom_bwd against torch.amp's on the CPU: what a Function's forward and backward
see (input dtypes, whether autocast is on) and the dtypes and values of its results and gradients."""

from __future__ import annotations

import numpy as np
import pytest

import flame

torch = pytest.importorskip("torch")


def _function(lib, cast_inputs, seen: list):
    amp = lib.amp
    base = torch.autograd.Function if lib is torch else flame.autograd.Function

    class MatMul(base):
        @staticmethod
        @amp.custom_fwd(device_type="cpu", cast_inputs=cast_inputs)
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            seen.append(("fwd", str(a.dtype), str(b.dtype), lib.is_autocast_enabled("cpu")))
            return a @ b

        @staticmethod
        @amp.custom_bwd(device_type="cpu")
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            ga, gb = g @ b.transpose(0, 1), a.transpose(0, 1) @ g
            seen.append(("bwd", str(g.dtype), lib.is_autocast_enabled("cpu"), str(ga.dtype), str(gb.dtype)))
            return ga, gb

    return MatMul


def _run(lib, cast_inputs, region: bool):
    rng = np.random.default_rng(0)
    a, b = (lib.tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True) for s in ((3, 4), (4, 2)))
    seen = []
    fn = _function(lib, None if cast_inputs is None else getattr(lib, cast_inputs), seen)
    if region:
        with lib.autocast("cpu", dtype=lib.bfloat16):
            out = fn.apply(a, b)
    else:
        out = fn.apply(a, b)
    out.float().sum().backward()
    name = (lambda s: s.replace("torch.", "").replace("flame.", "").replace("bfloat16", "bf16")
            .replace("float32", "f32"))
    seen = [tuple(name(x) if isinstance(x, str) else x for x in row) for row in seen]
    return seen, name(str(out.dtype)), out.detach().float().numpy(), a.grad.float().numpy(), str(a.grad.dtype)


@pytest.mark.parametrize("region", [True, False], ids=["autocast", "plain"])
@pytest.mark.parametrize("cast_inputs", [None, "float32"])
def test_custom_fwd_and_bwd_as_torch(cast_inputs, region):
    tseen, tdt, tout, tga, _ = _run(torch, cast_inputs, region)
    fseen, fdt, fout, fga, _ = _run(flame, cast_inputs, region)
    assert fseen == tseen and fdt == tdt
    np.testing.assert_allclose(fout, tout, rtol=1e-2 if tdt == "bf16" else 1e-6, atol=1e-2)
    np.testing.assert_allclose(fga, tga, rtol=1e-2, atol=1e-2)


def test_device_type_must_be_a_string_as_torch():
    for lib in (torch, flame):
        with pytest.raises(ValueError, match="device_type"):
            lib.amp.custom_fwd(lambda ctx: None, device_type=None)
        with pytest.raises(ValueError, match="device_type"):
            lib.amp.custom_bwd(device_type=3)


def test_torch_cuda_amp_spellings_as_torch():
    """torch.cuda.amp.custom_fwd / custom_bwd: the same signatures, a FutureWarning, device_type "cuda"."""
    import inspect

    for name in ("custom_fwd", "custom_bwd"):
        want = list(inspect.signature(getattr(torch.cuda.amp, name)).parameters)
        assert list(inspect.signature(getattr(flame.cuda.amp, name)).parameters) == want, name
    seen = []

    class Double(flame.autograd.Function):
        with pytest.warns(FutureWarning, match="deprecated"):
            @staticmethod
            @flame.cuda.amp.custom_fwd(cast_inputs=flame.float32)
            def forward(ctx, x):
                seen.append((x.dtype, flame.is_autocast_enabled()))
                return x * 2

        with pytest.warns(FutureWarning, match="deprecated"):
            @staticmethod
            @flame.cuda.amp.custom_bwd
            def backward(ctx, g):
                return g * 2

    x = flame.ones(2, dtype=flame.bf16, requires_grad=True)
    with flame.autocast("cuda", dtype=flame.bf16):
        out = Double.apply(x)
    out.sum().backward()
    assert seen == [(flame.f32, False)] and out.dtype == flame.f32 and x.grad.dtype == flame.bf16
