"""User-defined gradients: flame.autograd.Function against torch.autograd.Function (each Function is written
once, over the library's module, and built for both), flame.custom_vjp with JAX's semantics (expected
gradients by hand), values and gradients in float64, eagerly and @flame.compile'd; a custom op against its
composite equivalent; the compiled forward fuses with its neighbours; flame.autograd.grad / backward
against torch.autograd's; gradcheck; errors as torch raises them."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

import flame
import flame.autograd
from flame.ir import print_graph


def _rng(seed: int, *shape):
    return np.random.default_rng(seed).standard_normal(shape)


# ---- the Functions, written once over `lib` (torch or flame) -------------------------------------------


def exp_fn(lib):
    class Exp(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * y

    return Exp


def straight_through_fn(lib):
    class RoundSTE(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.round()

        @staticmethod
        def backward(ctx, g):
            return g

    return RoundSTE


def clamp_fn(lib):
    class Clamp(lib.autograd.Function):  # gradient only where the input was inside [lo, hi]
        @staticmethod
        def forward(ctx, x, lo, hi):
            ctx.lo, ctx.hi = lo, hi
            ctx.save_for_backward(x)
            return x.clamp(lo, hi)

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            inside = ((x >= ctx.lo) & (x <= ctx.hi)).to(g.dtype)
            return g * inside, None, None

    return Clamp


def mul_add_fn(lib):
    class MulAdd(lib.autograd.Function):  # two tensor inputs, a Python scale, two outputs
        @staticmethod
        def forward(ctx, a, b, k):
            ctx.k = k
            ctx.save_for_backward(a, b)
            return a * b * k, a + b

        @staticmethod
        def backward(ctx, g_prod, g_sum):
            a, b = ctx.saved_tensors
            return g_prod * b * ctx.k + g_sum, g_prod * a * ctx.k + g_sum, None

    return MulAdd


def attr_fn(lib):
    class Masked(lib.autograd.Function):  # a tensor kept as a ctx attribute; setup_context form
        @staticmethod
        def forward(x, w):
            return (x * w).relu()

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, w = inputs
            ctx.mask = (output > 0).to(x.dtype)
            ctx.save_for_backward(x, w)

        @staticmethod
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            gm = g * ctx.mask
            return gm * w, gm * x

    return Masked


CASES = {  # name: (Function builder, arguments as (kind, value): "t" a tensor with grad, "c" one without)
    "exp": (exp_fn, [("t", _rng(1, 3, 4))]),
    "straight_through": (straight_through_fn, [("t", 3 * _rng(2, 5))]),
    "clamp": (clamp_fn, [("t", 2 * _rng(3, 6)), ("p", -0.5), ("p", 0.75)]),
    "mul_add": (mul_add_fn, [("t", _rng(4, 2, 3)), ("t", _rng(5, 2, 3)), ("p", 1.5)]),
    "mul_add_one_frozen": (mul_add_fn, [("t", _rng(4, 2, 3)), ("c", _rng(5, 2, 3)), ("p", -2.0)]),
    "ctx_attr": (attr_fn, [("t", _rng(6, 4, 3)), ("t", _rng(7, 3))]),
}


def _args(lib, spec):
    out = []
    for kind, v in spec:
        if kind == "p":
            out.append(v)
        elif lib is torch:
            out.append(torch.tensor(v, dtype=torch.float64, requires_grad=kind == "t"))
        else:
            out.append(flame.tensor(v, dtype=flame.f64, requires_grad=kind == "t"))
    return out


def _loss(lib, outs):
    """A loss that weighs every element differently, so each gradient entry is tested."""
    outs = outs if isinstance(outs, tuple) else (outs,)
    total = 0
    for k, o in enumerate(outs):
        w = np.linspace(0.5, 2.0, o.numel()).reshape(tuple(o.shape)) * (k + 1)
        w = torch.tensor(w) if lib is torch else flame.tensor(w, dtype=flame.f64)
        total = total + (o * o * w).sum() + o.sum()
    return total


def _torch_run(name):
    build, spec = CASES[name]
    args = _args(torch, spec)
    outs = build(torch).apply(*args)
    loss = _loss(torch, outs)
    loss.backward()
    outs = outs if isinstance(outs, tuple) else (outs,)
    return [o.detach().numpy() for o in outs], [
        a.grad.numpy() if a.grad is not None else None for a in args if isinstance(a, torch.Tensor)
    ]


def _grads(args):
    return [a.grad.numpy() if a.grad is not None else None for a in args if isinstance(a, flame.Tensor)]


def _check(got_outs, got_grads, name):
    want_outs, want_grads = _torch_run(name)
    assert len(got_outs) == len(want_outs)
    for g, w in zip(got_outs, want_outs):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    assert [g is None for g in got_grads] == [w is None for w in want_grads]
    for g, w in zip(got_grads, want_grads):
        if w is not None:
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(CASES))
def test_function_eager_matches_torch(name):
    build, spec = CASES[name]
    args = _args(flame, spec)
    outs = build(flame).apply(*args)
    _loss(flame, outs).backward()
    outs = outs if isinstance(outs, tuple) else (outs,)
    assert all(o.requires_grad for o in outs)
    _check([o.numpy() for o in outs], _grads(args), name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_function_compiled_matches_torch(name):
    build, spec = CASES[name]
    fn = build(flame)
    args = _args(flame, spec)

    @flame.compile
    def step(*a):
        outs = fn.apply(*a)
        _loss(flame, outs).backward()
        return outs

    outs = step(*args)
    outs = outs if isinstance(outs, tuple) else (outs,)
    _check([o.numpy() for o in outs], _grads(args), name)
    for a in args:  # a second call replays the compiled step: the same gradients again
        if isinstance(a, flame.Tensor):
            a.grad = None
    step(*args)
    _check([o.numpy() for o in outs], _grads(args), name)


def test_only_the_used_output_differentiates_and_the_other_gets_zeros():
    for lib in (torch, flame):
        a, b, _ = _args(lib, CASES["mul_add"][1])
        _, s = mul_add_fn(lib).apply(a, b, 2.0)
        (s * s).sum().backward()
        if lib is torch:
            want = a.grad.numpy(), b.grad.numpy()
        else:
            np.testing.assert_allclose(a.grad.numpy(), want[0], rtol=1e-12)
            np.testing.assert_allclose(b.grad.numpy(), want[1], rtol=1e-12)


# ---- ctx: mark_non_differentiable, set_materialize_grads, once_differentiable (needs_input_grad: its own file)


def _argmax_fn(lib, seen: list, materialize: bool):
    class ScaleAndArgmax(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(materialize)
            idx = x.argmax()
            doubled = x * 2
            ctx.mark_non_differentiable(idx)
            return doubled, idx, x * 3, "label"

        @staticmethod
        def backward(ctx, g2, g_idx, g3, g_label):
            seen.append((g_idx is None, g3 is None, g_label is None))
            return g2 * 2 if g3 is None else g2 * 2 + g3 * 3

    return ScaleAndArgmax


@pytest.mark.parametrize("materialize", [True, False])
def test_non_differentiable_and_non_tensor_outputs_and_materialized_grads_as_torch(materialize):
    seen = {torch: [], flame: []}
    grads = {}
    for lib in (torch, flame):
        x = (
            torch.tensor(_rng(10, 5), requires_grad=True)
            if lib is torch
            else flame.tensor(_rng(10, 5), dtype=flame.f64, requires_grad=True)
        )
        doubled, idx, tripled, label = _argmax_fn(lib, seen[lib], materialize).apply(x)
        assert (doubled.requires_grad, idx.requires_grad, tripled.requires_grad, label) == (True, False, True, "label")
        assert int(idx) == int(np.argmax(_rng(10, 5)))
        doubled.sum().backward()  # the third output is not used: zeros, or None without materializing
        grads[lib] = x.grad.numpy()
    assert seen[flame] == seen[torch]
    np.testing.assert_allclose(grads[flame], grads[torch], rtol=1e-12)


def test_once_differentiable_and_kwargs_are_accepted():
    class Scale(flame.autograd.Function):
        @staticmethod
        def forward(ctx, x, scale=2.0):
            ctx.scale = scale
            return x * scale

        @staticmethod
        @flame.autograd.once_differentiable
        def backward(ctx, g):
            return g * ctx.scale, None

    x = flame.tensor([1.0, 2.0], requires_grad=True)
    Scale.apply(x, scale=5.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [5.0, 5.0])


def test_no_grad_and_inputs_without_grad_record_nothing():
    fn = exp_fn(flame)
    x = flame.tensor([0.5, 1.0], requires_grad=True)
    with flame.no_grad():
        assert not fn.apply(x).requires_grad
    assert not fn.apply(flame.tensor([0.5, 1.0])).requires_grad


# ---- a custom op against its composite, and fusion ----------------------------------------------------


def test_custom_op_matches_its_composite_eager_and_compiled():
    """A softplus with its own gradient (sigmoid) against the same forward differentiated by autodiff."""

    class Softplus(flame.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return (x.exp() + 1).log()

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * x.sigmoid()

    def runner(f):
        def run(x, w):
            loss = (f(x @ w) * w.sum()).mean()
            loss.backward()
            return loss

        return run

    x = flame.tensor(_rng(11, 4, 3), dtype=flame.f64)
    w = flame.tensor(_rng(12, 3, 5), dtype=flame.f64, requires_grad=True)
    results = []
    for f in (Softplus.apply, lambda v: (v.exp() + 1).log()):
        for run in (runner(f), flame.compile(runner(f))):
            w.grad = None
            loss = run(x, w)
            results.append((loss.item(), w.grad.numpy()))
    for loss, g in results[1:]:
        np.testing.assert_allclose(loss, results[0][0], rtol=1e-12)
        np.testing.assert_allclose(g, results[0][1], rtol=1e-10)


class _LinearFn(flame.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        return x @ w.t() + b

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g @ w, g.t() @ x, g.sum(0)


@pytest.mark.parametrize("checkpointed", [False, True])
def test_custom_linear_in_a_compiled_training_step_matches_nn_linear(checkpointed):
    """A module calling a custom linear, with an optimizer step (and inside flame.utils.checkpoint),
    against nn.Linear: the same loss and the same updated parameters."""
    x = flame.tensor(_rng(40, 5, 4).astype(np.float32))
    results = []
    for custom in (False, True):
        flame.manual_seed(0)
        lin = flame.nn.Linear(4, 3)
        opt = flame.optim.SGD(lin.parameters(), lr=0.1)

        def forward(x, lin=lin, custom=custom):
            y = _LinearFn.apply(x, lin.weight, lin.bias) if custom else lin(x)
            return y.tanh()

        @flame.compile
        def step(x, forward=forward, opt=opt):
            opt.zero_grad()
            y = flame.utils.checkpoint(forward, x, use_reentrant=False) if checkpointed else forward(x)
            loss = (y * y).mean()
            loss.backward()
            opt.step()
            return loss

        losses = [step(x).item() for _ in range(3)]
        results.append((losses, lin.weight.numpy(), lin.bias.numpy()))
    (l0, w0, b0), (l1, w1, b1) = results
    np.testing.assert_allclose(l1, l0, rtol=1e-6)
    np.testing.assert_allclose(w1, w0, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(b1, b0, rtol=1e-6, atol=1e-7)


def _exp_step(fn):
    @flame.compile
    def step(x):
        y = fn.apply(x * 3).sin()
        y.sum().backward()
        return y

    return step


def test_the_call_is_one_op_of_the_traced_graph_whose_gradient_is_the_backward():
    step = _exp_step(exp_fn(flame))
    x = flame.tensor(_rng(13, 8), dtype=flame.f64, requires_grad=True)
    text = print_graph(step.trace(x))
    assert "user_exp" in text and "call=" in text
    step(x)
    np.testing.assert_allclose(x.grad.numpy(), 3 * np.exp(3 * x.numpy()) * np.cos(np.exp(3 * x.numpy())), rtol=1e-12)


def test_compiled_forward_fuses_with_its_neighbours():
    step = _exp_step(exp_fn(flame))
    x = flame.tensor(_rng(13, 8), dtype=flame.f64, requires_grad=True)
    g = step.optimized(x)
    assert not any(op.name.startswith("user_exp") for op in g.ops)  # the op is gone after autodiff
    (group,) = [k for k in g.groups if any(op.name == "exp" for op in k.ops)]
    names = {op.name for op in group.ops}
    assert {"mul", "exp", "sin"} <= names  # its producer, the forward and its consumer: one kernel


def test_compiled_step_plans_kernels_that_compile_for_the_gpu(cuda_target):
    from flame.codegen.nvrtc import compile_cubin

    step = _exp_step(straight_through_fn(flame))
    x = flame.tensor(3 * _rng(14, 64), requires_grad=True)
    step(x)
    np.testing.assert_allclose(x.grad.numpy(), 3 * np.cos(np.round(3 * x.numpy())), rtol=1e-5)
    sources = {k.source for k in step._last.plan.kernels()}
    assert sources
    for source in sources:
        assert compile_cubin(source, "sm_90")[:4] == b"\x7fELF"


# ---- errors --------------------------------------------------------------------------------------------


def _bad_fn(lib, result):
    class Bad(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, y, k):
            return x * y * k

        @staticmethod
        def backward(ctx, g):
            return result(g)

    return Bad


BAD = {
    "too_few": (lambda g: g, r"function BadBackward returned an incorrect number of gradients \(expected 3, got 1\)"),
    "too_many": (lambda g: (g, g, None, g), r"incorrect number of gradients \(expected 3, got 4\)"),
    "non_tensor_input": (
        lambda g: (g, g, g),
        r"gradient different than None at position 3, but the corresponding "
        r"forward input was not a Variable",
    ),
    "shape": (
        lambda g: (g[:2], None, None),
        r"invalid gradient at index 0 - got \[2\] but expected shape compatible "
        r"with \[3\]",
    ),
    "not_a_tensor": (lambda g: (3.0, None, None), r"expected Variable or None \(got float\)"),
}


@pytest.mark.parametrize("case", sorted(BAD))
@pytest.mark.parametrize("compiled", [False, True])
def test_a_wrong_backward_raises_as_torch_naming_the_function(case, compiled):
    result, pattern = BAD[case]
    with pytest.raises(RuntimeError, match=pattern):
        x = torch.randn(3, requires_grad=True)
        _bad_fn(torch, result).apply(x, torch.randn(3), 2.0).sum().backward()
    fn = _bad_fn(flame, result)

    def body(x, y):
        fn.apply(x, y, 2.0).sum().backward()

    run = flame.compile(body) if compiled else body
    x, y = flame.tensor(_rng(15, 3), requires_grad=True), flame.tensor(_rng(16, 3))
    with pytest.raises(flame.errors.AutogradError, match=pattern) as e:
        run(x, y)
    assert "Bad.backward, defined at test_custom_autograd.py:" in str(e.value)


def test_trailing_nones_beyond_the_arguments_are_allowed_as_in_torch():
    x = flame.tensor([1.0, 2.0, 3.0], requires_grad=True)
    _bad_fn(flame, lambda g: (g, None, None, None)).apply(x, flame.tensor([1.0, 1.0, 1.0]), 2.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 1.0, 1.0])


def test_mark_dirty_and_save_for_backward_of_a_non_tensor_raise():
    class Dirty(flame.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.mark_dirty(x)
            return x

    class SavesNumber(flame.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x, 3)
            return x

    x = flame.tensor([1.0], requires_grad=True)
    with pytest.raises(flame.errors.AutogradError, match="in place"):
        Dirty.apply(x)
    with pytest.raises(TypeError, match="save_for_backward can only save variables, but argument 1 is of type int"):
        SavesNumber.apply(x)


# ---- custom_vjp (JAX's shape) ---------------------------------------------------------------------------


@flame.custom_vjp
def clip_gradient(lo, hi, x):
    return x  # the identity, whose cotangent is clipped to [lo, hi]


def _clip_fwd(lo, hi, x):
    return x, (lo, hi)


def _clip_bwd(res, g):
    lo, hi = res
    return (None, None, g.clamp(lo, hi))


clip_gradient.defvjp(_clip_fwd, _clip_bwd)


@flame.custom_vjp
def f_sin_mul(x, y):
    return x.sin() * y


def _f_fwd(x, y):
    return f_sin_mul(x, y), (x.cos(), x.sin(), y)


def _f_bwd(res, g):
    cos_x, sin_x, y = res
    return (cos_x * g * y, sin_x * g)


f_sin_mul.defvjp(_f_fwd, _f_bwd)


@pytest.mark.parametrize("compiled", [False, True])
def test_custom_vjp_gradients_are_bwd_s(compiled):
    """jax.custom_vjp's example: f(x, y) = sin(x) * y with bwd (cos(x) g y, sin(x) g)."""
    x0, y0 = _rng(17, 4), _rng(18, 4)
    x = flame.tensor(x0, dtype=flame.f64)
    y = flame.tensor(y0, dtype=flame.f64)
    loss = lambda x, y: (f_sin_mul(x, y) * flame.tensor(np.arange(1.0, 5.0), dtype=flame.f64)).sum()  # noqa: E731
    grad = flame.grad(loss, argnums=(0, 1))
    if compiled:
        grad = flame.compile(grad)
    gx, gy = grad(x, y)
    w = np.arange(1.0, 5.0)
    np.testing.assert_allclose(gx.numpy(), np.cos(x0) * w * y0, rtol=1e-12)
    np.testing.assert_allclose(gy.numpy(), np.sin(x0) * w, rtol=1e-12)
    np.testing.assert_allclose(f_sin_mul(x, y).numpy(), np.sin(x0) * y0, rtol=1e-12)


