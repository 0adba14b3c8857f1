"""A module's extra state (get_extra_state / set_extra_state) in state_dict and load_state_dict, as torch's:
the `_extra_state` key, its order, missing and unexpected keys, assign=True, and a round trip through
flame.save and save_checkpoint."""

from __future__ import annotations

import pytest
import torch

import flame
from flame.checkpoint import load_checkpoint, save_checkpoint
from flame.errors import CheckpointError


def _model(nn):
    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.count = 3

        def get_extra_state(self):
            return {"count": self.count}

        def set_extra_state(self, state):
            self.count = state["count"]

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Counter()
            self.other = nn.Linear(2, 1)

    return Outer


def test_state_dict_keys_and_order_match_torch():
    assert list(_model(flame.nn)().state_dict()) == list(_model(torch.nn)().state_dict())
    assert "inner._extra_state" in _model(flame.nn)().state_dict()
    assert list(flame.nn.Linear(2, 2).state_dict()) == list(torch.nn.Linear(2, 2).state_dict())


@pytest.mark.parametrize("assign", [False, True])
def test_load_state_dict_hands_the_extra_state_back(assign):
    model = _model(flame.nn)
    a, b = model(), model()
    a.inner.count = 7
    assert a.state_dict()["inner._extra_state"] == {"count": 7}
    b.load_state_dict(a.state_dict(), assign=assign)
    assert b.inner.count == 7


def test_missing_and_unexpected_extra_state_as_torch():
    model = _model(flame.nn)
    sd = {k: v for k, v in model().state_dict().items() if k != "inner._extra_state"}
    with pytest.raises(CheckpointError, match="inner._extra_state"):
        model().load_state_dict(sd)
    b = model()
    assert b.load_state_dict(sd, strict=False).missing_keys == ["inner._extra_state"]
    assert b.inner.count == 3
    lin = flame.nn.Linear(2, 2)
    got = lin.load_state_dict({**lin.state_dict(), "_extra_state": 1}, strict=False)
    want = torch.nn.Linear(2, 2).load_state_dict({**torch.nn.Linear(2, 2).state_dict(), "_extra_state": 1},
                                                 strict=False)
    assert (got.missing_keys, got.unexpected_keys) == (want.missing_keys, want.unexpected_keys)


def test_a_failed_load_changes_no_extra_state():
    model = _model(flame.nn)
    a, b = model(), model()
    a.inner.count = 9
    sd = a.state_dict()
    sd["other.weight"] = flame.zeros(5, 5)
    with pytest.raises(CheckpointError, match="other.weight"):
        b.load_state_dict(sd)
    assert b.inner.count == 3


def test_the_base_class_has_no_extra_state():
    for nn in (flame.nn, torch.nn):
        with pytest.raises(RuntimeError):
            nn.Linear(2, 2).get_extra_state()
        with pytest.raises(RuntimeError):
            nn.Linear(2, 2).set_extra_state(1)


def test_extra_state_survives_flame_save_and_save_checkpoint(tmp_path):
    model = _model(flame.nn)
    a = model()
    a.inner.count = 11
    flame.save(a.state_dict(), tmp_path / "sd.safetensors")
    b = model()
    b.load_state_dict(flame.load(tmp_path / "sd.safetensors"))
    assert b.inner.count == 11
    save_checkpoint(tmp_path / "ck.safetensors", a)
    c = model()
    load_checkpoint(tmp_path / "ck.safetensors", c)
    assert c.inner.count == 11
