"""Every learning-rate scheduler against torch.optim.lr_scheduler, step by step, for a range of
arguments over about three times the schedule's length: get_last_lr(), each group's lr (and the
momentum or beta1 OneCycleLR and CyclicLR cycle), compared with ==: flame's schedulers do torch's Python
float arithmetic in torch's order. Also: two schedulers chained on one optimizer (torch's docs'
example), ChainedScheduler, a rate set by hand between steps, step(epoch) and its closed forms,
resuming through state_dict into fresh objects and through last_epoch, SequentialLR's milestones,
state_dict's layout, and the errors torch raises too."""

from __future__ import annotations

import contextlib
import math
import warnings

import pytest
import torch

import flame
import flame.nn as nn
import flame.optim as optim
from flame.errors import FlameError
from flame.optim import lr_scheduler as S

T = torch.optim.lr_scheduler


def _pair(groups: int = 2, kind: str = "sgd"):
    """(flame optimizer, torch optimizer) with the same groups (lrs 0.1, 0.2, ...)."""
    fg = [{"params": [nn.Parameter(flame.zeros(1))], "lr": 0.1 * (k + 1)} for k in range(groups)]
    tg = [{"params": [torch.zeros(1, requires_grad=True)], "lr": 0.1 * (k + 1)} for k in range(groups)]
    if kind == "sgd":
        return optim.SGD(fg, lr=0.1, momentum=0.9), torch.optim.SGD(tg, lr=0.1, momentum=0.9)
    return optim.AdamW(fg, lr=0.1), torch.optim.AdamW(tg, lr=0.1)


def _groups(opt) -> list[tuple]:
    """What a scheduler may write in each group: lr, momentum, beta1."""
    return [(g["lr"], g.get("momentum"), tuple(g["betas"]) if "betas" in g else None) for g in opt.param_groups]


def _same(fs, ts, fopt, topt, what: str) -> None:
    assert fs.get_last_lr() == ts.get_last_lr(), what
    assert _groups(fopt) == _groups(topt), what


