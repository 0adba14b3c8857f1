"""Corrupt checkpoints raise CheckpointError naming the file; saved hyperparameters are validated;
temp files of killed saves are cleaned by the next save (issue 14 item 10)."""

import json
import os
import struct

import pytest

import flame
from flame import checkpoint


def _model_and_opt():
    flame.manual_seed(0)
    model = flame.nn.Linear(3, 2)
    opt = flame.optim.Adam(model.parameters(), lr=1e-3)
    (model(flame.ones(4, 3)).sum()).backward()
    opt.step()
    return model, opt


@pytest.fixture
def saved(tmp_path):
    model, opt = _model_and_opt()
    path = tmp_path / "ck.safetensors"
    checkpoint.save_checkpoint(path, model, opt)
    return path, model, opt


@pytest.mark.parametrize("cut", [0, 4, 8, 20])
def test_truncated_file_metadata_raises_checkpoint_error(saved, cut):
    path = saved[0]
    path.write_bytes(path.read_bytes()[:cut])
    with pytest.raises(flame.CheckpointError, match="ck.safetensors"):
        checkpoint.load_metadata(path)


def _rewrite_groups(path, groups_text, extra=None):
    tensors = checkpoint.load(path)
    meta = checkpoint.load_metadata(path)
    meta["flame.optimizer.param_groups"] = groups_text
    tensors.update(extra or {})
    checkpoint.save(tensors, path, meta)


def _groups(path):
    return json.loads(checkpoint.load_metadata(path)["flame.optimizer.param_groups"])


@pytest.mark.parametrize("mutate", [
    lambda g: "not json",
    lambda g: json.dumps({"params": [0]}),
    lambda g: json.dumps([{"lr": 1.0}]),
    lambda g: json.dumps([{**g[0], "params": ["a", "b"]}]),
    lambda g: json.dumps([{**g[0], "lr": "fast"}]),
    lambda g: json.dumps([{**g[0], "betas": [0.9]}]),
    lambda g: json.dumps([{**g[0], "amsgrad": 3}]),
    lambda g: json.dumps([{**g[0], "lr": float("nan")}]),
    lambda g: json.dumps([{**g[0], "initial_lr": {"a": 1}}]),
])
def test_malformed_optimizer_section_raises_checkpoint_error(saved, mutate):
    path, model, opt = saved
    _rewrite_groups(path, mutate(_groups(path)))
    before = opt.param_groups[0]["lr"]
    with pytest.raises(flame.CheckpointError, match="ck.safetensors"):
        checkpoint.load_checkpoint(path, model, opt)
    assert opt.param_groups[0]["lr"] == before


def test_extra_plain_hyperparameters_load_as_pytorch_keeps_them(saved):
    path, model, opt = saved
    _rewrite_groups(path, json.dumps([{**_groups(path)[0], "initial_lr": 0.5}]))
    checkpoint.load_checkpoint(path, model, opt)
    assert opt.param_groups[0]["initial_lr"] == 0.5


def test_badly_named_optimizer_tensor_raises_checkpoint_error(saved):
    path, model, opt = saved
    _rewrite_groups(path, json.dumps(_groups(path)), {"optimizer/state/x/exp_avg": flame.zeros(2)})
    with pytest.raises(flame.CheckpointError, match="ck.safetensors"):
        checkpoint.load_checkpoint(path, model, opt)


def test_stale_temp_files_of_killed_saves_are_removed(saved, tmp_path):
    path, model, opt = saved
    dead = tmp_path / f".{path.name}.999999999.abcd.tmp"  # no such pid
    old_style = tmp_path / f".{path.name}.abcd1234.tmp"
    live = tmp_path / f".{path.name}.{os.getppid()}.efgh.tmp"  # a running process: a save in flight
    other = tmp_path / ".other.safetensors.999999999.x.tmp"
    for f in (dead, old_style, live, other):
        f.write_bytes(b"partial")
    checkpoint.save_checkpoint(path, model, opt)
    assert not dead.exists() and not old_style.exists()
    assert live.exists() and other.exists()
    assert checkpoint.load_metadata(path)


def test_metadata_header_length_past_the_end(tmp_path):
    path = tmp_path / "h.safetensors"
    path.write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    with pytest.raises(flame.CheckpointError, match="h.safetensors"):
        checkpoint.load_metadata(path)