@pytest.mark.parametrize("compiled", [False, True])
def test_custom_vjp_clip_gradient_with_backward(compiled):
    """JAX's clip_gradient: forward the identity, the cotangent clipped (here: by loss.backward())."""
    x0 = _rng(19, 6)
    x = flame.tensor(x0, dtype=flame.f64, requires_grad=True)
    scale = np.linspace(-3.0, 3.0, 6)

    def body(x):
        y = clip_gradient(-1.0, 1.0, x)
        (y * flame.tensor(scale, dtype=flame.f64)).sum().backward()
        return y

    y = flame.compile(body)(x) if compiled else body(x)
    np.testing.assert_allclose(y.numpy(), x0, rtol=0)
    np.testing.assert_allclose(x.grad.numpy(), np.clip(scale, -1.0, 1.0), rtol=1e-12)


def test_custom_vjp_nondiff_argnums_and_pytrees():
    @functools.partial(flame.custom_vjp, nondiff_argnums=(0,))
    def app(power, pair):
        a, b = pair
        return {"p": a**power, "s": a + b}

    def fwd(power, pair):
        return app(power, pair), pair[0]

    def bwd(power, a, g):
        return ((g["p"] * power * a ** (power - 1) + g["s"], g["s"]),)

    app.defvjp(fwd, bwd)
    a0, b0 = _rng(20, 3), _rng(21, 3)
    a, b = (flame.tensor(v, dtype=flame.f64, requires_grad=True) for v in (a0, b0))
    out = app(3, (a, b))
    (out["p"].sum() + (2 * out["s"]).sum()).backward()
    np.testing.assert_allclose(a.grad.numpy(), 3 * a0**2 + 2, rtol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), np.full(3, 2.0), rtol=1e-12)


