"""Rematerialisation: flame.utils.checkpoint regions and flame.compile(memory_budget=...) give the same
gradients as the unconstrained plan, bit for bit on the reference executor, while the planned peak
drops; the memory report lists what is kept and what is recomputed; an unreachable budget says the
smallest reachable peak."""

from __future__ import annotations

import numpy as np
import pytest

import flame
import flame.nn as nn
import flame.nn.functional as F
from flame.ir import parse
from flame.ir.printer import print_graph
from flame.passes.autodiff import is_backward
from flame.passes.remat import is_recompute
from flame.utils import checkpoint

LAYERS, WIDTH, BATCH = 4, 32, 512
BUDGET = 0.99  # of the unconstrained peak: met by recomputing reductions (the LayerNorm statistics), no matmul


def _model():
    flame.manual_seed(0)
    return nn.Sequential(*[m for _ in range(LAYERS) for m in (nn.Linear(WIDTH, WIDTH), nn.LayerNorm(WIDTH), nn.GELU())])


def _layer(model, i):
    return lambda t: model[3 * i + 2](model[3 * i + 1](model[3 * i](t)))


def _step(model, mode="plain", dropout=0.0):
    def step(x):
        h = x
        for i in range(LAYERS):
            h = checkpoint(_layer(model, i), h, use_reentrant=False) if mode == "ckpt" else _layer(model, i)(h)
            if dropout:
                h = checkpoint(F.dropout, h, dropout, use_reentrant=False) if mode == "ckpt" else F.dropout(h, dropout)
        loss = (h * h).mean()
        loss.backward()
        return loss
    return step


def _run(mode="plain", budget=None, dropout=0.0):
    model = _model()
    f = flame.compile(_step(model, mode, dropout), name="step", memory_budget=budget)
    x = flame.tensor(np.random.default_rng(1).standard_normal((BATCH, WIDTH)).astype(np.float32))
    report = f.memory_report(x)
    loss = f(x)
    return f, x, report, loss.item(), [p.grad.numpy().copy() for p in model.parameters()]


@pytest.fixture(scope="module")
def plain():
    return _run()


