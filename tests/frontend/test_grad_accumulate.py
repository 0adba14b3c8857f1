"""A gradient accumulated into an existing .grad is added in place, as torch's AccumulateGrad: the
same tensor, its storage updated, eager and inside @flame.compile (where the sum is an output aliased
to the .grad input, so the plan writes it into that buffer and holds no second copy)."""

import warnings

import numpy as np
import pytest
import torch

import flame
from flame import nn
from tests.frontend.expected_retrace import said_at_info

SHAPES = [(6, 4), (6,), (3, 6), (3,)]
STEPS = 4


def _start() -> list[np.ndarray]:
    r = np.random.default_rng(0)
    return [r.standard_normal(s) for s in SHAPES]


def _batch(k: int) -> tuple[np.ndarray, np.ndarray]:
    r = np.random.default_rng(10 + k)
    return r.standard_normal((5, 4)), r.standard_normal((5, 3))


def _loss(lib, ps, x, y):
    w1, b1, w2, b2 = ps
    h = lib.tanh(x @ w1.T + b1)
    return ((h @ w2.T + b2 - y) ** 2).mean()


def _body(lib, ps, opt, mode: str, x, y):
    """One training step as a user writes it; mode says how gradients are cleared and accumulated."""
    if mode == "zero_keep":
        opt.zero_grad(set_to_none=False)
    if mode == "zero_none":
        opt.zero_grad(set_to_none=True)
    if mode == "micro":  # two micro-batches accumulate into .grad, then one update
        opt.zero_grad(set_to_none=False)
        for half in (slice(0, 2), slice(2, 5)):
            (_loss(lib, ps, x[half], y[half]) / 2).backward()
        opt.step()
        return None
    _loss(lib, ps, x, y).backward()
    if mode != "accumulate":  # "accumulate": .grad grows across calls, no update
        opt.step()
    return None


def _optimizers(name: str, ps, tps):
    kw = {"SGD": dict(lr=0.05, momentum=0.9), "AdamW": dict(lr=0.01, weight_decay=0.1)}[name]
    return getattr(flame.optim, name)(ps, **kw), getattr(torch.optim, name)(tps, **kw)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("mode", ["zero_keep", "zero_none", "accumulate", "micro"])
@pytest.mark.parametrize("name", ["SGD", "AdamW"])
def test_steps_match_torch_and_held_grads_see_the_update(name, mode, compiled):
    start = _start()
    ps = [nn.Parameter(flame.tensor(a.copy())) for a in start]
    tps = [torch.nn.Parameter(torch.tensor(a.copy())) for a in start]
    opt, topt = _optimizers(name, ps, tps)

    def body(x, y):
        return _body(flame, ps, opt, mode, x, y)

    step = flame.compile(body) if compiled else body
    for k in range(STEPS):
        xa, ya = _batch(k)
        held, theld = [p.grad for p in ps], [tp.grad for tp in tps]  # references held before the step
        with warnings.catch_warnings():  # the first call (no .grad yet) and the second trace differently
            warnings.simplefilter("ignore", flame.RecompileWarning)
            step(flame.tensor(xa), flame.tensor(ya))
        _body(torch, tps, topt, mode, torch.tensor(xa), torch.tensor(ya))
        for i, (p, tp, g, tg) in enumerate(zip(ps, tps, held, theld)):
            what = f"{name} {mode} step {k} param {i}"
            np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-12, atol=1e-12, err_msg=what)
            np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-12, atol=1e-12, err_msg=what)
            assert (p.grad is g) == (tp.grad is tg), what  # the same .grad tensor exactly where torch keeps it
            if tg is not None:  # a held reference sees what torch's sees (the sum, or the old gradient)
                np.testing.assert_allclose(g.numpy(), tg.numpy(), rtol=1e-12, atol=1e-12, err_msg=what)


def _mlp_step(accumulate: bool):
    p = nn.Parameter(flame.tensor(np.ones((64, 32), np.float32)))
    opt = flame.optim.SGD([p], lr=0.1)

    @flame.compile
    def step(x):
        if not accumulate:
            opt.zero_grad(set_to_none=False)
        (x @ p).square().sum().backward()
        opt.step()

    return p, step


