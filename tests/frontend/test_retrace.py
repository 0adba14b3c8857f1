"""Never a silent re-trace (issue 15): a compiled function traces once per input signature; the state
a step creates or clears itself (zero_grad() anywhere in the step) is part of the traced program, not
of the cache key; every later trace emits one flame.RecompileWarning naming the function and the
cause, and never otherwise; stats() counts; the cache of traces is bounded."""

import logging
import warnings

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn
import flame.nn.functional as F
import flame.optim as optim
from tests.frontend.expected_retrace import said_at_info


def _models(seed=0):
    """A flame MLP and a torch copy with the same weights."""
    g = flame.Generator(seed)
    model = nn.Sequential(nn.Linear(6, 16, generator=g), nn.Tanh(), nn.Linear(16, 3, generator=g))
    ref = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    ref.load_state_dict({k: torch.from_numpy(v.numpy().copy()) for k, v in model.state_dict().items()})
    return model, ref


def _batch(n=8, seed=0):
    r = np.random.default_rng(seed)
    return r.standard_normal((n, 6)).astype(np.float32), r.integers(0, 3, n)


def _steps(where: str):
    """The same AdamW step with zero_grad() at the top, in the middle or at the end, in flame
    (compiled) and in torch."""

    def flame_step(model, opt, x, y, body):
        if where == "top":
            opt.zero_grad()
        out = model(x)
        if where == "middle":
            opt.zero_grad()
        loss = F.cross_entropy(out, y)
        loss.backward()
        opt.step()
        if where == "end":
            opt.zero_grad()
        body.append(1)
        return loss

    def torch_step(model, opt, x, y):
        if where == "top":
            opt.zero_grad()
        out = model(x)
        if where == "middle":
            opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(out, y)
        loss.backward()
        opt.step()
        if where == "end":
            opt.zero_grad()
        return loss

    return flame_step, torch_step


@pytest.mark.parametrize("where", ["top", "middle", "end"])
def test_zero_grad_anywhere_in_the_step_traces_once_and_trains_like_torch(where, rtol=1e-4):
    model, ref = _models()
    opt = optim.AdamW(model.parameters(), lr=0.05)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=0.05)
    flame_step, torch_step = _steps(where)
    body = []
    step = flame.compile(lambda x, y: flame_step(model, opt, x, y, body), name="train_step")
    with warnings.catch_warnings():
        warnings.simplefilter("error", flame.RecompileWarning)  # no re-trace at all
        for i in range(5):
            xb, yb = _batch(seed=i)
            got = step(flame.tensor(xb), flame.tensor(yb)).item()
            want = torch_step(ref, ref_opt, torch.from_numpy(xb), torch.from_numpy(yb)).item()
            assert got == pytest.approx(want, rel=rtol, abs=1e-6)
    assert len(body) == 1
    s = step.stats()
    assert (s.traces, s.cache_hits, s.calls, s.variants) == (1, 4, 5, 1)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        np.testing.assert_allclose(p.numpy(), q.detach().numpy(), rtol=rtol, atol=10 * rtol, err_msg=name)
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None:
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=rtol, atol=rtol / 100, err_msg=name)


@pytest.mark.gpu
def test_zero_grad_at_the_top_traces_once_on_the_gpu():
    test_zero_grad_anywhere_in_the_step_traces_once_and_trains_like_torch("top", rtol=2e-3)


def test_a_shape_change_that_becomes_dynamic_is_said_at_info_level_then_replays_silently(caplog):
    model, _ = _models()

    @flame.compile
    def predict(x):
        return model(x).argmax(1)

    big, small = flame.tensor(_batch(64)[0]), flame.tensor(_batch(32)[0])
    with warnings.catch_warnings(record=True) as seen, caplog.at_level(logging.INFO, logger="flame"):
        warnings.simplefilter("always")
        predict(big)
        predict(big)
        predict(small)  # a smaller batch: expected (the dim becomes dynamic), as torch.compile's silent recompile
        for _ in range(3):
            predict(small)
            predict(big)
    assert [w for w in seen if issubclass(w.category, flame.RecompileWarning)] == []
    (said,) = [r.getMessage() for r in caplog.records if "re-tracing" in r.getMessage()]
    assert "predict" in said and "argument 0 (x): shape [64, 6] -> [32, 6]" in said
    s = predict.stats()
    assert (s.traces, s.cache_hits, s.calls) == (2, 7, 9)
    assert s.recompile_reasons == (
        "argument 0 (x): shape [64, 6] -> [32, 6]; argument 0 dim 0 is now dynamic (sizes 64, 32)",
    )
    assert s.compile_seconds > 0
    assert "2 trace(s), 0 size instantiation(s), 7 cache hit(s)" in str(s)


def test_recompile_warning_is_a_user_warning_exported_at_the_root():
    assert issubclass(flame.RecompileWarning, UserWarning)
    assert "RecompileWarning" in flame.__all__ and "RecompileWarning" in dir(flame)


