"""Python's and NumPy's global random draws inside a traced body are refused (frontend/host_random.py):
their value would be a constant of the compiled step."""

import random
import threading

import numpy as np
import pytest

import flame
from flame.errors import TraceError

HERE = "test_host_random.py"


def _compiled(draw):
    @flame.compile
    def step(x):
        return x * draw()

    return step


@pytest.mark.parametrize("draw, name", [
    (lambda: random.random(), "random.random"),
    (lambda: random.randint(0, 3), "random.randint"),
    (lambda: random.choice([1.0, 2.0]), "random.choice"),
    (lambda: np.random.rand(), "numpy.random.rand"),
    (lambda: float(np.random.normal()), "numpy.random.normal"),
])
def test_a_global_draw_while_tracing_names_the_users_line(draw, name):
    with pytest.raises(TraceError, match=rf"(?s){name}\(\) inside @flame\.compile runs once.*flame\.rand.*{HERE}:"):
        _compiled(draw)(flame.ones(2))


def test_the_originals_are_back_after_a_trace_and_draw_outside_one():
    originals = random.random, random.shuffle, np.random.rand, np.random.permutation
    with pytest.raises(TraceError):
        _compiled(lambda: random.random())(flame.ones(2))
    ok = _compiled(lambda: 2.0)
    assert ok(flame.ones(2)).tolist() == [2.0, 2.0]
    assert (random.random, random.shuffle, np.random.rand, np.random.permutation) == originals
    random.seed(3)
    want = random.random()
    random.seed(3)
    assert random.random() == want


def test_another_thread_draws_while_a_body_is_traced():
    inside, done, got = threading.Event(), threading.Event(), []

    def other():
        assert inside.wait(30)
        got.append((random.random(), float(np.random.rand())))
        done.set()

    @flame.compile
    def step(x):
        inside.set()
        assert done.wait(30)  # the other thread draws while this body is being traced
        return x + 1

    t = threading.Thread(target=other)
    t.start()
    assert step(flame.ones(2)).tolist() == [2.0, 2.0]
    t.join(30)
    assert len(got) == 1 and all(0.0 <= v < 1.0 for v in got[0])


def test_flames_own_draws_change_at_every_call():
    @flame.compile
    def flip(x):
        return flame.where(flame.rand(()) < 0.5, x, -x)

    flame.manual_seed(0)
    signs = {flip(flame.ones(1)).item() for _ in range(32)}
    assert signs == {1.0, -1.0}
