"""Module.compile(), as torch's: the module's calls are compiled in place (hooks included), a backward
and an optimizer step after them give eager torch's values, a call inside another compiled function is
traced into it, and flame.compile's arguments pass through."""

from __future__ import annotations

import numpy as np
import pytest

import flame

torch = pytest.importorskip("torch")


def _model(lib, rng):
    m = lib.nn.Sequential(lib.nn.Linear(4, 8), lib.nn.GELU(), lib.nn.Linear(8, 1)).double()
    with lib.no_grad():
        for p in m.parameters():
            p.copy_(lib.tensor(rng.standard_normal(tuple(p.shape))))
    return m


def _train(lib, compiled: bool):
    rng = np.random.default_rng(0)
    m = _model(lib, rng)
    m.register_forward_hook(lambda mod, args, out: out * 0.5)
    opt = lib.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    if compiled:
        m.compile(name="mlp")
    x = lib.tensor(rng.standard_normal((16, 4)))
    losses = []
    for _ in range(3):
        loss = m(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, m


def test_compiled_module_trains_as_torch_eager():
    want, _ = _train(torch, False)
    got, m = _train(flame, True)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert type(m).__name__ == "Sequential" and m._compiled_call.stats().traces == 1


def test_a_compiled_module_inside_a_compiled_step_is_traced_into_it():
    rng = np.random.default_rng(1)
    m = _model(flame, rng)
    m.compile()
    x = flame.tensor(rng.standard_normal((5, 4)))
    step = flame.compile(lambda x: m(x).sum())
    want = float((m._compiled_call(x)).sum())
    assert float(step(x)) == pytest.approx(want, rel=1e-12)
    assert m._compiled_call.stats().calls == 1  # only the direct call above went through it


def test_torch_compile_options_flame_lacks_are_a_type_error():
    with pytest.raises(TypeError):
        flame.nn.Linear(2, 2).compile(mode="max-autotune")
