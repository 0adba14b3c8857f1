"""flame.func.vmap and in-place writes, against torch.func.vmap: batched values written into a tensor
that is not vmapped over is torch's RuntimeError (not a silent per-element write); a write into a
tensor that is batched, or into one made inside the function, computes as torch's; a write into a
captured tensor runs once, as torch's (inside @flame.compile it is refused, not run once per element)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.func as TF

import flame
import flame.func as F

X = np.random.default_rng(1).standard_normal((3, 4))


def ft(a):
    return flame.tensor(np.asarray(a), dtype=flame.float64)


def tt(a):
    return torch.tensor(np.asarray(a), dtype=torch.float64)


WRITES = {
    "mul_": lambda y, v: y.mul_(v),
    "copy_": lambda y, v: y.copy_(v),
    "setitem": lambda y, v: y.__setitem__(0, v[0]),
    "clamp_": lambda y, v: y.clamp_(min=v),
}


@pytest.mark.parametrize("name", list(WRITES))
def test_batched_value_into_unbatched_tensor_raises(name):
    write = WRITES[name]
    ty = torch.zeros(4, dtype=torch.float64)
    if name != "clamp_":  # (torch's clamp_ raises another message for a tensor bound)
        with pytest.raises(RuntimeError, match=r"vmap: inplace arithmetic\(self, \*extra_args\) is not possible"):
            TF.vmap(lambda v: write(ty, v))(tt(X))
    fy = flame.zeros(4, dtype=flame.float64)
    with pytest.raises(RuntimeError, match=r"vmap: inplace arithmetic\(self, \*extra_args\) is not possible"):
        F.vmap(lambda v: write(fy, v))(ft(X))
    assert np.all(fy.numpy() == 0)


def test_batched_value_into_tensor_made_inside_raises():
    with pytest.raises(RuntimeError, match="vmap: inplace arithmetic"):
        F.vmap(lambda v: flame.zeros(4, dtype=flame.float64).mul_(v))(ft(X))


def test_writes_into_batched_tensors_compute_as_torch():
    def f(lib):
        def g(v, y):
            z = v * 2
            z.add_(y)          # unbatched value into a batched tensor
            v2 = v.clone()
            v2[1] = z[0]       # batched into batched
            return z.sin_() + v2
        return g

    y = X[0] * 0.5
    want = TF.vmap(f(torch), in_dims=(0, None))(tt(X), tt(y))
    got = F.vmap(f(flame), in_dims=(0, None))(ft(X), ft(y))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
    fc = flame.compile(F.vmap(f(flame), in_dims=(0, None)))
    np.testing.assert_allclose(fc(ft(X), ft(y)).numpy(), want.numpy(), rtol=1e-12)


def _captured(lib, dt, x):
    y = lib.tensor(X[0] * 0.5, dtype=dt)
    z = lib.tensor(X[1], dtype=dt)

    def f(v):
        before = v * y  # read before the write: the values from before it
        y.add_(1)  # an unbatched write into a captured tensor: once, as torch's
        z[0] = 7.0
        return before + y + z

    return (lib.func.vmap(f)(x), y, z)


def test_unbatched_write_into_captured_tensor_runs_once():
    want = _captured(torch, torch.float64, tt(X))
    got = _captured(flame, flame.float64, ft(X))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12)


def test_unbatched_write_into_captured_tensor_with_gradients():
    def run(lib, dt):
        w = lib.tensor(X[0], dtype=dt, requires_grad=True)
        x = lib.tensor(X, dtype=dt)
        buf = w * 1.0  # captured, with a gradient history

        def f(v):
            before = (v * buf).sum()
            buf.mul_(2)
            return before + (v * buf).sum()

        out = lib.func.vmap(f)(x)
        (out.sum() + buf.sum()).backward()
        return out.detach().numpy(), buf.detach().numpy(), w.grad.numpy()

    for g, w in zip(run(flame, flame.float64), run(torch, torch.float64)):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def test_unbatched_write_into_captured_tensor_inside_compile_is_refused():
    fy = flame.zeros(4, dtype=flame.float64)

    @flame.compile
    def step(x):
        return F.vmap(lambda v: (fy.add_(1), v * 2)[1])(x)

    with pytest.raises(RuntimeError, match="would run it 3 times"):
        step(ft(X))


def test_unbatched_write_into_tensor_made_inside_is_fine():
    def f(lib, dt):
        def g(v):
            z = lib.zeros(4, dtype=dt)
            z.add_(1.5)
            return v * z
        return g

    want = TF.vmap(f(torch, torch.float64))(tt(X))
    got = F.vmap(f(flame, flame.float64))(ft(X))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


LIKE = {
    "zeros_like": lambda lib: lambda v: lib.zeros_like(v).add_(v),
    "empty_like": lambda lib: lambda v: lib.empty_like(v).copy_(v),
    "full_like": lambda lib: lambda v: lib.full_like(v, 2.0).mul_(v),
    "rand_like": lambda lib: lambda v: (lib.rand_like(v) * 0).add_(v),
    "new_zeros": lambda lib: lambda v: v.new_zeros(4).add_(v),
    "new_ones": lambda lib: lambda v: v.new_ones(v.shape).add_(v),
}


@pytest.mark.parametrize("name", list(LIKE))
def test_a_tensor_made_like_a_batched_one_is_batched(name):
    want = TF.vmap(LIKE[name](torch), randomness="different")(tt(X))
    got = F.vmap(LIKE[name](flame), randomness="different")(ft(X))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


def test_nested_vmaps_run_a_captured_write_once():
    def run(lib, dt):
        y = lib.tensor(X[0], dtype=dt)

        def inner(v):
            y.add_(1)
            return v * y

        out = lib.func.vmap(lib.func.vmap(inner))(lib.tensor(np.stack([X, X * 2]), dtype=dt))
        return out.numpy(), y.numpy()

    for g, w in zip(run(flame, flame.float64), run(torch, torch.float64)):
        np.testing.assert_allclose(g, w, rtol=1e-12)
