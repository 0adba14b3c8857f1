"""Corrupt checkpoints raise CheckpointError naming the file; saved hyperparameters are validated;
temp files of killed saves are cleaned by the next save (issue 14 item 10)."""

import io
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
    checkpoint.save(tensors, path, metadata=meta)


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


def _set_header_metadata(path, key, text):
    """Edit one metadata entry of a safetensors header in place, as a hand (or an attacker) would."""
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header["__metadata__"][key] = text
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + n:])


def _saved_object(tmp_path):
    path = tmp_path / "obj.safetensors"
    flame.save({"w": flame.ones(2), "step": 3, "pair": (1, "a")}, path)
    return path


@pytest.mark.parametrize("text, says", [
    (json.dumps({"__tensor__": "nope"}), "names tensor 'nope', which the file does not hold"),
    (json.dumps({"__dict__": [["w", {"__tensor__": "gone"}]]}), "'w' names tensor 'gone'"),
    (json.dumps({"__dict__": 3}), "not a tensor, tuple or dict"),
    (json.dumps({"__dict__": [[1]]}), "not a tensor, tuple or dict"),
    (json.dumps({"__dict__": [[[1], 2]]}), "not a tensor, tuple or dict"),  # an unhashable key
    (json.dumps({"__tuple__": 5}), "not a tensor, tuple or dict"),
    (json.dumps({"__tensor__": [1]}), "not a tensor, tuple or dict"),
    (json.dumps([{"a": 1}]), "'0' is {'a': 1}, not a tensor"),
    (json.dumps({"__tensor__": "w", "__tuple__": []}), "not a tensor, tuple or dict"),
    (json.dumps({"__dtype__": "evil"}), "not a tensor, tuple or dict"),
    (json.dumps({"__namedtuple__": 5}), "not a tensor, tuple or dict"),
    (json.dumps({"__namedtuple__": ["os", "system", ["a"], [1]]}), "namedtuple os.system('a',), which no imported"),
    (json.dumps({"__namedtuple__": ["nomodule", "P", ["a"], [1]]}), "import nomodule first"),
    ("{{", "not valid JSON"),
    ("1" * 5000, "not valid JSON"),
    ("[" * 100_000 + "]" * 100_000, "JSON nested 100000 levels deep (at most 193)"),
    ("[" * 194 + "]" * 194, "JSON nested 194 levels deep"),
], ids=lambda v: v[:20] if isinstance(v, str) else None)
def test_a_tampered_saved_object_raises_checkpoint_error(tmp_path, text, says):
    """flame.object edited by hand: a KeyError, TypeError, ValueError or RecursionError before."""
    path = _saved_object(tmp_path)
    _set_header_metadata(path, "flame.object", text)
    with pytest.raises(flame.CheckpointError, match="obj.safetensors") as e:
        flame.load(path)
    assert says in str(e.value)


def _nest(x, levels):
    for i in range(levels):
        x = ({"k": x}, (x,), [x])[i % 3]
    return x


def _unnest(x, levels):
    for i in reversed(range(levels)):
        x = x["k"] if i % 3 == 0 else x[0]
    return x


def test_what_flame_save_nests_flame_load_reads_and_deeper_is_refused(tmp_path):
    path = tmp_path / "deep.safetensors"
    deepest = _nest([flame.ones(1)], 63)  # 64 containers, dicts and tuples among them
    flame.save(deepest, path)
    back = _unnest(flame.load(path), 63)
    assert isinstance(back, list) and back[0].numpy().tolist() == [1.0]
    with pytest.raises(flame.CheckpointError, match="nested deeper than 64 levels"):
        flame.save([deepest], path)
    assert _unnest(flame.load(path), 63)[0].numpy().tolist() == [1.0]  # the file is the one saved before


@pytest.mark.parametrize("levels", [200, 5000])
def test_metadata_nested_too_deep_is_refused_on_save(tmp_path, levels):
    value = []
    for _ in range(levels - 1):
        value = [value]
    with pytest.raises(flame.CheckpointError, match="metadata 'm'"):
        flame.save({"w": flame.ones(1)}, tmp_path / "m.safetensors", metadata={"m": value})


