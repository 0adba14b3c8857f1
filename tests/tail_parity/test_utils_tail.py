"""nn.utils against torch in f64: clip_grad_norm_ (every norm order, error_if_nonfinite, foreach, the
returned norm's dtype and shape, a parameter without a gradient, a single tensor, a generator),
get_total_norm, clip_grads_with_norm_, clip_grad_value_, parameters_to_vector / vector_to_parameters;
eager and inside @flame.compile."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.tail_parity.common import close, rng

R = rng(3)
SHAPES = [(3, 4), (5,), (2, 2), (1,)]
VALUES = [R.standard_normal(s) for s in SHAPES]
WEIGHTS = [R.standard_normal(s) * 3 for s in SHAPES]
NORMS = [2.0, 2, 1, 3.0, 0.5, 0, float("inf"), "inf", -float("inf"), -1.5]


def _params(lib, dtypes=None):
    dtypes = dtypes or [lib.float64] * len(VALUES)
    return [lib.tensor(v.copy()).to(d).detach().requires_grad_(True) for v, d in zip(VALUES, dtypes)]


def _step(lib, params, clip, with_grad=(0, 2, 3)):
    """The gradients of a weighted sum of some parameters (parameter 1 gets none), then `clip`."""
    loss = sum((params[i] * lib.tensor(WEIGHTS[i]).to(params[i].dtype)).sum() for i in with_grad)
    loss.backward()
    return clip(lib, params)


def _compare(clip, compiled: bool, dtypes=("f64",) * 4, rtol=1e-12) -> None:
    tp = _params(torch, [getattr(torch, {"f64": "float64", "f32": "float32"}[d]) for d in dtypes])
    fp = _params(flame, [getattr(flame, {"f64": "float64", "f32": "float32"}[d]) for d in dtypes])
    theirs = _step(torch, tp, clip)
    run = flame.compile(lambda: _step(flame, fp, clip)) if compiled else lambda: _step(flame, fp, clip)
    mine = run()
    close(mine, theirs, "returned value", rtol=rtol, atol=0)
    for i, (a, b) in enumerate(zip(fp, tp)):
        close(a.grad, b.grad, f"grad of parameter {i}", rtol=rtol, atol=0)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("max_norm", [0.5, 1e3])
@pytest.mark.parametrize("norm_type", NORMS, ids=str)
def test_clip_grad_norm(norm_type, max_norm, compiled):
    _compare(lambda L, ps: L.nn.utils.clip_grad_norm_(ps, max_norm, norm_type=norm_type), compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("foreach", [None, False, True])
def test_clip_grad_norm_foreach_and_generator(foreach, compiled):
    _compare(lambda L, ps: L.nn.utils.clip_grad_norm_((p for p in ps), 0.7, 2.0, False, foreach), compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_clip_grad_norm_mixed_dtypes(compiled):
    """Each gradient's norm in its own dtype, the total in the promoted one."""
    _compare(lambda L, ps: L.nn.utils.clip_grad_norm_(ps, 0.3), compiled, ("f32", "f64", "f32", "f64"), rtol=1e-6)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_clip_grad_norm_single_tensor(compiled):
    _compare(lambda L, ps: L.nn.utils.clip_grad_norm_(ps[0], 0.4, norm_type=1), compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_get_total_norm_and_clip_grads_with_norm(compiled):
    def clip(L, ps):
        total = L.nn.utils.get_total_norm([p.grad for p in ps if p.grad is not None], 3.0)
        L.nn.utils.clip_grads_with_norm_(ps, 0.9, total)
        return total

    _compare(clip, compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("clip_value", [0.5, 2.0])
def test_clip_grad_value(clip_value, compiled):
    def clip(L, ps):
        L.nn.utils.clip_grad_value_(ps, clip_value)
        return ps[0].grad.sum()

    _compare(clip, compiled)


def test_no_gradients_at_all():
    """Parameters without gradients (or none): a 0-d f32 zero, as torch's."""
    for ps in ([], [flame.zeros(3, requires_grad=True)]):
        t = torch.nn.utils.clip_grad_norm_([torch.zeros(3, requires_grad=True)] if ps else [], 1.0)
        close(flame.nn.utils.clip_grad_norm_(ps, 1.0), t, "norm", atol=0)
    close(flame.nn.utils.get_total_norm([]), torch.nn.utils.get_total_norm([]), "norm", atol=0)


@pytest.mark.parametrize("norm_type", [2.0, float("inf"), 1.0])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_clip_grad_norm_error_if_nonfinite(bad, norm_type):
    def clip(L, ps, error):
        ps[0].grad = ps[0].grad.clone()
        with L.no_grad():
            ps[0].grad[0, 1] = bad
        return L.nn.utils.clip_grad_norm_(ps, 1.0, norm_type=norm_type, error_if_nonfinite=error)

    with pytest.raises(RuntimeError, match="non-finite"):
        _step(torch, _params(torch), lambda L, ps: clip(L, ps, True))
    with pytest.raises(RuntimeError, match="non-finite, so it cannot be clipped"):
        _step(flame, _params(flame), lambda L, ps: clip(L, ps, True))
    _compare(lambda L, ps: clip(L, ps, False), compiled=False)


def test_clip_grad_norm_error_if_nonfinite_compiled_says_what_to_do():
    ps = _params(flame)
    step = flame.compile(lambda: _step(flame, ps, lambda L, q: L.nn.utils.clip_grad_norm_(q, 1.0, 2.0, True)))
    with pytest.raises(flame.TraceError, match="return the norm"):
        step()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_parameters_to_vector(compiled):
    def fn(L, ps):
        v = L.nn.utils.parameters_to_vector(ps)
        (v * L.tensor(np.arange(v.shape[0], dtype=np.float64))).sum().backward()
        return v

    tp, fp = _params(torch), _params(flame)
    theirs = fn(torch, tp)
    mine = (flame.compile(lambda: fn(flame, fp)) if compiled else lambda: fn(flame, fp))()
    close(mine, theirs, "vector")
    for a, b in zip(fp, tp):
        close(a.grad, b.grad, "grad")


def test_vector_to_parameters_eager():
    """Each parameter's data becomes its slice of the vector: its values, and (as in torch) its dtype."""
    vec = R.standard_normal(sum(int(np.prod(s)) for s in SHAPES) + 2)
    for dtype in ("float64", "float32"):
        tp, fp = _params(torch), _params(flame)
        torch.nn.utils.vector_to_parameters(torch.tensor(vec).to(getattr(torch, dtype)), tp)
        flame.nn.utils.vector_to_parameters(flame.tensor(vec).to(getattr(flame, dtype)), fp)
        for a, b in zip(fp, tp):
            close(a, b, "parameter")
            assert a.requires_grad and b.requires_grad
    with pytest.raises(TypeError):
        torch.nn.utils.vector_to_parameters(vec, _params(torch))
    with pytest.raises(TypeError, match="expected a flame.Tensor"):
        flame.nn.utils.vector_to_parameters(vec, _params(flame))


def test_vector_to_parameters_compiled():
    vec = R.standard_normal(sum(int(np.prod(s)) for s in SHAPES))
    fp = _params(flame)
    flame.compile(lambda v: flame.nn.utils.vector_to_parameters(v, fp))(flame.tensor(vec))
    np.testing.assert_array_equal(np.concatenate([p.numpy().reshape(-1) for p in fp]), vec)
    with pytest.raises(flame.DTypeError, match="dtype"):
        flame.compile(lambda v: flame.nn.utils.vector_to_parameters(v, _params(flame)))(flame.tensor(vec).float())
