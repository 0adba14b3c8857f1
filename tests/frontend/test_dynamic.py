"""flame.compile(dynamic=...): a dim seen at two sizes becomes one template instantiated per size
(flame/frontend/dynamic.py); results equal the specialised compiles, warnings say when and why."""

import logging
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import flame
import flame.nn as nn
import flame.optim as optim

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from train_gpt import GPT  # noqa: E402


class _Retraces(logging.Handler):
    """Every re-trace message, warned or (an expected one: a dim made dynamic) logged at info."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record):
        if "re-tracing" in record.getMessage():
            self.messages.append(record.getMessage())


def _run(make, batches, dynamic):
    step, params = make(dynamic)
    logger, seen = logging.getLogger("flame"), _Retraces()
    level = logger.level
    logger.addHandler(seen)
    logger.setLevel(logging.INFO)
    try:
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            losses = [step(*(flame.tensor(a) for a in b)).numpy().copy() for b in batches]
    finally:
        logger.removeHandler(seen)
        logger.setLevel(level)
    warned = [str(w.message) for w in warned if issubclass(w.category, flame.RecompileWarning)]
    # a dim made dynamic is expected (a smaller last batch): said at info level, never warned
    assert warned == [m for m in seen.messages if "now dynamic" not in m]
    return losses, [p.numpy().copy() for p in params], step.stats(), seen.messages, step


def _mlp(dynamic):
    gen = flame.Generator(0)
    model = nn.Sequential(nn.Linear(64, 32, generator=gen), nn.ReLU(), nn.Linear(32, 10, generator=gen))
    opt = optim.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-4)
    loss_fn = nn.CrossEntropyLoss()

    @flame.compile(dynamic=dynamic)
    def step(x, y):
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    return step, list(model.parameters())


def _digits_batches(sizes):
    rng = np.random.default_rng(0)
    return [(rng.random((n, 64), dtype=np.float32), rng.integers(0, 10, n)) for n in sizes]


SIZES = (64, 64, 32, 17, 64)


def test_mlp_batch_sizes_trace_twice_then_check_and_match_the_specialised_compiles():
    batches = _digits_batches(SIZES)
    want_losses, want_params, static, static_warns, _ = _run(_mlp, batches, False)
    assert (static.traces, static.instantiations) == (3, 0)  # dynamic=False: today's behaviour
    assert len(static_warns) == 2 and all("now dynamic" not in w for w in static_warns)

    losses, params, s, warns, step = _run(_mlp, batches, None)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-6)
    for p, q in zip(params, want_params):
        np.testing.assert_allclose(p, q, rtol=1e-6, atol=1e-7)
    # 64 and 32 traced (the template), 17 traced once more to check it, then instantiated
    assert (s.traces, s.instantiations, s.cache_hits, s.calls) == (3, 1, 2, 5)
    assert warns == ["flame.compile: re-tracing step: argument 0 (x): shape [64, 64] -> [32, 64]; argument 1 (y): "
                     "shape [64] -> [32]; argument 0 dim 0, argument 1 dim 0 are now dynamic (sizes 64, 32)"]
    assert s.dynamic == ("argument 0 dim 0, argument 1 dim 0 (s0 = 64, 32, ...)",)
    assert "3 trace(s), 1 size instantiation(s)" in str(s)
    text = str(step._templates[0].template)  # the template prints with its symbol
    assert "%0: f32[s0,64] data, %1: i64[s0] data" in text and "bool[s0]" in text  # the labels kept, per row

    losses, params, s, warns, _ = _run(_mlp, batches, True)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-6)
    for p, q in zip(params, want_params):
        np.testing.assert_allclose(p, q, rtol=1e-6, atol=1e-7)
    # the first call traces at 64 and probes at 65; 32 is traced to check the template, then 32 and 17
    # are instantiated, silently
    assert (s.traces, s.instantiations, s.variants) == (3, 2, 1)
    assert warns == []


def _gpt(dynamic):
    model = GPT(11, 16, 1, 2, 16, flame.f32, 0)
    opt = flame.optim.AdamW(model.parameters(), lr=1e-2)

    @flame.compile(dynamic=dynamic)
    def step(x, y):
        loss = model.loss(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    return step, list(model.parameters())


def _tokens(lengths):
    rng = np.random.default_rng(1)
    return [(rng.integers(0, 11, (2, t)), rng.integers(0, 11, (2, t))) for t in lengths]


def test_gpt_step_at_several_sequence_lengths_traces_three_times():
    batches = _tokens((8, 5, 12, 3, 8, 10))
    want_losses, want_params, *_ = _run(_gpt, batches, False)
    losses, params, s, warns, _ = _run(_gpt, batches, None)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
    for p, q in zip(params, want_params):
        np.testing.assert_allclose(p, q, rtol=1e-5, atol=1e-6)
    assert (s.traces, s.instantiations, s.cache_hits) == (3, 3, 1)  # 8, 5; 12 checked
    assert len(warns) == 1 and "argument 0 dim 1, argument 1 dim 1 are now dynamic (sizes 8, 5)" in warns[0]


def test_a_size_that_traces_differently_is_specialised_and_the_next_pair_is_tried():
    # at the model's full length wpe[:T] is wpe itself (no slice op): those two traces differ
    _, _, s, warns, _ = _run(_gpt, _tokens((16, 8, 5, 12)), None)
    assert (s.traces, s.instantiations) == (4, 1)  # 16, 8, 5; 12 checked
    assert len(warns) == 2
    assert "changed (sizes 16, 8) but cannot be dynamic: the traces at sizes 16 and 8 differ in their ops" in warns[0]
    assert "specialising per size" in warns[0]
    assert "are now dynamic (sizes 8, 5)" in warns[1]


def _simple(fn):
    return lambda dynamic: (flame.compile(fn, dynamic=dynamic), [])


def test_a_branch_on_the_size_is_specialised_with_the_reason():
    def f(x):
        return x * 2 if x.shape[0] > 40 else x + 1

    # (seen only where the two traced sizes take different paths: a template made from 32 and 17
    # would serve 50 with the x + 1 path; such a function wants dynamic=False)
    xs = [np.arange(n, dtype=np.float32)[:, None] for n in (64, 32, 50)]
    _, _, s, warns, step = _run(_simple(f), [(x,) for x in xs], None)
    assert s.traces == 3 and s.instantiations == 0
    assert "changed (sizes 64, 32) but cannot be dynamic" in warns[0]
    assert all("cannot be dynamic" not in w for w in warns[1:])  # said once
    for x in xs:
        want = x * 2 if len(x) > 40 else x + 1
        np.testing.assert_array_equal(step(flame.tensor(x)).numpy(), want)


def test_a_size_the_affine_forms_cannot_take_is_traced_and_says_why():
    def f(x):
        return x[: x.shape[0] // 2].sum(0)

    xs = [np.arange(n * 3, dtype=np.float32).reshape(n, 3) for n in (64, 32, 40, 17)]
    _, _, s, warns, step = _run(_simple(f), [(x,) for x in xs], None)
    assert (s.traces, s.instantiations) == (4, 1)  # 40 -> 20 checked and instantiated; 17 -> 8 is not s/2
    assert "now dynamic (sizes 64, 32)" in warns[0]
    assert "argument 0 dim 0 (s0 = 64, 32, ...) cannot take size 17" in warns[1]
    assert "s0 is 17/2 at s0=17, not a size" in warns[1] or "at s0=17, not a size" in warns[1]
    for x in xs:
        np.testing.assert_array_equal(step(flame.tensor(x)).numpy(), x[: len(x) // 2].sum(0))


def test_dims_that_change_by_different_sizes_follow_one_symbol():
    """A language model's short last batch: tokens [s0, 4] and their flattened targets [4*s0] change by
    5 -> 2 and 20 -> 8 at once; the targets' length is a form of s0, so one template serves both (no
    warning), and a call whose targets are not 4*s0 long is traced on its own."""

    def f(x, y):
        return (x.reshape(-1) * y).mean() + y.sum()

    def want(x, y):
        return (x.reshape(-1) * y).mean() + y.sum()

    rng = np.random.default_rng(0)
    calls = [(rng.standard_normal((n, 4)), rng.standard_normal(4 * n)) for n in (5, 2, 3, 7, 3)]
    _, _, s, warns, step = _run(_simple(f), calls, None)
    assert (s.traces, s.instantiations) == (3, 2)  # 5, 2; 3 checked
    assert warns == ["flame.compile: re-tracing f: argument 0 (x): shape [5, 4] -> [2, 4]; argument 1 (y): shape "
                     "[20] -> [8]; argument 0 dim 0, argument 1 dim 0 are now dynamic (sizes 20, 8, 5, 2)"]
    assert s.dynamic == ("argument 0 dim 0, argument 1 dim 0 = 4*s0 (s0 = 5, 2, ...)",)
    for x, y in calls:
        np.testing.assert_allclose(step(flame.tensor(x), flame.tensor(y)).numpy(), want(x, y), rtol=1e-12)

    def g(x, y):
        return x.mean() + y.mean()

    other = [(rng.standard_normal((n, 4)), rng.standard_normal(m)) for n, m in ((5, 20), (2, 8), (3, 10))]
    _, _, s, warns, step = _run(_simple(g), other, None)
    assert (s.traces, s.instantiations) == (3, 0)  # y of 10 is not 4*s0 at s0 = 3: traced on its own
    for x, y in other:
        np.testing.assert_allclose(step(flame.tensor(x), flame.tensor(y)).numpy(), x.mean() + y.mean())


def test_a_size_squared_is_caught_by_the_shape_rules():
    def f(x):
        return (x[:, None] * x[None, :]).reshape(-1) + 1

    xs = [np.arange(n, dtype=np.float32) for n in (4, 6, 10)]
    _, _, s, warns, step = _run(_simple(f), [(x,) for x in xs], None)
    assert (s.traces, s.instantiations) == (3, 0)
    assert "does not hold" in warns[1] and "reshape" in warns[1]  # the check of size 10
    for x in xs:
        np.testing.assert_array_equal(step(flame.tensor(x)).numpy(), np.outer(x, x).reshape(-1) + 1)


def test_a_constant_that_is_not_1_over_n_of_the_size_specialises():
    def f(x):
        return x * float(x.shape[0]) ** 0.5

    _, _, s, warns, _ = _run(_simple(f), [(np.ones(n, np.float32),) for n in (4, 9)], None)
    assert s.traces == 2 and s.dynamic == ()
    assert "cannot be dynamic" in warns[0] and "the constant 2.0 at size 4 is 3.0 at size 9" in warns[0]


def test_dynamic_must_be_none_true_or_false():
    with pytest.raises(ValueError, match="dynamic must be None, True or False"):
        flame.compile(lambda x: x, dynamic="batch")


# ---- new sizes are planned, not compiled: kernels take s0 as a parameter (flame.ir.symbolic) ----

def _instances(step):
    return [e for es in step._cache.values() for e in es if e.template is not None]


def _same_training(losses, params, want_losses, want_params, rtol: float) -> None:
    """The losses and final parameters of a run equal another's (the static compiles') to rtol."""
    np.testing.assert_allclose(losses, want_losses, rtol=rtol)
    for p, q in zip(params, want_params):
        np.testing.assert_allclose(p, q, rtol=rtol, atol=rtol / 10)


def _launches_taking_s0(plan):
    return [k for k in plan.kernels() if k.sizes]


def test_mlp_new_batch_sizes_plan_without_new_kernels_and_match_the_static_compiles():
    batches = _digits_batches((64, 48, 17, 33, 40, 9, 21))
    want_losses, want_params, *_ = _run(_mlp, batches, False)
    losses, params, s, _, step = _run(_mlp, batches, None)
    _same_training(losses, params, want_losses, want_params, 1e-6)
    assert (s.traces, s.instantiations) == (3, 5)  # 64, 48; 17 checked
    dyn = step._templates[0]
    assert dyn.planned is not None, dyn.not_planned
    for e in _instances(step):
        assert _launches_taking_s0(e.plan), "an instantiated size's kernels take s0"
        assert all(k.sizes == (e.shapes[0][0],) for k in _launches_taking_s0(e.plan))
    # the first planned size renders every kernel once; later sizes add at most the variants a
    # size-dependent choice makes (a whole-tensor reduction vectorises when s0 is a multiple of 4)
    assert s.size_kernels <= 2
    assert "kernel source(s) new after the first" in str(s)


def test_gpt_step_at_ten_sequence_lengths_traces_three_times_and_reuses_its_kernels():
    lengths = (8, 5, 12, 3, 10, 7, 11, 6, 9, 4)
    batches = _tokens(lengths)
    want_losses, want_params, *_ = _run(_gpt, batches, False)
    losses, params, s, warns, step = _run(_gpt, batches, None)
    _same_training(losses, params, want_losses, want_params, 1e-5)
    assert (s.traces, s.instantiations) == (3, 8)  # 8, 5; 12 checked
    assert step._templates[0].planned is not None
    sources = [{k.source for k in e.plan.kernels()} for e in _instances(step) if _launches_taking_s0(e.plan)]
    assert len(sources) >= 6
    assert len(set().union(*sources)) <= len(sources[0]) + 2  # the same kernels at every length


@pytest.mark.parametrize("make, sizes", [(_mlp, ((64, 48, 17), (12, 20, 36))), (_gpt, ((8, 5, 12), (4, 8, 16)))])
def test_cuda_plans_render_the_same_kernel_sources_at_several_sizes_and_compile(make, sizes):
    from flame.codegen.nvrtc import compile_cubin
    from flame.ir import symbolic
    from flame.plan.build import to_plan
    from flame.runtime.backend import capabilities

    traced, planned = sizes
    batches = _digits_batches(traced) if make is _mlp else _tokens(traced)
    *_, step = _run(make, batches, None)
    template = step._templates[0].planned
    per_size = []
    for n in planned:  # multiples of 4: the same vectorisation choices at each
        with symbolic.rendering(n) as r:
            plan = to_plan(template.instantiate(n, symbolic=True), target=capabilities("cuda"))
        assert r.per_size == []
        per_size.append({k.source for k in plan.kernels()})
        assert all(k.sizes == (n,) for k in _launches_taking_s0(plan)) and _launches_taking_s0(plan)
    assert per_size[0] == per_size[1] == per_size[2]
    for source in per_size[0]:
        compile_cubin(source, "sm_90")


# ---- a new size evaluates the recorded plan (flame.plan.instance): no pass, no render, no re-plan ----

@pytest.fixture
def cuda_target(monkeypatch):
    """Plans for the CUDA target (its vector widths, workspaces and grids: the guards a GPU run
    records), run by the reference executor."""
    import flame.compiler as compiler
    from flame.runtime.backend import capabilities

    monkeypatch.setattr(compiler, "_target", lambda *a, **k: capabilities("cuda"))


def _counting_renders(monkeypatch) -> list:
    import flame.plan.build as build

    calls, render = [], build._render
    monkeypatch.setattr(build, "_render", lambda item: calls.append(item) or render(item))
    return calls


def _static_and_dynamic(sizes):
    batches = _digits_batches(sizes)
    want_losses, want_params, *_ = _run(_mlp, batches, False)
    return batches, want_losses, want_params


def test_new_sizes_evaluate_the_recorded_plan_and_equal_the_static_compiles_exactly(cuda_target, monkeypatch):
    warm, new = (64, 48, 17), (29, 33, 37, 41, 52, 56, 45, 60)
    batches, want_losses, want_params = _static_and_dynamic(warm + new)
    step, params = _mlp(True)
    losses = [step(*(flame.tensor(a) for a in b)).numpy().copy() for b in batches[:len(warm)]]
    renders = _counting_renders(monkeypatch)
    losses += [step(*(flame.tensor(a) for a in b)).numpy().copy() for b in batches[len(warm):]]
    s = step.stats()
    np.testing.assert_array_equal(losses, want_losses)
    for p, q in zip(params, want_params):
        np.testing.assert_array_equal(p.numpy(), q)
    assert (s.traces, s.instantiations) == (3, len(warm) - 1 + len(new))  # the probe; the first instance checked
    assert renders == [] and (s.size_replans, s.size_rerenders) == (0, 0), str(s)
    assert "0 size(s) planned again, 0 kernel(s) rendered again" in str(s)
    variants = step._templates[0].plans.variants
    assert len(variants) <= 3 and not {v.size for v in variants} & set(new)  # 29 (the last digits batch) included


def test_a_size_that_breaks_a_guard_is_planned_again_and_equals_the_static_compile(cuda_target, caplog):
    sizes = (64, 48, 33, 3)  # 3: grids of one block, a guard of the kernels recorded at 65 fails
    batches, want_losses, want_params = _static_and_dynamic(sizes)
    step, params = _mlp(True)
    losses = [step(*(flame.tensor(a) for a in b)).numpy().copy() for b in batches[:3]]
    step._templates[0].plans.MAX_VARIANTS = len(step._templates[0].plans.variants)  # no new class recorded
    with caplog.at_level("INFO", logger="flame"):
        losses += [step(*(flame.tensor(a) for a in b)).numpy().copy() for b in batches[3:]]
    s = step.stats()
    np.testing.assert_array_equal(losses, want_losses)
    for p, q in zip(params, want_params):
        np.testing.assert_array_equal(p.numpy(), q)
    assert s.size_replans == 1 and s.size_rerenders >= 1, str(s)
    planned_again = [r.getMessage() for r in caplog.records if "planned again" in r.getMessage()]
    assert len(planned_again) == 1 and "s0=3: planned again (" in planned_again[0]
    assert "(s0=3)); kernels rendered again: " in planned_again[0] and "fused_le_where" in planned_again[0]
    assert all("kernels rendered for this size" not in r.getMessage() for r in caplog.records)


def test_a_new_class_of_sizes_is_recorded_once_then_reused(cuda_target, monkeypatch, caplog):
    sizes = (64, 48, 33, 3, 7, 5)  # 3, 7, 5: grids of one block, a class the sizes before did not have
    batches, want_losses, want_params = _static_and_dynamic(sizes)
    step, params = _mlp(True)
    with caplog.at_level("INFO", logger="flame"):
        losses = [step(*(flame.tensor(a) for a in b)).numpy().copy() for b in batches]
    np.testing.assert_array_equal(losses, want_losses)
    recorded = [r.getMessage() for r in caplog.records if "plan recorded for this size's class" in r.getMessage()]
    assert len(recorded) == 1 and "s0=3" in recorded[0], recorded
    assert step.stats().size_replans == 0


# ---- a GPT block (flame.bench.cases_gpt's, small): a new batch size or length is its recorded plan ----

def _block(dtype: str):
    """A GPT block training step (pre-LayerNorm, causal attention written by hand, GELU MLP, AdamW)
    over x [B, T, 16], its causal mask sized from x (so T may be dynamic too)."""
    from flame.bench.cases_gpt import _block_inputs, _flame_block, _flame_mask
    from flame.bench.spec import generate, to_flame

    def make(dynamic):
        s = {"d": 16, "heads": 2, "dtype": dtype}
        inputs = _block_inputs(s)
        p = {n: nn.Parameter(to_flame(a, dtype, copy=True)) for n, a in generate(inputs, np, 0).items()}
        opt = optim.AdamW(list(p.values()), lr=1e-2)

        @flame.compile(dynamic=dynamic)
        def step(x):
            y = _flame_block(x, p, "", s, _flame_mask({**s, "T": x.shape[1]}))
            loss = (y.float() ** 2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss

        return step, list(p.values())

    return make


def _block_inputs_at(shapes, dtype: str):
    rng = np.random.default_rng(2)
    xs = [flame.tensor(rng.standard_normal(shape, dtype=np.float32)) for shape in shapes]
    return [(x.to(flame.bf16) if dtype == "bf16" else x,) for x in xs]


def _numpy(t) -> np.ndarray:
    return t.float().numpy().copy() if t.dtype == flame.bf16 else t.numpy().copy()


@pytest.mark.parametrize("dtype, dim", [("f32", 0), ("bf16", 0), ("f32", 1), ("bf16", 1)])
def test_gpt_block_new_sizes_evaluate_the_recorded_plan_and_equal_the_static_compiles(cuda_target, monkeypatch,
                                                                                     dtype, dim):
    # a batch size (dim 0) or a sequence length (dim 1, of batch 2); the new ones in the classes of the
    # sizes before (a softmax over s0 columns vectorises where s0 is a multiple of 4: 40 and 44, 41)
    warm, new = (40, 41, 44), (48, 43, 52)
    shapes = [(n, 8, 16) if dim == 0 else (2, n, 16) for n in warm + new]
    calls = _block_inputs_at(shapes, dtype)
    make = _block(dtype)
    want, static_params = [], None
    step, params = make(False)
    want = [_numpy(step(*c)) for c in calls]
    static_params = [_numpy(p) for p in params]
    step, params = make(None)  # the dim that changes between the first two calls becomes dynamic
    got = [_numpy(step(*c)) for c in calls[: len(warm)]]
    renders = _counting_renders(monkeypatch)
    got += [_numpy(step(*c)) for c in calls[len(warm):]]
    s = step.stats()
    np.testing.assert_array_equal(got, want)
    for p, q in zip(params, static_params):
        np.testing.assert_array_equal(_numpy(p), q)
    assert (s.traces, s.instantiations) == (3, len(warm) + len(new) - 2), str(s)  # 40, 41; the next checked
    assert renders == [] and (s.size_replans, s.size_rerenders) == (0, 0), str(s)
    assert not {v.size for v in step._templates[0].plans.variants} & set(new)


@pytest.mark.parametrize("op", ["concat", "slice"])
def test_a_concat_or_slice_along_a_dynamic_dim_renders_one_source_for_every_size(op):
    from flame.ir import symbolic
    from flame.plan.build import to_plan
    from flame.runtime.backend import capabilities

    def f(x, y):
        z = flame.cat([x, y * 2], dim=0) if op == "concat" else x[1:-1] * 3
        return z.exp()

    step = flame.compile(f, dynamic=True)
    for n in (5, 9):
        step(flame.tensor(np.ones((n, 3), np.float32)), flame.tensor(np.ones((n + 2, 3), np.float32)))
    template = step._templates[0].planned
    sources = []
    for n in (6, 7, 11):
        with symbolic.rendering(n) as r:
            plan = to_plan(template.instantiate(n, symbolic=True), target=capabilities("cuda"))
        assert r.per_size == []
        sources.append({k.source for k in plan.kernels()})
        assert all(k.sizes == (n,) for k in _launches_taking_s0(plan)) and _launches_taking_s0(plan)
    assert sources[0] == sources[1] == sources[2]
    if op == "concat":
        assert any("concat" in k for k in sources[0]) and any("flame_s0" in k and "if (c < " in k for k in sources[0])


# ---- a size a recorded plan serves is set up without passes, renders, re-plans or shape rules ----

def test_a_served_size_runs_no_pass_render_or_shape_rule_and_its_plan_is_the_one_built_at_that_size(
        cuda_target, monkeypatch):
    import flame.compiler as compiler
    import flame.frontend.dynamic as dynamic
    import flame.plan.build as build
    from flame.plan.steps import format_plan

    batches = _digits_batches((64, 48, 17, 29, 33, 41, 52))
    step, _ = _mlp(True)
    for b in batches[:3]:
        step(*(flame.tensor(a) for a in b))
    calls = []
    for module, name in ((compiler, "run_pipeline"), (build, "to_plan"), (build, "_render"),
                         (dynamic.Template, "_checked")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, real=real, name=name, **k: calls.append(name) or real(*a, **k))
    for b in batches[3:]:
        step(*(flame.tensor(a) for a in b))
    assert calls == [] and step.stats().size_replans == 0
    monkeypatch.undo()
    template = step._templates[0].plans
    for e in _instances(step):
        n = e.shapes[0][0]
        if n in (b[0].shape[0] for b in batches[3:]):  # the served sizes: the plan as built from scratch there
            built = template._record(n)[0].plan
            assert format_plan(e.plan) == format_plan(built)
            assert e.plan.arena_size == built.arena_size


@pytest.mark.parametrize("n", [1, 2, 5, 29, 64, 65, 100])
def test_the_graph_at_a_size_without_shape_rules_is_the_checked_one(n):
    from flame.frontend.dynamic import Template
    from flame.ir.printer import print_graph

    step, _ = _mlp(None)
    a, b = (step.trace(*(flame.tensor(x) for x in bt)) for bt in _digits_batches((64, 48)))
    t = Template(a, b, {(0, 0): (64, 48), (1, 0): (64, 48)})
    fast, checked = t.instantiate(n, check=False), t.instantiate(n)
    assert print_graph(fast) == print_graph(checked)
    assert [type(d) for v in fast.inputs for d in v.shape] == [int] * sum(len(v.shape) for v in fast.inputs)
    assert all(x.attrs is not y.attrs for x, y in zip(fast.ops, t.instantiate(n, check=False).ops))


def test_merged_guards_hold_exactly_where_each_holds():
    from flame.ir import symbolic

    with symbolic.recording() as g:
        s0 = symbolic.SymInt(24, 1, 0)
        _ = s0 % 4 == 0, s0 * 8 < 1024, (s0 + 3) // 2 > 5, s0 != 7
    assert len(g) == 4
    for s in range(0, 200):
        assert g.holds(s) == (g.failed(s) == ""), s


def test_dynamic_true_first_call_runs_the_template_kernels(cuda_target):
    """dynamic=True: the first call's plan is the size template's at its own size (kernels taking the
    size as a parameter), so a later size of the same class needs no kernel of its own. Before, the
    first call compiled kernels specialised to its size and the first smaller batch compiled the
    whole step again: 64 ms extra in the digits MLP's first epoch on a fresh H100 (2026-11-27)."""
    step, _ = _mlp(True)
    first, later = _digits_batches((64, 48))
    step(*(flame.tensor(a) for a in first))
    sources = {k.source for k in step._last.plan.kernels()}
    assert any("s0" in src for src in sources)  # the batch size is a kernel parameter
    step(*(flame.tensor(a) for a in later))
    assert {k.source for k in step._last.plan.kernels()} <= sources
    s = step.stats()
    assert (s.traces, s.instantiations, s.size_kernels, s.size_replans) == (3, 1, 0, 0), str(s)  # 48 checked


