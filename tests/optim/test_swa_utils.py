"""flame.optim.swa_utils against torch.optim.swa_utils in f64: AveragedModel's averaged parameters and
buffers after several training steps (default SWA averaging, EMA through multi_avg_fn and avg_fn,
use_buffers=True averaging BatchNorm's running statistics), eagerly and with update_parameters inside
the @flame.compile'd training step; state_dict layout and round trip; SWALR's rates over epochs for both
anneal strategies and per-group swa_lr; update_bn's running statistics; the errors torch raises too."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch.optim import swa_utils as TS

import flame
import flame.nn as nn
from flame.optim import swa_utils as FS

STEPS = 5


def _models():
    """(flame model, torch model) with the same f64 weights: Linear, BatchNorm1d, Linear."""
    torch.manual_seed(0)
    tm = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2)).double()
    fm = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)).double()
    fm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    return fm, tm


def _averagers(kind: str):
    """(flame kwargs, torch kwargs) of AveragedModel for one averaging."""
    if kind == "swa":
        return {}, {}
    if kind == "ema-multi":
        return {"multi_avg_fn": FS.get_ema_multi_avg_fn(0.9)}, {"multi_avg_fn": TS.get_ema_multi_avg_fn(0.9)}
    if kind == "ema-avg":
        return {"avg_fn": FS.get_ema_avg_fn(0.8)}, {"avg_fn": TS.get_ema_avg_fn(0.8)}
    if kind == "swa-avg":
        return {"avg_fn": FS.get_swa_avg_fn()}, {"avg_fn": TS.get_swa_avg_fn()}
    if kind == "swa-multi":
        return {"multi_avg_fn": FS.get_swa_multi_avg_fn()}, {"multi_avg_fn": TS.get_swa_multi_avg_fn()}
    raise AssertionError(kind)


def _same_state(fa, ta) -> None:
    ts, fs = ta.state_dict(), fa.state_dict()
    assert list(fs) == list(ts)
    for k in ts:
        np.testing.assert_allclose(fs[k].numpy(), ts[k].numpy(), rtol=1e-12, atol=1e-14, err_msg=k)
        assert fs[k].numpy().dtype == ts[k].numpy().dtype, k


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("use_buffers", [False, True], ids=["params", "buffers"])
@pytest.mark.parametrize("kind", ["swa", "ema-multi", "ema-avg", "swa-avg", "swa-multi"])
def test_averaged_model_follows_torch(kind, use_buffers, compiled):
    fm, tm = _models()
    fk, tk = _averagers(kind)
    fa = FS.AveragedModel(fm, use_buffers=use_buffers, **fk)
    ta = TS.AveragedModel(tm, use_buffers=use_buffers, **tk)
    if kind == "swa-multi" and use_buffers:  # num_batches_tracked is an integer: torch refuses, so does flame
        for avg, m in ((ta, tm), (fa, fm)):
            avg.update_parameters(m)
            with pytest.raises(RuntimeError, match="Integer division with addcdiv"):
                avg.update_parameters(m)
        return
    fopt, topt = flame.optim.SGD(fm.parameters(), lr=0.1), torch.optim.SGD(tm.parameters(), lr=0.1)
    xs = np.random.default_rng(1).standard_normal((STEPS, 6, 3))

    def fstep(x):
        loss = fm(x).pow(2).sum()
        loss.backward()
        fopt.step()
        fopt.zero_grad()
        fa.update_parameters(fm)
        return loss

    fstep = flame.compile(fstep) if compiled else fstep
    for x in xs:
        tl = tm(torch.tensor(x)).pow(2).sum()
        tl.backward()
        topt.step()
        topt.zero_grad()
        ta.update_parameters(tm)
        fl = fstep(flame.tensor(x))
        np.testing.assert_allclose(fl.item(), tl.item(), rtol=1e-12)
        _same_state(fa, ta)
    # the averaged copy's forward, in eval mode (running statistics: averaged or followed)
    fa.eval()
    ta.eval()
    x = np.random.default_rng(2).standard_normal((4, 3))
    np.testing.assert_allclose(fa(flame.tensor(x)).numpy(), ta(torch.tensor(x)).detach().numpy(), rtol=1e-12)


def test_ema_inside_a_compiled_step_is_one_trace_and_writes_in_place():
    """The EMA weights and n_averaged are state the compiled step updates: the same objects hold the
    new values after each call, and the step is traced once (the first call's copy is a `where`)."""
    fm, tm = _models()
    ema = FS.AveragedModel(fm, multi_avg_fn=FS.get_ema_multi_avg_fn(0.5))
    weight = ema.module[0].weight
    opt = flame.optim.SGD(fm.parameters(), lr=0.1)

    @flame.compile
    def step(x):
        loss = fm(x).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        ema.update_parameters(fm)
        return loss

    expected = None
    with warnings.catch_warnings():
        warnings.simplefilter("error", flame.RecompileWarning)
        for i in range(3):
            step(flame.ones(2, 3, dtype=flame.float64))
            now = fm[0].weight.numpy()
            expected = now.copy() if expected is None else 0.5 * expected + 0.5 * now
            np.testing.assert_allclose(weight.numpy(), expected, rtol=1e-12)
            assert ema.n_averaged.item() == i + 1
    assert ema.module[0].weight is weight


def test_state_dict_round_trip_and_torch_layout():
    fm, tm = _models()
    fa, ta = FS.AveragedModel(fm), TS.AveragedModel(tm)
    for _ in range(2):
        fa.update_parameters(fm)
        ta.update_parameters(tm)
    assert list(fa.state_dict()) == list(ta.state_dict())
    assert list(fa.state_dict())[0] == "n_averaged"
    # torch's state_dict loads into flame's and back
    fresh = FS.AveragedModel(fm)
    fresh.load_state_dict({k: v.numpy() for k, v in ta.state_dict().items()})
    assert fresh.n_averaged.item() == 2
    back = TS.AveragedModel(tm)
    back.load_state_dict({k: torch.tensor(v.numpy()) for k, v in fresh.state_dict().items()})
    _same_state(fresh, back)


def test_averaged_model_is_a_deep_copy():
    fm, _ = _models()
    fa = FS.AveragedModel(fm)
    assert fa.module is not fm
    assert all(a is not b for a, b in zip(fa.parameters(), fm.parameters()))
    np.testing.assert_array_equal(fa.module[0].weight.numpy(), fm[0].weight.numpy())
    assert fa.n_averaged.dtype == flame.int64 and fa.n_averaged.item() == 0


def test_errors_as_torch():
    fm, tm = _models()
    for lib, m in ((FS, fm), (TS, tm)):
        with pytest.raises(AssertionError, match="Only one of avg_fn and multi_avg_fn"):
            lib.AveragedModel(m, avg_fn=lib.get_swa_avg_fn(), multi_avg_fn=lib.get_swa_multi_avg_fn())
        for fn in (lib.get_ema_avg_fn, lib.get_ema_multi_avg_fn):
            with pytest.raises(ValueError, match=r"Invalid decay value 1.5 provided"):
                fn(1.5)


def _sgd_pair(lrs=(0.1, 0.4)):
    fg = [{"params": [nn.Parameter(flame.zeros(1))], "lr": lr} for lr in lrs]
    tg = [{"params": [torch.zeros(1, requires_grad=True)], "lr": lr} for lr in lrs]
    return flame.optim.SGD(fg, lr=0.1), torch.optim.SGD(tg, lr=0.1)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(swa_lr=0.05),
        dict(swa_lr=0.05, anneal_strategy="linear"),
        dict(swa_lr=[0.01, 0.2], anneal_epochs=3),
        dict(swa_lr=[0.01, 0.2], anneal_epochs=4, anneal_strategy="linear"),
        dict(swa_lr=0.3, anneal_epochs=0),
        dict(swa_lr=0.02, anneal_epochs=1, anneal_strategy="linear"),
    ],
)
def test_swalr_rates_follow_torch(kwargs):
    fopt, topt = _sgd_pair()
    fs, ts = FS.SWALR(fopt, **kwargs), TS.SWALR(topt, **kwargs)
    assert fs.get_last_lr() == ts.get_last_lr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's warning about scheduler-before-optimizer order
        for epoch in range(15):
            fs.step()
            ts.step()
            assert fs.get_last_lr() == ts.get_last_lr(), epoch
            assert [g["lr"] for g in fopt.param_groups] == [g["lr"] for g in topt.param_groups]
            assert [g["swa_lr"] for g in fopt.param_groups] == [g["swa_lr"] for g in topt.param_groups]


