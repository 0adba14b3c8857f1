"""Freezing and zero_grad idioms against torch, eagerly and inside @flame.compile, from the same f64
weights: `requires_grad_(False)` on a submodule between steps (and unfreezing it later), with
zero_grad's set_to_none=True (a frozen parameter then has no .grad and the optimizer skips it) and
set_to_none=False (it keeps a zero .grad, so momentum and weight decay still move it, as in torch),
and a parameter that some steps do not reach."""

from __future__ import annotations

import pytest
import torch

import flame
from tests.training_idioms.common import assert_same_params, batches, ce_step, maybe_compile, numpy_of, to_lib, twin

DATA = batches(8, (6, 4), classes=3)


def _mlp(lib):
    nn = lib.nn
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 3))


def _step_fn(lib, model, opt, compiled, set_to_none=True, zero_with="opt"):
    holder = opt if zero_with == "opt" else model
    return ce_step(lib, model, opt, compiled, lambda: holder.zero_grad(set_to_none=set_to_none))


OPTS = [
    ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=0.05)),
    ("AdamW", dict(lr=0.01, weight_decay=0.1)),
]


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("set_to_none", [True, False])
@pytest.mark.parametrize("name,kw", OPTS)
def test_freeze_and_unfreeze_a_submodule_between_steps(name, kw, set_to_none, compiled):
    """The middle layer frozen after 2 steps and unfrozen after 5: torch's parameters at every step."""
    theirs, mine = twin(_mlp)
    topt, fopt = (
        getattr(torch.optim, name)(theirs.parameters(), **kw),
        getattr(flame.optim, name)(mine.parameters(), **kw),
    )
    tstep = _step_fn(torch, theirs, topt, False, set_to_none)
    fstep = _step_fn(flame, mine, fopt, compiled, set_to_none)
    for i, (x, y) in enumerate(DATA):
        if i in (2, 5):
            theirs[2].requires_grad_(i == 5)
            mine[2].requires_grad_(i == 5)
        tl, fl = tstep(*to_lib(torch, x, y)), fstep(*to_lib(flame, x, y))
        assert abs(tl.item() - fl.item()) < 1e-10, f"loss at step {i}"
        assert_same_params(mine, theirs, what=f"after step {i}")
        for (n, fp), tp in zip(mine.named_parameters(), theirs.parameters()):
            assert (fp.grad is None) == (tp.grad is None), f"{n}.grad after step {i}"
            if tp.grad is not None:
                assert not numpy_of(fp.grad).any() and not numpy_of(tp.grad).any()


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("name,kw", OPTS)
def test_frozen_before_the_first_step_never_moves(name, kw, compiled):
    theirs, mine = twin(_mlp)
    theirs[0].requires_grad_(False)
    mine[0].requires_grad_(False)
    topt, fopt = (
        getattr(torch.optim, name)(theirs.parameters(), **kw),
        getattr(flame.optim, name)(mine.parameters(), **kw),
    )
    before = numpy_of(mine[0].weight).copy()
    tstep, fstep = _step_fn(torch, theirs, topt, False), _step_fn(flame, mine, fopt, compiled)
    for x, y in DATA[:4]:
        tstep(*to_lib(torch, x, y))
        fstep(*to_lib(flame, x, y))
    assert_same_params(mine, theirs)
    assert (numpy_of(mine[0].weight) == before).all()
    assert mine[0].weight.grad is None


def _branchy(lib):
    nn = lib.nn
    return nn.ModuleDict({"a": nn.Linear(4, 3), "b": nn.Linear(4, 3)})


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("set_to_none", [True, False])
@pytest.mark.parametrize("zero_with", ["opt", "model"])
@pytest.mark.parametrize("name,kw", OPTS)
def test_a_parameter_some_steps_do_not_reach(name, kw, zero_with, set_to_none, compiled):
    """Branch "b" is used on even steps only (an argument chooses it): with set_to_none=False its zeroed
    .grad still drives momentum, weight decay and Adam's moments on the odd steps, as in torch."""
    theirs, mine = twin(_branchy)
    topt, fopt = (
        getattr(torch.optim, name)(theirs.parameters(), **kw),
        getattr(flame.optim, name)(mine.parameters(), **kw),
    )

    def make(lib, model, opt, compiled):
        F = lib.nn.functional

        @maybe_compile(lib, compiled)
        def step(x, y, use_b):
            out = model["a"](x) + (model["b"](x) if use_b else 0.0)
            loss = F.cross_entropy(out, y)
            loss.backward()
            opt.step()
            (opt if zero_with == "opt" else model).zero_grad(set_to_none=set_to_none)
            return loss

        return step

    tstep, fstep = make(torch, theirs, topt, False), make(flame, mine, fopt, compiled)
    for i, (x, y) in enumerate(DATA):
        tstep(*to_lib(torch, x, y), i % 2 == 0)
        fstep(*to_lib(flame, x, y), i % 2 == 0)
        assert_same_params(mine, theirs, what=f"after step {i}")


def _gan(lib, G, D, compiled, restore):
    """(d_step, g_step) of a GAN: the generator's step freezes the discriminator's parameters as it
    begins (and unfreezes them as it ends when `restore`), the discriminator's step unfreezes them."""
    opt_g, opt_d = lib.optim.Adam(G.parameters(), lr=0.01), lib.optim.SGD(D.parameters(), lr=0.1, momentum=0.5)

    def d_step(z, x):
        D.requires_grad_(True)
        loss = D(G(z).detach()).mean() - D(x).mean()
        loss.backward()
        opt_d.step()
        opt_d.zero_grad()
        return loss

    def g_step(z):
        for p in D.parameters():
            p.requires_grad_(False)
        loss = -D(G(z)).mean()
        loss.backward()
        opt_g.step()
        opt_g.zero_grad()
        if restore:
            D.requires_grad_(True)
        return loss

    return maybe_compile(lib, compiled)(d_step), maybe_compile(lib, compiled)(g_step)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("restore", [False, True])
def test_a_step_that_freezes_another_model_as_a_gan_does(restore, compiled):
    """The flags a compiled step sets are set again at each replay (the discriminator stays frozen after
    the generator's step, as in torch), and a step that sets them as it goes is traced once, with the
    flags the call found, not re-traced at every call."""
    (tG, fG), (tD, fD) = (twin(lambda lib: lib.nn.Linear(3, 4), seed=1), twin(lambda lib: lib.nn.Linear(4, 1), seed=2))
    runs = {torch: _gan(torch, tG, tD, False, restore), flame: _gan(flame, fG, fD, compiled, restore)}
    for i, (z, x) in enumerate(zip(batches(5, (5, 3), seed=3), batches(5, (5, 4), seed=4))):
        for k in (0, 1):
            args = (z[0], x[0])[: 2 - k]
            want, got = runs[torch][k](*to_lib(torch, *args)), runs[flame][k](*to_lib(flame, *args))
            assert float(numpy_of(got)) == pytest.approx(float(numpy_of(want)), rel=1e-9), (i, k)
            assert [p.requires_grad for p in fD.parameters()] == [p.requires_grad for p in tD.parameters()]
    assert_same_params(fG, tG)
    assert_same_params(fD, tD)
    if compiled:
        d_step, g_step = runs[flame]
        assert g_step.stats().traces == 1
        assert d_step.stats().traces == (1 if restore else 2)  # its first call finds D unfrozen, then frozen
