"""Gradients after a write through `.data` into what torch's node of a composite saved (frontend/
torch_formulas.py): softmax's, log_softmax's, prod's and a norm's result, logsumexp's, std's, dist's and
copysign's and cdist's inputs and result, the inputs of var, mse_loss, layer_norm, group_norm, kl_div,
softplus, huber_loss, smooth_l1_loss, binary_cross_entropy_with_logits, sinc, logaddexp, logaddexp2, fmax,
xlogy, lerp, addcmul, addcdiv, clamp, clamp_min, clamp_max, log1p, logit, entr, erfcx, log_ndtr, xlog1py, fmin,
hardtanh, celu, mish, glu, cross, binary_cross_entropy, batch_norm, max, min, median and nanmedian, ndtri's,
exp2's and ldexp's result.
torch's backward reads the new values through its own formula; flame's, which differentiates the composite
through its ops, takes torch's formula there. A write into the result and into each input (a leaf, and a tensor
with a history), eagerly, inside @flame.compile, and with the backward outside a compiled forward.
Against torch in float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as torch_F

import flame

RNG = np.random.default_rng(1)
X, Y, C = RNG.uniform(0.2, 0.9, (3, 4)), RNG.uniform(0.3, 0.8, (3, 4)), RNG.uniform(-1, 1, (3, 4))
W, BIAS, V = RNG.uniform(0.5, 1.5, 4), RNG.uniform(-1, 1, 4), RNG.uniform(0.5, 1.5, (3, 4))
ROWS, GROUPED, T0 = RNG.uniform(0.2, 0.9, (30, 4)), RNG.uniform(0.2, 0.9, (2, 4, 3)), Y.copy()
BATCH = RNG.uniform(0.2, 0.9, (2, 3, 4))
T0[0, 1] = 0.0  # (a zero target: kl_div's gradient there is torch's NaN)
CL = np.concatenate([C[0], RNG.uniform(-1, 1, 96)])  # the weights of a result of other than 2 dims


def _f(lib):
    return torch_F if lib is torch else flame.nn.functional


OPS = {  # name: (operands, the op on lib's tensors)
    "softmax": ((X,), lambda lib, x: _f(lib).softmax(x, 1)),
    "softmax dim=0": ((X,), lambda lib, x: _f(lib).softmax(x, 0)),
    "log_softmax": ((X,), lambda lib, x: _f(lib).log_softmax(x, -1)),
    "logsumexp": ((X,), lambda lib, x: lib.logsumexp(x, 1)),
    "logsumexp keepdim": ((X,), lambda lib, x: lib.logsumexp(x, 0, keepdim=True)),
    "prod dim": ((X,), lambda lib, x: x.prod(1)),
    "prod": ((X,), lambda lib, x: x.prod()),
    "norm": ((X,), lambda lib, x: x.norm(dim=1)),
    "norm of all": ((X,), lambda lib, x: x.norm()),
    "vector_norm ord 1": ((X,), lambda lib, x: lib.linalg.vector_norm(x, 1, dim=0)),
    "vector_norm ord 3": ((X,), lambda lib, x: lib.linalg.vector_norm(x, 3, dim=1, keepdim=True)),
    "vector_norm ord 1.5": ((X,), lambda lib, x: lib.linalg.vector_norm(x, 1.5, dim=1)),
    "vector_norm ord 0.5": ((X,), lambda lib, x: lib.linalg.vector_norm(x, 0.5)),
    "vector_norm ord inf": ((X,), lambda lib, x: lib.linalg.vector_norm(x, float("inf"), dim=1)),
    "std": ((X,), lambda lib, x: x.std(1)),
    "std of all": ((X,), lambda lib, x: x.std()),
    "var": ((X,), lambda lib, x: x.var(0, keepdim=True, correction=0)),
    "mse_loss": ((X, Y), lambda lib, x, y: _f(lib).mse_loss(x, y)),
    "mse_loss none": ((X, Y), lambda lib, x, y: _f(lib).mse_loss(x, y, reduction="none")),
    "mse_loss sum": ((X, Y), lambda lib, x, y: _f(lib).mse_loss(x, y, reduction="sum")),
    "mse_loss weighted": ((X, Y, V), lambda lib, x, y, w: _f(lib).mse_loss(x, y, weight=w)),
    "mse_loss weighted sum": ((X, Y, V), lambda lib, x, y, w: _f(lib).mse_loss(x, y, reduction="sum", weight=w)),
    "layer_norm": ((X,), lambda lib, x: _f(lib).layer_norm(x, (4,))),
    "layer_norm affine": ((X, W, BIAS), lambda lib, x, w, b: _f(lib).layer_norm(x, (4,), w, b)),
    "softplus": ((X,), lambda lib, x: _f(lib).softplus(x * 4 - 2, beta=2.0, threshold=1.0)),
    "huber_loss": ((X, Y), lambda lib, x, y: _f(lib).huber_loss(x, y, delta=0.1)),
    "huber_loss weighted": ((X, Y, V), lambda lib, x, y, w: _f(lib).huber_loss(x, y, "none", 0.1, w)),
    "smooth_l1_loss": ((X, Y), lambda lib, x, y: _f(lib).smooth_l1_loss(x, y, reduction="sum", beta=0.1)),
    "smooth_l1_loss beta 0": ((X, Y), lambda lib, x, y: _f(lib).smooth_l1_loss(x, y, reduction="none", beta=0.0)),
    "bce_with_logits": ((X, Y), lambda lib, x, y: _f(lib).binary_cross_entropy_with_logits(x * 4 - 2, y)),
    "bce_with_logits weights": ((X, Y), lambda lib, x, y: _f(lib).binary_cross_entropy_with_logits(
        x * 4 - 2, y, weight=lib.tensor(W, dtype=lib.float64), pos_weight=lib.tensor(W[::-1].copy(), dtype=lib.float64),
        reduction="none")),
    "dist": ((X, Y), lambda lib, x, y: lib.dist(x, y)),
    "dist p 3": ((X, Y), lambda lib, x, y: lib.dist(x, y, 3)),
    "sinc": ((X,), lambda lib, x: lib.sinc(x)),
    "logaddexp2": ((X, Y), lambda lib, x, y: lib.logaddexp2(x, y)),
    "copysign": ((X, Y), lambda lib, x, y: lib.copysign(x, y - 0.5)),
    "fmax": ((X, Y), lambda lib, x, y: lib.fmax(x, y)),
    "xlogy": ((X, Y), lambda lib, x, y: lib.xlogy(x, y)),
    "cdist": ((X, Y), lambda lib, x, y: lib.cdist(x, y)),
    "cdist p 1": ((X, Y), lambda lib, x, y: lib.cdist(x, y, p=1)),
    "cdist p inf": ((X, Y), lambda lib, x, y: lib.cdist(x, y, p=float("inf"))),
    "cdist p 3 batch": ((BATCH, Y), lambda lib, x, y: lib.cdist(x, y, p=3)),
    "cdist p 0.5": ((X, Y), lambda lib, x, y: lib.cdist(x, y, p=0.5)),
    "cdist euclidean_dist": ((ROWS, Y), lambda lib, x, y: lib.cdist(x, y)),  # (torch's matrix product)
    "kl_div": ((X, Y), lambda lib, x, y: _f(lib).kl_div(x.log(), y, reduction="batchmean")),
    "kl_div none": ((X, T0), lambda lib, x, y: _f(lib).kl_div(x, y, reduction="none")),
    "kl_div log_target": ((X, Y), lambda lib, x, y: _f(lib).kl_div(x, y, reduction="sum", log_target=True)),
    "lerp": ((X, Y, V), lambda lib, x, y, w: x.lerp(y, w * 0.5)),
    "lerp 0-d weight": ((X, Y, W[:1].reshape(())), lambda lib, x, y, w: lib.lerp(x, y, w)),
    "lerp by a number": ((X, Y), lambda lib, x, y: x.lerp(y, 0.3)),
    "addcmul": ((X, Y, V), lambda lib, x, y, z: x.addcmul(y, z, value=0.7)),
    "addcdiv": ((X, Y, V), lambda lib, x, y, z: lib.addcdiv(x, y, z, value=-1.5)),
    "logaddexp": ((X, Y), lambda lib, x, y: lib.logaddexp(x, y)),
    "ldexp": ((X, Y), lambda lib, x, y: lib.ldexp(x, y * 3)),  # (input is not saved; flame's own mul reads it)
    "clamp_min": ((X, Y), lambda lib, x, y: x.clamp_min(y)),
    "clamp_max": ((X, Y), lambda lib, x, y: lib.clamp_max(x, y)),
    "clamp": ((X, Y, V), lambda lib, x, y, z: x.clamp(y, z)),
    "clamp by numbers": ((X,), lambda lib, x: x.clamp(0.3, 0.6)),
    "clamp by max": ((X, Y), lambda lib, x, y: lib.clamp(x, max=y)),
    "corrcoef": ((X,), lambda lib, x: lib.corrcoef(x)),  # (a clamp by numbers inside)
    "log1p": ((X,), lambda lib, x: x.log1p()),
    "logit": ((X,), lambda lib, x: x.logit()),
    "logit eps": ((X,), lambda lib, x: lib.logit(x, 0.3)),
    "entr": ((X,), lambda lib, x: lib.special.entr(x)),
    "erfcx": ((X,), lambda lib, x: lib.special.erfcx(x)),
    "log_ndtr": ((X,), lambda lib, x: lib.special.log_ndtr(x * 4 - 2)),
    "ndtri": ((X,), lambda lib, x: lib.special.ndtri(x)),
    "xlog1py": ((X, Y), lambda lib, x, y: lib.special.xlog1py(x, y)),
    "fmin": ((X, Y), lambda lib, x, y: lib.fmin(x, y)),
    "hardtanh": ((X,), lambda lib, x: _f(lib).hardtanh(x, 0.3, 0.6)),
    "celu": ((C,), lambda lib, x: _f(lib).celu(x, 0.7)),
    "mish": ((X,), lambda lib, x: _f(lib).mish(x)),
    "glu": ((X,), lambda lib, x: _f(lib).glu(x, 1)),
    "glu dim 0": ((X[:2],), lambda lib, x: _f(lib).glu(x, 0)),
    "cross": ((X[:, :3], Y[:, 1:]), lambda lib, x, y: lib.linalg.cross(x, y)),
    "cross dim 0": ((X[:, :3], Y[:, 1:]), lambda lib, x, y: x.cross(y, dim=0)),
    "binary_cross_entropy": ((X * 0.5, Y), lambda lib, x, y: _f(lib).binary_cross_entropy(x, y)),
    "binary_cross_entropy weighted": ((X * 0.5, Y), lambda lib, x, y: _f(lib).binary_cross_entropy(
        x, y, weight=lib.tensor(V, dtype=lib.float64), reduction="none")),
    "batch_norm": ((GROUPED,), lambda lib, x: _f(lib).batch_norm(x, None, None, training=True)),
    "batch_norm affine": ((GROUPED, W, BIAS), lambda lib, x, w, b: _f(lib).batch_norm(
        x, lib.zeros(4, dtype=lib.float64), lib.ones(4, dtype=lib.float64), w, b, training=True, eps=1e-3)),
    "batch_norm eval": ((GROUPED, W, BIAS), lambda lib, x, w, b: _f(lib).batch_norm(
        x, lib.tensor(BIAS * 0.3, dtype=lib.float64), lib.tensor(W * 0.8, dtype=lib.float64), w, b)),
    "max of every element": ((X,), lambda lib, x: x.max()),
    "min of every element": ((X,), lambda lib, x: lib.min(x)),
    "median of every element": ((X,), lambda lib, x: x.median()),
    "nanmedian of every element": ((X,), lambda lib, x: x.nanmedian()),
    "max(other)": ((X, Y), lambda lib, x, y: x.max(y)),
    "min(other)": ((X, Y), lambda lib, x, y: x.min(y)),
    "exp2": ((X,), lambda lib, x: lib.exp2(x)),
    "group_norm": ((GROUPED,), lambda lib, x: _f(lib).group_norm(x, 2)),
    "group_norm affine": ((GROUPED, W, BIAS), lambda lib, x, w, b: _f(lib).group_norm(x, 2, w, b, 1e-3)),
}
CASES = [(name, where, made) for name, (xs, _) in OPS.items() for where in ("result", *range(len(xs)))
         for made in (False, True)]


def _body(lib, name, where, made):
    fn = OPS[name][1]

    def run(*xs):
        xs = [x * 1.0 for x in xs] if made else xs  # a tensor with a history, or the leaf itself
        y = fn(lib, *xs)
        if where == "result":
            y.data.mul_(1.5)
        else:
            xs[where].data.mul_(xs[where].data + 0.5)  # (not a shift or a scale, which some leave as they are)
        c = lib.tensor(C, dtype=lib.float64)
        if y.ndim == 2 and y.shape[0] <= 3 and y.shape[1] <= 4:
            return (y * c[: y.shape[0], : y.shape[1]]).sum()
        return (y * lib.tensor(CL[: y.numel()].reshape(y.shape), dtype=lib.float64)).sum()

    return run


def _operands(lib, name):
    return [lib.tensor(a.copy(), dtype=lib.float64, requires_grad=True) for a in OPS[name][0]]


@pytest.mark.parametrize("how", ["eager", "compiled", "backward outside"])
@pytest.mark.parametrize(("name", "where", "made"), CASES,
                         ids=[f"{n}-{w}-{'made' if m else 'leaf'}" for n, w, m in CASES])
def test_gradient_after_a_data_write_into_a_composites_saved_tensor_is_torchs(name, where, made, how):
    xs = _operands(torch, name)
    want = torch.autograd.grad(_body(torch, name, where, made)(*xs), xs)
    run = _body(flame, name, where, made)
    xs = _operands(flame, name)
    if how == "backward outside":
        got = flame.autograd.grad(flame.compile(run)(*xs), xs)
    else:
        def grads(*xs):
            return flame.autograd.grad(run(*xs), list(xs))

        got = (grads if how == "eager" else flame.compile(grads))(*xs)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("how", ["eager", "compiled"])
def test_prod_with_a_zero_written_through_data_takes_torchs_zero_safe_gradient(how):
    def body(lib, x):
        y = x.prod(1)
        x.data[0, 1] = 0.0
        return (y * lib.tensor([1.0, -2.0, 0.5], dtype=lib.float64)).sum()

    xt = torch.tensor(X.copy(), requires_grad=True)
    want = torch.autograd.grad(body(torch, xt), xt)[0]
    def grads(x):
        return flame.autograd.grad(body(flame, x), x)[0]

    got = (grads if how == "eager" else flame.compile(grads))(flame.tensor(X.copy(), requires_grad=True))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("how", ["eager", "compiled"])
def test_a_weighted_mse_loss_saves_no_input_as_torchs_composite(how):
    """With weight=, torch's mse_loss is ops of its own, none saving the input: a counted write into the
    input after it raises nothing there and the gradient is that of the values as they were."""
    def body(lib, x):
        h = x * 1.0
        loss = _f(lib).mse_loss(h, lib.tensor(Y, dtype=lib.float64), weight=lib.tensor(C[0] + 2.0, dtype=lib.float64))
        h.mul_(2)
        return loss

    xt = torch.tensor(X[0].copy(), requires_grad=True)
    want = torch.autograd.grad(body(torch, xt), xt)[0]
    def grads(x):
        return flame.autograd.grad(body(flame, x), x)[0]

    got = (grads if how == "eager" else flame.compile(grads))(flame.tensor(X[0].copy(), requires_grad=True))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)


COUNTED = {  # name: (operands, the op, the operand written in place, whether torch's node saved it)
    "group_norm input": ((GROUPED, W, BIAS), lambda lib, x, w, b: _f(lib).group_norm(x, 2, w, b), 0, True),
    "group_norm weight": ((GROUPED, W, BIAS), lambda lib, x, w, b: _f(lib).group_norm(x, 2, w, b), 1, True),
    "group_norm bias": ((GROUPED, W, BIAS), lambda lib, x, w, b: _f(lib).group_norm(x, 2, w, b), 2, False),
    "kl_div target": ((X, Y), lambda lib, x, y: _f(lib).kl_div(x, y, reduction="sum"), 1, True),
    "kl_div log_target input": ((X, Y), lambda lib, x, y: _f(lib).kl_div(x, y, reduction="sum", log_target=True), 0,
                                False),
    "kl_div log_target target": ((X, Y), lambda lib, x, y: _f(lib).kl_div(x, y, reduction="sum", log_target=True), 1,
                                 False),
}


@pytest.mark.parametrize("how", ["eager", "compiled"])
@pytest.mark.parametrize("name", list(COUNTED))
def test_a_counted_write_after_group_norm_or_kl_div_raises_where_torchs_node_saved_it(name, how):
    """native_group_norm's node saves the input and weight, not the bias; kl_div with log_target is
    exp(target) * (target - input), whose nodes save only values it made."""
    arrays, fn, k, raises = COUNTED[name]

    def body(lib, *xs):
        hs = [x * 1.0 for x in xs]
        y = fn(lib, *hs)
        with lib.no_grad():
            hs[k].mul_(2.0)
        return lib.autograd.grad((y * y.detach()).sum(), list(xs))

    def operands(lib):
        return [lib.tensor(a.copy(), dtype=lib.float64, requires_grad=True) for a in arrays]

    run = (lambda *xs: body(flame, *xs)) if how == "eager" else flame.compile(lambda *xs: body(flame, *xs))
    if raises:
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            body(torch, *operands(torch))
        with pytest.raises(flame.errors.AutogradError, match="modified by an inplace operation"):
            run(*operands(flame))
        return
    want = body(torch, *operands(torch))
    for g, w in zip(run(*operands(flame)), want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12, atol=1e-12)


SECOND = {  # name: (the op on lib's tensors x and y, what is written through .data: "result" or "x")
    "mse_loss input": (lambda lib, x, y: _f(lib).mse_loss(x, y), "x"),
    "dist result": (lambda lib, x, y: lib.dist(x, y), "result"),
    "cdist result": (lambda lib, x, y: lib.cdist(x, y).sum(), "result"),
    "group_norm input": (lambda lib, x, y: _f(lib).group_norm(x.reshape(2, 2, 3), 2).sum(), "x"),
    "kl_div target": (lambda lib, x, y: _f(lib).kl_div(y, x, reduction="sum"), "x"),
}


@pytest.mark.parametrize("how", ["eager", "compiled"])
@pytest.mark.parametrize("name", list(SECOND))
def test_a_second_backward_after_a_data_write_took_torchs_formula_raises_as_torchs(name, how):
    """A composite whose gradient torch's formula gave ran torch's node: a backward without retain_graph
    frees it, and a second one raises torch's error; with retain_graph, it gives the same gradient."""
    fn, where = SECOND[name]

    def body(lib, x, retain):
        y = lib.tensor(Y, dtype=lib.float64)
        r = fn(lib, x, y) if where == "x" else None
        if where == "x":
            x.data.mul_(x.data + 0.5)
        else:
            r = fn(lib, x, y)
            r.data.mul_(1.5)
        r.backward(retain_graph=retain)
        first = x.grad.clone()
        try:
            r.backward()
        except (RuntimeError, flame.errors.AutogradError) as e:
            return first, str(e)
        return first, x.grad - first

    for retain in (False, True):
        want = body(torch, torch.tensor(X.copy(), requires_grad=True), retain)
        run = (lambda x, retain=retain: body(flame, x, retain))
        got = (run if how == "eager" else flame.compile(run))(flame.tensor(X.copy(), requires_grad=True))
        np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=1e-12, atol=1e-12)
        if retain:
            np.testing.assert_allclose(got[1].numpy(), want[1].numpy(), rtol=1e-12, atol=1e-12)
        else:
            assert "backward through the graph a second time" in want[1]
            assert "backward through the graph a second time" in got[1]