def test_swalr_takes_over_from_another_schedule_and_resumes():
    """Torch's docs' pattern: a schedule first, SWALR later, continuing from the rate the group holds;
    a state_dict of the scheduler restores it into a fresh one."""
    fopt, topt = _sgd_pair()
    fsched = flame.optim.lr_scheduler.MultiplicativeLR(fopt, lambda e: 0.9)
    tsched = torch.optim.lr_scheduler.MultiplicativeLR(topt, lambda e: 0.9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):
            fsched.step()
            tsched.step()
        fs = FS.SWALR(fopt, swa_lr=0.05, anneal_epochs=4)
        ts = TS.SWALR(topt, swa_lr=0.05, anneal_epochs=4)
        for _ in range(2):
            fs.step()
            ts.step()
        state = fs.state_dict()
        assert set(state) >= {"anneal_epochs", "_anneal_strategy", "base_lrs", "last_epoch", "_step_count"}
        assert "anneal_func" not in state and "optimizer" not in state
        again = FS.SWALR(fopt, swa_lr=0.05, anneal_epochs=4)
        again.load_state_dict(state)
        for _ in range(4):
            again.step()
            ts.step()
            assert again.get_last_lr() == ts.get_last_lr()


def test_swalr_errors_as_torch():
    fopt, topt = _sgd_pair()
    for lib, opt in ((FS, fopt), (TS, topt)):
        with pytest.raises(ValueError, match="anneal_strategy must be one of 'cos' or 'linear'"):
            lib.SWALR(opt, swa_lr=0.1, anneal_strategy="exp")
        with pytest.raises(ValueError, match="anneal_epochs must be equal or greater than 0"):
            lib.SWALR(opt, swa_lr=0.1, anneal_epochs=-1)
        with pytest.raises(ValueError):
            lib.SWALR(opt, swa_lr=[0.1, 0.2, 0.3])
    with pytest.warns(UserWarning, match="get_last_lr"):
        FS.SWALR(fopt, swa_lr=0.1).get_lr()


