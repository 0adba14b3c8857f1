"""flame.utils.checkpoint's policies (JAX's checkpoint policies): save nothing (the default, PyTorch's
behaviour), save the matmuls' results, or save only the values tagged with flame.tag(x, name). Each
keeps what it says and recomputes the rest, with gradients bit-identical to the plan without
checkpointing on the reference executor and matching torch's; a bad policy is refused by name."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn
from flame.utils import checkpoint, checkpoint_policies

LAYERS, WIDTH, BATCH = 3, 32, 64


def _x():
    return np.random.default_rng(1).standard_normal((BATCH, WIDTH)).astype(np.float32)


def _run(policy="none", activation_budget=None):
    flame.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(LAYERS) for m in (nn.Linear(WIDTH, WIDTH), nn.GELU())])

    def layer(i):
        def body(t):
            h = model[2 * i](t)
            flame.tag(h, "pre_gelu")
            return model[2 * i + 1](h)
        return body

    def step(x):
        h = x
        for i in range(LAYERS):
            h = layer(i)(h) if policy == "none" else checkpoint(layer(i), h, policy=policy, use_reentrant=False)
        loss = (h * h).mean()
        loss.backward()
        return loss

    f = flame.compile(step, name="step", activation_budget=activation_budget)
    x = flame.tensor(_x())
    report = f.memory_report(x)
    loss = f(x)
    return model, f, report, loss.item(), [p.grad.numpy().copy() for p in model.parameters()]


@pytest.fixture(scope="module")
def plain():
    return _run()


def _torch(model):
    t = torch.nn.Sequential(*[m for _ in range(LAYERS) for m in (torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU())])
    t = t.double()
    with torch.no_grad():
        for tp, p in zip(t.parameters(), model.parameters()):
            tp.copy_(torch.from_numpy(p.numpy().astype(np.float64)))
    loss = (t(torch.from_numpy(_x().astype(np.float64))) ** 2).mean()
    loss.backward()
    return [p.grad.numpy() for p in t.parameters()]


POLICIES = [None, "save_nothing", "save_matmuls", checkpoint_policies.dots_saveable,
            checkpoint_policies.nothing_saveable, checkpoint_policies.save_only_these_names("pre_gelu")]


@pytest.mark.parametrize("policy", POLICIES, ids=repr)
@pytest.mark.parametrize("budget", [None, 0.3])
def test_every_policy_gives_bit_identical_gradients(plain, policy, budget):
    _, _, _, loss0, grads0 = plain
    model, f, report, loss, grads = _run(policy, budget)
    assert loss == loss0
    for g, g0 in zip(grads, grads0):
        assert g.tobytes() == g0.tobytes()
    for g, tg in zip(grads, _torch(model)):
        np.testing.assert_allclose(g, tg, rtol=2e-4, atol=2e-6)


def _gemm(src: str) -> bool:
    """The printed op is a GEMM: a matmul, or a Linear's matmul_bias."""
    return " matmul " in src or " matmul_bias " in src


def _matmuls_recomputed(report):
    return sum(_gemm(src) for src, _, _ in report.recomputed)


def test_policies_keep_what_they_say(plain):
    nothing = _run("save_nothing")[2]
    matmuls = _run("save_matmuls")[2]
    named = _run(checkpoint_policies.save_only_these_names("pre_gelu"))[2]
    other = _run(checkpoint_policies.save_only_these_names("something_else"))[2]
    assert _matmuls_recomputed(nothing) > 0
    assert _matmuls_recomputed(matmuls) == 0 and _matmuls_recomputed(named) == 0
    assert _matmuls_recomputed(other) == _matmuls_recomputed(nothing)
    # the Linear's result (matmul + bias) is what the tag names: kept, so neither it nor its matmul recomputed
    assert named.saved_bytes >= matmuls.saved_bytes > nothing.saved_bytes
    assert any(_gemm(src) or " add " in src for src, _, _ in matmuls.saved)


def test_saved_results_print_and_parse_back():
    from flame.ir import parse
    from flame.ir.printer import print_graph

    f = _run("save_matmuls")[1]
    text = print_graph(f._last.traced)
    assert " saved" in text and "checkpoint 0" in text
    assert print_graph(parse(text)) == text


@pytest.mark.parametrize("bad, error", [("dots", flame.ArgumentError), (3, flame.ArgumentTypeError)])
def test_a_bad_policy_is_refused_naming_it(bad, error):
    with pytest.raises(error, match="policy must be None, 'save_nothing', 'save_matmuls'"):
        checkpoint(lambda t: t, flame.ones(2), policy=bad, use_reentrant=False)


def test_tag_outside_a_region_changes_nothing():
    x = flame.ones(3)
    assert flame.tag(x, "a") is x
    with pytest.raises(flame.ArgumentTypeError, match="flame.tag: name must be a string"):
        flame.tag(x, 3)
