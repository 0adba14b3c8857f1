"""flame.func's transforms (grad, grad_and_value, vjp, jvp, jacrev, jacfwd, hessian, vmap,
stack_module_state) against torch.func's in f64: values and gradients, pytrees, argnums, has_aux,
composition (grad of grad, vmap of grad, vmap of jacrev, per-sample gradients with functional_call,
ensembles), torch's errors, eagerly and inside @flame.compile."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.func as TF

import flame
import flame.autograd.forward_ad as ffwd
import flame.func as F
import flame.nn as nn

RNG = np.random.default_rng(0)
A = RNG.standard_normal((3,))
B = RNG.standard_normal((3,))
M = RNG.standard_normal((4, 3))


def ft(a):
    return flame.tensor(np.asarray(a), dtype=flame.float64)


def tt(a):
    return torch.tensor(np.asarray(a), dtype=torch.float64)


def close(got, want, rtol=1e-10, atol=1e-12):
    """got (a flame pytree) equals want (the torch pytree of the same structure)."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, flame.Tensor), type(got)
        assert tuple(got.shape) == tuple(want.shape), (got.shape, want.shape)
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=rtol, atol=atol)
    elif isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want)
        for k in want:
            close(got[k], want[k], rtol, atol)
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want), (type(got), type(want))
        for g, w in zip(got, want):
            close(g, w, rtol, atol)
    else:
        assert got == want


def f_sc(x, y):
    return (x.sin() * y + x * x * y.exp()).sum()


def f_vec(x, y):
    return (x.sin() * y, (x * y).sum().reshape(1) * x)


def f_dict(p):
    return (p["w"].tanh() * p["b"]).sum() + (p["w"] ** 3).sum()


@pytest.mark.parametrize("argnums", [0, 1, (0, 1), (1, 0), -1])
def test_grad_and_grad_and_value(argnums):
    close(F.grad(f_sc, argnums)(ft(A), ft(B)), TF.grad(f_sc, argnums)(tt(A), tt(B)))
    close(F.grad_and_value(f_sc, argnums)(ft(A), ft(B)), TF.grad_and_value(f_sc, argnums)(tt(A), tt(B)))


def test_grad_pytrees_aux_and_kwargs():
    fp, tp = {"w": ft(A), "b": ft(B)}, {"w": tt(A), "b": tt(B)}
    close(F.grad(f_dict)(fp), TF.grad(f_dict)(tp))

    def g(xs, scale=1.0):
        return (xs[0] * xs[1]).sum() * scale, {"a": xs[0] * 2}

    close(F.grad(g, has_aux=True)([ft(A), ft(B)], scale=3.0), TF.grad(g, has_aux=True)([tt(A), tt(B)], scale=3.0))
    close(F.grad_and_value(g, has_aux=True)((ft(A), ft(B))), TF.grad_and_value(g, has_aux=True)((tt(A), tt(B))))
    # an argument the output does not depend on: zeros
    close(F.grad(lambda x, y: (x * 2).sum(), 1)(ft(A), ft(B)), TF.grad(lambda x, y: (x * 2).sum(), 1)(tt(A), tt(B)))
    got = F.grad(f_sc)(ft(A), ft(B))
    assert not got.requires_grad


def test_higher_order():
    def f(x):
        return (x.sin() * x ** 3).sum()

    close(F.grad(F.grad(lambda x: f(x)))(ft(np.array(0.7))), TF.grad(TF.grad(f))(tt(np.array(0.7))))
    close(F.hessian(f)(ft(A)), TF.hessian(f)(tt(A)))
    close(F.hessian(f_sc, (0, 1))(ft(A), ft(B)), TF.hessian(f_sc, (0, 1))(tt(A), tt(B)))
    close(F.jacfwd(F.jacrev(f))(ft(A)), TF.jacfwd(TF.jacrev(f))(tt(A)))
    close(F.grad(lambda x: F.grad(f)(x).sum())(ft(A)), TF.grad(lambda x: TF.grad(f)(x).sum())(tt(A)))


