"""nn.Module's conversions against torch.nn.Module's: `_apply(fn)`, `type(dst_type)`, `share_memory()` and
the ones built on `_apply` (to, float, double, half, cpu) on the same model: what each returns, the dtypes
of every parameter, .grad and buffer afterwards, which objects stay the same, which errors are raised,
that a subclass's `_apply` override is what they call, and a compiled forward after a conversion."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame


def _net(lib):
    nn = lib.nn
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    net.register_buffer("steps", lib.zeros(2, dtype=lib.int64))
    for p in net.parameters():
        p.grad = lib.ones(*p.shape)
    return net


def _flame_dtype(d) -> str:
    return d.name if isinstance(d, flame.dtype) else {v: k for k, v in _TORCH.items()}[d]


_TORCH = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16,
          "i64": torch.int64, "i32": torch.int32, "bool": torch.bool}


def _facts(net):
    """(dtype of each state entry, dtype of each .grad, which objects are Parameters)."""
    state = {k: _flame_dtype(v.dtype) for k, v in net.state_dict(keep_vars=True).items()}
    grads = {k: _flame_dtype(p.grad.dtype) for k, p in net.named_parameters()}
    kinds = {k: type(v).__name__ for k, v in net.state_dict(keep_vars=True).items()}
    return state, grads, kinds


def _convert(lib, net, how):
    objects = net.state_dict(keep_vars=True)
    grads = {k: p.grad for k, p in net.named_parameters()}
    assert how(net) is net
    kept = {k: v is objects[k] for k, v in net.state_dict(keep_vars=True).items()}
    kept_grads = {k: p.grad is grads[k] for k, p in net.named_parameters()}
    return _facts(net), kept, kept_grads


CONVERSIONS = {
    "_apply half": lambda lib: lambda m: m._apply(lambda t: t.half()),
    "_apply double, not recursing": lambda lib: lambda m: m[0]._apply(lambda t: t.double(), recurse=False) and m,
    "_apply identity": lambda lib: lambda m: m._apply(lambda t: t),
    "type(float64)": lambda lib: lambda m: m.type(lib.float64),
    "type('torch.DoubleTensor')": lambda lib: lambda m: m.type("torch.DoubleTensor"),
    "type('<lib>.HalfTensor')": lambda lib: lambda m: m.type(f"{lib.__name__}.HalfTensor"),
    "share_memory": lambda lib: lambda m: m.share_memory(),
    "to(float64)": lambda lib: lambda m: m.to(lib.float64),
    "to('cpu')": lambda lib: lambda m: m.to("cpu"),
    "cpu": lambda lib: lambda m: m.cpu(),
    "double": lambda lib: lambda m: m.double(),
    "bfloat16": lambda lib: lambda m: m.bfloat16(),
}


@pytest.mark.parametrize("name", CONVERSIONS)
def test_conversion_matches_torch(name):
    theirs = _convert(torch, _net(torch), CONVERSIONS[name](torch))
    mine = _convert(flame, _net(flame), CONVERSIONS[name](flame))
    assert mine == theirs


@pytest.mark.parametrize("dst", ["int64", "torch.LongTensor"])
def test_type_to_an_integer_type_refuses_a_parameter_that_requires_grad(dst):
    errors = []
    for lib in (torch, flame):
        with pytest.raises(RuntimeError) as e:
            _net(lib).type(getattr(lib, dst) if dst == "int64" else dst)
        errors.append(str(e.value))
    assert "must be floating point" in errors[0] and "must be floating point" in errors[1]


@pytest.mark.parametrize("bad, error", [("foo", ValueError), ("float64", ValueError), ("torch.float64", ValueError),
                                        (float, ValueError), (3, TypeError)])
def test_type_rejects_what_torch_rejects(bad, error):
    for lib in (torch, flame):
        with pytest.raises(error, match="invalid type|dtype must be"):
            lib.nn.Linear(2, 2).type(bad)


def test_requires_grad_integer_data_is_refused_as_torchs():
    for lib in (torch, flame):
        p = lib.nn.Parameter(lib.ones(2))
        with pytest.raises(RuntimeError, match="must be floating point"):
            p.data = lib.ones(2, dtype=lib.int64)
        with pytest.raises(TypeError):
            lib.nn.Linear(2, 2)._apply(lambda t: 5)


def test_apply_may_change_shapes_of_parameters_and_grads():
    shapes = []
    for lib in (torch, flame):
        m = lib.nn.Linear(2, 3)
        m.weight.grad = lib.ones(3, 2)
        w = m.weight
        m._apply(lambda t: t.reshape(-1))
        assert m.weight is w and isinstance(m.weight, lib.nn.Parameter)
        shapes.append((tuple(m.weight.shape), tuple(m.weight.grad.shape), tuple(m.bias.shape)))
    assert shapes[0] == shapes[1]


@pytest.mark.parametrize("how", ["half", "float", "double", "to", "type", "share_memory", "cpu"])
def test_conversions_call_a_subclass_apply(how):
    calls = []
    for lib in (torch, flame):
        class Kept(lib.nn.Linear):
            seen: list = []

            def _apply(self, fn, recurse=True):
                self.seen.append(type(self).__name__)
                return super()._apply(fn, recurse)

        m = lib.nn.Sequential(Kept(2, 2), lib.nn.ReLU())
        args = {"to": (lib.float64,), "type": (lib.float64,)}.get(how, ())
        assert getattr(m, how)(*args) is m
        calls.append(Kept.seen)
    assert calls[1] == calls[0] == ["Kept"]


@pytest.mark.filterwarnings("ignore::flame.RecompileWarning")  # the conversion re-traces, as it must
@pytest.mark.parametrize("compiled", [False, True])
def test_forward_after_apply_matches_torch(compiled):
    torch.manual_seed(0)
    theirs = _net(torch).eval()
    mine = _net(flame).eval()
    mine.load_state_dict({k: flame.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((5, 3))
    outs = []
    for lib, m in ((torch, theirs), (flame, mine)):
        f = flame.compile(lambda t, m=m: m(t)) if compiled and lib is flame else m
        f(lib.tensor(x, dtype=lib.float32))  # a first call in f32 (a compiled function traces it)
        m._apply(lambda t: t.double() if t.is_floating_point() else t)
        y = f(lib.tensor(x, dtype=lib.float64))
        assert _flame_dtype(y.dtype) == "f64"
        outs.append(y.detach().numpy())
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-12)


@pytest.mark.parametrize("dtype", sorted(_TORCH) + ["i16", "i8", "u8"])
def test_tensor_type_names_as_torchs(dtype):
    td = _TORCH.get(dtype) or {"i16": torch.int16, "i8": torch.int8, "u8": torch.uint8}[dtype]
    theirs = torch.zeros(2, dtype=td)
    mine = flame.zeros(2, dtype=dtype)
    assert mine.type() == theirs.type().replace("torch.", "flame.", 1)
    for name in (theirs.type(), mine.type()):
        back = flame.ones(2).type(name)
        assert back.dtype.name == dtype and torch.ones(2).type(theirs.type()).dtype == td
    assert mine.type(mine.type()) is mine and theirs.type(theirs.type()) is theirs