@contextlib.contextmanager
def _quiet():
    """torch warns about its own call order (scheduler before optimizer) and step(epoch): not under test here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# name -> (make(lib, optimizer), steps): steps about three times the schedule's length
CASES = {
    "LambdaLR": (lambda m, o: m.LambdaLR(o, lambda e: 0.9**e + 0.01 * e), 30),
    "LambdaLR-per-group": (lambda m, o: m.LambdaLR(o, [lambda e: 1 / (e + 1), lambda e: 0.5 ** (e // 3)]), 30),
    "MultiplicativeLR": (lambda m, o: m.MultiplicativeLR(o, lambda e: 0.95 if e % 2 else 1.0), 30),
    "StepLR": (lambda m, o: m.StepLR(o, step_size=3, gamma=0.5), 30),
    "StepLR-1": (lambda m, o: m.StepLR(o, step_size=1, gamma=0.7), 20),
    "MultiStepLR": (lambda m, o: m.MultiStepLR(o, milestones=[2, 5, 5, 9], gamma=0.3), 30),
    "MultiStepLR-doc": (lambda m, o: m.MultiStepLR(o, milestones=[30, 80], gamma=0.1), 240),
    "ConstantLR": (lambda m, o: m.ConstantLR(o, factor=0.3, total_iters=4), 15),
    "ConstantLR-default": (lambda m, o: m.ConstantLR(o), 15),
    "ConstantLR-0-iters": (lambda m, o: m.ConstantLR(o, factor=0.5, total_iters=0), 6),
    "LinearLR": (lambda m, o: m.LinearLR(o, start_factor=0.1, end_factor=0.7, total_iters=6), 20),
    "LinearLR-default": (lambda m, o: m.LinearLR(o), 15),
    "LinearLR-decay": (lambda m, o: m.LinearLR(o, start_factor=1.0, end_factor=0.0, total_iters=4), 12),
    "LinearLR-0-iters": (lambda m, o: m.LinearLR(o, start_factor=0.5, total_iters=0), 6),
    "ExponentialLR": (lambda m, o: m.ExponentialLR(o, gamma=0.9), 30),
    "ExponentialLR-up": (lambda m, o: m.ExponentialLR(o, gamma=1.1), 30),
    "PolynomialLR": (lambda m, o: m.PolynomialLR(o, total_iters=7, power=2.0), 21),
    "PolynomialLR-default": (lambda m, o: m.PolynomialLR(o), 15),
    "PolynomialLR-sqrt": (lambda m, o: m.PolynomialLR(o, total_iters=4, power=0.5), 12),
    "CosineAnnealingLR": (lambda m, o: m.CosineAnnealingLR(o, T_max=5, eta_min=0.01), 15),
    "CosineAnnealingLR-10": (lambda m, o: m.CosineAnnealingLR(o, T_max=10), 30),
    "CosineAnnealingLR-1": (lambda m, o: m.CosineAnnealingLR(o, T_max=1, eta_min=0.001), 6),
    "CosineAnnealingWarmRestarts": (lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2, eta_min=1e-3), 45),
    "CosineAnnealingWarmRestarts-1": (lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=6), 18),
    "CosineAnnealingWarmRestarts-T1": (lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=1, T_mult=3), 40),
    "OneCycleLR": (lambda m, o: m.OneCycleLR(o, max_lr=1.0, total_steps=20), 20),
    "OneCycleLR-3-linear": (
        lambda m, o: m.OneCycleLR(
            o,
            max_lr=[0.5, 2.0],
            epochs=3,
            steps_per_epoch=7,
            pct_start=0.25,
            anneal_strategy="linear",
            three_phase=True,
            base_momentum=[0.8, 0.7],
            max_momentum=0.9,
        ),
        21,
    ),
    "OneCycleLR-no-momentum": (
        lambda m, o: m.OneCycleLR(
            o, max_lr=0.3, total_steps=9, cycle_momentum=False, div_factor=10.0, final_div_factor=100.0
        ),
        9,
    ),
    "CyclicLR": (lambda m, o: m.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=4), 24),
    "CyclicLR-triangular2": (
        lambda m, o: m.CyclicLR(
            o, base_lr=[0.01, 0.02], max_lr=[0.1, 0.3], step_size_up=2, step_size_down=3, mode="triangular2"
        ),
        30,
    ),
    "CyclicLR-exp_range": (lambda m, o: m.CyclicLR(o, 0.01, 0.1, step_size_up=3, mode="exp_range", gamma=0.97), 24),
    "CyclicLR-scale_fn": (
        lambda m, o: m.CyclicLR(
            o,
            0.01,
            0.1,
            step_size_up=3,
            scale_fn=lambda x: 1 / (1 + 0.1 * x),
            scale_mode="iterations",
            cycle_momentum=False,
        ),
        24,
    ),
    "SequentialLR": (
        lambda m, o: m.SequentialLR(
            o, [m.LinearLR(o, start_factor=0.1, total_iters=3), m.CosineAnnealingLR(o, T_max=7)], milestones=[3]
        ),
        30,
    ),
    "SequentialLR-3": (
        lambda m, o: m.SequentialLR(
            o, [m.ConstantLR(o, factor=0.5, total_iters=3), m.ExponentialLR(o, 0.9), m.StepLR(o, 4)], milestones=[3, 9]
        ),
        30,
    ),
    "SequentialLR-lambda": (
        lambda m, o: m.SequentialLR(
            o,
            [
                m.LambdaLR(o, lambda e: (e + 1) / 4),
                m.PolynomialLR(o, total_iters=6, power=2.0),
                m.MultiStepLR(o, [2, 4]),
            ],
            milestones=[4, 8],
        ),
        24,
    ),
    "SequentialLR-milestone-0": (
        lambda m, o: m.SequentialLR(o, [m.ExponentialLR(o, 0.5), m.StepLR(o, 2, 0.5)], milestones=[0]),
        10,
    ),
    "SequentialLR-nested": (
        lambda m, o: m.SequentialLR(
            o,
            [m.SequentialLR(o, [m.ConstantLR(o, 0.5, 2), m.ExponentialLR(o, 0.8)], [2]), m.CosineAnnealingLR(o, 4)],
            milestones=[5],
        ),
        20,
    ),
    "ChainedScheduler": (
        lambda m, o: m.ChainedScheduler([m.ConstantLR(o, factor=0.1, total_iters=2), m.ExponentialLR(o, gamma=0.9)]),
        12,
    ),
    "ChainedScheduler-3": (
        lambda m, o: m.ChainedScheduler(
            [m.LinearLR(o, 0.2, total_iters=4), m.StepLR(o, 3, 0.5), m.CosineAnnealingLR(o, 6, 0.01)], optimizer=o
        ),
        24,
    ),
}
MOMENTUM = {k for k in CASES if k.startswith(("OneCycleLR", "CyclicLR"))}
TWO_GROUPS = {"LambdaLR-per-group", "OneCycleLR-3-linear", "CyclicLR-triangular2"}  # per-group arguments


def _run(name: str, fopt, topt, steps: int, between=None):
    """Make CASES[name] in both libraries and step both `steps` times, comparing after each step;
    between(i) runs before step i."""
    make, _ = CASES[name]
    fs, ts = make(S, fopt), make(T, topt)
    _same(fs, ts, fopt, topt, f"{name} after construction")
    for i in range(steps):
        if between is not None:
            between(i)
        topt.step()
        fs.step()
        with _quiet():
            ts.step()
        _same(fs, ts, fopt, topt, f"{name} after step {i}")
    return fs, ts


@pytest.mark.parametrize("name,groups", [(n, g) for n in CASES for g in (1, 2) if g == 2 or n not in TWO_GROUPS])
def test_rates_match_torch_step_by_step(name, groups):
    for kind in ("sgd", "adam") if name in MOMENTUM else ("sgd",):
        fopt, topt = _pair(groups, kind)
        _run(name, fopt, topt, CASES[name][1])


@pytest.mark.parametrize("name", list(CASES))
def test_a_rate_set_by_hand_is_continued_or_overwritten_as_in_torch(name):
    """Schedulers of the chainable form continue from the rate set; the others overwrite it."""
    fopt, topt = _pair()
    steps = CASES[name][1]

    def by_hand(i):
        if i in (2, steps // 2):
            for opt in (fopt, topt):
                opt.param_groups[1]["lr"] = 0.0123 * (i + 1)

    _run(name, fopt, topt, steps, between=by_hand)


CHAINS = [
    lambda m, o: [m.ExponentialLR(o, gamma=0.9), m.MultiStepLR(o, milestones=[30, 80], gamma=0.1)],  # torch's docs
    lambda m, o: [m.LinearLR(o, start_factor=0.1, total_iters=3), m.StepLR(o, 2)],
    lambda m, o: [m.CosineAnnealingLR(o, 5), m.LinearLR(o, 0.5, total_iters=7)],
    lambda m, o: [m.ConstantLR(o, 0.5, 3), m.PolynomialLR(o, 6, 2.0), m.MultiplicativeLR(o, lambda e: 0.99)],
    lambda m, o: [m.LambdaLR(o, lambda e: 0.9**e), m.CosineAnnealingLR(o, 4, 0.01)],  # LambdaLR overwrites
    lambda m, o: [m.StepLR(o, 3, 0.5), m.CosineAnnealingWarmRestarts(o, T_0=4)],  # the restarts overwrite
]


@pytest.mark.parametrize("chain", range(len(CHAINS)))
def test_two_schedulers_on_one_optimizer_chain_as_in_torch(chain):
    fopt, topt = _pair()
    fss, tss = CHAINS[chain](S, fopt), CHAINS[chain](T, topt)
    for epoch in range(100):
        topt.step()
        for s in fss:
            s.step()
        for s in tss:
            s.step()
        assert [s.get_last_lr() for s in fss] == [s.get_last_lr() for s in tss], epoch
        assert _groups(fopt) == _groups(topt), epoch


def test_chained_scheduler_state_dict_and_errors():
    fopt, topt = _pair()
    fs, ts = _run("ChainedScheduler-3", fopt, topt, 5)
    state = fs.state_dict()
    assert set(state) == set(ts.state_dict()) and len(state["_schedulers"]) == 3
    fopt2, _ = _pair()
    again = CASES["ChainedScheduler-3"][0](S, fopt2)
    fopt2.load_state_dict(fopt.state_dict())
    again.load_state_dict(state)
    for i in range(10):
        fs.step()
        again.step()
        ts.step()
        assert again.get_last_lr() == fs.get_last_lr() == ts.get_last_lr(), i
    other, _ = _pair()
    with pytest.raises(ValueError, match="same optimizer"):
        S.ChainedScheduler([S.StepLR(fopt, 2), S.StepLR(other, 2)])
    with pytest.raises(ValueError, match="ReduceLROnPlateau"):
        S.ChainedScheduler([S.StepLR(fopt, 2), S.ReduceLROnPlateau(fopt)])
    with pytest.raises(ValueError, match="at least one"):
        S.ChainedScheduler([])


CLOSED = [
    "StepLR",
    "MultiStepLR",
    "ConstantLR",
    "LinearLR",
    "ExponentialLR",
    "PolynomialLR",
    "CosineAnnealingLR",
    "LambdaLR",
    "MultiplicativeLR",
    "CosineAnnealingWarmRestarts",
    "CosineAnnealingWarmRestarts-1",
    "CyclicLR",
]


@pytest.mark.parametrize("name", CLOSED)
def test_step_with_an_epoch_is_torchs(name):
    """step(epoch) (deprecated in both, with a UserWarning): the closed form where torch has one, else
    the scheduler's get_lr() at that epoch; fractional epochs for CosineAnnealingWarmRestarts."""
    fopt, topt = _pair()
    make, _ = CASES[name]
    fs, ts = make(S, fopt), make(T, topt)
    epochs = [3, 4, 1, 9, 9, 0, 17, 2, 30, 5, 6]
    if name.startswith("CosineAnnealingWarmRestarts"):
        epochs += [0.5, 2.25, 7.75, 13.1, 40.0]
    for k, epoch in enumerate(epochs):
        with pytest.warns(UserWarning, match="deprecated") if "Restarts" not in name else _nothing():
            fs.step(epoch)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ts.step(epoch)
        _same(fs, ts, fopt, topt, f"{name} at epoch {epoch}")
        if k % 3 == 2:  # plain steps continue from there, in the chainable form
            fs.step()
            ts.step()
            _same(fs, ts, fopt, topt, f"{name} a step after epoch {epoch}")


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("name", list(CASES))
def test_resume_through_state_dict_into_fresh_objects(name):
    """k steps; the optimizer's and the scheduler's state into a fresh optimizer and scheduler (the
    scheduler made first, as torch's docs advise), the rest of the steps: as torch doing the same, and
    as torch's uninterrupted run."""
    steps = CASES[name][1]
    k = steps // 3
    fopt, topt = _pair()
    fs, ts = _run(name, fopt, topt, k)
    saved_f, saved_t = (fopt.state_dict(), fs.state_dict()), (topt.state_dict(), ts.state_dict())
    fopt2, topt2 = _pair()
    with _quiet():
        fs2, ts2 = CASES[name][0](S, fopt2), CASES[name][0](T, topt2)
    fopt2.load_state_dict(saved_f[0])
    topt2.load_state_dict(saved_t[0])
    fs2.load_state_dict(saved_f[1])
    ts2.load_state_dict(saved_t[1])
    for i in range(k, steps):
        with _quiet():
            for s in (fs2, ts2, ts):
                s.step()
        _same(fs2, ts2, fopt2, topt2, f"{name} resumed, step {i}")
        assert fs2.get_last_lr() == ts.get_last_lr(), f"{name} resumed vs uninterrupted, step {i}"