def test_custom_vjp_errors_are_jax_s():
    @flame.custom_vjp
    def f(x):
        return x * 2

    x = flame.tensor([1.0], requires_grad=True)
    with pytest.raises(flame.errors.AutogradError, match="No VJP defined for custom_vjp function f using defvjp"):
        f(x)
    f.defvjp(lambda x: (x * 2, None), lambda res, g: g * 2)  # not a tuple
    with pytest.raises(
        flame.errors.AutogradError,
        match="must produce a tuple of length equal to the number of arguments to the primal function",
    ):
        f(x).sum().backward()


def test_custom_vjp_without_gradients_runs_the_primal_function():
    calls = []

    @flame.custom_vjp
    def f(x):
        calls.append("fun")
        return x * 2

    f.defvjp(lambda x: (calls.append("fwd") or f(x), None), lambda res, g: (g * 2,))
    f(flame.tensor([1.0]))
    f(flame.tensor([1.0], requires_grad=True))
    assert calls == ["fun", "fwd", "fun"]


# ---- flame.autograd.grad / backward against torch.autograd's -------------------------------------------


def _graph(lib, x0, w0):
    mk = torch.tensor if lib is torch else (lambda v, **k: flame.tensor(v, dtype=flame.f64, **k))
    x, w = mk(x0, requires_grad=True), mk(w0, requires_grad=True)
    h = (x * w).tanh()
    return x, w, h, (h * h).sum(), h.sum() * 3