@pytest.mark.parametrize("jac", ["jacrev", "jacfwd"])
@pytest.mark.parametrize("argnums", [0, (0, 1)])
def test_jacobians(jac, argnums):
    close(getattr(F, jac)(f_vec, argnums)(ft(A), ft(B)), getattr(TF, jac)(f_vec, argnums)(tt(A), tt(B)))
    close(getattr(F, jac)(f_dict)({"w": ft(A), "b": ft(B)}), getattr(TF, jac)(f_dict)({"w": tt(A), "b": tt(B)}))

    def aux(x):
        return x.sin().reshape(3, 1) * x, x.cos()

    close(getattr(F, jac)(aux, has_aux=True)(ft(A)), getattr(TF, jac)(aux, has_aux=True)(tt(A)))


def test_vjp_and_jvp():
    fo, fn = F.vjp(f_vec, ft(A), ft(B))
    to, tn = TF.vjp(f_vec, tt(A), tt(B))
    close(fo, to)
    ct = (RNG.standard_normal(3), RNG.standard_normal(3))
    close(fn((ft(ct[0]), ft(ct[1]))), tn((tt(ct[0]), tt(ct[1]))))
    close(fn((ft(ct[1]), ft(ct[0]))), tn((tt(ct[1]), tt(ct[0]))))  # called again
    fo, fn, faux = F.vjp(lambda x: (x.exp(), x * 2), ft(A), has_aux=True)
    to, tn, taux = TF.vjp(lambda x: (x.exp(), x * 2), tt(A), has_aux=True)
    close((fo, faux, fn(ft(B))), (to, taux, tn(tt(B))))
    close(F.jvp(f_vec, (ft(A), ft(B)), (ft(B), ft(A))), TF.jvp(f_vec, (tt(A), tt(B)), (tt(B), tt(A))))
    close(F.jvp(f_dict, ({"w": ft(A), "b": ft(B)},), ({"w": ft(B), "b": ft(A)},)),
          TF.jvp(f_dict, ({"w": tt(A), "b": tt(B)},), ({"w": tt(B), "b": tt(A)},)))
    close(F.jvp(lambda x: (x * x, x.sum()), (ft(A),), (ft(B),), has_aux=True),
          TF.jvp(lambda x: (x * x, x.sum()), (tt(A),), (tt(B),), has_aux=True))


def test_composes_with_autograd():
    x, tx = flame.tensor(A, requires_grad=True), torch.tensor(A, requires_grad=True)
    F.grad(lambda v: (v ** 3).sum())(x).sum().backward()
    TF.grad(lambda v: (v ** 3).sum())(tx).sum().backward()
    close(x.grad, tx.grad)
    # a tensor the function captures that requires grad: the gradient keeps a history to it
    w, tw = flame.tensor(B, requires_grad=True), torch.tensor(B, requires_grad=True)
    g, tg = F.grad(lambda v: (v * v * w).sum())(ft(A)), TF.grad(lambda v: (v * v * tw).sum())(tt(A))
    assert g.requires_grad and tg.requires_grad
    g.sum().backward()
    tg.sum().backward()
    close(w.grad, tw.grad)
    jf, jt = F.jacrev(lambda v: v * w)(ft(A)), TF.jacrev(lambda v: v * tw)(tt(A))
    jf.sum().backward()
    jt.sum().backward()
    close(w.grad, tw.grad)


def _raises(fn_flame, fn_torch, exc=Exception):
    with pytest.raises(exc) as want:
        fn_torch()
    with pytest.raises(type(want.value)) as got:
        fn_flame()
    return str(got.value), str(want.value)


@pytest.mark.parametrize("case", ["nonscalar", "argnum", "aux", "argnums_type", "dup", "primals", "jac_aux"])
def test_autodiff_errors(case):
    call = {
        "nonscalar": lambda m, lib: m.grad(lambda x: x * 2)(lib(A)),
        "argnum": lambda m, lib: m.grad(f_sc, 2)(lib(A), lib(B)),
        "aux": lambda m, lib: m.grad(lambda x: x.sum(), has_aux=True)(lib(A)),
        "argnums_type": lambda m, lib: m.grad(f_sc, [0])(lib(A), lib(B)),
        "dup": lambda m, lib: m.grad(f_sc, (0, 0))(lib(A), lib(B)),
        "primals": lambda m, lib: m.jvp(lambda x: x, lib(A), lib(B)),
        "jac_aux": lambda m, lib: m.jacrev(lambda x: x, has_aux=True)(lib(A)),
    }[case]
    got, want = _raises(lambda: call(F, ft), lambda: call(TF, tt))
    assert got == want