def test_state_dict_holds_torchs_attributes():
    """The same keys as torch's state_dict (torch's private flag of get_lr's warning aside), and values a
    torch state_dict of the same scheduler holds."""
    for name in CASES:
        fopt, topt = _pair()
        fs, ts = _run(name, fopt, topt, 4)
        mine, theirs = fs.state_dict(), ts.state_dict()
        assert set(mine) == set(theirs) - {"_get_lr_called_within_step"}, name
        for key in ("last_epoch", "base_lrs", "_last_lr", "_step_count", "lr_lambdas", "T_cur", "T_i"):
            if key in theirs:
                assert mine[key] == theirs[key], (name, key)


@pytest.mark.parametrize(
    "name",
    [
        "StepLR",
        "MultiStepLR",
        "ConstantLR",
        "LinearLR",
        "ExponentialLR",
        "PolynomialLR",
        "CosineAnnealingLR",
        "CosineAnnealingWarmRestarts",
        "CosineAnnealingWarmRestarts-1",
        "LambdaLR",
        "MultiplicativeLR",
        "OneCycleLR",
        "CyclicLR",
    ],
)
@pytest.mark.parametrize("k", [0, 3, 4, 7])
def test_resume_through_last_epoch_is_torchs(name, k):
    """A scheduler made with last_epoch=k on an optimizer whose groups hold initial_lr (its state
    loaded): torch's construction step from there, and the steps after."""
    fopt, topt = _pair()
    _run(name, fopt, topt, k + 1)
    fopt2, topt2 = _pair()
    fopt2.load_state_dict(fopt.state_dict())
    topt2.load_state_dict(topt.state_dict())
    make = CASES[name][0]
    fs, ts = _with_last_epoch(make, S, fopt2, k), _with_last_epoch(make, T, topt2, k)
    _same(fs, ts, fopt2, topt2, f"{name} resumed at {k}")
    for i in range(CASES[name][1] - k - 2):
        topt2.step()
        fs.step()
        ts.step()
        _same(fs, ts, fopt2, topt2, f"{name} resumed at {k}, step {i}")