def test_odd_sizes_reuse_the_batch_means_kernel(cuda_target):
    """The loss's mean over the batch is a row reduction over s0 itself: vectorising it only when s0 is
    a multiple of 4 made every odd size render (and compile) a kernel of its own; it now takes one
    kernel for every size."""
    step, _ = _mlp(True)
    for n in (64, 29, 17, 41, 50):
        step(*(flame.tensor(a) for a in _digits_batches((n,))[0]))
    s = step.stats()
    assert (s.instantiations, s.size_kernels, s.size_rerenders) == (4, 0, 0), str(s)


@pytest.mark.parametrize("form,sizes", [(lambda n: n // 2, (2, 3, 4, 5, 7, 8)), (lambda n: n % 2, (4, 6, 9, 5, 7)),
                                        (lambda n: min(n, 4), (5, 7, 2, 3, 9))], ids=["floordiv", "mod", "min"])
def test_a_number_equal_at_the_two_traced_sizes_is_checked_at_the_next(form, sizes):
    """A Python number computed from the size that is not affine in it but equal at the two sizes traced
    (n // 2 at 2 and 3) made the template take it for a constant: every later size silently used it. The
    first size the template would serve is traced too; the trace refutes it, says where, and the dims are
    specialised per size from then on: every call computes what the function does at its size."""

    def f(x):
        return (x * form(x.shape[0])).sum(0) + x.mean()

    xs = [np.arange(n * 3, dtype=np.float32).reshape(n, 3) for n in sizes]
    _, _, s, warns, step = _run(_simple(f), [(x,) for x in xs], None)
    assert (s.traces, s.instantiations) == (len(sizes), 0) and step._templates == []
    assert f"(s0 = {sizes[0]}, {sizes[1]}, ...) does not hold: at size {sizes[2]} the trace has" in warns[1]
    assert all("now dynamic" not in w for w in warns[2:])  # not made again from later pairs
    for x in xs:
        np.testing.assert_allclose(step(flame.tensor(x)).numpy(), (x * form(len(x))).sum(0) + x.mean(), rtol=1e-6)
