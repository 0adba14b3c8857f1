"""Parameter updates written by hand, as tutorials write plain SGD: `p.data = p.data - lr * p.grad`,
`p.data.sub_(...)`, `p.add_(...)` under no_grad, `p.copy_(...)`: the same parameters as torch after
several steps, eagerly and inside @flame.compile."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.training_idioms.common import assert_same_params, batches, maybe_compile, to_lib, twin


def _mlp(lib):
    return lib.nn.Sequential(lib.nn.Linear(4, 6), lib.nn.Tanh(), lib.nn.Linear(6, 2))


def _data_assigned(lib, p, lr):
    p.data = p.data - lr * p.grad


def _data_written(lib, p, lr):
    p.data.sub_(lr * p.grad.data)


def _added(lib, p, lr):
    with lib.no_grad():
        p.add_(p.grad, alpha=-lr)


def _copied(lib, p, lr):
    with lib.no_grad():
        p.copy_(p - lr * p.grad)


@pytest.mark.parametrize("update", [_data_assigned, _data_written, _added, _copied])
@pytest.mark.parametrize("compiled", [False, True])
def test_hand_written_sgd_trains_as_torchs(update, compiled):
    theirs, mine = twin(_mlp)

    def step_of(lib, model):
        @maybe_compile(lib, compiled)
        def step(x, y, lr):
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            for p in model.parameters():
                update(lib, p, lr)
                p.grad = None
            return loss

        return step

    tstep, step = step_of(torch, theirs), step_of(flame, mine)
    for x, y in batches(4, (5, 4)):
        tstep(*to_lib(torch, x, y), 0.1)
        step(*to_lib(flame, x, y), flame.tensor(0.1, dtype=flame.float64))
    assert_same_params(mine, theirs, what=update.__name__)


def test_data_of_another_shape_inside_a_compiled_step_says_so():
    p = flame.nn.Parameter(flame.zeros(3))

    @flame.compile
    def step():
        p.data = flame.zeros(2)

    with pytest.raises(flame.TraceError, match=r"\.data takes a tensor of its own shape and dtype only"):
        step()


_MULTIPLIED = {
    "add_": lambda q, a, b, s: q.add_(a, alpha=-s),
    "sub_": lambda q, a, b, s: q.sub_(a, alpha=s),
    "addcmul_": lambda q, a, b, s: q.addcmul_(a, b, value=s),
    "addcdiv_": lambda q, a, b, s: q.addcdiv_(a, b, value=-s),
    "add": lambda q, a, b, s: q.copy_(q.add(a, alpha=s)),
}


@pytest.mark.parametrize("name", list(_MULTIPLIED))
@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
@pytest.mark.parametrize("compiled", [False, True])
def test_a_multiplier_given_as_a_tensor_is_its_value(name, dtype, compiled):
    """alpha= / value= as a 0-d tensor (a step size computed from a learning-rate tensor, as a hand-written
    Adam's p.addcdiv_(m, denom, value=-step_size)): torch takes its value; inside @flame.compile it is
    read at every call."""
    update = _MULTIPLIED[name]

    def run(lib, s):
        dt = getattr(lib, dtype)
        q = lib.tensor([2.0, -1.0, 0.5], dtype=dt)
        a, b = lib.tensor([1.0, 2.0, 3.0], dtype=dt), lib.tensor([0.5, 4.0, 1.0], dtype=dt)

        @maybe_compile(lib, compiled)
        def step(q, s):
            update(q, a, b, s * 2)
            return q

        return step(q, lib.tensor(s, dtype=lib.float64))

    for s in (0.3, 0.7):  # a second value: read at the call, not the one traced
        want, got = run(torch, s), run(flame, s)
        assert str(got.dtype) == {"float64": "f64", "float32": "f32", "float16": "f16"}[dtype]
        # within an ulp: torch's CPU kernels round alpha * other apart (f16) or fuse it into an FMA (f64)
        eps = float(np.finfo(want.numpy().dtype).eps)
        np.testing.assert_allclose(got.numpy().astype(np.float64), want.numpy().astype(np.float64), rtol=eps, atol=eps)


@pytest.mark.parametrize("compiled", [False, True])
def test_the_torch_nn_tutorials_loop_from_scratch_trains_as_torchs(compiled):
    """The loop of torch's tutorial "What is torch.nn really?": tensors made leaves by requires_grad_(), a
    log-softmax and a negative log-likelihood written by hand (`-input[range(target.shape[0]),
    target].mean()`), `w -= w.grad * lr` and `w.grad.zero_()` under no_grad."""
    rng = np.random.default_rng(0)
    w0, xs, ys = rng.standard_normal((12, 5)) / np.sqrt(12), rng.standard_normal((30, 12)), rng.integers(0, 5, 30)

    def run(lib):
        weights = lib.tensor(w0.copy())
        weights.requires_grad_()
        bias = lib.zeros(5, dtype=lib.float64, requires_grad=True)

        def nll(input, target):
            return -input[range(target.shape[0]), target].mean()

        @maybe_compile(lib, compiled)
        def step(xb, yb):
            out = xb @ weights + bias
            loss = nll(out - out.exp().sum(-1).log().unsqueeze(-1), yb)
            loss.backward()
            with lib.no_grad():
                weights.sub_(weights.grad * 0.5)
                bias.sub_(bias.grad * 0.5)
                weights.grad.zero_()
                bias.grad.zero_()
            return loss

        losses = [float(step(*to_lib(lib, xs[i:i + 10], ys[i:i + 10]))) for _ in range(2) for i in (0, 10, 20)]
        return losses, [t.detach().numpy() if lib is torch else t.numpy() for t in (weights, bias)]

    (want, want_ps), (got, got_ps) = run(torch), run(flame)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    for g, w in zip(got_ps, want_ps):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)
