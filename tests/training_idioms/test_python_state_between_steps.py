"""A loss weight the training loop changes between compiled steps through a config dict, a list, an
argparse-like namespace or a trainer's attribute (KL annealing, a warm-up of an auxiliary loss), a value a
hook or an autograd.Function reads, and an optimizer replaced by another (Adam, then SGD), train as
torch's: the step re-traces with the new value or object instead of replaying the one it was traced with."""

from __future__ import annotations

import functools
import types
import warnings

import numpy as np
import pytest
import torch

import flame
from tests.training_idioms.common import assert_same_params, batches, maybe_compile, numpy_of, to_lib, twin


def _build(lib):
    return lib.nn.Sequential(lib.nn.Linear(5, 7), lib.nn.Tanh(), lib.nn.Linear(7, 3))


class _Trainer:
    def __init__(self, lib, model, compiled):
        self.lib, self.model, self.beta = lib, model, 0.0
        self.opt = lib.optim.SGD(model.parameters(), lr=0.1)
        self.step = maybe_compile(lib, compiled)(self._step)

    def loss(self, x, y):
        out = self.model(x)
        return self.lib.nn.functional.cross_entropy(out, y) + self.beta * out.pow(2).mean()

    def _step(self, x, y):
        loss = self.loss(x, y)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad()
        return loss


def _holder_step(lib, model, compiled, where):
    cfg, ws, ns = {"beta": 0.0}, [0.0], types.SimpleNamespace(beta=0.0)
    opt = lib.optim.SGD(model.parameters(), lr=0.1)

    @maybe_compile(lib, compiled)
    def step(x, y):
        beta = {"dict": lambda: cfg["beta"], "list": lambda: ws[0], "namespace": lambda: ns.beta}[where]
        out = model(x)
        loss = lib.nn.functional.cross_entropy(out, y) + beta() * out.pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    def set_beta(b):
        cfg["beta"], ws[0], ns.beta = b, b, b

    return step, set_beta


@pytest.mark.parametrize("where", ["dict", "list", "namespace", "trainer"])
@pytest.mark.parametrize("compiled", [False, True])
def test_a_loss_weight_annealed_between_compiled_steps(where, compiled):
    theirs, mine = twin(_build)
    runs = {}
    for lib, m in ((torch, theirs), (flame, mine)):
        if where == "trainer":
            t = _Trainer(lib, m, compiled and lib is flame)
            runs[lib] = (t.step, lambda b, t=t: setattr(t, "beta", b))
        else:
            runs[lib] = _holder_step(lib, m, compiled and lib is flame, where)
    for i, (x, y) in enumerate(batches(5, (6, 5), classes=3)):
        for lib in (torch, flame):
            runs[lib][1](0.25 * i)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", flame.RecompileWarning)
            want, got = runs[torch][0](*to_lib(torch, x, y)), runs[flame][0](*to_lib(flame, x, y))
        np.testing.assert_allclose(numpy_of(got), numpy_of(want), rtol=1e-9, err_msg=f"step {i}")
    assert_same_params(mine, theirs)


def _switching_step(lib, m, held):
    """(step, switch): the step reads its optimizer from a closure variable or a dict's entry; switch()
    replaces Adam by SGD with momentum."""
    box = {"opt": lib.optim.Adam(m.parameters(), lr=0.01)}
    opt = box["opt"]

    def step(x, y):
        o = box["opt"] if held == "dict" else opt
        loss = lib.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        o.step()
        o.zero_grad()
        return loss

    def switch():
        nonlocal opt
        opt = box["opt"] = lib.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)

    return (flame.compile(step) if lib is flame else step), switch


@pytest.mark.parametrize("held", ["closure", "dict"])
def test_an_optimizer_replaced_between_compiled_steps(held):
    theirs, mine = twin(_build)
    runs = {torch: _switching_step(torch, theirs, held), flame: _switching_step(flame, mine, held)}
    for i, (x, y) in enumerate(batches(5, (6, 5), classes=3)):
        if i == 2:
            for lib in (torch, flame):
                runs[lib][1]()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", flame.RecompileWarning)
            want, got = runs[torch][0](*to_lib(torch, x, y)), runs[flame][0](*to_lib(flame, x, y))
        np.testing.assert_allclose(numpy_of(got), numpy_of(want), rtol=1e-9, err_msg=f"step {i}")
    assert_same_params(mine, theirs)


def _hooked(lib, m, box):
    """Hooks and an autograd.Function that read box['s'], a value the loop changes between steps: a
    forward hook, a forward pre-hook, a tensor hook, a full backward hook and a Function's backward."""

    class Scale(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            return g * box["function"]

    return {
        "forward hook": lambda: m[0].register_forward_hook(lambda mod, args, out: out * box["forward hook"]),
        "forward pre-hook": lambda: m[2].register_forward_pre_hook(
            lambda mod, args: (args[0] * box["forward pre-hook"],)),
        "tensor hook": lambda: m[0].weight.register_hook(lambda g: g * box["tensor hook"]),
        "full backward hook": lambda: m[2].register_full_backward_hook(
            lambda mod, gin, gout: (gin[0] * box["full backward hook"],)),
        "function": lambda: m[1].register_forward_hook(lambda mod, args, out: Scale.apply(out)),
    }


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("what", ["forward hook", "forward pre-hook", "tensor hook", "full backward hook", "function"])
def test_a_value_a_hook_reads_changed_between_compiled_steps(what, compiled):
    """A hook (or an autograd.Function's backward) reading a value the loop changes: the next step uses the
    new value, as torch's, instead of replaying the one traced (the step re-traces, naming the hook)."""
    theirs, mine = twin(_build)
    steps, boxes = {}, {}
    for lib, m in ((torch, theirs), (flame, mine)):
        boxes[lib] = {what: 1.0}
        _hooked(lib, m, boxes[lib])[what]()
        opt = lib.optim.SGD(m.parameters(), lr=0.1)
        steps[lib] = maybe_compile(lib, compiled)(functools.partial(_ce, lib, m, opt))
    warned = []
    for i, (x, y) in enumerate(batches(5, (6, 5), classes=3)):
        for lib in (torch, flame):
            boxes[lib][what] = 1.0 if i < 2 else 3.0
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", flame.RecompileWarning)
            want, got = steps[torch](*to_lib(torch, x, y)), steps[flame](*to_lib(flame, x, y))
        warned += [str(w.message) for w in caught if issubclass(w.category, flame.RecompileWarning)]
        np.testing.assert_allclose(numpy_of(got), numpy_of(want), rtol=1e-9, err_msg=f"step {i}")
        assert_same_params(mine, theirs, what=f"after step {i}")
    if compiled:
        assert len(warned) == 1 and "'box'" in warned[0], warned


def _ce(lib, m, opt, x, y):
    loss = lib.nn.functional.cross_entropy(m(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss
