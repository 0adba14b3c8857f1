"""flame.checkpoint: safetensors round trips, PyTorch interoperability, error listing, atomic saves."""

import os

import ml_dtypes
import numpy as np
import pytest
import safetensors.torch
import torch

import flame
import flame.nn as nn
import flame.optim as optim
from flame import checkpoint
from flame.errors import CheckpointError


def _model(seed=0):
    g = flame.Generator(seed)
    return nn.Sequential(nn.Linear(4, 8, generator=g), nn.ReLU(), nn.LayerNorm(8), nn.Linear(8, 2, generator=g))


def test_save_load_round_trip_all_dtypes(tmp_path):
    sd = {"f32": flame.randn(2, 3, generator=flame.Generator(0)), "f64": flame.tensor(np.arange(3.0)),
          "i64": flame.tensor([1, 2, 3]), "i32": flame.tensor(np.array([4], np.int32)),
          "bool": flame.tensor([True, False]), "bf16": flame.tensor(np.array([1.5, -2], ml_dtypes.bfloat16)),
          "f16": flame.tensor(np.array([0.5], np.float16)), "scalar": flame.tensor(3.0)}
    path = tmp_path / "t.safetensors"
    checkpoint.save(sd, path)
    back = checkpoint.load(path)
    assert set(back) == set(sd)
    for k, v in sd.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape, k
        np.testing.assert_array_equal(back[k].numpy(), v.numpy())
    assert checkpoint.load_metadata(path)["format"] == "pt"
    torch_view = safetensors.torch.load_file(path)  # and PyTorch reads flame's files
    assert torch_view["bf16"].dtype == torch.bfloat16 and torch_view["scalar"].shape == ()


def test_model_and_optimizer_checkpoint(tmp_path):
    model, other = _model(0), _model(1)
    opt = optim.AdamW(model.parameters(), lr=0.01, betas=(0.8, 0.9))
    x = flame.randn(5, 4, generator=flame.Generator(2))
    model(x).square().mean().backward()
    opt.step()
    opt.param_groups[0]["lr"] = 0.003
    path = tmp_path / "ck.safetensors"
    checkpoint.save_checkpoint(path, model, opt, metadata={"epoch": "3"})
    opt2 = optim.AdamW(other.parameters(), lr=1.0)
    meta = checkpoint.load_checkpoint(path, other, opt2)
    assert meta["epoch"] == "3"
    np.testing.assert_array_equal(model(x).numpy(), other(x).numpy())
    g = opt2.param_groups[0]
    assert g["lr"] == 0.003 and g["betas"] == (0.8, 0.9)
    for p, q in zip(model.parameters(), other.parameters()):
        for k in ("step", "exp_avg", "exp_avg_sq"):
            np.testing.assert_array_equal(opt.state[p][k].numpy(), opt2.state[q][k].numpy())
    with pytest.raises(CheckpointError, match="no optimizer state"):
        checkpoint.save_checkpoint(path, model)
        checkpoint.load_checkpoint(path, other, opt2)


def test_torch_written_file_loads_into_model(tmp_path):
    ref = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.LayerNorm(8), torch.nn.Linear(8, 2))
    path = tmp_path / "torch.safetensors"
    safetensors.torch.save_file(ref.state_dict(), path)
    model = _model()
    checkpoint.load_checkpoint(path, model)
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(model(flame.tensor(x)).numpy(), ref(torch.tensor(x)).detach().numpy(),
                               rtol=1e-5, atol=1e-6)
    model.load_state_dict(checkpoint.load(path))


