"""A model of identical blocks: the plan builder renders each alike group's kernels once and reuses
them (plan/build.py Renders), the plan is the one rendering every group gives, and `flame explain`
names what was reused and where the plan repeats itself."""

import dataclasses

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn
from flame import compiler
from flame.codegen.nvrtc import compile_cubin
from flame.explain import explain_plan, repeated_runs
from flame.ir.graph import FusionGroup, Kind
from flame.plan import build
from flame.plan.steps import KernelLaunch

D, T, BATCH = 16, 6, 3


def _weights(blocks: int, d: int = D, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [
        {
            "w1": rng.standard_normal((d, 2 * d)) * 0.3,
            "b1": rng.standard_normal(2 * d) * 0.1,
            "w2": rng.standard_normal((2 * d, d)) * 0.3,
            "g": 1 + rng.standard_normal(d) * 0.1,
        }
        for _ in range(blocks)
    ]


def _block(lib, x, p, layer_norm):
    """A pre-LayerNorm residual MLP block, written once for flame and torch."""
    h = layer_norm(x, p["g"])
    h = lib.tanh(h @ p["w1"] + p["b1"])
    return x + h @ p["w2"]


def _flame_step(weights):
    params = [{k: flame.tensor(v.astype(np.float32), requires_grad=True) for k, v in p.items()} for p in weights]

    def ln(x, g):
        return nn.functional.layer_norm(x, (x.shape[-1],), weight=g)

    @flame.compile
    def step(x):
        for p in params:
            x = _block(flame, x, p, ln)
        loss = (x * x).mean()
        loss.backward()
        return loss

    return step, params


def _torch_loss(weights, x):
    params = [{k: torch.tensor(v, requires_grad=True) for k, v in p.items()} for p in weights]

    def ln(x, g):
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight=g)

    y = torch.tensor(x, dtype=torch.float64)
    for p in params:
        y = _block(torch, y, p, ln)
    loss = (y * y).mean()
    loss.backward()
    return loss.item(), params


def _x(d: int = D) -> np.ndarray:
    return np.random.default_rng(1).standard_normal((BATCH, T, d)).astype(np.float32)


def _plan_text(plan) -> str:
    """The plan as printed, every kernel source, and the graph's fusion groups: what must not change."""
    return (
        str(plan)
        + "\n".join(k.source for k in plan.kernels())
        + "\n".join(f"{g.kind} {g.reason} {len(g.ops)}" for g in plan.graph.groups or ())
    )


@pytest.mark.parametrize("target", ["reference", "cuda"])
def test_reused_renderings_give_the_plan_of_rendering_every_block(target, request, monkeypatch):
    """Four identical blocks: the plan with renderings reused is the plan with every group rendered
    on its own (printed plan, steps, kernel sources), and it did reuse the blocks' kernels."""
    if target == "cuda":
        request.getfixturevalue("cuda_target")
    x = _x()
    step, _ = _flame_step(_weights(4))
    step(flame.tensor(x))
    reused = step._last.plan
    assert reused.reused and sum(n for _, n in reused.reused) >= 3 * 3  # blocks 2-4 reuse block 1's kernels

    monkeypatch.setattr(build.Renders, "render", lambda self, item, inputs: build._render(item))
    monkeypatch.setattr(compiler, "_CACHE", type(compiler._CACHE)())  # not the plan made above
    fresh, _ = _flame_step(_weights(4))
    fresh(flame.tensor(x))
    alone = fresh._last.plan
    assert alone.reused == ()
    assert _plan_text(reused) == _plan_text(alone)
    if target == "cuda":
        for source in {k.source for k in reused.kernels()}:
            assert compile_cubin(source, "sm_90")[:4] == b"\x7fELF"