@pytest.mark.parametrize("accumulate", [True, False], ids=["accumulate", "zero_grad_keep"])
def test_steady_plan_writes_grad_into_its_own_buffer(accumulate):
    p, step = _mlp_step(accumulate)
    x = flame.tensor(np.ones((8, 64), np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", flame.RecompileWarning)
        step(x)  # creates .grad
        g, data = p.grad, p.grad._data
        step(x)
    assert p.grad is g and p.grad._data is data  # written in place, no new tensor or buffer
    plan = step.variants()[0].plan
    grad_input = plan.graph.roles.index("state")  # SGD without momentum: the .grad is the one state input
    assert grad_input in plan.graph.aliases.values()  # the .grad output is aliased to the .grad input
    assert plan.inputs[grad_input] in plan.outputs  # and lives in that input's buffer
    report = step.memory_report(x)
    assert report.bound.get("output", 0) == 0  # no gradient output beside the .grad input (the step returns nothing)


def test_grad_held_inside_the_body_sees_the_accumulation():
    p = nn.Parameter(flame.tensor([1.0, 2.0]))
    tp = torch.nn.Parameter(torch.tensor([1.0, 2.0], dtype=torch.float64))

    def body(lib, p):
        g = p.grad
        (p * p).sum().backward()
        return g.clone()

    (p * 3.0).sum().backward()
    (tp * 3.0).sum().backward()
    got = flame.compile(lambda: body(flame, p))()
    np.testing.assert_array_equal(got.numpy(), body(torch, tp).detach().numpy())


def test_eager_backward_accumulates_in_place():
    p = nn.Parameter(flame.tensor([1.0, 2.0]))
    (p * 3.0).sum().backward()
    g = p.grad
    (p * p).sum().backward()
    assert p.grad is g
    np.testing.assert_array_equal(g.numpy(), [5.0, 7.0])
    flame.autograd.backward((p * 2.0).sum(), inputs=[p])
    assert p.grad is g
    np.testing.assert_array_equal(g.numpy(), [7.0, 9.0])


def test_arguments_grad_accumulates_in_place_across_calls(caplog):
    x = flame.tensor([1.0, 2.0], requires_grad=True)
    step = flame.compile(lambda x: (x * x).sum().backward())
    step(x)
    g = x.grad
    with said_at_info(caplog, r"argument 0\.grad: None -> set"):  # as a parameter's first .grad
        step(x)
    step(x)
    assert x.grad is g
    np.testing.assert_array_equal(g.numpy(), [6.0, 12.0])
    plan = next(v.plan for v in step.variants() if "state" in v.plan.graph.roles)
    grad_input = plan.graph.roles.index("state")  # the argument's .grad, bound at every call
    assert grad_input in plan.graph.aliases.values() and plan.inputs[grad_input] in plan.outputs
    assert step.memory_report(x).bound.get("output", 0) == 0  # the sum is written into that .grad's buffer


def _arg_bodies(lib):
    """Bodies taking an argument that requires grad, as a user writes them (lib: flame or torch)."""

    def read(x, w):  # reads the caller's .grad after the backward: the sum
        (x * w).square().sum().backward()
        return x.grad * 1.0

    def zero_first(x, w):
        x.grad.zero_()
        (x * w).sum().backward()

    def replace(x, w):
        (x * w).sum().backward()
        x.grad = x.grad * 0.5

    def clear(x, w):
        (x * w).sum().backward()
        x.grad = None

    return {"read": read, "zero_first": zero_first, "replace": replace, "clear": clear}


@pytest.mark.parametrize("name", ["read", "zero_first", "replace", "clear"])
def test_arguments_grad_in_the_body_is_the_callers(name):
    x = flame.tensor([1.0, -2.0, 3.0], requires_grad=True)
    tx = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64, requires_grad=True)
    w, tw = flame.tensor([0.5, 2.0, -1.0]), torch.tensor([0.5, 2.0, -1.0], dtype=torch.float64)
    body, tbody = _arg_bodies(flame)[name], _arg_bodies(torch)[name]
    (x * 3.0).sum().backward()
    (tx * 3.0).sum().backward()
    step = flame.compile(body)
    for k in range(3):
        held, theld = x.grad, tx.grad
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", flame.RecompileWarning)
            got = step(x, w)
        want = tbody(tx, tw)
        what = f"{name} call {k}"
        if want is not None:
            np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-6, err_msg=what)
        assert (x.grad is None) == (tx.grad is None), what
        if tx.grad is not None:
            np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6, err_msg=what)
        assert (held is not None and x.grad is held) == (theld is not None and tx.grad is theld), what
        if theld is not None:  # a reference held to the old .grad sees what torch's sees
            np.testing.assert_allclose(held.numpy(), theld.numpy(), rtol=1e-6, err_msg=what)