def _with_last_epoch(make, lib, opt, k):
    """CASES' scheduler with last_epoch=k (the factories take no last_epoch: patch the constructor's default)."""
    probe = make(_Recorder(lib), opt)
    return getattr(lib, probe.cls)(opt, *probe.args, **probe.kwargs, last_epoch=k)


class _Recorder:
    """A stand-in for the lr_scheduler module that records the one constructor call of a CASES factory."""

    def __init__(self, lib):
        self.lib = lib

    def __getattr__(self, cls):
        def record(opt, *args, **kwargs):
            call = type("Call", (), {})()
            call.cls, call.args, call.kwargs = cls, args, kwargs
            return call

        return record


def test_warmup_cosine_shape():
    """flame's WarmupCosineLR (Hugging Face's get_cosine_schedule_with_warmup): linear warmup, then a half cosine."""
    ours, _ = _pair(1)
    ours.param_groups[0]["lr"] = 1.0
    s = S.WarmupCosineLR(ours, warmup_steps=4, total_steps=14, min_lr_ratio=0.1)
    lrs = [s.get_last_lr()[0]]
    for _ in range(16):
        s.step()
        lrs.append(s.get_last_lr()[0])
    assert lrs[:5] == [0, 0.25, 0.5, 0.75, 1.0]
    assert lrs[9] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:]))
    assert lrs[14] == pytest.approx(0.1) and lrs[16] == pytest.approx(0.1)
    hf = S.get_cosine_schedule_with_warmup(_pair(1)[0], 2, 10)
    assert hf.get_last_lr() == [0.0]