def test_blocks_with_reused_kernels_compute_what_torch_does():
    """Values and gradients of every block's parameters against torch in f64."""
    weights, x = _weights(3), _x()
    step, params = _flame_step(weights)
    loss = step(flame.tensor(x)).item()
    want, tparams = _torch_loss(weights, x)
    assert step._last.plan.reused
    np.testing.assert_allclose(loss, want, rtol=1e-5)
    for p, tp in zip(params, tparams):
        for k in p:
            np.testing.assert_allclose(p[k].grad.numpy(), tp[k].grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=k)


def test_groups_alike_only_up_to_renaming():
    """The canonical key of a group ignores which values it reads, not their types or its wiring."""
    from flame.codegen import kernel_inputs

    a, b = flame.tensor(np.ones((4, 8), np.float32)), flame.tensor(np.ones((4, 8), np.float32))
    c = flame.tensor(np.ones((4, 9), np.float32))

    def f(a, b, c):
        return (a * b).exp() + a, (b * a).exp() + b, (c * c).exp() + c, (a * b).exp() + b

    g = flame.compile(f).trace(a, b, c)
    ops = [op for op in g.ops if op.name in ("mul", "exp", "add")]
    assert len(ops) == 12
    groups = [FusionGroup(tuple(ops[i : i + 3]), Kind.ELEMENTWISE, "graph output") for i in range(0, 12, 3)]
    groups = [dataclasses.replace(grp, outputs=(grp.ops[-1].out,)) for grp in groups]
    keys = [build.canonical_group(grp, tuple(kernel_inputs(grp))) for grp in groups]
    assert keys[0] == keys[1]  # the same ops on other values
    assert keys[2] != keys[0]  # another shape
    assert keys[3] != keys[0]  # wired otherwise: the add reads the other input
    assert (
        build.canonical_group(dataclasses.replace(groups[0], reason="other"), tuple(kernel_inputs(groups[0])))
        != keys[0]
    )  # the boundary reason is in the kernel's source


def test_explain_names_the_reused_regions():
    """`flame explain` says which kernels were rendered once and reused, and where the plan repeats."""
    step, _ = _flame_step(_weights(4))
    step(flame.tensor(_x()))
    entry = step._last
    report = explain_plan("step", entry.graph, entry.plan)
    assert "reused regions:" in report
    names = {s.name for s in entry.plan.steps if isinstance(s, KernelLaunch)}
    reused_names = [n for ns, _ in entry.plan.reused for n in ns]
    assert reused_names and set(reused_names) <= names
    assert f"{reused_names[0]}" in report.split("reused regions:")[1]
    runs = [line for line in report.splitlines() if "step(s) repeated" in line]
    assert runs  # the forward's blocks (a block's LayerNorm takes the residual add of the one before)


def test_no_reuse_section_without_repetition():
    """A graph with no alike groups has no reuse section."""

    @flame.compile
    def f(a):
        return (a.exp() * 2).sum()

    f(flame.tensor(np.ones((4, 8), np.float32)))
    entry = f._last
    assert entry.plan.reused == ()
    assert "reused regions" not in explain_plan("f", entry.graph, entry.plan)


def test_repeated_runs_finds_the_blocks():
    """Runs of one region repeated back to back, shortest period first, not overlapping."""
    seq = list("xy") + list("abc") * 4 + list("z") + list("de") * 3
    assert repeated_runs(seq) == [(2, 3, 4), (15, 2, 3)]
    assert repeated_runs(list("abcdef")) == []


def test_a_stored_plan_keeps_what_was_reused():
    """The plan cache's stored form (plan/serial.py) reads back with the same reused kernels, so
    `flame explain` of a plan loaded in a new process names them too."""
    from flame.plan import serial

    step, _ = _flame_step(_weights(3))
    step(flame.tensor(_x()))
    entry = step._last
    graph, plan = serial.loads(serial.dumps(entry.graph, entry.plan))
    assert plan.reused == entry.plan.reused != ()
    assert "reused regions:" in explain_plan("step", graph, plan)
