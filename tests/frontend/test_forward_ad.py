"""flame.autograd.forward_ad against torch.autograd.forward_ad in float64: the tangents unpack_dual gives
for compositions of elementwise ops, matmul, reductions, softmax, layer_norm and conv2d, several duals
with their own tangents, the Jacobian-vector product of a model's forward (and of a CNN's loss in training
mode), inside @flame.compile, views and in-place writes of a dual, a tangent differentiated again, levels
(as a block, a decorator, enter/exit), and torch's errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as tfwd
import torch.nn.functional as TF

import flame
import flame.autograd.forward_ad as ffwd
import flame.nn.functional as FF


def _rng(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def _close(got, want) -> None:
    assert isinstance(got, flame.Tensor), got
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-10, atol=1e-12)


def _jvp(lib, fwd, body, primals, tangents):
    """(primal, tangent) of body(*duals) in a dual level of lib's forward_ad."""
    with fwd.dual_level():
        duals = [fwd.make_dual(lib.tensor(p, dtype=lib.float64), lib.tensor(t, dtype=lib.float64))
                 for p, t in zip(primals, tangents)]
        out = fwd.unpack_dual(body(*duals))
        return out.primal, out.tangent


def _both(body, primals, tangents) -> None:
    fp, ft = _jvp(flame, ffwd, body(flame, FF), primals, tangents)
    tp, tt = _jvp(torch, tfwd, body(torch, TF), primals, tangents)
    _close(fp, tp)
    _close(ft, tt)


CASES = {
    "elementwise": (lambda lib, F: lambda x: x.sin() * x.exp() + x.tanh() / (1 + x * x) - x.abs().pow(1.5),
                    [(3, 4)]),
    "matmul_reductions": (lambda lib, F: lambda x, w: (x @ w).relu().sum(1) + (x @ w).amax(0).mean(),
                          [(3, 4), (4, 3)]),
    "softmax": (lambda lib, F: lambda x: F.softmax(x * 2, dim=-1) * F.log_softmax(x, dim=0), [(3, 5)]),
    "layer_norm": (lambda lib, F: lambda x, w, b: F.layer_norm(x, (5,), w, b).tanh(), [(4, 5), (5,), (5,)]),
    "conv2d": (lambda lib, F: lambda x, w, b: F.conv2d(x, w, b, stride=1, padding=1).sigmoid(),
               [(2, 3, 5, 5), (4, 3, 3, 3), (4,)]),
    "broadcast_and_scalar": (lambda lib, F: lambda x, s: (x * s + s.exp()).sum(), [(2, 3), ()]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_tangents_match_torch(name):
    body, shapes = CASES[name]
    primals = [_rng(10 + i, *s) for i, s in enumerate(shapes)]
    tangents = [_rng(20 + i, *s) for i, s in enumerate(shapes)]
    _both(body, primals, tangents)


def test_a_subset_of_the_inputs_dual_and_several_outputs():
    x0, w0, vx = _rng(1, 3, 4), _rng(2, 4, 2), _rng(3, 3, 4)
    for lib, fwd in ((flame, ffwd), (torch, tfwd)):
        with fwd.dual_level() as level:
            assert level == 0
            x = fwd.make_dual(lib.tensor(x0, dtype=lib.float64), lib.tensor(vx, dtype=lib.float64))
            w = lib.tensor(w0, dtype=lib.float64)
            y = x @ w
            z = y.exp().sum()
            other = w * 2  # depends on no dual
            got = (fwd.unpack_dual(y), fwd.unpack_dual(z), fwd.unpack_dual(other), fwd.unpack_dual(w))
        if lib is flame:
            mine = got
        else:
            for m, t in zip(mine, got):
                _close(m.primal, t.primal)
                assert (m.tangent is None) == (t.tangent is None)
                if t.tangent is not None:
                    _close(m.tangent, t.tangent)


def test_the_jvp_of_a_model_forward_matches_torch():
    torch.manual_seed(0)
    tm = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.LayerNorm(8),
                             torch.nn.Linear(8, 3)).double()
    fm = flame.nn.Sequential(flame.nn.Linear(6, 8), flame.nn.GELU(), flame.nn.LayerNorm(8),
                             flame.nn.Linear(8, 3)).to(flame.f64)
    fm.load_state_dict({k: flame.tensor(v.detach().numpy(), dtype=flame.f64) for k, v in tm.state_dict().items()})
    x0, v0 = _rng(5, 4, 6), _rng(6, 4, 6)
    with tfwd.dual_level():
        tout = tfwd.unpack_dual(tm(tfwd.make_dual(torch.tensor(x0), torch.tensor(v0))))
    fx, fv = flame.tensor(x0, dtype=flame.f64), flame.tensor(v0, dtype=flame.f64)
    with ffwd.dual_level():
        fout = ffwd.unpack_dual(fm(ffwd.make_dual(fx, fv)))
    _close(fout.primal, tout.primal)
    _close(fout.tangent, tout.tangent)
    # the same product as flame.autograd.functional.jvp's
    _, want = flame.autograd.functional.jvp(fm, fx, fv)
    np.testing.assert_allclose(fout.tangent.numpy(), want.numpy(), rtol=1e-12)


def test_the_jvp_of_a_cnn_loss_in_training_mode_matches_torch():
    torch.manual_seed(1)

    def net(nn):
        return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(16, 5))

    tm, fm = net(torch.nn).double(), net(flame.nn).to(flame.f64)
    fm.load_state_dict({k: flame.tensor(v.detach().numpy(), dtype=flame.f64) for k, v in tm.state_dict().items()})
    x0, v0, y0 = _rng(20, 2, 3, 4, 4), _rng(21, 2, 3, 4, 4), np.array([1, 3])
    res = {}
    for lib, fwd, m, F in ((flame, ffwd, fm, FF), (torch, tfwd, tm, TF)):
        with fwd.dual_level():
            out = m(fwd.make_dual(lib.tensor(x0), lib.tensor(v0)))
            res[lib] = fwd.unpack_dual(F.cross_entropy(out, lib.tensor(y0)))
    _close(res[flame].primal, res[torch].primal)
    _close(res[flame].tangent, res[torch].tangent)
    _close(fm[1].running_var, tm[1].running_var)