def test_errors_where_torch_errors():
    fopt, topt = _pair()
    for lib, opt in ((S, fopt), (T, topt)):
        with pytest.raises(KeyError, match="initial_lr"):
            lib.StepLR(opt, 2, last_epoch=3)
        with pytest.raises(ValueError):
            lib.ConstantLR(opt, factor=1.5)
        with pytest.raises(ValueError):
            lib.LinearLR(opt, start_factor=0.0)
        with pytest.raises(ValueError, match="milestones"):
            lib.SequentialLR(opt, [lib.StepLR(opt, 2), lib.StepLR(opt, 3)], milestones=[])
    fs, ts = S.ConstantLR(fopt, factor=0.0, total_iters=2), T.ConstantLR(topt, factor=0.0, total_iters=2)
    topt.step()
    fs.step()
    ts.step()
    with pytest.raises(ZeroDivisionError):
        ts.step()
    with pytest.raises(FlameError, match=r"ConstantLR\(factor=0\).*total_iters=2"):
        fs.step()
    with pytest.raises(FlameError, match="T_max must not be 0"):
        S.CosineAnnealingLR(fopt, T_max=0)
    with pytest.raises(FlameError, match=r"LinearLR\(total_iters=0\) has no closed form"), _quiet():
        S.LinearLR(fopt, total_iters=0).step(3)