def test_vmap_in_dims_out_dims_and_nesting():
    x, y = RNG.standard_normal((4, 3)), RNG.standard_normal((3, 4))

    def f(a, b, c):
        return a * b.cos() + c, (a * b).sum()

    for in_dims in [(0, 1, None), (0, 1, 0)]:
        c = RNG.standard_normal(3) if in_dims[2] is None else RNG.standard_normal((4, 3))
        for out_dims in [0, (1, 0), -1, (-2, 0)]:
            close(F.vmap(f, in_dims, out_dims)(ft(x), ft(y), ft(c)), TF.vmap(f, in_dims, out_dims)(tt(x), tt(y), tt(c)))
    nested = {"p": x, "q": [y, RNG.standard_normal(5)]}

    def g(d):
        return d["p"] + d["q"][0] * d["q"][1].sum()

    fd = {"p": ft(x), "q": [ft(y), ft(nested["q"][1])]}
    td = {"p": tt(x), "q": [tt(y), tt(nested["q"][1])]}
    close(F.vmap(g, ({"p": 0, "q": [1, None]},))(fd), TF.vmap(g, ({"p": 0, "q": [1, None]},))(td))
    z = RNG.standard_normal((2, 4, 3))
    close(F.vmap(F.vmap(lambda a: a.sum() * a))(ft(z)), TF.vmap(TF.vmap(lambda a: a.sum() * a))(tt(z)))
    close(F.vmap(lambda a: (a, 2), out_dims=(0, None))(ft(x)), TF.vmap(lambda a: (a, 2), out_dims=(0, None))(tt(x)))


@pytest.mark.parametrize("case", ["sizes", "structure", "type", "range", "nontensor_dim", "output", "none_in",
                                  "noargs"])
def test_vmap_errors(case):
    def ident(a, b=None):
        return a

    call = {
        "sizes": lambda m, lib: m.vmap(lambda a, b: a + b)(lib(np.ones(3)), lib(np.ones(2))),
        "structure": lambda m, lib: m.vmap(ident, in_dims=(0, 0, 0))(lib(A), lib(A)),
        "type": lambda m, lib: m.vmap(ident, in_dims=None)(lib(A)),
        "range": lambda m, lib: m.vmap(ident, in_dims=1)(lib(A)),
        "nontensor_dim": lambda m, lib: m.vmap(ident, in_dims=(0, 0))(lib(A), 3),
        "output": lambda m, lib: m.vmap(lambda a: 1)(lib(A)),
        "none_in": lambda m, lib: m.vmap(ident, in_dims=(None,))(lib(A)),
        "noargs": lambda m, lib: m.vmap(ident)(),
    }[case]
    got, want = _raises(lambda: call(F, ft), lambda: call(TF, tt))
    if case == "structure":  # torch prints its TreeSpec
        got, want = got.split(" in_dims has")[0], want.split(" in_dims has")[0]
    assert got == want


def test_vmap_randomness():
    x = ft(np.zeros((4, 3)))
    with pytest.raises(RuntimeError, match="randomness error mode"):
        F.vmap(lambda a: a + flame.rand(3))(x)
    with pytest.raises(RuntimeError, match="randomness error mode"):
        F.jacfwd(lambda a: a + flame.rand(3))(ft(A))
    with pytest.raises(RuntimeError, match="Only allowed values"):
        F.vmap(lambda a: a, randomness="other")
    flame.manual_seed(1)
    diff = F.vmap(lambda a: a + flame.rand(3, dtype=flame.float64), randomness="different")(x).numpy()
    assert len({tuple(r) for r in diff}) == 4
    same = F.vmap(lambda a: a + flame.rand(3, dtype=flame.float64) + flame.randn(3, dtype=flame.float64),
                  randomness="same")(x).numpy()
    assert all(np.array_equal(r, same[0]) for r in same)
    after = flame.rand(1).numpy()  # the stream advanced once, not per element
    flame.manual_seed(1)
    flame.rand(12, dtype=flame.float64)
    flame.rand(3, dtype=flame.float64)
    flame.randn(3, dtype=flame.float64)
    np.testing.assert_array_equal(after, flame.rand(1).numpy())


def _mlps():
    torch.manual_seed(0)
    tms = [torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2)).double()
           for _ in range(3)]
    fms = []
    for tm in tms:
        fm = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2)).double()
        fm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
        fms.append(fm)
    return fms, tms


