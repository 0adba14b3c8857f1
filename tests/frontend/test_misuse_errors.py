"""Everyday misuse, written once against a library `lib` (torch or flame), eagerly and under @flame.compile:
torch 2.13 raises the built-in class of each row, and flame raises its own error (flame.FlameError, or the
built-in class where torch's is a plain Python one) that is also that class, says the row's fragment and
names the user's line: this file and the line of the row's lambda."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

import flame

HERE = "test_misuse_errors.py"


def _x(lib, *shape, grad=False):
    t = lib.tensor(np.arange(np.prod(shape), dtype=np.float32).reshape(shape))
    return t.requires_grad_(True) if grad else t


def _make_mods(lib):
    """Modules made once per library, outside any compiled function (parameters cannot be made while tracing)."""

    class NoForward(lib.nn.Module):
        pass

    return types.SimpleNamespace(
        lin=lib.nn.Linear(4, 2),
        emb=lib.nn.Embedding(10, 3),
        bn=lib.nn.BatchNorm2d(3),
        conv=lib.nn.Conv2d(3, 4, 3),
        none=NoForward(),
    )


_mods = {lib: _make_mods(lib) for lib in (torch, flame)}.__getitem__


# name: (f(lib), the built-in class torch raises, a fragment of flame's message, whether it runs compiled too)
CASES = {
    "matmul shapes": (lambda lib: _x(lib, 3, 4) @ _x(lib, 5, 6), RuntimeError, "inner dimensions differ", True),
    "add broadcast": (lambda lib: _x(lib, 3, 4) + _x(lib, 5), RuntimeError, "do not broadcast", True),
    "cat shapes": (lambda lib: lib.cat([_x(lib, 2, 3), _x(lib, 2, 4)]), RuntimeError, "differ", True),
    "view count": (lambda lib: _x(lib, 2, 3).view(4, 2), RuntimeError, "element counts differ", True),
    "reshape(-1, -1)": (lambda lib: _x(lib, 2, 3).reshape(-1, -1), RuntimeError, "only one dimension", True),
    "expand": (lambda lib: _x(lib, 2, 3).expand(4, 3), RuntimeError, "broadcast", True),
    "narrow": (lambda lib: _x(lib, 2, 3).narrow(1, 2, 3), RuntimeError, "narrow", True),
    "sum(dim=5)": (lambda lib: _x(lib, 2, 3).sum(dim=5), IndexError, "out of range", True),
    "transpose(0, 2)": (lambda lib: _x(lib, 2, 3).transpose(0, 2), IndexError, "out of range", True),
    "x[5]": (lambda lib: _x(lib, 2, 3)[5], IndexError, "index 5 is out of bounds for dimension 0 with size 2", True),
    "x[:, 3]": (lambda lib: _x(lib, 2, 3)[:, 3], IndexError, "out of bounds for dimension 1", True),
    "too many indices": (lambda lib: _x(lib, 2, 3)[0, 0, 0], IndexError, "too many indices", True),
    "float tensor index": (lambda lib: _x(lib, 2, 3)[lib.tensor([0.0, 1.0])], IndexError, "indices", True),
    "tensor index out of range": (lambda lib: _x(lib, 2, 3)[lib.tensor([0, 7])], IndexError, "index 7", True),
    "matmul f16 @ f32": (lambda lib: _x(lib, 2, 3).half() @ _x(lib, 3, 2), RuntimeError, "dtype", True),
    "mean of an int tensor": (lambda lib: lib.tensor([1, 2]).mean(), RuntimeError, "mean", True),
    "item of 3 elements": (lambda lib: _x(lib, 3).item(), RuntimeError, "3 elements", False),
    "bool of 3 elements": (lambda lib: bool(_x(lib, 3) > 0), RuntimeError, "ambiguous", False),
    "tensor + str": (lambda lib: _x(lib, 3) + "a", TypeError, "str", True),
    "randn(2.5)": (lambda lib: lib.randn(2.5), TypeError, "size", True),
    "zeros((2, 3.0))": (lambda lib: lib.zeros((2, 3.0)), TypeError, "size", True),
    "dropout p=1.5": (lambda lib: lib.nn.functional.dropout(_x(lib, 3), p=1.5), ValueError, "dropout", True),
    "cross_entropy float labels": (
        lambda lib: lib.nn.functional.cross_entropy(_x(lib, 4, 3), lib.tensor([0.0, 1.0, 2.0, 1.0])),
        RuntimeError,
        "int64",
        True,
    ),
    "cross_entropy class 5 of 3": (
        lambda lib: lib.nn.functional.cross_entropy(_x(lib, 4, 3), lib.tensor([0, 1, 5, 1])),
        IndexError,
        "target 5",
        True,
    ),
    "Linear in_features": (lambda lib: _mods(lib).lin(_x(lib, 3, 5)), RuntimeError, "features", True),
    "Embedding float indices": (lambda lib: _mods(lib).emb(_x(lib, 2)), RuntimeError, "embedding: indices", True),
    "Embedding index 12 of 10": (lambda lib: _mods(lib).emb(lib.tensor([1, 12])), IndexError, "index 12", True),
    "BatchNorm2d channels": (lambda lib: _mods(lib).bn(_x(lib, 2, 4, 2, 2)), RuntimeError, "channels", True),
    "Conv2d channels": (lambda lib: _mods(lib).conv(_x(lib, 1, 2, 5, 5)), RuntimeError, "channels", True),
    "Module without forward": (lambda lib: _mods(lib).none(_x(lib, 3)), NotImplementedError, '"forward"', True),
    "in-place on a leaf": (lambda lib: _x(lib, 3, grad=True).add_(1), RuntimeError, "leaf Variable", False),
    "SGD of a tensor": (lambda lib: lib.optim.SGD(_x(lib, 3, grad=True), lr=0.1), TypeError, "iterable", False),
    "SGD of a non-leaf": (lambda lib: lib.optim.SGD([_x(lib, 3, grad=True) * 2], 0.1), ValueError, "non-leaf", False),
    "SGD of nothing": (lambda lib: lib.optim.SGD([], lr=0.1), ValueError, "empty parameter list", False),
    "SGD lr=-1": (lambda lib: lib.optim.SGD([_x(lib, 3, grad=True)], lr=-1.0), ValueError, "learning rate", False),
    "backward(gradient of another shape)": (
        lambda lib: (_x(lib, 3, grad=True) * 2).backward(_x(lib, 4)), RuntimeError, "Mismatch in shape", False
    ),
    "backward() of a non-scalar": (lambda lib: (_x(lib, 3, grad=True) * 2).backward(), RuntimeError, "scalar", False),
    "gather index past the end": (
        lambda lib: _x(lib, 2, 3).gather(1, lib.tensor([[3], [0]])), RuntimeError, "index", True
    ),
    "index_select of a 2-D index": (
        lambda lib: _x(lib, 2, 3).index_select(0, lib.zeros(2, 2, dtype=lib.int64)), IndexError, "1-D", True
    ),
    "index tensors that do not broadcast": (
        lambda lib: _x(lib, 2, 3)[lib.tensor([0, 1]), lib.tensor([0, 1, 2])], IndexError, "broadcast together", True
    ),
    "masked_fill mask shape": (
        lambda lib: _x(lib, 2, 3).masked_fill(lib.ones(4, dtype=lib.bool), 0.0), RuntimeError, "broadcast", True
    ),
    "one_hot class 3 of 3": (lambda lib: lib.nn.functional.one_hot(lib.tensor([3]), 3), RuntimeError, "one_hot", True),
    "ragged nested lists": (lambda lib: lib.tensor([[1, 2], [3]]), ValueError, "length 2 at dim 1 (got 1)", False),
    "Sequential of an int": (lambda lib: lib.nn.Sequential(lib.nn.Identity(), 3), TypeError, "not a Module", False),
    "load_state_dict missing": (
        lambda lib: lib.nn.Linear(2, 2).load_state_dict({"weight": lib.zeros(2, 2)}), RuntimeError, "bias", False
    ),
    "load_state_dict shape": (
        lambda lib: lib.nn.Linear(2, 2).load_state_dict(lib.nn.Linear(3, 2).state_dict()), RuntimeError, "weight", False
    ),
}


def _line(f) -> str:
    return f"{HERE}:{f.__code__.co_firstlineno}"


@pytest.mark.parametrize("name", CASES)
def test_torch_raises_the_class(name):
    f, cls, _, _ = CASES[name]
    with pytest.raises(cls):
        f(torch)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", CASES)
def test_flame_raises_its_error_at_the_users_line(name, compiled):
    f, cls, fragment, runs_compiled = CASES[name]
    if compiled and not runs_compiled:
        pytest.skip("eager-only misuse")
    with pytest.raises(cls) as info:
        if compiled:
            flame.compile(lambda x: f(flame) * x)(flame.tensor(1.0))
        else:
            f(flame)
    err, msg = info.value, str(info.value)
    builtin_only = cls in (NotImplementedError,)
    assert builtin_only or isinstance(err, flame.FlameError), f"{type(err).__name__}: {msg}"
    assert fragment in msg, f"{fragment!r} not in: {msg}"
    assert _line(f) in msg, f"{_line(f)} not in: {msg}"


def test_parameter_made_while_tracing_names_the_line():
    def step(x):
        return flame.nn.Linear(2, 2)(x)  # the module is made inside the trace

    with pytest.raises(flame.TraceError) as info:
        flame.compile(step)(_x(flame, 3, 2))
    msg = str(info.value)
    assert "before compiling" in msg and f"{HERE}:{step.__code__.co_firstlineno + 1}" in msg, msg


def test_duplicate_parameter_says_where_it_repeats():
    p, q = _x(flame, 3, grad=True), _x(flame, 2, grad=True)
    with pytest.raises(ValueError, match=f"(?s)twice in one parameter group.*{HERE}"):
        flame.optim.SGD([p, q, p], lr=0.1)
    with pytest.raises(ValueError, match=f"(?s)more than one parameter group.*{HERE}"):
        flame.optim.SGD([{"params": [p]}, {"params": [q, p]}], lr=0.1)


def test_backward_of_a_non_scalar_while_tracing_names_the_line():
    def step(x):
        (x * 2).backward()  # no gradient argument

    with pytest.raises(RuntimeError) as info:
        flame.compile(step)(_x(flame, 3, grad=True))
    msg = str(info.value)
    assert isinstance(info.value, flame.FlameError) and "implicitly created only for scalar outputs" in msg
    assert f"{HERE}:{step.__code__.co_firstlineno + 1}" in msg, msg


def test_a_retained_non_leaf_can_be_optimized_as_in_torch():
    y = _x(flame, 3, grad=True) * 2
    y.retain_grad()
    flame.optim.SGD([y], lr=0.1)
