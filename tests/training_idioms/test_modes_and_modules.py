"""Module idioms against torch, eagerly and inside @flame.compile, from the same f64 weights: BatchNorm's running
statistics (momentum=None's cumulative average, track_running_stats=False) across train() / eval() switches,
eval() inside a compiled step, steps that begin with train() or eval(), Dropout in eval mode, weight tying
(one Parameter in two modules, counted and updated once), a non-persistent buffer, and model.apply(init)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.training_idioms.common import assert_same_params, batches, maybe_compile, numpy_of, to_lib, twin

DATA = batches(6, (8, 4), classes=3)


def _bn_model(momentum, track):
    def build(lib):
        nn = lib.nn
        return nn.Sequential(
            nn.Linear(4, 6),
            nn.BatchNorm1d(6, momentum=momentum, track_running_stats=track),
            nn.ReLU(),
            nn.Dropout(0.0),
            nn.Linear(6, 3),
        )

    return build


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("momentum,track", [(0.1, True), (None, True), (0.3, False)])
def test_batch_norm_statistics_across_train_and_eval(momentum, track, compiled):
    theirs, mine = twin(_bn_model(momentum, track))

    def make(lib, model, compiled):
        opt = lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        F = lib.nn.functional

        @maybe_compile(lib, compiled)
        def train_step(x, y):
            model.train()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss

        @maybe_compile(lib, compiled)
        def evaluate(x, y):
            model.eval()  # inside the compiled function, as many evaluation loops write it
            return F.cross_entropy(model(x), y)

        return train_step, evaluate

    tt, te = make(torch, theirs, False)
    ft, fe = make(flame, mine, compiled)
    for i, (x, y) in enumerate(DATA):
        assert abs(tt(*to_lib(torch, x, y)).item() - ft(*to_lib(flame, x, y)).item()) < 1e-10
        assert abs(te(*to_lib(torch, x, y)).item() - fe(*to_lib(flame, x, y)).item()) < 1e-10, f"eval {i}"
        assert_same_params(mine, theirs, what=f"after step {i}")
    assert not mine.training and not mine[1].training


def _tied(lib):
    nn = lib.nn

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 6)
            self.mid = nn.Linear(6, 6)
            self.head = nn.Linear(6, 10, bias=False)
            self.head.weight = self.emb.weight  # tied
            self.register_buffer("scale", lib.tensor(np.array(0.5)), persistent=False)

        def forward(self, idx):
            return self.head(self.mid(self.emb(idx)).tanh() * self.scale)

    return LM()


@pytest.mark.parametrize("compiled", [False, True])
def test_tied_weights_train_as_one_parameter(compiled):
    theirs, mine = twin(_tied)
    assert [n for n, _ in mine.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert "scale" not in mine.state_dict() and "head.weight" in mine.state_dict()
    assert mine.head.weight is mine.emb.weight
    r = np.random.default_rng(1)

    def make(lib, model, compiled):
        opt = lib.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1)

        @maybe_compile(lib, compiled)
        def step(idx, y):
            loss = lib.nn.functional.cross_entropy(model(idx), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss

        return step

    ts, fs = make(torch, theirs, False), make(flame, mine, compiled)
    for i in range(4):
        idx, y = r.integers(0, 10, 5), r.integers(0, 10, 5)
        assert abs(ts(*to_lib(torch, idx, y)).item() - fs(*to_lib(flame, idx, y)).item()) < 1e-10
        assert_same_params(mine, theirs, what=f"after step {i}")
    assert mine.head.weight is mine.emb.weight


def test_apply_init_fn_and_nn_init_as_torch():
    """model.apply(fn) visits every submodule (children first, as torch); the deterministic nn.init ops
    give torch's values."""

    def build(lib):
        nn = lib.nn
        return nn.Sequential(nn.Linear(3, 4), nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4)), nn.Linear(4, 2))

    for lib in (torch, flame):
        seen = []
        model = build(lib)

        def init(m, lib=lib, seen=seen):
            seen.append(type(m).__name__)
            if isinstance(m, lib.nn.Linear):
                lib.nn.init.constant_(m.weight, 0.25)
                lib.nn.init.zeros_(m.bias)
            if isinstance(m, lib.nn.LayerNorm):
                lib.nn.init.ones_(m.weight)

        model.apply(init)
        if lib is torch:
            want_seen, want = seen, {k: numpy_of(v) for k, v in model.state_dict().items()}
    assert seen == want_seen
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(numpy_of(v), want[k], err_msg=k)
    w = flame.nn.Parameter(flame.zeros(4, 4))
    flame.nn.init.eye_(w)
    np.testing.assert_array_equal(w.numpy(), np.eye(4))


@pytest.mark.parametrize("compiled", [False, True])
def test_steps_that_switch_the_mode_themselves(compiled):
    """A training step that begins with model.train() and an evaluation that begins with model.eval(),
    alternating as an epoch loop does: each is traced once per mode the call finds (not at every call
    after a switch), a replay leaves the mode the body leaves, and the values are torch's."""
    theirs, mine = twin(_bn_model(0.1, True))
    runs = {}
    for lib, model in ((torch, theirs), (flame, mine)):
        opt = lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

        def step(x, y, model=model, opt=opt, lib=lib):
            model.train()
            loss = lib.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss

        def evaluate(x, model=model, lib=lib):
            model.eval()
            with lib.no_grad():
                return model(x)

        runs[lib] = (maybe_compile(lib, compiled)(step), maybe_compile(lib, compiled)(evaluate))
    for i, (x, y) in enumerate(batches(9, (8, 4), classes=3)):
        for k in (0, 1) if i % 3 == 2 else (0,):
            args = (x, y) if k == 0 else (x,)
            want, got = runs[torch][k](*to_lib(torch, *args)), runs[flame][k](*to_lib(flame, *args))
            np.testing.assert_allclose(numpy_of(got), numpy_of(want), rtol=1e-9, atol=1e-12, err_msg=f"{i} {k}")
            assert [m.training for m in mine.modules()] == [m.training for m in theirs.modules()]
    assert_same_params(mine, theirs)
    if compiled:
        step, evaluate = runs[flame]
        assert (step.stats().traces, evaluate.stats().traces) == (2, 1)  # the step first finds train mode