def test_per_sample_gradients():
    fms, tms = _mlps()
    x, y = RNG.standard_normal((6, 3)), RNG.standard_normal((6, 2))

    def loss(lib_func, model):
        def f(params, xi, yi):
            out = lib_func.functional_call(model, params, (xi.unsqueeze(0),))
            return ((out - yi.unsqueeze(0)) ** 2).sum()
        return f

    fp = {k: v.detach() for k, v in fms[0].named_parameters()}
    tp = {k: v.detach() for k, v in tms[0].named_parameters()}
    got = F.vmap(F.grad(loss(F, fms[0])), in_dims=(None, 0, 0))(fp, ft(x), ft(y))
    want = TF.vmap(TF.grad(loss(TF, tms[0])), in_dims=(None, 0, 0))(tp, tt(x), tt(y))
    close(got, want)


def test_ensemble_with_stack_module_state():
    fms, tms = _mlps()
    fparams, fbufs = F.stack_module_state(fms)
    tparams, tbufs = TF.stack_module_state(tms)
    close(fparams, tparams)
    assert all(p.requires_grad for p in fparams.values()) and fbufs == {} == tbufs
    x = RNG.standard_normal((5, 3))

    def run(lib_func, base):
        return lambda p, b, xx: lib_func.functional_call(base, (p, b), (xx,))

    got = F.vmap(run(F, fms[0]), in_dims=(0, 0, None))(fparams, fbufs, ft(x))
    want = TF.vmap(run(TF, tms[0]), in_dims=(0, 0, None))(tparams, tbufs, tt(x))
    close(got, want)
    got.sum().backward()
    want.sum().backward()
    close({k: v.grad for k, v in fparams.items()}, {k: v.grad for k, v in tparams.items()})
    with pytest.raises(RuntimeError, match="Expected at least one model"):
        F.stack_module_state([])


def test_vmap_of_jacrev_and_hessian():
    def f(x):
        return x.sin() * x.sum()

    close(F.vmap(F.jacrev(f))(ft(M)), TF.vmap(TF.jacrev(f))(tt(M)))
    close(F.vmap(F.hessian(lambda x: (x ** 3).sum()))(ft(M)), TF.vmap(TF.hessian(lambda x: (x ** 3).sum()))(tt(M)))


def test_compiled():
    def step(x, y, m):
        g = F.grad(f_sc, (0, 1))(x, y)
        j = F.jacrev(f_vec)(x, y)
        h = F.hessian(lambda v: (v.sin() * v ** 3).sum())(x)
        v = F.vmap(F.grad(lambda r: (r.tanh() ** 2).sum()))(m)
        jv = F.jvp(lambda a: a.exp() * a, (x,), (y,))[1]
        return g[0], g[1], j[0], j[1], h, v, jv

    def tstep(x, y, m):
        g = TF.grad(f_sc, (0, 1))(x, y)
        j = TF.jacrev(f_vec)(x, y)
        h = TF.hessian(lambda v: (v.sin() * v ** 3).sum())(x)
        v = TF.vmap(TF.grad(lambda r: (r.tanh() ** 2).sum()))(m)
        jv = TF.jvp(lambda a: a.exp() * a, (x,), (y,))[1]
        return g[0], g[1], j[0], j[1], h, v, jv

    got = flame.compile(step)(ft(A), ft(B), ft(M))
    close(tuple(got), tstep(tt(A), tt(B), tt(M)))


def test_signatures_match_torch():
    import inspect

    for name in F.__all__:
        if name == "functional_call":
            continue
        fs = inspect.signature(getattr(F, name))
        ts = inspect.signature(getattr(TF, name))
        assert [(p.name, p.kind, p.default) for p in fs.parameters.values()] == \
               [(p.name, p.kind, p.default) for p in ts.parameters.values()], name


