"""nn.Module bookkeeping: registration, traversal, state_dict round trips and load errors, modes."""

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn
from flame.errors import CheckpointError


def _mlp(seed=0, dtype="f32"):
    g = flame.Generator(seed)
    return nn.Sequential(nn.Linear(4, 8, dtype=dtype, generator=g), nn.ReLU(), nn.LayerNorm(8, dtype=dtype),
                         nn.Linear(8, 3, dtype=dtype, generator=g))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3, 3, generator=flame.Generator(1))
        self.norm = nn.RMSNorm(3)
        self.register_buffer("count", flame.zeros(()))
        self.register_buffer("scratch", flame.zeros(2), persistent=False)
        self.scale = 2.0

    def forward(self, x):
        return self.norm(self.proj(x)) * self.scale


def test_parameter_is_a_slotted_tensor_sharing_memory():
    t = flame.ones(3)
    p = nn.Parameter(t)
    assert isinstance(p, flame.Tensor) and p.requires_grad
    assert not hasattr(p, "__dict__")
    with pytest.raises(AttributeError):
        p.anything = 1
    assert p._data is t._data
    assert type(p * 2) is flame.Tensor
    assert "Parameter containing" in repr(p)


def test_registration_and_traversal():
    b = Block()
    assert [n for n, _ in b.named_parameters()] == ["proj.weight", "proj.bias", "norm.weight"]
    assert [n for n, _ in b.named_children()] == ["proj", "norm"]
    assert [type(m).__name__ for m in b.modules()] == ["Block", "Linear", "RMSNorm"]
    assert [n for n, _ in b.named_buffers()] == ["count", "scratch"]
    assert list(b.state_dict()) == ["count", "proj.weight", "proj.bias", "norm.weight"]  # torch order
    assert b.count._role == "state"
    assert b.scale == 2.0 and "scale" not in b.state_dict()
    b.proj = None
    assert [n for n, _ in b.named_parameters()] == ["norm.weight"]
    with pytest.raises(TypeError):
        b.norm = 3  # a registered child must stay a Module (or None)
    del b.count
    assert "count" not in b.state_dict()


def test_shared_parameters_are_listed_once():
    lin = nn.Linear(2, 2)
    m = nn.Sequential(lin, nn.ReLU(), lin)
    assert len(list(m.parameters())) == 2
    assert len(list(m.modules())) == 3


def test_assigning_before_super_init_explains():
    class Bad(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(flame.ones(1))

    with pytest.raises(AttributeError, match="super"):
        Bad()


def test_state_dict_names_match_torch():
    ours = _mlp()
    theirs = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.LayerNorm(8), torch.nn.Linear(8, 3))
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict(theirs.state_dict())  # torch tensors load directly
    for (_, a), (_, b) in zip(ours.state_dict().items(), theirs.state_dict().items()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_state_dict_round_trip_in_place():
    a, b = _mlp(0), _mlp(1)
    params_before = list(b.parameters())
    x = flame.tensor(np.random.default_rng(0).standard_normal((5, 4)), dtype="f32")
    assert not np.allclose(a(x).numpy(), b(x).numpy())
    b.load_state_dict(a.state_dict())
    np.testing.assert_array_equal(a(x).numpy(), b(x).numpy())
    assert all(p is q for p, q in zip(params_before, b.parameters()))  # same objects, new values
    sd = a.state_dict()
    assert sd["0.weight"]._data is a[0].weight._data  # state_dict shares memory


def test_load_state_dict_lists_every_problem_and_changes_nothing():
    m = _mlp(0)
    before = {k: v.numpy().copy() for k, v in m.state_dict().items()}
    sd = dict(_mlp(1).state_dict())
    del sd["0.bias"], sd["2.weight"]
    sd["extra.weight"] = flame.zeros(2)
    sd["3.weight"] = flame.zeros(3, 9)
    with pytest.raises(CheckpointError) as e:
        m.load_state_dict(sd)
    msg = str(e.value)
    for needle in ("0.bias", "2.weight", "extra.weight", "3.weight", "2 missing", "1 unexpected", "1 mis-shaped",
                   "[3, 9]", "[3, 8]"):
        assert needle in msg
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k])


