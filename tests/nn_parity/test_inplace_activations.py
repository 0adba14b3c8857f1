"""torch's `inplace=True` of the activations and dropouts (modules and functions), the in-place
functional spellings (F.relu_ ...) and Tensor's in-place methods made from the out-of-place ones
(x.sigmoid_() ...), against torch in f64: the input holds the result and is returned, gradients flow
through it as torch's (eagerly and compiled), a leaf that requires grad is refused, and reprs match."""

from __future__ import annotations

import numpy as np
import pytest

import flame
from flame.frontend.tensor_inplace import IN_PLACE

torch = pytest.importorskip("torch")

X = np.array([[-2.5, -1.0, -0.2, 0.0], [0.3, 1.0, 4.0, 7.0]])

MODULES = [
    ("ReLU", ()), ("ReLU6", ()), ("LeakyReLU", (0.1,)), ("ELU", (0.7,)), ("CELU", (1.3,)), ("SELU", ()),
    ("SiLU", ()), ("Mish", ()), ("Hardtanh", (-0.5, 2.0)), ("Hardsigmoid", ()), ("Hardswish", ()),
    ("Threshold", (0.1, 20.0)),
]
FUNCTIONS = [
    ("relu", ()), ("relu6", ()), ("leaky_relu", (0.2,)), ("elu", (0.7,)), ("celu", (1.3,)), ("selu", ()),
    ("silu", ()), ("mish", ()), ("hardtanh", (-0.5, 2.0)), ("hardsigmoid", ()), ("hardswish", ()),
    ("threshold", (0.1, 20.0)), ("rrelu", (0.1, 0.3, False)),
]
UNDERSCORED = [("relu_", ()), ("elu_", (0.7,)), ("celu_", (1.3,)), ("selu_", ()), ("leaky_relu_", (0.2,)),
               ("hardtanh_", (-0.5, 2.0)), ("threshold_", (0.1, 20.0)), ("rrelu_", (0.1, 0.3))]


def _both(make):
    out = []
    for lib in (torch, flame):
        x = lib.tensor(X.copy())
        got = make(lib, x)
        out.append((x, got))
    return out


@pytest.mark.parametrize("name,args", MODULES, ids=[m for m, _ in MODULES])
def test_modules_write_into_their_input(name, args):
    (tx, tgot), (fx, fgot) = _both(lambda lib, x: getattr(lib.nn, name)(*args, inplace=True)(x))
    assert fgot is fx and tgot is tx
    np.testing.assert_allclose(fx.numpy(), tx.numpy(), rtol=1e-12, atol=1e-15)
    assert repr(getattr(flame.nn, name)(*args, inplace=True)) == repr(getattr(torch.nn, name)(*args, inplace=True))
    (tx, _), (fx, fgot) = _both(lambda lib, x: getattr(lib.nn, name)(*args)(x))
    np.testing.assert_array_equal(fx.numpy(), X)  # without inplace the input stays


@pytest.mark.parametrize("name,args", FUNCTIONS + UNDERSCORED, ids=[f for f, _ in FUNCTIONS + UNDERSCORED])
def test_functions_write_into_their_input(name, args):
    kw = {} if name.endswith("_") else {"inplace": True}
    (tx, tgot), (fx, fgot) = _both(lambda lib, x: getattr(lib.nn.functional, name)(x, *args, **kw))
    assert fgot is fx and tgot is tx
    np.testing.assert_allclose(fx.numpy(), tx.numpy(), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name", ["Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout",
                                  "FeatureAlphaDropout"])
