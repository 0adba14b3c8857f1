"""flame.amp.GradScaler against torch.amp.GradScaler on the CPU: the same scales, growth trackers,
skipped steps (parameters and optimizer state keep their bits on inf/NaN) and parameters, step by
step, eagerly and inside @flame.compile (where the skip and the scale update are graph ops)."""

from __future__ import annotations

import numpy as np
import pytest

import flame
import flame.nn as nn
from flame.amp import GradScaler

torch = pytest.importorskip("torch")

# 1 = a clean step, inf / nan = a step whose gradients overflow
SCHEDULE = [1.0, 1.0, float("inf"), 1.0, 1.0, 1.0, 1.0, float("nan"), 1.0, 1.0, 1.0, 1.0, 1.0]
KW = {"init_scale": 2.0**4, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 3}


def _data():
    rng = np.random.default_rng(0)
    return rng.standard_normal((8, 5)).astype(np.float32), rng.standard_normal((3, 5)).astype(np.float32)


def _linear(lib, w: np.ndarray):
    """lib's Linear(5, 3) with weight w and a zero bias, and its Adam (lr 0.1)."""
    lin = lib.nn.Linear(5, 3)
    with lib.no_grad():
        lin.weight.copy_(lib.tensor(w))
        lin.bias.zero_()
    return lin, lib.optim.Adam(lin.parameters(), lr=0.1)


def _torch_run():
    x, w = _data()
    lin, opt = _linear(torch, w)
    scaler = torch.amp.GradScaler("cpu", **KW)
    out = []
    for s in SCHEDULE:
        loss = (lin(torch.tensor(x)) ** 2).mean() * s
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        out.append((scaler.get_scale(), scaler._growth_tracker.item(), lin.weight.detach().numpy().copy(),
                    opt.state[lin.weight]["step"].item()))
    return out


def _flame_setup(make=lambda: GradScaler("cpu", **KW)):
    x, w = _data()
    lin, opt = _linear(flame, w)
    return flame.tensor(x), lin, opt, make()