def test_compiled_per_sample_gradients_ensemble_and_randomness():
    fms, tms = _mlps()
    x, y = RNG.standard_normal((6, 3)), RNG.standard_normal((6, 2))
    names = [k for k, _ in fms[0].named_parameters()]

    def loss(lib_func, model):
        def f(params, xi, yi):
            return ((lib_func.functional_call(model, params, (xi.unsqueeze(0),)) - yi.unsqueeze(0)) ** 2).sum()
        return f

    @flame.compile
    def per_sample(w0, b0, w2, b2, xb, yb):
        g = F.vmap(F.grad(loss(F, fms[0])), in_dims=(None, 0, 0))(dict(zip(names, (w0, b0, w2, b2))), xb, yb)
        return tuple(g[k] for k in names)

    got = per_sample(*[p.detach() for p in fms[0].parameters()], ft(x), ft(y))
    want = TF.vmap(TF.grad(loss(TF, tms[0])), in_dims=(None, 0, 0))(
        {k: v.detach() for k, v in tms[0].named_parameters()}, tt(x), tt(y))
    close(dict(zip(names, got)), want)

    fparams, _ = F.stack_module_state(fms)
    tparams, _ = TF.stack_module_state(tms)

    @flame.compile
    def ensemble(*stacked):
        return F.vmap(lambda *ps: F.functional_call(fms[0], dict(zip(names, ps)), (ft(x),)))(*stacked)

    close(ensemble(*[fparams[k].detach() for k in names]),
          TF.vmap(lambda p: TF.functional_call(tms[0], p, (tt(x),)))(tparams))

    @flame.compile
    def same(z):
        return F.vmap(lambda a: a + flame.rand(3, dtype=flame.float64), randomness="same")(z)

    r = same(ft(np.zeros((4, 3)))).numpy()
    assert all(np.array_equal(row, r[0]) for row in r) and len(set(r[0])) == 3

    @flame.compile
    def refused(z):
        return F.vmap(lambda a: a + flame.rand(3, dtype=flame.float64))(z)

    with pytest.raises(RuntimeError, match="randomness error mode"):
        refused(ft(np.zeros((4, 3))))


def test_no_grad_outside_and_checks():
    x = RNG.standard_normal((4, 3))

    def f(a):
        return (a.sin() ** 2).sum()

    with flame.no_grad():
        got = F.grad(f)(ft(x))
    close(got, TF.grad(f)(tt(x)))
    def lib(m):
        return tt(x) if m is TF else ft(x)

    for call in (lambda m: m.jacrev(f, chunk_size=0), lambda m: m.vmap(f, chunk_size=0),
                 lambda m: m.vmap(f, out_dims="x")(lib(m)),
                 lambda m: m.grad(f)(3.0),
                 lambda m: m.jvp(lambda a: lib(m).sum(), (lib(m),), (lib(m),), strict=True)):
        got, want = _raises(lambda c=call: c(F), lambda c=call: c(TF))
        assert got == want


def _out_dims_none_cases(m, lib):
    x, y = lib(M), lib(A)
    return {
        "batched": lambda: m.vmap(lambda a: a * 2, out_dims=None)(x),
        "identity": lambda: m.vmap(lambda a: a, out_dims=None)(x),
        "one_of_two": lambda: m.vmap(lambda a: (a * 2, a.sum()), out_dims=(0, None))(x),
        "through_inner_vmap": lambda: m.vmap(lambda a: m.vmap(lambda z: z * a.sum())(y), out_dims=None)(x),
        "closure": lambda: m.vmap(lambda a: y * 2, out_dims=None)(x),
        "mixed": lambda: m.vmap(lambda a: (a.exp(), y + 1), out_dims=(0, None))(x),
        "fresh": lambda: m.vmap(lambda a: y.new_ones(2), out_dims=None)(x),
        "detached": lambda: m.vmap(lambda a: a.detach().sum() + 1, out_dims=None)(x),
        "same_shape_view": lambda: m.vmap(lambda a: a.reshape(a.shape), out_dims=None)(x),
    }


@pytest.mark.parametrize("case", sorted(_out_dims_none_cases(F, ft)))
def test_vmap_out_dims_none_refuses_a_batched_output_as_torch(case):
    def run(m, lib):
        try:
            return _out_dims_none_cases(m, lib)[case]()
        except ValueError as e:
            return str(e)

    got, want = run(F, ft), run(TF, tt)
    if isinstance(want, str):
        assert got == want and "can not return a BatchedTensor when out_dim is None" in want
    else:
        close(got, want)


def test_vmap_out_dims_none_inside_compile_as_eagerly():
    bad = flame.compile(lambda x: F.vmap(lambda a: (a * 2, a.sum() + 1), out_dims=(0, None))(x))
    with pytest.raises(ValueError, match="can not return a BatchedTensor when out_dim is None"):
        bad(ft(M))
    y = RNG.standard_normal(3)
    good = flame.compile(lambda x, c: F.vmap(lambda a: (a * c, c.exp()), out_dims=(0, None))(x))
    for _ in range(2):
        close(good(ft(M), ft(y)), TF.vmap(lambda a: (a * tt(y), tt(y).exp()), out_dims=(0, None))(tt(M)))