def test_a_group_added_after_the_scheduler_is_named():
    """The chainable form needs no initial lr: the new group follows, as in torch. A scheduler that
    needs one raises ValueError in both (torch's from zip(strict=True)); flame's names the counts."""
    fopt, topt = _pair(1)
    fs, ts = S.ExponentialLR(fopt, 0.9), T.ExponentialLR(topt, 0.9)
    f2, t2 = _pair(1)
    fl, tl = S.LambdaLR(f2, lambda e: 0.5), T.LambdaLR(t2, lambda e: 0.5)
    for opt, lib in ((fopt, flame), (topt, torch), (f2, flame), (t2, torch)):
        opt.add_param_group({"params": [lib.zeros(1, requires_grad=True)], "lr": 0.3})
        opt.step()
    fs.step()
    ts.step()
    _same(fs, ts, fopt, topt, "ExponentialLR with a group added")
    with pytest.raises(ValueError):
        tl.step()
    with pytest.raises(ValueError, match="2 param_groups, the scheduler computed 1 rates"):
        fl.step()


def test_lambda_state_dict_saves_callable_objects_as_torch():
    class Warm:
        def __init__(self, n):
            self.n = n

        def __call__(self, e):
            return min(1.0, (e + 1) / self.n)

    fopt, topt = _pair()
    fs, ts = S.LambdaLR(fopt, [Warm(5), lambda e: 0.5]), T.LambdaLR(topt, [Warm(5), lambda e: 0.5])
    topt.step()
    fs.step()
    ts.step()
    assert fs.state_dict()["lr_lambdas"] == ts.state_dict()["lr_lambdas"] == [{"n": 5}, None]
    fopt2, _ = _pair()
    again = S.LambdaLR(fopt2, [Warm(2), lambda e: 0.5])
    again.load_state_dict(fs.state_dict())
    assert again.lr_lambdas[0].n == 5 and again.last_epoch == 1


@pytest.mark.parametrize("make", [
    lambda opt: flame.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5),
    lambda opt: flame.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=10),
    lambda opt: flame.optim.lr_scheduler.ReduceLROnPlateau(opt),
])
def test_a_scheduler_stepped_inside_a_compiled_step_is_a_trace_error(make):
    """Its Python would run once, when the step is traced (the traced call updating with the next rate,
    every later call with that one): flame says where, and to step it outside the compiled step."""
    m = flame.nn.Linear(3, 1)
    opt = flame.optim.SGD(m.parameters(), lr=0.5, momentum=0.9)
    sched = make(opt)

    @flame.compile
    def step(x):
        loss = m(x).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        sched.step(*((1.0,) if isinstance(sched, flame.optim.lr_scheduler.ReduceLROnPlateau) else ()))
        return loss

    with pytest.raises(flame.TraceError, match=r"\.step\(\) inside @flame.compile.*outside the compiled step"):
        step(flame.ones(2, 3))