@pytest.mark.parametrize("where", ["amp", "cuda.amp"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_scale_skips_and_growth_match_torch(compiled, where):
    """flame.amp.GradScaler, and torch.cuda.amp's spelling (no device argument) of the same scaler."""
    make = (lambda: GradScaler("cpu", **KW)) if where == "amp" else (lambda: flame.cuda.amp.GradScaler(**KW))
    x, lin, opt, scaler = _flame_setup(make)

    def step(x, s):
        loss = (lin(x) ** 2).mean() * s
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        return loss

    run = flame.compile(step) if compiled else step
    want = _torch_run()
    for i, (s, (scale, tracker, weight, nsteps)) in enumerate(zip(SCHEDULE, want)):
        run(x, flame.tensor(s))
        assert scaler.get_scale() == scale, (i, scaler.get_scale(), scale)
        assert int(scaler._growth_tracker.item()) == tracker, i
        assert opt.state[lin.weight]["step"].item() == nsteps, i  # a skipped step does not count
        np.testing.assert_allclose(lin.weight.numpy(), weight, rtol=1e-5, atol=1e-5, err_msg=f"step {i}")
    if compiled:
        assert run.stats().traces == 1  # one trace serves clean and overflowing steps alike


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_scale_with_factors_that_round_matches_torch_bit_for_bit(compiled):
    """torch's _amp_update_scale_ multiplies the f32 scale by the f64 factor and rounds once: with factors
    not powers of two, an f32 product (the f32-rounded factor) drifts from torch's scale by an ulp."""
    kw = {"init_scale": 3.0**9, "growth_factor": 1.7, "backoff_factor": 0.3, "growth_interval": 1}
    schedule = [1.0, float("inf"), 1.0, 1.0, float("nan"), 1.0, float("inf"), 1.0, 1.0, 1.0]
    tscaler, fscaler, steps = _paired_sgd_steps(kw, compiled)
    for i, s in enumerate(schedule):
        steps(s)
        assert fscaler.get_scale() == tscaler.get_scale(), (i, fscaler.get_scale(), tscaler.get_scale())


def _paired_sgd_steps(kw: dict, compiled: bool):
    """torch's and flame's GradScaler made with kw, each over SGD on a parameter of ones, and steps(s):
    one scaled step of sum(p) * s in each (flame's compiled or eager)."""
    tp = torch.nn.Parameter(torch.ones(2))
    topt, tscaler = torch.optim.SGD([tp], lr=0.1), torch.amp.GradScaler("cpu", **kw)
    fp = nn.Parameter(flame.ones(2))
    fopt, fscaler = flame.optim.SGD([fp], lr=0.1), GradScaler("cpu", **kw)

    def step(s):
        fscaler.scale(fp.sum() * s).backward()
        fscaler.step(fopt)
        fscaler.update()
        fopt.zero_grad()

    run = flame.compile(step) if compiled else step

    def steps(s: float) -> None:
        tscaler.scale(tp.sum() * s).backward()
        tscaler.step(topt)
        tscaler.update()
        topt.zero_grad()
        run(flame.tensor(s))

    return tscaler, fscaler, steps


@pytest.mark.parametrize("inside", ["step", "backward"])
def test_update_outside_the_compiled_step_matches_torch(inside):
    """The torch.compile habit: the compiled function scales, backpropagates and (with "step") steps;
    scaler.update() (and with "backward" scaler.step()) runs eagerly after each call and reads that
    call's inf/NaN check."""
    x, lin, opt, scaler = _flame_setup()

    def body(x, s):
        loss = (lin(x) ** 2).mean() * s
        scaler.scale(loss).backward()
        if inside == "step":
            scaler.step(opt)
        return loss

    run = flame.compile(body)
    want = _torch_run()
    for i, (s, (scale, tracker, weight, nsteps)) in enumerate(zip(SCHEDULE, want)):
        run(x, flame.tensor(s))
        if inside == "backward":
            scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        assert scaler.get_scale() == scale, (i, scaler.get_scale(), scale)
        assert int(scaler._growth_tracker.item()) == tracker, i
        assert opt.state[lin.weight]["step"].item() == nsteps, i
        np.testing.assert_allclose(lin.weight.numpy(), weight, rtol=1e-5, atol=1e-5, err_msg=f"step {i}")
    assert run.stats().traces == 1


def test_a_skipped_compiled_step_keeps_every_bit_and_is_a_graph_op():
    x, lin, opt, scaler = _flame_setup()

    @flame.compile
    def step(x, s):
        loss = (lin(x) ** 2).mean() * s
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        return loss

    step(x, flame.tensor(1.0))
    before = [t.numpy().copy() for t in [lin.weight, lin.bias, *opt.state[lin.weight].values()]]
    step(x, flame.tensor(float("inf")))
    after = [t.numpy() for t in [lin.weight, lin.bias, *opt.state[lin.weight].values()]]
    for a, b in zip(before, after):
        assert a.tobytes() == b.tobytes()
    assert scaler.get_scale() == KW["init_scale"] / 2
    g = step.trace(x, flame.tensor(1.0))
    text = str(g)
    assert "where" in text and "lt" in text  # found_inf and the skipped update are ops of the step
    scale_input = [i for i, r in enumerate(g.roles) if r == "state" and g.inputs[i].type.shape == ()]
    assert any(i in g.aliases.values() for i in scale_input)  # the scale is written back by the graph


def test_unscale_then_clip_and_the_order_rules():
    x, lin, opt, scaler = _flame_setup()
    loss = (lin(x) ** 2).mean()
    scaler.scale(loss).backward()
    scaled = lin.weight.grad.numpy().copy()
    scaler.unscale_(opt)
    np.testing.assert_allclose(lin.weight.grad.numpy(), scaled / KW["init_scale"], rtol=1e-6)
    with pytest.raises(RuntimeError, match="already been called"):
        scaler.unscale_(opt)
    flame.nn.utils.clip_grad_norm_(lin.parameters(), 1.0)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match="step\\(\\) has already been called"):
        scaler.step(opt)
    scaler.update()
    with pytest.raises(AssertionError, match="No inf checks"):
        scaler.update()


def test_state_dict_round_trip_and_disabled_scaler():
    _, _, _, scaler = _flame_setup()
    scaler._scale.fill_(128.0)
    scaler._growth_tracker.fill_(2)
    sd = scaler.state_dict()
    assert sd == {"scale": 128.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 3,
                  "_growth_tracker": 2}
    tsd = torch.amp.GradScaler("cpu", **KW)
    tsd.load_state_dict(sd)  # the same layout torch reads
    assert tsd.get_scale() == 128.0
    other = GradScaler()
    other.load_state_dict(sd)
    assert other.state_dict() == sd
    off = GradScaler(enabled=False)
    loss = flame.tensor(3.0)
    assert off.scale(loss) is loss and off.get_scale() == 1.0 and off.state_dict() == {}
    with pytest.raises(RuntimeError, match="empty"):
        other.load_state_dict({})


def test_fp16_gradients_refuse_to_unscale():
    p = nn.Parameter(flame.ones(3, dtype=flame.f16))
    opt = flame.optim.SGD([p], lr=0.1)
    scaler = GradScaler()
    scaler.scale(p.float().sum() * 2).backward()
    with pytest.raises(ValueError, match="FP16"):
        scaler.unscale_(opt)


def test_torch_cuda_amp_names_and_signatures():
    """`from torch.cuda.amp import GradScaler, autocast` scripts: the same names, torch.cuda.amp's signatures."""
    import inspect

    from flame.cuda.amp import GradScaler as CudaScaler
    from flame.cuda.amp import autocast

    for name in ("GradScaler", "autocast"):
        want = list(inspect.signature(getattr(torch.cuda.amp, name)).parameters)
        assert list(inspect.signature(getattr(flame.cuda.amp, name)).parameters) == want, name
    assert CudaScaler is flame.cuda.amp.GradScaler and isinstance(CudaScaler(), GradScaler)
    assert not CudaScaler(enabled=False).is_enabled()
    with autocast(dtype=flame.bf16):
        assert flame.amp.get_autocast_dtype() == flame.bf16
        a = flame.ones(2, 2)
        assert (a @ a).dtype == flame.bf16
    with autocast():
        assert (a @ a).dtype == flame.f16


def test_scale_of_other_iterables_as_torch():
    """torch's scale maps over any iterable of tensors: a list or tuple keeps its type, another iterable
    (a generator) gives a lazy map; something else is a ValueError."""
    tscaler, fscaler = torch.amp.GradScaler("cpu", init_scale=4.0), GradScaler("cpu", init_scale=4.0)
    for lib, scaler in ((torch, tscaler), (flame, fscaler)):
        a, b = lib.tensor(1.0), lib.tensor(2.0)
        out = scaler.scale(t for t in (a, [b]))
        assert isinstance(out, map)
        first, (second,) = list(out)
        assert (first.item(), second.item()) == (4.0, 8.0)
        assert isinstance(scaler.scale((a, [b])), tuple)
        with pytest.raises(ValueError, match="outputs must be a Tensor or an iterable of Tensors"):
            scaler.scale(3.0)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_growth_needs_the_count_to_equal_the_interval_as_torch(compiled):
    """torch's _amp_update_scale_ grows the scale when the count of clean steps equals growth_interval:
    a count already past a lowered interval keeps counting, and the scale grows again only after an
    inf/NaN step resets the count."""
    kw = {"init_scale": 8.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 5}
    schedule = [1.0] * 6 + [float("inf")] + [1.0] * 5
    tscaler, fscaler, steps = _paired_sgd_steps(kw, compiled)
    for i, s in enumerate(schedule):
        if i == 3:
            tscaler.set_growth_interval(2)
            fscaler.set_growth_interval(2)
        steps(s)
        assert (fscaler.get_scale(), int(fscaler._growth_tracker.item())) == (
            tscaler.get_scale(), int(tscaler._growth_tracker.item())), i


def test_a_step_without_gradients_is_refused_as_torch():
    """An optimizer none of whose parameters has a gradient records no inf check (torch keeps one per
    device of the gradients): step() raises, and update() after unscale_ alone raises, as torch's."""
    for lib, make in ((torch, lambda: torch.amp.GradScaler("cpu")), (flame, GradScaler)):
        p = (torch.nn.Parameter if lib is torch else nn.Parameter)(lib.ones(2))
        opt = lib.optim.SGD([p], lr=0.1)
        scaler = make()
        scaler.scale(lib.ones(1))
        with pytest.raises(AssertionError, match="No inf checks were recorded for this optimizer"):
            scaler.step(opt)
        scaler = make()
        scaler.scale(lib.ones(1))
        scaler.unscale_(opt)
        with pytest.raises(AssertionError, match="No inf checks were recorded prior to update"):
            scaler.update()
        assert p.detach().numpy().tolist() == [1.0, 1.0]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_unscale_of_bf16_gradients_matches_torch_bit_for_bit(compiled):
    """torch's unscale kernel multiplies a bf16 gradient by the f32 1/scale in f32 and rounds once (1/scale
    rounded to bf16 first is off by an ulp where the scale is not a power of two)."""
    g = np.random.default_rng(0).standard_normal(64).astype(np.float32)
    tp = torch.nn.Parameter(torch.zeros(64, dtype=torch.bfloat16))
    tp.grad = torch.tensor(g).bfloat16()
    topt, tscaler = torch.optim.SGD([tp], lr=0.1), torch.amp.GradScaler("cpu", init_scale=3.0**5)
    tscaler.scale(torch.ones(1))
    tscaler.unscale_(topt)
    fp = nn.Parameter(flame.zeros(64, dtype=flame.bf16))
    fp.grad = flame.tensor(g).to(flame.bf16)
    fopt, fscaler = flame.optim.SGD([fp], lr=0.1), GradScaler("cpu", init_scale=3.0**5)
    fscaler.scale(flame.ones(1))
    unscale = flame.compile(fscaler.unscale_) if compiled else fscaler.unscale_
    unscale(fopt)
    assert fp.grad.to(flame.f32).numpy().tobytes() == tp.grad.float().numpy().tobytes()


def _converted_run(lib, compiled: bool):
    """A Linear made in f32, its Adam made, then the model converted to f64 (torch.optim makes the
    state at the first step that is not skipped); the first and third steps overflow."""
    x, w = _data()
    lin, opt = _linear(lib, w)
    lin.double()
    scaler = torch.amp.GradScaler("cpu", **KW) if lib is torch else GradScaler("cpu", **KW)

    def step(x, s):
        loss = (lin(x) ** 2).mean() * s
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()

    step = flame.compile(step) if compiled and lib is flame else step
    for s in [float("inf"), 1.0, float("inf"), 1.0, 1.0]:
        step(lib.tensor(x.astype(np.float64)), lib.tensor(s, dtype=lib.float64))
    state = {k: v.numpy() if lib is flame else v.detach().numpy() for k, v in opt.state[lin.weight].items()}
    return lin.weight.numpy() if lib is flame else lin.weight.detach().numpy(), state


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_skipped_first_step_of_a_model_converted_after_its_optimizer_as_torch(compiled):
    weight, state = _converted_run(flame, compiled)
    tweight, tstate = _converted_run(torch, False)
    np.testing.assert_allclose(weight, tweight, rtol=1e-12, atol=1e-15)
    assert sorted(state) == sorted(tstate)
    for k in tstate:
        assert state[k].dtype == tstate[k].dtype or k == "step", k
        np.testing.assert_allclose(state[k], tstate[k], rtol=1e-12, atol=1e-15, err_msg=k)