@pytest.mark.parametrize("compiled", [False, True])
def test_autograd_grad_matches_torch(compiled):
    x0, w0, seed = _rng(22, 4), _rng(23, 4), _rng(24, 4)
    tx, tw, th, tl1, tl2 = _graph(torch, x0, w0)
    want = torch.autograd.grad([tl1, th], [tx, th], grad_outputs=[None, torch.tensor(seed)])

    def body(x, w):
        h = (x * w).tanh()
        l1 = (h * h).sum()
        return flame.autograd.grad([l1, h], [x, h], grad_outputs=[None, flame.tensor(seed, dtype=flame.f64)])

    x, w = (flame.tensor(v, dtype=flame.f64, requires_grad=True) for v in (x0, w0))
    got = (flame.compile(body) if compiled else body)(x, w)
    assert len(got) == 2 and x.grad is None
    for g, t in zip(got, want):
        np.testing.assert_allclose(g.numpy(), t.numpy(), rtol=1e-12)


def test_autograd_grad_unused_retain_and_errors_as_torch():
    x0, w0 = _rng(25, 3), _rng(26, 3)
    x, w, h, l1, l2 = _graph(flame, x0, w0)
    other = flame.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(
        flame.errors.AutogradError,
        match="The differentiated Tensor at index 1 appears to not have been used in the graph. Set allow_unused=True",
    ):
        flame.autograd.grad(l1, [x, other], retain_graph=True)
    gx, go = flame.autograd.grad(l1, [x, other], allow_unused=True, retain_graph=True)
    assert go is None
    _, gz = flame.autograd.grad(l1, [x, other], materialize_grads=True, retain_graph=True)
    np.testing.assert_array_equal(gz.numpy(), [0.0, 0.0])
    (gw,) = flame.autograd.grad(l2, w)  # frees l2's graph, shared with l1
    tx, tw, th, tl1, tl2 = _graph(torch, x0, w0)
    np.testing.assert_allclose(gx.numpy(), torch.autograd.grad(tl1, tx, retain_graph=True)[0].numpy(), rtol=1e-12)
    np.testing.assert_allclose(gw.numpy(), torch.autograd.grad(tl2, tw)[0].numpy(), rtol=1e-12)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        flame.autograd.grad(l1, x)
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        flame.autograd.grad(_graph(flame, x0, w0)[2], x)
    with pytest.raises(RuntimeError, match="element 0 of tensors does not require grad"):
        flame.autograd.grad(flame.tensor([1.0]).sum(), x)
    with pytest.raises(RuntimeError, match="One of the differentiated Tensors does not require grad"):
        flame.autograd.grad(_graph(flame, x0, w0)[3], flame.tensor([1.0]))


