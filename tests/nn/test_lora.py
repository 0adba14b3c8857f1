"""flame.nn.utils.lora: wrapping by PEFT's target rule, PEFT's init, forward and gradients against a
hand-written LoRA in torch, only the adapters train (the base keeps its bits), adapters save/load
round-trip under PEFT's names, merge / unmerge / merge_and_unload."""

import json
import math
from collections import OrderedDict

import numpy as np
import pytest
import safetensors.numpy
import torch

import flame
import flame.nn as nn
import flame.nn.functional as F
from flame.checkpoint import load_metadata
from flame.nn.utils import lora

TARGETS = ["q", "fc"]


class Net(nn.Module):
    """Two named projections and an MLP, so target names and paths mean something."""

    def __init__(self, seed=0):
        super().__init__()
        g = flame.Generator(seed)
        self.q = nn.Linear(12, 12, generator=g)
        self.mlp = nn.Sequential(OrderedDict(fc=nn.Linear(12, 20, generator=g), act=nn.GELU(),
                                             out=nn.Linear(20, 5, generator=g)))

    def forward(self, x):
        return self.mlp(F.relu(self.q(x)))


def _net(seed=0, r=4, alpha=8, **kw):
    return lora.apply_lora(Net(seed), lora.LoraConfig(r=r, lora_alpha=alpha, target_modules=TARGETS, **kw),
                           generator=flame.Generator(seed + 100))


def _x(seed=1, n=7):
    return flame.tensor(np.random.default_rng(seed).standard_normal((n, 12)).astype(np.float32))


def _randomise_b(model, seed=2):
    """Non-zero B (a trained adapter), so gradients of A and the merge are not trivially zero."""
    r = np.random.default_rng(seed)
    for _, m in lora.lora_layers(model):
        with flame.no_grad():
            m.lora_B.weight.copy_(flame.tensor(r.standard_normal(m.lora_B.weight.shape).astype(np.float32) * 0.3))


def test_apply_lora_wraps_targets_and_freezes_the_rest():
    model = _net()
    assert [p for p, _ in lora.lora_layers(model)] == ["q", "mlp.fc"]
    assert isinstance(model.mlp.fc, lora.Linear) and type(model.mlp.out) is nn.Linear
    trainable = sorted(n for n, p in model.named_parameters() if p.requires_grad)
    assert trainable == ["mlp.fc.lora_A.weight", "mlp.fc.lora_B.weight", "q.lora_A.weight", "q.lora_B.weight"]
    assert list(lora.lora_state_dict(model)) == [f"base_model.model.{n}" for n in
                                                 ["q.lora_A.weight", "q.lora_B.weight", "mlp.fc.lora_A.weight",
                                                  "mlp.fc.lora_B.weight"]]
    regex = lora.apply_lora(Net(), lora.LoraConfig(target_modules=r"mlp\.(fc|out)"))
    assert [p for p, _ in lora.lora_layers(regex)] == ["mlp.fc", "mlp.out"]


@pytest.mark.parametrize("bias, trained", [("all", ["mlp.fc.base_layer.bias", "mlp.out.bias", "q.base_layer.bias"]),
                                           ("lora_only", ["mlp.fc.base_layer.bias", "q.base_layer.bias"])])
def test_bias_modes(bias, trained):
    model = _net(bias=bias)
    biases = sorted(n for n, p in model.named_parameters() if p.requires_grad and n.endswith("bias"))
    assert biases == trained
    assert sorted(k for k in lora.lora_state_dict(model) if k.endswith("bias")) == \
        [f"base_model.model.{n}" for n in trained]


def test_apply_lora_errors():
    with pytest.raises(ValueError, match="not found in the model"):
        lora.apply_lora(Net(), lora.LoraConfig(target_modules=["nope"]))
    with pytest.raises(ValueError, match="'mlp.act' is a GELU"):
        lora.apply_lora(Net(), lora.LoraConfig(target_modules=["act"]))
    with pytest.raises(flame.FlameError, match="has LoRA adapters already"):
        lora.apply_lora(_net(), lora.LoraConfig(target_modules=["q"]))
    with pytest.raises(ValueError, match="r must be a positive integer"):
        lora.LoraConfig(r=0, target_modules=["q"])


def test_init_as_peft_starts_from_the_base_model():
    base, model = Net(), _net()
    x = _x()
    np.testing.assert_array_equal(model(x).numpy(), base(x).numpy())  # B = 0: the adapters add nothing
    a = model.q.lora_A.weight.numpy()
    bound = 1 / math.sqrt(12)  # kaiming_uniform(a=sqrt(5)) over fan_in 12
    assert np.abs(a).max() <= bound and a.std() > 0.4 * bound
    assert not model.q.lora_B.weight.numpy().any()


