"""flame.amp.GradScaler's argument checks and misuse against torch.amp.GradScaler("cpu"): what each
refuses (the same exception type) and what each accepts."""

from __future__ import annotations

import pytest

import flame
import flame.nn as nn
from flame.amp import GradScaler

torch = pytest.importorskip("torch")


def _make(lib, **kw):
    return torch.amp.GradScaler("cpu", **kw) if lib is torch else GradScaler("cpu", **kw)


def _outcome(fn, *args):
    """('ok', value) or the exception type torch's users catch (AssertionError, ValueError, ...)."""
    try:
        return "ok", fn(*args)
    except AssertionError:
        return "AssertionError", None
    except RuntimeError:
        return "RuntimeError", None
    except ValueError:
        return "ValueError", None


@pytest.mark.parametrize("kw", [
    dict(growth_factor=1.0), dict(growth_factor=0.5), dict(backoff_factor=1.0), dict(backoff_factor=2.0),
    dict(backoff_factor=0.0), dict(growth_interval=0), dict(growth_factor=1.0, enabled=False),
    dict(backoff_factor=1.5, enabled=False),
], ids=str)
def test_constructor_checks_as_torch(kw):
    """torch asserts growth_factor > 1 and backoff_factor < 1, only for an enabled scaler, and accepts a zero
    backoff factor or growth interval."""
    want = _outcome(lambda: _make(torch, **kw).state_dict())
    got = _outcome(lambda: _make(flame, **kw).state_dict())
    assert got == want


@pytest.mark.parametrize("kw", [dict(backoff_factor=0.0), dict(growth_interval=0)], ids=str)
def test_accepted_corner_factors_update_as_torch(kw):
    """A zero backoff factor sends the scale to 0 on inf/NaN; a zero growth interval never grows it."""
    scales = []
    for lib in (torch, flame):
        p = (torch.nn.Parameter if lib is torch else nn.Parameter)(lib.ones(2))
        opt, scaler = lib.optim.SGD([p], lr=0.1), _make(lib, init_scale=4.0, **kw)
        seen = []
        for s in (1.0, 1.0, float("inf"), 1.0):
            scaler.scale(p.sum() * s).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            seen.append(scaler.get_scale())
        scales.append(seen)
    assert scales[1] == scales[0]


def _param_with_grad(lib):
    p = (torch.nn.Parameter if lib is torch else nn.Parameter)(lib.ones(2))
    (p.sum() * 4).backward()
    return p, lib.optim.SGD([p], lr=0.1)


@pytest.mark.parametrize("call", ["step", "unscale_", "update", "update_new_scale"])
def test_calls_before_any_scale_refuse_as_torch(call):
    """Before scale() has met a tensor, torch's scaler has no scale: step, unscale_ and update raise an
    AssertionError, and the parameters keep their values (no step on gradients never scaled)."""
    msgs, params = [], []
    for lib in (torch, flame):
        p, opt = _param_with_grad(lib)
        scaler = _make(lib)
        scaler.scale([])  # an empty list reaches no tensor: still no scale
        fn, args = {"step": (scaler.step, (opt,)), "unscale_": (scaler.unscale_, (opt,)),
                    "update": (scaler.update, ()), "update_new_scale": (scaler.update, (8.0,))}[call]
        with pytest.raises(AssertionError) as err:
            fn(*args)
        msgs.append(str(err.value).splitlines()[0])
        params.append(p.detach().numpy().tolist())
    assert msgs[1] == msgs[0]
    assert params[1] == params[0] == [1.0, 1.0]


def test_scale_of_a_generator_makes_the_scale_when_consumed_as_torch():
    outcomes = []
    for lib in (torch, flame):
        p, opt = _param_with_grad(lib)
        scaler = _make(lib)
        lazy = scaler.scale(t for t in [lib.ones(1)])
        before = _outcome(scaler.unscale_, opt)[0]
        list(lazy)
        outcomes.append((before, _outcome(scaler.step, opt)[0], p.detach().numpy().tolist()))
    assert outcomes[1] == outcomes[0]


@pytest.mark.parametrize("new_scale", ["float", "0d", "0d_f64", "1elt", "2elt", "requires_grad"])
def test_update_with_a_new_scale_as_torch(new_scale):
    """update(new_scale): a float or a 0-d tensor sets the scale; a tensor of more than one element or one
    that requires grad is refused with torch's AssertionError (a [1] tensor fails torch's copy_)."""
    got = []
    for lib in (torch, flame):
        scaler = _make(lib, init_scale=4.0)
        scaler.scale(lib.ones(1))
        value = {"float": 3.0, "0d": lib.tensor(8.0), "0d_f64": lib.tensor(3.0, dtype=lib.float64),
                 "1elt": lib.tensor([8.0]), "2elt": lib.tensor([8.0, 2.0]),
                 "requires_grad": lib.tensor(8.0, requires_grad=True)}[new_scale]
        got.append((_outcome(scaler.update, value)[0], scaler.get_scale()))
    assert got[1] == got[0]


@pytest.mark.parametrize("copy_with", ["pickle", "deepcopy"])
def test_pickle_and_deepcopy_as_torch(copy_with):
    """A scaler pickles (or deep-copies) between iterations with its scale and growth tracker, and the copy
    needs a scale() before step, as torch's; mid-iteration (after unscale_ or step, before update) torch
    refuses with an AssertionError. The copy then trains on as the original would."""
    import copy
    import pickle

    dup = (lambda s: pickle.loads(pickle.dumps(s))) if copy_with == "pickle" else copy.deepcopy
    got = []
    for lib in (torch, flame):
        p, opt = _param_with_grad(lib)
        scaler = _make(lib, init_scale=8.0, growth_interval=2)
        for s in (1.0, float("inf"), 1.0):
            opt.zero_grad()
            scaler.scale(p.sum() * s).backward()
            scaler.step(opt)
            scaler.update()
        fresh = _make(lib, enabled=False)
        scaler.scale(p.sum()).backward()
        scaler.unscale_(opt)
        seen = [_outcome(dup, scaler)[0], _outcome(dup, fresh)[0]]
        scaler.step(opt)
        scaler.update()
        twin = dup(scaler)
        seen += [twin.state_dict(), _outcome(twin.step, opt)[0]]
        for s in (1.0, 1.0, float("inf")):
            opt.zero_grad()
            twin.scale(p.sum() * s).backward()
            twin.step(opt)
            twin.update()
            seen.append((twin.get_scale(), twin.state_dict()["_growth_tracker"]))
        got.append((seen, p.detach().numpy().tolist(), scaler.state_dict()))
    assert got[1] == got[0]