@pytest.mark.parametrize("text, says", [
    ("[" * 50_000, "JSON nested 50000 levels deep"),
    ('["x"]', "does not list metadata keys"),
    ('{"a": 1}', "does not list metadata keys"),
], ids=["deep", "unknown key", "not a list"])
def test_tampered_json_metadata_list_raises_checkpoint_error(saved, text, says):
    path, model, opt = saved
    _set_header_metadata(path, "flame.metadata.json", text)
    for load in (checkpoint.load_metadata, lambda p: checkpoint.load_checkpoint(p, model, opt)):
        with pytest.raises(flame.CheckpointError, match="ck.safetensors") as e:
            load(path)
        assert says in str(e.value)


def test_optimizer_groups_nested_too_deep_raise_checkpoint_error(saved):
    path, model, opt = saved
    _set_header_metadata(path, "flame.optimizer.param_groups", "[" * 50_000 + "]" * 50_000)
    with pytest.raises(flame.CheckpointError, match="parameter groups: JSON nested 50000 levels deep"):
        checkpoint.load_checkpoint(path, model, opt)


@pytest.mark.parametrize("lr", ["1" + "0" * 400, "1e400", "-1e400"], ids=["10**400", "1e400", "-1e400"])
def test_a_learning_rate_beyond_float_range_raises_checkpoint_error(saved, lr):
    """An lr of 10**400 raised OverflowError (math.isfinite of an int no float holds)."""
    path, model, opt = saved
    groups = _groups(path)
    _rewrite_groups(path, json.dumps(groups).replace(f'"lr": {groups[0]["lr"]}', f'"lr": {lr}'))
    match = r"ck\.safetensors.*\n  param_groups\.0\.lr: saved .* cannot replace"
    with pytest.raises(flame.CheckpointError, match=match):
        checkpoint.load_checkpoint(path, model, opt)
    assert opt.param_groups[0]["lr"] == 1e-3


@pytest.mark.parametrize("index", ["\u00b2", "9" * 5000, "-1"], ids=["superscript", "5000 digits", "-1"])
def test_an_optimizer_tensor_with_a_bad_index_raises_checkpoint_error(saved, index):
    path, model, opt = saved
    _rewrite_groups(path, json.dumps(_groups(path)), {f"optimizer/state/{index}/exp_avg": flame.zeros(2)})
    with pytest.raises(flame.CheckpointError, match="is not named optimizer/state/INDEX/NAME"):
        checkpoint.load_checkpoint(path, model, opt)


def test_a_file_object_is_named_by_its_type(tmp_path):
    with pytest.raises(flame.CheckpointError, match="<BytesIO>"):
        flame.load(io.BytesIO(b"not a checkpoint"))


@pytest.mark.parametrize("text, says", [
    ('{"a": 1}', "not a list"),
    ('[[[-1], {"w": []}]]', "base shape [-1]"),
    ('[[[2], {"nope": []}]]', "names ['nope'], which the file does not hold"),
    ('[[[2], {"w": [["exp", {}, [2]]]}]]', "is not a list of [view op, attributes, shape]"),
    ('[[[2], {"w": 3}]]', "is not a list of [view op, attributes, shape]"),
    ('[[[100000000], {"w": []}]]', "far fewer elements than it"),
    ('[[[3], {"w": [["slice", {"bogus": 1}, [2]]]}]]', "its view ops do not apply to a [3] storage"),
    ('[[[2], {"w": [["reshape", {"shape": [1, 2]}, [1, 2]]]}]]', "its view ops give shape [1, 2], not its [2]"),
    ('[[[2], {"w": []}, "nope"]]', "the storage's other elements 'nope', which the file does not hold"),
    ('[[[2], {"w": []}, "w"]]', "the storage's other elements 'w', which the file does not hold"),
], ids=lambda v: v[:24])
def test_tampered_views_raise_checkpoint_error(tmp_path, text, says):
    """flame.views edited by hand: the views are rebuilt only from registry view ops that apply."""
    path = _saved_object(tmp_path)
    _set_header_metadata(path, "flame.views", text)
    with pytest.raises(flame.CheckpointError, match="obj.safetensors") as e:
        flame.load(path)
    assert says in str(e.value)