def test_load_errors_list_every_problem(tmp_path):
    sd = dict(_model().state_dict())
    del sd["2.bias"]
    sd["3.weight"] = flame.zeros(2, 7)
    sd["head.weight"] = flame.zeros(1)
    sd["head.bias"] = flame.zeros(1)
    path = tmp_path / "bad.safetensors"
    checkpoint.save(sd, path)
    with pytest.raises(CheckpointError) as e:
        checkpoint.load_checkpoint(path, _model())
    msg = str(e.value)
    assert "missing: 2.bias" in msg and "2 unexpected" in msg and "head.weight" in msg and "head.bias" in msg
    assert "mis-shaped: 3.weight: checkpoint f32[2, 7] vs model f32[2, 8]" in msg
    with pytest.raises(CheckpointError, match="does not exist"):
        checkpoint.load(tmp_path / "nope.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError, match="not a valid"):
        checkpoint.load(tmp_path / "junk.safetensors")


def test_failed_save_keeps_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "ck.safetensors"
    model = _model(0)
    checkpoint.save_checkpoint(path, model)
    good = path.read_bytes()

    def write_half_then_crash(f, data):
        f.write(data[: len(data) // 2])
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint, "_write", write_half_then_crash)
    with pytest.raises(OSError, match="disk full"):
        checkpoint.save_checkpoint(path, _model(1))
    assert path.read_bytes() == good
    assert os.listdir(tmp_path) == ["ck.safetensors"]  # the temporary file was removed
    monkeypatch.undo()
    fresh = _model(1)
    checkpoint.load_checkpoint(path, fresh)
    np.testing.assert_array_equal(fresh[0].weight.numpy(), model[0].weight.numpy())


def test_save_replaces_atomically_and_keeps_usual_permissions(tmp_path, monkeypatch):
    path = tmp_path / "ck.safetensors"
    checkpoint.save({"a": flame.zeros(2)}, path)
    calls = []
    real_replace = os.replace
    monkeypatch.setattr(checkpoint.os, "replace", lambda a, b: (calls.append((a, b)), real_replace(a, b)))
    checkpoint.save({"a": flame.ones(2)}, path)
    (src, dst), = calls
    assert os.path.dirname(src) == str(tmp_path) and dst == str(path)
    np.testing.assert_array_equal(checkpoint.load(path)["a"].numpy(), [1, 1])
    assert (os.stat(path).st_mode & 0o777) == (0o666 & ~checkpoint._UMASK)


def test_checkpoint_load_is_all_or_nothing(tmp_path):
    model = _model(0)
    path = tmp_path / "ck.safetensors"
    adamw = optim.AdamW(model.parameters())
    model(flame.ones(3, 4)).sum().backward()
    adamw.step()  # AdamW's state (torch's, made at the first step) does not fit SGD's
    checkpoint.save_checkpoint(path, model, adamw)
    other = _model(1)
    before = other[0].weight.numpy().copy()
    with pytest.raises(CheckpointError, match="momentum_buffer"):  # the optimizer does not fit ...
        checkpoint.load_checkpoint(path, other, optim.SGD(other.parameters(), lr=0.1, momentum=0.9))
    np.testing.assert_array_equal(other[0].weight.numpy(), before)  # ... so the model is untouched too


def test_metadata_of_any_json_type_round_trips(tmp_path):
    path = tmp_path / "m.safetensors"
    meta = {"epoch": 3, "lr": 2.5e-4, "done": False, "note": "plain text", "history": [1.5, 1.25],
            "cfg": {"layers": 2, "act": "gelu"}, "nothing": None, "step": np.int64(7)}
    checkpoint.save_checkpoint(path, _model(), metadata=meta)
    back = checkpoint.load_checkpoint(path, _model())
    want = dict(meta, step=7)
    assert {k: back[k] for k in want} == want
    assert type(back["epoch"]) is int and type(back["note"]) is str
    assert "flame.metadata.json" not in back  # the bookkeeping key stays inside the file
    raw = safetensors.safe_open(str(path), "np").metadata()  # other tools see strings
    assert raw["epoch"] == "3" and raw["note"] == "plain text"


@pytest.mark.parametrize("meta, message", [
    ({"weights": np.zeros(3)}, "metadata 'weights': a ndarray cannot be stored"),
    ({"t": flame.tensor([1.0])}, "metadata 't': a Tensor cannot be stored"),
    ({3: "x"}, "metadata keys must be strings"),
    ({"flame.metadata.json": "[]"}, "is reserved by flame"),
])
def test_metadata_that_cannot_be_stored_is_a_checkpoint_error(tmp_path, meta, message):
    path = tmp_path / "bad.safetensors"
    with pytest.raises(CheckpointError, match=message.replace("(", r"\(").replace(".", r"\.")):
        checkpoint.save_checkpoint(path, _model(), metadata=meta)
    assert not path.exists()