def test_dtype_constant_and_requires_grad_changes_are_named():
    @flame.compile
    def f(x, k):
        return x * k

    x = flame.ones(3)
    f(x, 2.0)
    with pytest.warns(flame.RecompileWarning, match=r"argument 1 \(k\): value 2.0 -> 3.0"):
        f(x, 3.0)
    with pytest.warns(flame.RecompileWarning, match=r"argument 0 \(x\): dtype f32 -> f64"):
        f(flame.ones(3, dtype="f64"), 3.0)
    with pytest.warns(flame.RecompileWarning, match=r"argument 0 \(x\): requires_grad False -> True"):
        f(flame.ones(3, dtype="f64", requires_grad=True), 3.0)


def test_the_learning_rate_and_a_new_batch_of_the_same_shape_never_warn():
    model, _ = _models()
    opt = optim.SGD(model.parameters(), lr=0.1)
    sched = optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)

    @flame.compile
    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i in range(4):
            xb, yb = _batch(seed=i)
            step(flame.tensor(xb), flame.tensor(yb))
            sched.step()
    assert step.stats().traces == 1


def test_accumulating_gradients_traces_again_once_because_grad_is_now_set(caplog):
    w = flame.tensor(np.ones(3, np.float32), requires_grad=True)

    @flame.compile
    def accumulate(x):
        (w * x).sum().backward()

    x = flame.tensor(np.arange(3, dtype=np.float32))
    accumulate(x)  # w.grad was None: this trace starts the gradient
    with said_at_info(caplog, r"param 'w'.grad: None -> set"):
        accumulate(x)  # now it adds to the existing one: another program
    with warnings.catch_warnings():
        warnings.simplefilter("error", flame.RecompileWarning)
        accumulate(x)
    np.testing.assert_array_equal(w.grad.numpy(), 3 * x.numpy())
    assert accumulate.stats().traces == 2


def test_cache_limit_drops_the_least_recently_used_trace_and_says_so():
    @flame.compile(cache_limit=2, dynamic=False)  # every shape its own trace
    def f(x):
        return x + 1

    f(flame.ones(1))
    with pytest.warns(flame.RecompileWarning) as seen:
        f(flame.ones(2))
    assert "cache_limit" not in str(seen[0].message)
    with pytest.warns(flame.RecompileWarning, match=r"cache_limit=2 traces reached"):
        f(flame.ones(3))  # drops [1], the least recently used
    with warnings.catch_warnings():
        warnings.simplefilter("error", flame.RecompileWarning)
        f(flame.ones(2))
        f(flame.ones(3))
    with pytest.warns(flame.RecompileWarning, match=r"shape \[3\] -> \[1\].*cache_limit=2"):
        np.testing.assert_array_equal(f(flame.ones(1)).numpy(), [2.0])
    s = f.stats()
    assert (s.traces, s.variants, s.cache_limit) == (4, 2, 2)


def test_cache_limit_from_the_environment(monkeypatch):
    monkeypatch.setenv("FLAME_CACHE_LIMIT", "3")
    assert flame.compile(lambda x: x).stats().cache_limit == 3
    monkeypatch.delenv("FLAME_CACHE_LIMIT")
    assert flame.compile(lambda x: x).stats().cache_limit == 8
    with pytest.raises(ValueError, match="cache_limit must be at least 1"):
        flame.compile(lambda x: x, cache_limit=0)


def test_each_cause_is_shown_once_under_the_default_warning_filter():
    @flame.compile(cache_limit=1, dynamic=False)  # every shape its own trace
    def f(x):
        return x * 2

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        for _ in range(3):  # alternating shapes with room for one trace: re-traces every call
            f(flame.ones(2))
            f(flame.ones(4))
    assert f.stats().traces == 6
    assert sorted({str(w.message) for w in seen}) == sorted(str(w.message) for w in seen)
    assert len(seen) == 2  # [4] -> [2] and [2] -> [4], once each


def test_variants_are_the_cached_traces_most_recently_called_first():
    """Compiled.variants(): one per traced signature, each with its graph, plan and run; setting run
    replaces what that variant's calls execute."""

    @flame.compile(dynamic=False)
    def f(x):
        return x * 2

    a, b = flame.ones(2), flame.ones(3)
    f(a)
    with pytest.warns(flame.RecompileWarning):
        f(b)
    f(a)
    first, second = f.variants()
    assert [v.graph.inputs[0].type.shape for v in (first, second)] == [(2,), (3,)]
    assert "mul" in [op.name for op in first.traced.ops]
    assert first.plan is not None and f.stats().variants == 2
    real, seen = first.run, []

    def counted(arrays):
        seen.append(len(arrays))
        return real(arrays)

    first.run = counted
    np.testing.assert_array_equal(f(a).numpy(), [2.0, 2.0])
    assert seen == [1] and first.run is counted
    f(b)
    assert seen == [1] and [v.graph.inputs[0].type.shape for v in f.variants()] == [(3,), (2,)]