def test_a_tangent_inside_a_compiled_function_matches_torch():
    x0, v0 = _rng(18, 3, 4), _rng(19, 3, 4)

    def step(lib, fwd, x, v):
        with fwd.dual_level():
            out = fwd.unpack_dual(lib.softmax(fwd.make_dual(x, v).tanh() * 3, dim=1).sum(0))
            return out.primal, out.tangent

    got = flame.compile(lambda x, v: step(flame, ffwd, x, v))(flame.tensor(x0), flame.tensor(v0))
    want = step(torch, tfwd, torch.tensor(x0), torch.tensor(v0))
    for m, t in zip(got, want):
        _close(m, t)


def test_views_and_in_place_writes_of_a_dual_match_torch():
    x0, v0, a0 = _rng(7, 4, 3), _rng(8, 4, 3), _rng(9, 4, 3)
    got = {}
    for lib, fwd in ((flame, ffwd), (torch, tfwd)):
        with fwd.dual_level():
            d = fwd.make_dual(lib.tensor(x0, dtype=lib.float64), lib.tensor(v0, dtype=lib.float64))
            view = d[1:].t().reshape(-1)
            d.mul_(d.sin())  # the dual written in place (torch's tangent of d.mul_(d) reads the updated d)
            d.add_(lib.tensor(a0, dtype=lib.float64).sin())
            d[0].mul_(3.0)  # a write through a view of the dual
            got[lib] = [fwd.unpack_dual(t) for t in (d, view, d[:, 1], d.sum(0))]
    for m, t in zip(got[flame], got[torch]):
        _close(m.primal, t.primal)
        _close(m.tangent, t.tangent)


def test_a_dual_of_a_tensor_that_requires_grad_keeps_its_gradient():
    x0, v0 = _rng(11, 5), _rng(12, 5)
    res = {}
    for lib, fwd in ((flame, ffwd), (torch, tfwd)):
        x = lib.tensor(x0, dtype=lib.float64, requires_grad=True)
        with fwd.dual_level():
            d = fwd.make_dual(x, lib.tensor(v0, dtype=lib.float64))
            y = (d.sin() * d).sum()
            tangent = fwd.unpack_dual(y).tangent
            y.backward()
        res[lib] = (tangent, x.grad)
    for m, t in zip(res[flame], res[torch]):
        _close(m, t)


def test_a_tangent_is_differentiable_in_its_primal_and_its_tangent():
    x0, v0, w0 = _rng(15, 4), _rng(16, 4), _rng(17, 4)
    res = {}
    for lib, fwd in ((flame, ffwd), (torch, tfwd)):
        x = lib.tensor(x0, dtype=lib.float64, requires_grad=True)
        v = lib.tensor(v0, dtype=lib.float64, requires_grad=True)
        w = lib.tensor(w0, dtype=lib.float64, requires_grad=True)
        with fwd.dual_level():
            y = (fwd.make_dual(x, v).sin() * w).sum()
            tangent = fwd.unpack_dual(y).tangent
        tangent.backward()
        res[lib] = (tangent, x.grad, v.grad, w.grad)
    for m, t in zip(res[flame], res[torch]):
        _close(m, t)


def test_unpack_dual_of_a_dual_and_outside_a_level():
    x, v = flame.tensor(_rng(13, 3), dtype=flame.f32), flame.tensor(_rng(14, 3), dtype=flame.f64)
    with ffwd.dual_level():
        d = ffwd.make_dual(x, v)
        primal, tangent = ffwd.unpack_dual(d)
        assert tangent is v  # as given, f64 for an f32 primal as in torch
        np.testing.assert_array_equal(primal.numpy(), x.numpy())
        assert ffwd.unpack_dual(x).tangent is None
        assert ffwd.unpack_dual(x, level=3).tangent is None  # another level: no error for a non-dual, as torch
        assert (d * 2).dtype == flame.f32
    out = ffwd.unpack_dual(d)
    assert out.tangent is None and out.primal is d
    assert type(out).__name__ == "UnpackedDualTensor" and out._fields == ("primal", "tangent")