def test_dropouts_write_into_their_input_when_training(name):
    shape = (2, 3, 4, 5, 6)[: {"Dropout1d": 3, "Dropout2d": 4, "Dropout3d": 5}.get(name, 3)]
    x = flame.ones(*shape, dtype=flame.float64) * 2
    m = getattr(flame.nn, name)(0.5, inplace=True)
    assert repr(m) == repr(getattr(torch.nn, name)(0.5, inplace=True))
    got = m(x)
    assert got is x and not np.all(x.numpy() == 2.0)  # some elements dropped, in x itself
    x = flame.ones(*shape, dtype=flame.float64)
    assert m.eval()(x) is x and np.all(x.numpy() == 1.0)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_gradient_through_an_in_place_activation(compiled):
    """y = lin(x); relu(y, inplace=True); the loss reads y: torch's values and gradients."""
    rng = np.random.default_rng(0)
    w, x = rng.standard_normal((3, 4)), rng.standard_normal((5, 4))
    res = []
    for lib in (torch, flame):
        lin = lib.nn.Linear(4, 3).double()
        with lib.no_grad():
            lin.weight.copy_(lib.tensor(w))
            lin.bias.fill_(0.1)

        def step(x, lin=lin, lib=lib):
            y = lin(x)
            lib.nn.functional.leaky_relu(y, 0.2, inplace=True)
            loss = (y * y).sum()
            loss.backward()
            return loss

        run = flame.compile(step) if compiled and lib is flame else step
        loss = run(lib.tensor(x))
        res.append((loss.item(), lin.weight.grad.numpy().copy()))
    assert res[0][0] == pytest.approx(res[1][0], rel=1e-12)
    np.testing.assert_allclose(res[1][1], res[0][1], rtol=1e-12)


def test_a_leaf_that_requires_grad_is_refused():
    for lib in (torch, flame):
        w = lib.ones(3, requires_grad=True)
        with pytest.raises(RuntimeError, match="leaf"):
            lib.nn.functional.relu(w, inplace=True)
        with pytest.raises(RuntimeError, match="leaf"):
            w.sigmoid_()


def _tensor_args(name):
    if name in ("cumsum", "cumprod"):
        return lambda lib: (1,)
    if name in ("clamp_min", "clamp_max"):
        return lambda lib: (0.5,)
    if name == "pow":
        return lambda lib: (2,)
    if name == "ldexp":
        return lambda lib: (lib.tensor([[1, 2, 0, 3], [1, -1, 2, 0]]),)
    if name in ("tril", "triu"):
        return lambda lib: (1,)
    if name == "lerp":
        return lambda lib: (lib.full((2, 4), 0.25, dtype=lib.float64), 0.3)
    if name in ("renorm",):
        return lambda lib: (2, 0, 1.0)
    return "try"


# tested with their ops: other argument shapes
_OTHER_SHAPES = ("polygamma", "mvlgamma", "addmm", "addbmm", "baddbmm", "addmv", "addr", "index_reduce", "put")


@pytest.mark.parametrize("name", [n for n in IN_PLACE if hasattr(torch.Tensor, n + "_")
                                  and hasattr(flame.Tensor, n + "_") and n not in _OTHER_SHAPES])
def test_tensor_in_place_methods_match_torch(name):
    args = _tensor_args(name)
    a = np.array([[0.3, 0.7, 1.5, 2.0], [0.1, 0.9, 1.2, 3.0]])
    b = np.array([[0.5, 0.2, 0.8, 1.1], [1.3, 0.4, 0.6, 0.25]])
    if name.startswith(("bitwise", "gcd", "lcm")):
        a, b = np.array([[3, 7, 12, 2], [1, 9, 5, 30]]), np.array([[5, 2, 1, 3], [1, 4, 6, 2]])
    got = []
    for lib in (torch, flame):
        x = lib.tensor(a.copy())
        if args == "try":
            try:
                out = getattr(x, name + "_")()
            except TypeError:
                x = lib.tensor(a.copy())
                out = getattr(x, name + "_")(lib.tensor(b))
        else:
            out = getattr(x, name + "_")(*args(lib))
        assert out is x
        got.append(x.numpy())
    np.testing.assert_allclose(got[1], got[0], rtol=1e-12, atol=1e-15, equal_nan=True)