def _same_bits(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.tobytes() == y.tobytes()


def test_checkpoint_gives_the_same_gradients_bit_for_bit_and_a_lower_peak(plain):
    _, _, base, loss0, grads0 = plain
    f, x, report, loss, grads = _run("ckpt")
    assert loss == loss0
    _same_bits(grads, grads0)
    # the plain plan already recomputes the free elementwise work (LayerNorm, GELU); the regions add the rest
    assert report.peak < 0.95 * base.peak, (report.peak, base.peak)
    assert report.recomputed and report.saved_bytes < base.saved_bytes
    # what a region hands on (its GELU output) is kept; what stays inside it is recomputed
    assert any("gelu" in src for src, _, _ in report.saved)
    assert any("matmul" in src for src, _, _ in report.recomputed)  # a region recomputes its matmuls too
    assert "recomputed in the backward" in str(report)


def test_checkpoint_regions_print_and_parse_back():
    f, x, *_ = _run("ckpt")
    g = f.trace(x)
    text = print_graph(g)
    for k in range(LAYERS):
        assert f"checkpoint {k}\n" in text
    assert print_graph(parse(text)) == text


def test_recomputations_stay_out_of_forward_kernels():
    f, x, *_ = _run("ckpt")
    g = f.optimized(x)
    n = 0
    for grp in g.groups:
        free = [op for op in grp.ops if op.name == "full" or (op.name in ("permute", "reshape")
                                                               and all(v.producer is None for v in op.inputs))]
        work = [op for op in grp.ops if op not in free]
        if any(is_recompute(op) for op in work):
            n += 1
            assert all(is_backward(op) for op in work), [str(op) for op in work]
    assert n > 0


def test_random_draws_inside_a_checkpoint_repeat_exactly():
    _, _, _, loss0, grads0 = _run(dropout=0.25)
    _, _, report, loss, grads = _run("ckpt", dropout=0.25)
    assert loss == loss0
    _same_bits(grads, grads0)
    assert any("random_uniform" in src for src, _, _ in report.recomputed)


def test_eager_checkpoint_gives_the_same_gradients():
    x = flame.tensor(np.random.default_rng(1).standard_normal((16, WIDTH)).astype(np.float32))
    out = []
    for mode in ("plain", "ckpt"):
        model = _model()
        _step(model, mode)(x)
        out.append([p.grad.numpy() for p in model.parameters()])
    _same_bits(*out)


@pytest.mark.parametrize("budget", [BUDGET, "bytes"])
def test_memory_budget_meets_the_budget_with_the_same_gradients(plain, budget):
    _, _, base, loss0, grads0 = plain
    budget = int(BUDGET * base.peak) if budget == "bytes" else budget
    f, x, report, loss, grads = _run(budget=budget)
    assert loss == loss0
    _same_bits(grads, grads0)
    assert report.budget is not None and report.budget.unconstrained_peak == base.peak
    assert report.peak <= report.budget.bytes == int(BUDGET * base.peak)
    # cheap recomputation was enough: no matmul is recomputed
    assert report.recomputed and not any("matmul" in src for src, _, _ in report.recomputed)
    text = str(report)
    assert "memory budget" in text and "without" in text and "recomputed in the backward" in text


def test_a_tighter_budget_recomputes_matmuls_only_when_forced(plain):
    _, _, base, _, grads0 = plain
    cheap = _run(budget=BUDGET)[2]
    assert not any("matmul" in src for src, _, _ in cheap.recomputed)
    tighter = int(0.95 * base.peak)  # below what recomputing the elementwise work and reductions reaches
    try:
        _, _, report, _, grads = _run(budget=tighter)
    except flame.MemoryBudgetError as e:  # a planner that cannot go lower must say how low it can go
        assert "smallest reachable planned peak" in str(e)
        return
    assert report.peak <= tighter
    assert any("matmul" in src for src, _, _ in report.recomputed)
    _same_bits(grads, grads0)


def test_an_unreachable_budget_names_the_smallest_reachable_peak(plain):
    with pytest.raises(flame.MemoryBudgetError, match=r"smallest reachable planned peak is [\d.]+ KiB") as e:
        _run(budget=0.05)
    assert "test_remat.py" in str(e.value)  # the user's line
    with pytest.raises(ValueError, match="memory_budget"):
        _run(budget=-1)


def test_a_budget_the_plan_already_meets_changes_nothing(plain):
    _, _, base, _, grads0 = plain
    _, _, report, _, grads = _run(budget=1.0)
    assert report.peak == base.peak and report.recomputed == base.recomputed  # the free recomputations only
    _same_bits(grads, grads0)


def _block(monkeypatch, free: bool):
    """gpt_block_train at --quick sizes on the reference executor, with or without the free
    recomputations: (memory report, kernels, loss, updated parameters)."""
    from collections import OrderedDict

    from flame import compiler
    from flame.bench.cases_gpt import GPT
    from flame.bench.spec import generate, to_flame
    from flame.passes import remat

    monkeypatch.setattr(compiler, "_CACHE", OrderedDict())
    if not free:
        monkeypatch.setattr(remat, "free", lambda g: set())
    case = next(c for c in GPT if c.name == "gpt_block_train")
    s = case.sizes(True)
    spec = case.inputs(s)
    a = {n: to_flame(x, spec[n].dtype, copy=True) for n, x in generate(spec, np, 0).items()}
    bound = case.flame(s, a, flame.compile)
    data = [a[n] for n, i in spec.items() if not i.state]
    report = bound.call.memory_report(*data)
    groups = bound.call.optimized(*data).groups
    loss = bound.call(*data).item()
    return report, groups, loss, [p.numpy().copy() for p in bound.state()]


def test_free_recomputation_lowers_the_peak_without_a_launch_and_keeps_the_values(monkeypatch):
    base, kernels0, loss0, params0 = _block(monkeypatch, free=False)
    monkeypatch.undo()
    report, kernels, loss, params = _block(monkeypatch, free=True)
    assert loss == loss0
    _same_bits(params, params0)
    assert report.peak < base.peak and report.saved_bytes < base.saved_bytes, (report.peak, base.peak)
    assert any("gelu" in src for src, _, _ in report.recomputed)  # from its saved input, in the GELU backward
    assert not any(op in src for src, _, _ in report.recomputed for op in ("matmul", "reduce", "attention"))
    # a recomputation beside a rows kernel that carries column sums (layer norm's dweight / dbias) cannot
    # join it (such a kernel has one segment only): at most that one more launch
    assert len(kernels) <= len(kernels0) + 1
    # every recomputation rides in a backward kernel that does other work: no launch of its own
    for grp in kernels:
        if any(is_recompute(op) for op in grp.ops):
            assert not all(is_recompute(op) or op.name == "full" for op in grp.ops), [str(op) for op in grp.ops]


def test_tiers_order_the_budget_candidates():
    from flame.passes import remat

    f, x, *_ = _run()
    order = remat.candidates(f.trace(x))
    tiers = [remat.tier(op) for op in order]
    assert tiers == sorted(tiers) and {op.name for op in order} >= {"matmul_bias", "reduce_mean"}
    assert remat.TIERS[remat.tier(next(op for op in order if op.name == "matmul_bias"))] == "matmuls"


def _norm_plan(monkeypatch, kind: str, free: bool, x, t):
    """(memory report, kernels, gradients) of a small step (`_norm_step`), with or without the free
    recomputations (remat.free patched to choose nothing)."""
    from flame.passes import remat

    flame.manual_seed(0)
    norm, lin1, lin2 = nn.LayerNorm(64), nn.Linear(64, 64), nn.Linear(64, 64)

    def step(x, t):
        if kind == "input":
            loss = (lin1(norm(x)) ** 2).mean()
        elif kind == "residual":
            h = x + lin1(x)
            loss = ((h + lin2(norm(h))) ** 2).mean()
        else:
            loss = F.cross_entropy(lin2(F.gelu(lin1(x))), t)
        loss.backward()
        return loss

    if not free:
        monkeypatch.setattr(remat, "free", lambda g: set())
    f = flame.compile(step, name=f"{kind}_{free}")
    report, kernels = f.memory_report(x, t), f.optimized(x, t).groups
    monkeypatch.undo()
    f(x, t)
    params = [norm.weight, norm.bias, lin1.weight, lin1.bias, lin2.weight, lin2.bias]
    return report, kernels, [p.grad.numpy().copy() for p in params if p.grad is not None]


def _norm_step(monkeypatch, kind: str):
    """A small training step on the reference executor, planned with the free recomputations (True)
    and without them (False). kind: "input", a LayerNorm of the graph input; "residual", a LayerNorm
    of a residual stream the loss reads at the forward's end; "xent", a cross-entropy loss, whose
    gradient the forward's last kernel computes."""
    rng = np.random.default_rng(3)
    x = flame.tensor(rng.standard_normal((256, 64)).astype(np.float32))
    t = flame.tensor(rng.integers(0, 64, 256))
    return {free: _norm_plan(monkeypatch, kind, free, x, t) for free in (True, False)}


def _full_size_saved(report, rows=256, d=64):
    return [src for src, ty, _ in report.saved if ty.endswith(f"[{rows},{d}]")]


def test_a_layer_norm_of_a_graph_input_keeps_only_its_row_statistics(monkeypatch):
    got = _norm_step(monkeypatch, "input")
    report, kernels, grads = got[True]
    base, kernels0, grads0 = got[False]
    # the input is bound memory anyway: the backward recomputes the normalised value (and the Linear's
    # input) from it, the row mean and rstd (kept: [256, 1] each) inside the kernel of LayerNorm's
    # weight gradient; what stays is the loss's input (the Linear's result), read by its gradient in the
    # forward's kernel
    assert [src.split(" = ")[1].split()[0] for src in _full_size_saved(report)] == ["matmul_bias"], report.saved
    assert any("reduce_mean" in src for src, _, _ in report.saved)
    assert len(_full_size_saved(base)) == 3 and report.peak < base.peak
    assert len(kernels) <= len(kernels0)
    _same_bits(grads, grads0)


def test_a_layer_norm_of_the_residual_stream_keeps_the_stream_not_a_centred_copy(monkeypatch):
    got = _norm_step(monkeypatch, "residual")
    report, kernels, grads = got[True]
    base, kernels0, grads0 = got[False]
    # the stream h is alive to the forward's end (the loss reads it): keeping it and the row statistics
    # costs the centred copy's bytes, which no longer exist in the forward
    kept = _full_size_saved(report)
    assert not any(" sub " in src for src in kept), kept
    assert any(" sub " in src for src in _full_size_saved(base))
    assert report.peak <= base.peak and len(kernels) <= len(kernels0)
    _same_bits(grads, grads0)


def test_a_loss_gradient_computed_in_the_forward_is_not_recomputed_in_the_backward(monkeypatch):
    got = _norm_step(monkeypatch, "xent")
    report, kernels, _ = got[True]
    # the softmax's exp reads the logits, alive at the forward's end; recomputing it in the backward would
    # only split the kernel that computes the loss and its gradient together
    assert not any(" exp " in src for src, _, _ in report.recomputed), report.recomputed
    assert len(kernels) <= len(got[False][1])


@pytest.mark.parametrize("kind", ["layer_norm", "group_norm"])
def test_a_bf16_norm_computed_in_f32_keeps_its_bf16_input_not_an_f32_copy(kind):
    """A bf16 LayerNorm / GroupNorm with bf16 weights computes in f32 (rounded once, as torch's); what its
    training step keeps for the backward is what torch's keeps: bf16 data of the input's size and f32
    statistics (per row, or per sample and group), never an f32 value of the input's size (the centred
    copy): the cast to f32 is recomputed from the narrower input (remat._widening)."""
    flame.manual_seed(0)
    rng = np.random.default_rng(5)
    if kind == "layer_norm":
        norm, lin = nn.LayerNorm(64), nn.Linear(64, 64)
        x = rng.standard_normal((256, 64)).astype(np.float32) * 3 + 5
    else:
        norm, lin = nn.GroupNorm(4, 16), nn.Conv2d(16, 16, 3, padding=1)
        x = rng.standard_normal((4, 16, 8, 8)).astype(np.float32) * 3 + 5
    for m in (norm, lin):
        m.to(flame.bf16)

    def step(x):
        h = lin(x)
        loss = (lin(norm(h)).float() ** 2).mean()  # the norm's input is no graph input and not alive at the end
        loss.backward()
        return loss

    f = flame.compile(step, name=f"bf16_{kind}")
    xb = flame.tensor(x).to(flame.bf16)
    report = f.memory_report(xb)
    full = [(src, ty) for src, ty, n in report.saved if n >= x.size * 2]  # values of the input's size
    assert full and all(ty.startswith("bf16") for _, ty in full), full
    stats = [ty for src, ty, n in report.saved if ty.startswith("f32") and n * 16 <= x.size * 4]
    assert len(stats) >= 2, report.saved  # the mean and the rstd, in f32
    f(xb)  # runs on the reference executor and gives the gradients
    assert all(np.isfinite(p.grad.float().numpy()).all() for p in (norm.weight, norm.bias))


def _group_norm_adamw(monkeypatch, free: bool):
    """(fusion groups, graph inputs, updated parameters) of a bf16 conv -> GroupNorm -> SiLU -> conv
    training step with AdamW, planned for CUDA, run on the reference executor; with the free
    recomputations (True) or without them (remat.free patched to choose nothing)."""
    from flame.passes import remat

    flame.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.GroupNorm(4, 16), nn.SiLU(),
                          nn.Conv2d(16, 16, 3, padding=1)).to(flame.bf16)
    opt = flame.optim.AdamW(model.parameters(), lr=1e-2)
    x = flame.tensor(np.random.default_rng(7).standard_normal((2, 16, 4, 4)).astype(np.float32)).to(flame.bf16)

    def step(x):
        opt.zero_grad()
        loss = (model(x).float() ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    with monkeypatch.context() as m:
        if not free:
            m.setattr(remat, "free", lambda g: set())
        f = flame.compile(step, name=f"gn_adamw_{free}")
        g = f.optimized(x)
        f(x)
    return g.groups, set(g.inputs), [p.float().numpy().copy() for p in model.parameters()]


def test_a_bf16_group_norm_step_with_adamw_plans_no_kernel_that_only_widens_a_parameter(monkeypatch, cuda_target):
    """GroupNorm widens its bf16 weight and bias to f32, and AdamW casts every bf16 parameter to f32: CSE
    makes them one value, which the backward recomputes. The update reads a copy of its own (remat.rewrite),
    computed in its kernel, not the backward's recomputation, which would be a kernel of its own per
    parameter (no kernel holds a recomputation and the update). Same parameters, bit for bit, as the plan
    without free recomputations, and no more kernels."""
    from flame.ir.registry import is_relabel

    groups, inputs, params = _group_norm_adamw(monkeypatch, True)
    groups0, _, params0 = _group_norm_adamw(monkeypatch, False)
    widen_only = [k for k in groups if all(op.name == "cast" or is_relabel(op) for op in k.ops)
                  and all(u in inputs for op in k.ops for u in op.inputs if u.producer not in k.ops)]
    assert not widen_only, [[str(op.out.type) for op in k.ops] for k in widen_only]
    assert len(groups) <= len(groups0)
    _same_bits(params, params0)