def test_forward_and_gradients_match_a_hand_written_torch_lora():
    model = _net(r=3, alpha=6)
    _randomise_b(model)
    x = _x()
    F.cross_entropy(model(x), flame.tensor([0, 1, 2, 3, 4, 0, 1])).backward()
    t = {n: torch.tensor(p.numpy(), requires_grad=p.requires_grad) for n, p in model.named_parameters()}

    def lin(h, path):
        y = h @ t[f"{path}.base_layer.weight"].T + t[f"{path}.base_layer.bias"]
        return y + (h @ t[f"{path}.lora_A.weight"].T @ t[f"{path}.lora_B.weight"].T) * 2.0  # alpha / r

    h = torch.nn.functional.gelu(lin(torch.relu(lin(torch.tensor(x.numpy()), "q")), "mlp.fc"))
    logits = h @ t["mlp.out.weight"].T + t["mlp.out.bias"]
    torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1, 2, 3, 4, 0, 1])).backward()
    for n, p in model.named_parameters():
        assert (p.grad is None) == (t[n].grad is None) == (not p.requires_grad), n
        if p.grad is not None:
            np.testing.assert_allclose(p.grad.numpy(), t[n].grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=n)


def _train(model, steps=3, seed=3):
    opt = flame.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.05)
    y = flame.tensor(np.random.default_rng(seed).integers(0, 5, 7))

    @flame.compile
    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    return [step(_x(seed + i), y).item() for i in range(steps)]


def test_training_changes_only_the_adapters():
    model = _net()
    before = {n: p.numpy().tobytes() for n, p in model.named_parameters()}
    losses = _train(model, steps=4)
    assert losses[-1] < losses[0]
    for n, p in model.named_parameters():
        assert (p.numpy().tobytes() != before[n]) == ("lora_" in n), n


def test_adapters_save_load_round_trip(tmp_path):
    model = _net(r=4, alpha=16, bias="lora_only")
    _train(model)
    path = tmp_path / "adapters.safetensors"
    lora.save_lora(model, path, {"note": "test"})
    raw = safetensors.numpy.load_file(str(path))  # plain safetensors: PEFT's names, only the adapters
    assert sorted(raw) == sorted(lora.lora_state_dict(model))
    meta = load_metadata(path)
    assert meta["note"] == "test"
    assert json.loads(meta["adapter_config"]) == {"peft_type": "LORA", "r": 4, "lora_alpha": 16, "lora_dropout": 0.0,
                                                  "target_modules": TARGETS, "bias": "lora_only"}
    fresh = Net()  # the same base, no adapters: load_lora wraps it as the file says
    lora.load_lora(fresh, path)
    x = _x(9)
    np.testing.assert_array_equal(fresh(x).numpy(), model(x).numpy())
    for n, p in fresh.named_parameters():
        assert p.requires_grad == ("lora_" in n or n in ("q.base_layer.bias", "mlp.fc.base_layer.bias")), n
    other = _net(r=2)
    with pytest.raises(flame.CheckpointError, match=r"mis-shaped: base_model\.model\.q\.lora_A\.weight"):
        lora.load_lora(other, path)
    assert not other.q.lora_B.weight.numpy().any()  # nothing loaded when it fails


def test_merge_unmerge_and_unload():
    model = _net()
    _randomise_b(model)
    x = _x()
    want = model(x).numpy()
    w0 = model.q.base_layer.weight.numpy().copy()
    lora.merge_lora(model)
    assert model.q.merged
    np.testing.assert_allclose(model(x).numpy(), want, rtol=1e-5, atol=1e-5)
    delta = model.q.lora_B.weight.numpy() @ model.q.lora_A.weight.numpy() * 2.0
    np.testing.assert_allclose(model.q.base_layer.weight.numpy(), w0 + delta, rtol=1e-6, atol=1e-6)
    with pytest.raises(flame.FlameError, match="merged already"):
        model.q.merge()
    lora.unmerge_lora(model)
    np.testing.assert_allclose(model.q.base_layer.weight.numpy(), w0, atol=1e-6)
    plain = lora.merge_and_unload(model)
    assert type(plain.q) is nn.Linear and not list(lora.lora_layers(plain))
    np.testing.assert_allclose(plain(x).numpy(), want, rtol=1e-5, atol=1e-5)


def test_bf16_base_gets_f32_adapters_that_train_through_bf16_compute():
    base = nn.Linear(12, 6, dtype=flame.bf16, generator=flame.Generator(0))
    layer = lora.Linear(base, r=2, lora_alpha=4, generator=flame.Generator(1))
    assert layer.lora_A.weight.dtype == layer.lora_B.weight.dtype == flame.f32  # PEFT's autocast_adapter_dtype
    base.requires_grad_(False)
    x = _x().to(flame.bf16)
    y = layer(x)
    assert y.dtype == flame.bf16
    y.float().square().sum().backward()
    assert layer.lora_B.weight.grad.dtype == flame.f32 and layer.lora_B.weight.grad.numpy().any()
    assert base.weight.grad is None