def test_second_order_gradients_with_create_graph_inside_compile_match_torch():
    x0 = _rng(27, 5)
    tx = torch.tensor(x0, requires_grad=True)
    (tg,) = torch.autograd.grad((tx.sin() * tx).sum(), tx, create_graph=True)
    (tgg,) = torch.autograd.grad(tg.sum(), tx)

    @flame.compile
    def second(x):
        (g,) = flame.autograd.grad((x.sin() * x).sum(), x, create_graph=True)
        (gg,) = flame.autograd.grad(g.sum(), x)
        return g, gg

    g, gg = second(flame.tensor(x0, dtype=flame.f64, requires_grad=True))
    np.testing.assert_allclose(g.numpy(), tg.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(gg.numpy(), tgg.numpy(), rtol=1e-12)


@pytest.mark.parametrize("compiled", [False, True])
def test_autograd_backward_accumulates_as_torch(compiled):
    x0, w0, seed = _rng(28, 4), _rng(29, 4), _rng(30, 4)
    tx, tw, th, tl1, _ = _graph(torch, x0, w0)
    torch.autograd.backward([tl1, th], [None, torch.tensor(seed)])

    def body(x, w):
        h = (x * w).tanh()
        flame.autograd.backward([(h * h).sum(), h], [None, flame.tensor(seed, dtype=flame.f64)])

    x, w = (flame.tensor(v, dtype=flame.f64, requires_grad=True) for v in (x0, w0))
    (flame.compile(body) if compiled else body)(x, w)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-12)