def test_grad_updated_in_place_then_replaced_reaches_the_held_reference():
    def body(lib, p):
        (p * p).sum().backward()
        p.grad = p.grad * 0.5  # a new tensor: a reference to the old .grad keeps the accumulated sum

    p = nn.Parameter(flame.tensor([1.0, 2.0]))
    tp = torch.nn.Parameter(torch.tensor([1.0, 2.0], dtype=torch.float64))
    (p * 3.0).sum().backward()
    (tp * 3.0).sum().backward()
    g, tg = p.grad, tp.grad
    flame.compile(lambda: body(flame, p))()
    body(torch, tp)
    assert p.grad is not g and tp.grad is not tg
    np.testing.assert_array_equal(g.numpy(), tg.numpy())
    np.testing.assert_array_equal(p.grad.numpy(), tp.grad.numpy())


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_assigning_a_mismatched_grad_raises_as_torch(compiled):
    p = nn.Parameter(flame.ones(2, 3))
    tp = torch.nn.Parameter(torch.ones(2, 3))
    cases = [(lambda: flame.ones(3, 2), lambda: torch.ones(3, 2), "of size '[3, 2]' to a tensor of size '[2, 3]'"),
             (lambda: flame.ones(2, 3, dtype=flame.float64), lambda: torch.ones(2, 3, dtype=torch.float64),
              "with dtype 'f64' to a tensor with dtype 'f32'"),
             (lambda: 3, lambda: 3, "expected to be a Tensor or None but got grad of type int")]
    for make, tmake, words in cases:
        with pytest.raises((RuntimeError, TypeError)) as theirs:
            tp.grad = tmake()

        def assign(make=make):
            p.grad = make()

        with pytest.raises(type(theirs.value)) as mine:
            flame.compile(assign)() if compiled else assign()
        assert words in str(mine.value)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["zero_keep", "accumulate", "micro"])
@pytest.mark.parametrize("name", ["SGD", "AdamW"])
def test_gpu_steps_accumulate_in_place_under_graph_replay(name, mode):
    """On the CUDA executor (a step replayed as a CUDA graph from its third call): the steady plan writes
    each sum into the .grad array the parameter holds, so a held reference sees it, and the values follow
    torch's."""
    start = _start()
    ps = [nn.Parameter(flame.tensor(a.copy())) for a in start]
    tps = [torch.nn.Parameter(torch.tensor(a.copy())) for a in start]
    opt, topt = _optimizers(name, ps, tps)
    step = flame.compile(lambda x, y: _body(flame, ps, opt, mode, x, y))
    for k in range(STEPS + 2):
        xa, ya = _batch(k)
        held = [p.grad for p in ps]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", flame.RecompileWarning)
            step(flame.tensor(xa), flame.tensor(ya))
        _body(torch, tps, topt, mode, torch.tensor(xa), torch.tensor(ya))
        for i, (p, tp, g) in enumerate(zip(ps, tps, held)):
            what = f"{name} {mode} step {k} param {i}"
            np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-9, atol=1e-9, err_msg=what)
            np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-9, atol=1e-9, err_msg=what)
            if g is not None:
                assert p.grad is g, what
                np.testing.assert_allclose(g.numpy(), tp.grad.numpy(), rtol=1e-9, atol=1e-9, err_msg=what)