@pytest.mark.parametrize("tuples", [False, True], ids=["tensors", "tuples"])
def test_update_bn_follows_torch(tuples):
    fm, tm = _models()
    fm.eval()
    tm.eval()
    fm[1].momentum = tm[1].momentum = 0.3
    data = np.random.default_rng(3).standard_normal((4, 6, 3)) * 2 + 1
    floader = [(flame.tensor(x), 0) if tuples else flame.tensor(x) for x in data]
    tloader = [(torch.tensor(x), 0) if tuples else torch.tensor(x) for x in data]
    FS.update_bn(floader, fm)
    TS.update_bn(tloader, tm)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        np.testing.assert_allclose(
            getattr(fm[1], name).numpy(), getattr(tm[1], name).numpy(), rtol=1e-12, err_msg=name
        )
    assert fm[1].momentum == 0.3 and not fm.training


def test_update_bn_of_an_averaged_model_and_without_batchnorm():
    fm, tm = _models()
    fa, ta = FS.AveragedModel(fm), TS.AveragedModel(tm)
    fa.update_parameters(fm)
    ta.update_parameters(tm)
    data = np.random.default_rng(4).standard_normal((3, 5, 3))
    FS.update_bn([flame.tensor(x) for x in data], fa)
    TS.update_bn([torch.tensor(x) for x in data], ta)
    _same_state(fa, ta)
    lin = nn.Linear(3, 2)
    FS.update_bn([flame.tensor(data[0])], lin)  # no BatchNorm: nothing to do, nothing run


def test_swalr_steers_a_compiled_step_without_retracing():
    """SWALR writes group['lr'], which a compiled step reads as a scalar input: the SGD updates follow
    torch's rates epoch by epoch, traced once."""
    fp, tp = nn.Parameter(flame.ones(3, dtype=flame.float64)), torch.ones(3, dtype=torch.float64, requires_grad=True)
    fopt, topt = flame.optim.SGD([fp], lr=0.5), torch.optim.SGD([tp], lr=0.5)
    fs, ts = FS.SWALR(fopt, swa_lr=0.05, anneal_epochs=3), TS.SWALR(topt, swa_lr=0.05, anneal_epochs=3)

    @flame.compile
    def fstep():
        (fp * fp).sum().backward()
        fopt.step()
        fopt.zero_grad()

    with warnings.catch_warnings():
        warnings.simplefilter("error", flame.RecompileWarning)
        for _ in range(6):
            fstep()
            (tp * tp).sum().backward()
            topt.step()
            topt.zero_grad()
            fs.step()
            ts.step()
            np.testing.assert_allclose(fp.numpy(), tp.detach().numpy(), rtol=1e-12)