def test_load_state_dict_non_strict_returns_keys():
    m = _mlp(0)
    sd = dict(_mlp(1).state_dict())
    del sd["0.bias"]
    sd["junk"] = flame.zeros(1)
    res = m.load_state_dict(sd, strict=False)
    assert res.missing_keys == ["0.bias"] and res.unexpected_keys == ["junk"]
    np.testing.assert_array_equal(m[0].weight.numpy(), sd["0.weight"].numpy())
    sd["3.bias"] = flame.zeros(7)
    with pytest.raises(CheckpointError, match="mis-shaped"):
        m.load_state_dict(sd, strict=False)


@pytest.mark.parametrize("as_path", [str, lambda p: p])
def test_load_state_dict_refuses_a_path_and_says_how_to_load_it(tmp_path, as_path):
    """A path was iterated character by character and nothing loaded; PyTorch raises a TypeError on
    anything that is not a mapping, and flame's error names the loaders."""
    m = _mlp(0)
    path = tmp_path / "w.safetensors"
    flame.save(_mlp(1).state_dict(), path)
    before = {k: v.numpy().copy() for k, v in m.state_dict().items()}
    match = r"Sequential\.load_state_dict: .* the path .*w\.safetensors"
    with pytest.raises(flame.ArgumentTypeError, match=match) as e:
        m.load_state_dict(as_path(path))
    assert isinstance(e.value, TypeError) and "flame.load(path)" in str(e.value) and "load_checkpoint" in str(e.value)
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k])
    m.load_state_dict(flame.load(path))  # what the message says to do
    for k, v in _mlp(1).state_dict().items():
        np.testing.assert_array_equal(m.state_dict()[k].numpy(), v.numpy())
    with pytest.raises(TypeError):  # PyTorch refuses what is not a mapping the same way
        torch.nn.Linear(2, 2).load_state_dict(str(path))


@pytest.mark.parametrize("value", [[("0.weight", np.zeros(1))], None, 3])
def test_load_state_dict_refuses_what_is_not_a_mapping(value):
    with pytest.raises(flame.ArgumentTypeError, match=rf"expected a state_dict .*got {type(value).__name__}"):
        _mlp(0).load_state_dict(value)
    with pytest.raises(TypeError):
        torch.nn.Linear(2, 2).load_state_dict(value)


def test_train_eval_and_dropout():
    m = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5, generator=flame.Generator(3)))
    assert m.training and m[1].training
    x = flame.ones(64, 4)
    m.eval()
    assert not m[1].training
    np.testing.assert_array_equal(m[1](x).numpy(), x.numpy())
    m.train()
    y = m[1](x).numpy()
    assert set(np.unique(y)) <= {0.0, 2.0}
    assert 0.35 < (y == 0).mean() < 0.65


def test_module_to_double_keeps_objects():
    m = _mlp()
    p0 = m[0].weight
    w = p0.numpy().astype(np.float64)
    m.double()
    assert m[0].weight is p0 and p0.dtype == flame.f64
    np.testing.assert_array_equal(p0.numpy(), w)
    assert m(flame.ones(2, 4, dtype="f64")).dtype == flame.f64


def test_repr_and_containers():
    m = nn.Sequential(nn.Linear(2, 3), nn.GELU(approximate="tanh"))
    assert "Linear(in_features=2, out_features=3, bias=True)" in repr(m)
    assert "approximate='tanh'" in repr(m)
    assert len(m) == 2 and isinstance(m[-1], nn.GELU) and len(m[:1]) == 1
    ml = nn.ModuleList([nn.Linear(1, 1), nn.Linear(1, 1)])
    assert len(list(ml.parameters())) == 4 and len(ml) == 2


@pytest.mark.parametrize("layer,ref", [
    (nn.ReLU(), torch.nn.ReLU()), (nn.GELU(), torch.nn.GELU()), (nn.GELU("tanh"), torch.nn.GELU("tanh")),
    (nn.SiLU(), torch.nn.SiLU()), (nn.Tanh(), torch.nn.Tanh()), (nn.Sigmoid(), torch.nn.Sigmoid()),
    (nn.LeakyReLU(0.2), torch.nn.LeakyReLU(0.2)), (nn.Softmax(-1), torch.nn.Softmax(-1)),
])
def test_activations_match_torch(layer, ref):
    x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    np.testing.assert_allclose(layer(flame.tensor(x)).numpy(), ref(torch.tensor(x)).numpy(), rtol=1e-5, atol=1e-6)