NOT_IN_FLAME = {  # composites whose torch formula flame does not have: name -> (operand, the op on lib's tensors)
    "i0": (X, lambda lib, x: lib.special.i0(x)),
    "i0e": (X, lambda lib, x: lib.special.i0e(x)),
    "i1": (X, lambda lib, x: lib.special.i1(x)),
    "i1e": (X, lambda lib, x: lib.special.i1e(x)),
    "renorm": (X, lambda lib, x: x.renorm(2, 0, 1.0)),
    "pdist": (X, lambda lib, x: _f(lib).pdist(x)),
}


@pytest.mark.parametrize("how", ["eager", "compiled", "backward outside"])
@pytest.mark.parametrize("where", ["result", "input"])
@pytest.mark.parametrize("name", list(NOT_IN_FLAME))
def test_a_data_write_into_a_composite_flame_has_no_torch_formula_of_raises(name, where, how):
    """torch's node of these saved their input (and result), and its backward reads the values a write
    through .data put there; flame, which has not torch's formula, raises naming the composite and the
    line that called it, where torch gives a gradient, in place of a gradient of its own."""
    array, fn = NOT_IN_FLAME[name]

    def body(lib, x):
        y = fn(lib, x)
        (y if where == "result" else x).data.mul_(1.5)
        return (y * y.detach()).sum()

    xt = torch.tensor(array.copy(), requires_grad=True)
    assert torch.isfinite(torch.autograd.grad(body(torch, xt), xt)[0]).all()
    x = flame.tensor(array.copy(), requires_grad=True)
    with pytest.raises(flame.errors.AutogradError, match=f"backward: {name} read a tensor written through .data") as e:
        if how == "backward outside":
            flame.autograd.grad(flame.compile(lambda x: body(flame, x))(x), x)
        else:
            run = lambda x: flame.autograd.grad(body(flame, x), x)[0]
            (run if how == "eager" else flame.compile(run))(x)
    assert "test_data_writes_composites.py" in str(e.value) and f'"{name}": (' in str(e.value)  # (the call's line)
