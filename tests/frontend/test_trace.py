"""Tracing with flame.compile: .trace() returns a Graph, compiled functions cache per signature and
re-trace on new shapes, captured tensors become inputs with roles, in-place updates become aliases,
and the counter-based random streams give the same numbers eagerly and compiled."""

from __future__ import annotations

import numpy as np
import pytest

import flame
from flame.ir import Graph, verify

RNG = np.random.default_rng(7)


def _t(*shape, dtype=np.float32) -> flame.Tensor:
    return flame.tensor(RNG.standard_normal(shape).astype(dtype))


def test_trace_returns_a_verified_graph() -> None:
    def f(x, y):
        return (x * y + 1.0).relu().sum(1)

    g = flame.compile(f).trace(_t(3, 4), _t(3, 4))
    assert isinstance(g, Graph)
    verify(g)
    assert [str(v.type) for v in g.inputs] == ["f32[3,4]", "f32[3,4]"]
    assert g.roles == ["data", "data"]
    assert [str(v.type) for v in g.outputs] == ["f32[3]"]
    names = [op.name for op in g.ops]
    assert {"mul", "add", "relu", "reduce_sum"} <= set(names)


def test_compiled_matches_eager_and_returns_structures() -> None:
    def f(x, w):
        h = x @ w
        return {"h": h, "parts": (h.amax(1), h.softmax(-1))}

    x, w = _t(5, 3), _t(3, 4)
    want = f(x, w)
    got = flame.compile(f)(x, w)
    np.testing.assert_allclose(got["h"].numpy(), want["h"].numpy(), rtol=1e-6)
    for g_, w_ in zip(got["parts"], want["parts"]):
        np.testing.assert_allclose(g_.numpy(), w_.numpy(), rtol=1e-6)


def test_caches_per_signature_and_retraces_on_new_shapes() -> None:
    calls = []

    @flame.compile
    def f(x):
        calls.append(x.shape)
        return x * 2

    a = _t(2, 3)
    for _ in range(3):
        np.testing.assert_array_equal(f(a).numpy(), a.numpy() * 2)
    assert calls == [(2, 3)]
    b = _t(4, 3)
    np.testing.assert_array_equal(f(b).numpy(), b.numpy() * 2)
    assert calls == [(2, 3), (4, 3)]
    f(_t(2, 3))
    f(flame.tensor(np.ones((2, 3), np.float64)))
    assert calls == [(2, 3), (4, 3), (2, 3)]  # dtype change: a new signature
    assert f.stats().variants == f.stats().traces == 3


def test_python_constants_are_part_of_the_signature() -> None:
    calls = []

    @flame.compile
    def f(x, k):
        calls.append(k)
        return x * k

    x = _t(3)
    np.testing.assert_allclose(f(x, 2.0).numpy(), x.numpy() * 2)
    np.testing.assert_allclose(f(x, 3.0).numpy(), x.numpy() * 3)
    f(x, 2.0)
    assert calls == [2.0, 3.0]


def test_captured_parameter_is_an_input_and_updates_become_aliases() -> None:
    w = flame.tensor(np.ones(3, np.float32), requires_grad=True)

    @flame.compile
    def step(x):
        loss = (x * w).sum()
        with flame.no_grad():  # a leaf that requires grad is written outside autograd, as in torch
            w.copy_(w - 0.5 * x)
        return loss

    g = step.trace(flame.tensor(np.arange(3, dtype=np.float32)))
    assert g.roles == ["data", "param"]
    assert g.aliases == {1: 1}
    x = flame.tensor(np.arange(3, dtype=np.float32))
    loss = step(x)
    assert loss.item() == pytest.approx(3.0)
    np.testing.assert_allclose(w.numpy(), [1.0, 0.5, 0.0])
    step(x)
    np.testing.assert_allclose(w.numpy(), [1.0, 0.0, -1.0])


def test_backward_inside_compile_gives_grads() -> None:
    w = flame.tensor(RNG.standard_normal(4).astype(np.float32), requires_grad=True)

    @flame.compile
    def f(x):
        loss = ((x * w) ** 2).sum()
        loss.backward()
        return loss

    x = _t(4)
    f(x)
    np.testing.assert_allclose(w.grad.numpy(), 2 * x.numpy() ** 2 * w.numpy(), rtol=1e-5)


def test_trace_records_user_locations() -> None:
    g = flame.compile(lambda x: x.exp()).trace(_t(2))
    assert g.ops[0].loc.startswith("test_trace.py:")


# ---- random -----------------------------------------------------------------------------------------

def test_same_seed_same_numbers_and_offset_advances() -> None:
    g1, g2 = flame.Generator(11), flame.Generator(11)
    a = flame.rand(5, generator=g1).numpy()
    b = flame.rand(5, generator=g2).numpy()
    np.testing.assert_array_equal(a, b)
    assert g1.offset_tensor.item() == 5
    c = flame.rand(2, 3, generator=g1).numpy()
    assert g1.offset_tensor.item() == 11
    assert not np.array_equal(c.ravel()[:5], a)
    assert ((a >= 0) & (a < 1)).all()
    assert not np.array_equal(flame.rand(5, generator=flame.Generator(12)).numpy(), a)


def test_draws_are_a_counter_stream() -> None:
    """Two draws of 3 equal one draw of 6: element i uses counter offset + i."""
    one = flame.randn(6, generator=flame.Generator(3)).numpy()
    g = flame.Generator(3)
    two = np.concatenate([flame.randn(3, generator=g).numpy(), flame.randn(3, generator=g).numpy()])
    np.testing.assert_array_equal(one, two)


def test_manual_seed_resets_the_stream() -> None:
    g = flame.Generator(5)
    first = flame.rand(4, generator=g).numpy()
    g.manual_seed(5)
    assert g.offset_tensor.item() == 0
    np.testing.assert_array_equal(flame.rand(4, generator=g).numpy(), first)


def test_eager_and_compiled_draws_are_identical() -> None:
    eager_gen, compiled_gen = flame.Generator(21), flame.Generator(21)
    eager = [flame.randn(2, 3, generator=eager_gen).numpy() for _ in range(3)]

    @flame.compile
    def draw(x):
        return flame.randn(2, 3, generator=compiled_gen) + x

    zero = flame.zeros(2, 3)
    compiled = [draw(zero).numpy() for _ in range(3)]
    for e, c in zip(eager, compiled):
        np.testing.assert_array_equal(e, c)
    assert compiled_gen.offset_tensor.item() == eager_gen.offset_tensor.item() == 18
    g = draw.trace(zero)
    assert g.roles.count("state") == 2 and len(g.aliases) == 1


def test_random_statistics() -> None:
    u = flame.rand(20000, generator=flame.Generator(0)).numpy().astype(np.float64)
    n = flame.randn(20000, generator=flame.Generator(1)).numpy().astype(np.float64)
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.005
    assert abs(n.mean()) < 0.03 and abs(n.std() - 1) < 0.03


def test_detach_stops_gradients_in_grad_and_compile():
    """x * x.detach(): the gradient is x (not 2x), eagerly, through flame.grad and inside compile."""
    x = np.array([0.0, 1.0, -2.0], np.float32)

    def f(t):
        return (t * t.detach()).sum()

    assert np.array_equal(flame.grad(f)(flame.tensor(x)).numpy(), x)
    assert np.array_equal(flame.compile(lambda t: flame.grad(f)(t))(flame.tensor(x)).numpy(), x)
    t = flame.tensor(x, requires_grad=True)
    f(t).backward()
    assert np.array_equal(t.grad.numpy(), x)