def test_vmap_out_dims_none_still_followed_after_a_dual_level_inside_func():
    def f(a):
        with ffwd.dual_level():
            ffwd.make_dual(a, a.exp())
        return a * 2

    with pytest.raises(ValueError, match="can not return a BatchedTensor when out_dim is None"):
        F.vmap(f, out_dims=None)(ft(M))


@pytest.mark.parametrize(
    "fn,in_dims,out_dims,shapes",
    [
        (lambda x: x * 2, 0, 0, [(0, 3)]),
        (lambda x: (x * 2, x.sum()), 0, (1, 0), [(0, 3)]),
        (lambda x, y: x * y, (1, None), 0, [(3, 0), (3,)]),
        (lambda x: x.sum(), -1, 0, [(3, 0)]),
        (lambda x, y: (x * 2, y), (0, None), (0, None), [(0, 3), (3,)]),
    ],
)
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_vmap_over_an_empty_batch_gives_empty_outputs_as_torch(fn, in_dims, out_dims, shapes, compiled):
    args = [RNG.standard_normal(s) for s in shapes]
    want = TF.vmap(fn, in_dims=in_dims, out_dims=out_dims)(*map(tt, args))
    mapped = F.vmap(fn, in_dims=in_dims, out_dims=out_dims)
    got = (flame.compile(mapped) if compiled else mapped)(*map(ft, args))
    for g, w in zip(*(o if isinstance(o, tuple) else (o,) for o in (got, want))):
        assert g.shape == tuple(w.shape) and g.dtype == flame.float64
        np.testing.assert_array_equal(g.numpy(), w.numpy())


def test_vmap_of_grad_over_an_empty_batch():
    f = lambda x: (x.sin() * x).sum()  # noqa: E731
    got = F.vmap(F.grad(f))(flame.zeros(0, 3, dtype=flame.float64))
    assert got.shape == tuple(TF.vmap(TF.grad(f))(torch.zeros(0, 3, dtype=torch.float64)).shape) == (0, 3)


def test_linearize_matches_torch():
    f = lambda x, d: (x.sin() * d["y"], (x * x).sum())  # noqa: E731
    out, jvp_fn = F.linearize(f, ft(A), {"y": ft(B)})
    want_out, want_fn = TF.linearize(f, tt(A), {"y": tt(B)})
    for g, w in zip(out, want_out):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12)
    for tangents in ((A, B), (B, M[0])):
        got = jvp_fn(ft(tangents[0]), {"y": ft(tangents[1])})
        want = want_fn(tt(tangents[0]), {"y": tt(tangents[1])})
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize(
    "tangents,match",
    [
        ((A, A), "same argspec as the primals"),
        ((M,), "tangent:0 with shape"),
        ((A.astype(np.float32),), "tangent:0 with dtype"),
    ],
)
def test_linearize_checks_the_tangents_as_torch(tangents, match):
    for lin, make in ((TF.linearize, lambda a: torch.tensor(a)), (F.linearize, lambda a: flame.tensor(a))):
        _, jvp_fn = lin(lambda x: x.sin(), make(A))
        with pytest.raises(RuntimeError, match=match):
            jvp_fn(*map(make, tangents))


def test_replace_all_batch_norm_modules_matches_torch():
    def run(L, Fn):
        L.manual_seed(0)
        m = L.nn.Sequential(L.nn.BatchNorm1d(3, dtype=L.float64), L.nn.Sequential(L.nn.BatchNorm1d(3, affine=False)))
        assert Fn.replace_all_batch_norm_modules_(m) is m
        bn = m[0]
        state = (bn.running_mean, bn.running_var, bn.num_batches_tracked, bn.track_running_stats)
        x = L.tensor(M)
        train = m[0](x)
        m.eval()
        return state, m[1][0].track_running_stats, sorted(m.state_dict()), train, m[0](x)

    got, want = run(flame, F), run(torch, TF)
    assert got[:3] == want[:3] == ((None, None, None, False), False, ["0.bias", "0.weight"])
    for g, w in zip(got[3:], want[3:]):
        np.testing.assert_allclose(g.detach().numpy(), w.detach().numpy(), rtol=1e-12)