def _under_no_grad(lib, fwd, x0, v0, w0):
    """Tangents under no_grad: a dual made there, and one made with gradients enabled then used there."""
    w = lib.tensor(w0, requires_grad=True)
    with fwd.dual_level():
        early = fwd.make_dual(lib.tensor(x0), lib.tensor(v0))
        with lib.no_grad():
            d = fwd.make_dual(lib.tensor(w0), lib.tensor(x0))
            y = lib.softmax(d.sin() * d + early.tanh() @ w.t(), dim=-1).sum(0)
            z = (early * w).exp()
            out = [fwd.unpack_dual(t) for t in (d, y, z, lib.ones(3), d.detach() * 2)]
        flags = [t.requires_grad for t in (d, y, z)] + [t.requires_grad for o in out[:3] for t in o]
    return out, flags


def test_tangents_under_no_grad_match_torch():
    x0, v0, w0 = _rng(21, 3, 3), _rng(22, 3, 3), _rng(23, 3, 3)
    got, got_flags = _under_no_grad(flame, ffwd, x0, v0, w0)
    want, want_flags = _under_no_grad(torch, tfwd, x0, v0, w0)
    assert got_flags == want_flags == [False] * 9
    for m, t in zip(got[:3], want[:3]):
        _close(m.primal, t.primal)
        _close(m.tangent, t.tangent)
    assert got[3].tangent is None and want[3].tangent is None
    assert got[4].tangent is None and want[4].tangent is None  # detach() drops the tangent


def test_a_tangent_under_no_grad_inside_a_compiled_function_matches_torch():
    x0, v0 = _rng(24, 3, 4), _rng(25, 3, 4)

    def step(lib, fwd, x, v):
        with fwd.dual_level(), lib.no_grad():
            out = fwd.unpack_dual((fwd.make_dual(x, v).tanh() * 3).softmax(1).sum(0))
            return out.primal, out.tangent

    f = flame.compile(lambda x, v: step(flame, ffwd, x, v))
    want = step(torch, tfwd, torch.tensor(x0), torch.tensor(v0))
    for _ in range(2):
        got = f(flame.tensor(x0), flame.tensor(v0))
        for m, t in zip(got, want):
            _close(m, t)
            assert not m.requires_grad


def test_levels_as_functions_and_as_a_decorator():
    level = ffwd.enter_dual_level()
    assert level == 0
    d = ffwd.make_dual(flame.ones(2), flame.ones(2))
    ffwd.exit_dual_level()
    assert ffwd.unpack_dual(d * 2).tangent is None

    @ffwd.dual_level()
    def tangent_of_square(x, v):
        return ffwd.unpack_dual(ffwd.make_dual(x, v) ** 2).tangent

    x = flame.tensor([1.0, 2.0, 3.0])
    np.testing.assert_allclose(tangent_of_square(x, flame.ones(3)).numpy(), [2.0, 4.0, 6.0])
    assert ffwd.enter_dual_level() == 0  # the decorator left the level
    ffwd.exit_dual_level()


def _message(fn) -> tuple[type, str]:
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return type(e), str(e)
    raise AssertionError("no error")


@pytest.mark.parametrize("case", ["outside", "size", "int_primal", "int_tangent", "nested", "twice", "level",
                                  "unpack_level", "exit_level", "exit_none"])
def test_errors_match_torch(case):
    def run(lib, fwd):
        x = lib.tensor([1.0, 2.0, 3.0])
        fns = {
            "outside": lambda: fwd.make_dual(x, x),
            "size": lambda: fwd.make_dual(x, lib.ones(4)),
            "int_primal": lambda: fwd.make_dual(lib.tensor([1, 2, 3]), x),
            "int_tangent": lambda: fwd.make_dual(x, lib.tensor([1, 2, 3])),
            "nested": lambda: fwd.dual_level().__enter__(),
            "twice": lambda: fwd.make_dual(fwd.make_dual(x, x), x),
            "level": lambda: fwd.make_dual(x, x, level=3),
            "unpack_level": lambda: fwd.unpack_dual(fwd.make_dual(x, x) * 2, level=3),
            "exit_level": lambda: fwd.exit_dual_level(level=3),
            "exit_none": fwd.exit_dual_level,
        }
        if case in ("outside", "exit_none"):
            return _message(fns[case])
        with fwd.dual_level():
            return _message(fns[case])

    mine, want = run(flame, ffwd), run(torch, tfwd)
    assert mine[0] is want[0], (mine, want)
    assert mine[1] == want[1].replace("torch.int64", "flame.i64"), (mine, want)
