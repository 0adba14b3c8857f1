"""Module registration, conversion and copying against torch: the names register_parameter /
register_buffer / add_module refuse, train()'s boolean mode, Sequential and ModuleList `+` (and
Sequential `*`), Module.to converting .grad with its parameter, an integer Parameter refused unless
requires_grad=False, copy.deepcopy of a model leaving its gradients behind, and the always_call forward
hooks run when a pre-hook or forward() raises."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import flame


def _outcome(fn, lib):
    """('ok', value) or (exception type name, None): torch's KeyError/TypeError/ValueError by name."""
    try:
        return "ok", fn(lib)
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        return type(e).__name__, None


def _mod(lib):
    m = lib.nn.Module()
    m.lin = lib.nn.Linear(2, 2)
    m.p = lib.nn.Parameter(lib.ones(1))
    m.register_buffer("b", lib.zeros(1))
    m.plain = 3
    return m


REGISTRATIONS = {
    "buffer over a parameter": lambda lib: _mod(lib).register_buffer("p", lib.ones(1)),
    "buffer over a module": lambda lib: _mod(lib).register_buffer("lin", lib.ones(1)),
    "buffer over a method": lambda lib: _mod(lib).register_buffer("forward", lib.ones(1)),
    "buffer over a plain attribute": lambda lib: _mod(lib).register_buffer("plain", lib.ones(1)),
    "buffer dotted": lambda lib: _mod(lib).register_buffer("a.b", lib.ones(1)),
    "buffer empty": lambda lib: _mod(lib).register_buffer("", lib.ones(1)),
    "buffer int name": lambda lib: _mod(lib).register_buffer(3, lib.ones(1)),
    "buffer again": lambda lib: _mod(lib).register_buffer("b", lib.ones(1)),
    "parameter over a buffer": lambda lib: _mod(lib).register_parameter("b", lib.nn.Parameter(lib.ones(1))),
    "parameter dotted": lambda lib: _mod(lib).register_parameter("x.y", lib.nn.Parameter(lib.ones(1))),
    "parameter again": lambda lib: _mod(lib).register_parameter("p", None),
    "module over a parameter": lambda lib: _mod(lib).add_module("p", lib.nn.ReLU()),
    "module dotted": lambda lib: _mod(lib).add_module("a.b", lib.nn.ReLU()),
    "module empty": lambda lib: _mod(lib).register_module("", lib.nn.ReLU()),
    "module again": lambda lib: _mod(lib).add_module("lin", lib.nn.ReLU()),
    "attribute assignment replaces": lambda lib: setattr(_mod(lib), "plain", lib.nn.Parameter(lib.ones(1))),
}


@pytest.mark.parametrize("case", sorted(REGISTRATIONS))
def test_registration_names_as_torch(case):
    fn = REGISTRATIONS[case]
    assert _outcome(fn, flame)[0] == _outcome(fn, torch)[0]


@pytest.mark.parametrize("mode", [True, False, 0, 1, "no", None])
def test_train_mode_must_be_boolean(mode):
    fn = lambda lib: lib.nn.Linear(1, 1).train(mode).training  # noqa: E731
    assert _outcome(fn, flame) == _outcome(fn, torch)


def _names(seq):
    return [(n, type(m).__name__) for n, m in seq.named_children()]


def _concatenations(lib):
    nn = lib.nn
    a, b = nn.Sequential(nn.Linear(2, 2), nn.ReLU()), nn.Sequential(nn.Tanh())
    s, r = a + b, 2 * b
    ml = nn.ModuleList([nn.ReLU()]) + [nn.Tanh(), nn.GELU()]
    got = [_names(s), s[0] is a[0], type(s).__name__, _names(r), _names(b * 3), _names(ml), type(ml).__name__]
    a += b
    return got + [_names(a)]


def test_sequential_and_module_list_concatenate_as_torch():
    assert _concatenations(flame) == _concatenations(torch)
    for expr in (lambda lib: lib.nn.Sequential() + [lib.nn.ReLU()], lambda lib: lib.nn.Sequential() * 0,
                 lambda lib: lib.nn.Sequential() * 1.5):
        assert _outcome(expr, flame)[0] == _outcome(expr, torch)[0] != "ok"


@pytest.mark.parametrize("convert", ["double", "half", "to"])
def test_module_conversion_converts_grad(convert):
    got = {}
    for lib in (torch, flame):
        m = lib.nn.Linear(3, 2)
        m(lib.ones(4, 3)).sum().backward()
        getattr(m, convert)(*([lib.float64] if convert == "to" else []))
        got[lib.__name__] = [(str(p.grad.dtype).split(".")[-1], p.grad.double().numpy()) for p in m.parameters()]
    names = {"float64": "f64", "float16": "f16"}
    for (td, tv), (fd, fv) in zip(got["torch"], got["flame"]):
        assert names[td] == fd
        np.testing.assert_allclose(fv, tv)


@pytest.mark.parametrize("dtype,requires_grad", [("int64", True), ("int64", False), ("bool", True), ("float32", True)])
def test_parameter_of_integer_dtype(dtype, requires_grad):
    fn = lambda lib: lib.nn.Parameter(lib.ones(2, dtype=getattr(lib, dtype)), requires_grad)  # noqa: E731
    if _outcome(fn, torch)[0] == "ok":
        assert fn(flame).requires_grad == fn(torch).requires_grad
    else:  # torch: "Only Tensors of floating point and complex dtype can require gradients"
        with pytest.raises(flame.errors.GradDTypeError, match="requires_grad=False"):
            fn(flame)


def test_deepcopy_of_a_model_leaves_parameter_grads_behind():
    for lib in (torch, flame):
        m = lib.nn.Sequential(lib.nn.Linear(2, 2), lib.nn.Linear(2, 2))
        m[1].weight = m[0].weight  # tied: one copy, still tied
        m(lib.ones(1, 2)).sum().backward()
        c = copy.deepcopy(m)
        assert [p.grad for p in c.parameters()] == [None, None, None]
        assert c[0].weight is c[1].weight and c[0].weight is not m[0].weight
        assert all(type(p) is lib.nn.Parameter and p.requires_grad for p in c.parameters())
        np.testing.assert_array_equal(c[0].weight.detach().numpy(), m[0].weight.detach().numpy())
        t = lib.ones(2, requires_grad=True)
        (t * 2).sum().backward()
        assert copy.deepcopy(t).grad is not None  # a plain tensor's deepcopy keeps its grad (torch's)


def _always_log(lib, where):
    m, log = lib.nn.Linear(2, 2), []

    def boom(*a):
        raise ZeroDivisionError

    m.register_forward_hook(lambda *a: log.append("first"))
    if where == "pre-hook":
        m.register_forward_pre_hook(boom)
    elif where == "forward hook":
        m.register_forward_hook(boom)
    m.register_forward_hook(lambda *a: log.append("always"), always_call=True)
    m.register_forward_hook(lambda *a: log.append("always-raises") or boom(), always_call=True)
    if where == "forward":
        m.forward = boom
    with pytest.warns(UserWarning, match="always_call"), pytest.raises(ZeroDivisionError):
        m(lib.ones(1, 2))
    return log


@pytest.mark.parametrize("where", ["pre-hook", "forward", "forward hook"])
def test_always_call_forward_hooks_run_when_the_call_raises(where):
    assert _always_log(flame, where) == _always_log(torch, where)