def test_autograd_backward_into_inputs_only():
    x0, w0 = _rng(31, 3), _rng(32, 3)
    tx, tw, _, tl1, _ = _graph(torch, x0, w0)
    torch.autograd.backward(tl1, inputs=[tw])
    x, w, _, l1, _ = _graph(flame, x0, w0)
    flame.autograd.backward(l1, inputs=[w])
    assert x.grad is None and tx.grad is None
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-12)


# ---- gradcheck ------------------------------------------------------------------------------------------


def test_gradcheck_passes_on_a_correct_backward_as_torch_s_does():
    for lib in (torch, flame):
        build = mul_add_fn(lib)
        args = _args(lib, [("t", _rng(33, 2, 3)), ("t", _rng(34, 2, 3)), ("p", 1.5)])
        assert lib.autograd.gradcheck(build.apply, args, eps=1e-6, atol=1e-5)


def test_gradcheck_fails_on_a_wrong_backward_as_torch_s_does():
    def wrong(lib):
        class WrongExp(exp_fn(lib)):
            @staticmethod
            def backward(ctx, g):
                (y,) = ctx.saved_tensors
                return g * y * 1.01

        return WrongExp

    with pytest.raises(RuntimeError, match="Jacobian mismatch for output 0 with respect to input 0"):
        torch.autograd.gradcheck(wrong(torch).apply, (torch.tensor(_rng(35, 3), requires_grad=True),))
    x = flame.tensor(_rng(35, 3), dtype=flame.f64, requires_grad=True)
    with pytest.raises(
        flame.errors.GradcheckError,
        match=r"(?s)Jacobian mismatch for output 0 with respect to "
        r"input 0,\nnumerical:.*analytical:",
    ):
        flame.autograd.gradcheck(wrong(flame).apply, (x,))
    assert flame.autograd.gradcheck(wrong(flame).apply, (x,), raise_exception=False) is False


def test_gradcheck_of_plain_flame_ops_and_its_input_rule():
    x = flame.tensor(_rng(36, 2, 3), dtype=flame.f64, requires_grad=True)
    w = flame.tensor(_rng(37, 3, 2), dtype=flame.f64, requires_grad=True)
    assert flame.autograd.gradcheck(lambda a, b: ((a @ b).tanh(), a.sum() * 2), (x, w))
    with pytest.raises(ValueError, match="at least one input tensor to require gradient"):
        flame.autograd.gradcheck(lambda a: a * 2, (flame.tensor([1.0]),))
