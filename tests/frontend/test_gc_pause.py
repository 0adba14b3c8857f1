"""A compiled function builds (traces, compiles, instantiates a new size) with Python's cyclic
garbage collector paused (flame._gc), and leaves it as it found it: enabled after a build, after a
build that raises, and disabled where the program disabled it."""

import gc

import numpy as np
import pytest

import flame
import flame.frontend.compile as compile_module


@pytest.fixture
def collector_enabled():
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def _step():
    seen = []

    @flame.compile
    def step(x):
        seen.append(gc.isenabled())  # Python runs at trace time only
        return (x * 2.0).sum()

    return step, seen


def test_a_trace_runs_with_the_collector_paused_and_enabled_after(collector_enabled):
    step, seen = _step()
    x = flame.tensor(np.ones((4, 3), np.float32))
    assert step(x).item() == 24.0 and step(x).item() == 24.0
    assert seen == [False] and gc.isenabled()


def test_a_build_that_raises_enables_the_collector_again(collector_enabled):
    @flame.compile
    def bad(x):
        return x @ x  # [4, 3] @ [4, 3]: a shape error while tracing

    with pytest.raises(flame.FlameError):
        bad(flame.tensor(np.ones((4, 3), np.float32)))
    assert gc.isenabled()


def test_a_collector_the_program_disabled_stays_disabled(collector_enabled):
    step, seen = _step()
    gc.disable()
    assert step(flame.tensor(np.ones((2, 3), np.float32))).item() == 12.0
    assert seen == [False] and not gc.isenabled()


def test_a_new_size_is_instantiated_with_the_collector_paused(collector_enabled, monkeypatch):
    states = []
    real = compile_module.compile_instance

    def spy(*args, **kwargs):
        states.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(compile_module, "compile_instance", spy)

    @flame.compile(dynamic=True)
    def step(x):
        return (x * x).sum()

    for n in (8, 5, 3):
        x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
        assert step(flame.tensor(x)).item() == pytest.approx(float((x * x).sum()))
    assert states and not any(states) and gc.isenabled()
    assert step.stats().instantiations >= 1


@pytest.mark.parametrize("method", ["trace", "optimized"])
def test_trace_and_optimized_build_with_the_collector_paused(collector_enabled, method):
    """`.trace(*args)` and `.optimized(*args)` (what the suite's compile-time columns time) build as a
    call's miss does: the collector paused while the body runs, enabled again after."""
    step, seen = _step()
    graph = getattr(step, method)(flame.tensor(np.ones((4, 3), np.float32)))
    assert graph.ops and seen == [False] and gc.isenabled()


def test_a_build_leaves_nothing_frozen_and_the_programs_frozen_objects_frozen(collector_enabled):
    """A build moves what it leaves into the oldest generation (gc.freeze, gc.unfreeze): nothing stays
    frozen after it, and objects the program froze itself stay frozen."""
    step, _ = _step()
    assert step(flame.tensor(np.ones((4, 3), np.float32))).item() == 24.0
    assert gc.get_freeze_count() == 0
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        other, seen = _step()
        assert other(flame.tensor(np.ones((5, 3), np.float32))).item() == 30.0
        assert seen == [False] and gc.isenabled()
        assert 0 < gc.get_freeze_count() <= frozen  # (a frozen object freed meanwhile leaves the count)
    finally:
        gc.unfreeze()
