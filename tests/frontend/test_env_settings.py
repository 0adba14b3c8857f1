"""FLAME_* environment variables are read through flame._env: a value a variable cannot hold raises
flame.ArgumentError naming the variable and the value (FLAME_CACHE_LIMIT=abc raised a bare
ValueError; FLAME_FUSE=abc or FLAME_CUDA_GRAPHS=2 were silently taken as a default)."""

from __future__ import annotations

import pytest

import flame
from flame import _env
from flame.codegen.kernel import rows_schedule
from flame.passes.pipeline import debug_enabled, fusion_enabled
from flame.runtime import backend, cuda, cuda_graphs, device

FLAGS = [  # (variable, its reader, the default)
    ("FLAME_FUSE", fusion_enabled, True),
    ("FLAME_DEBUG", debug_enabled, False),
    ("FLAME_SIDE_STREAM", backend.side_stream_enabled, False),
    ("FLAME_MATMUL_BGRAD", backend.bgrad_enabled, False),
    ("FLAME_COMM_STREAM", backend.comm_stream_enabled, True),
    ("FLAME_SANITIZE", cuda.sanitizing, False),
    ("FLAME_MATMUL_AUTOTUNE", lambda: _env.env_flag("FLAME_MATMUL_AUTOTUNE", False), False),  # read at import
]


@pytest.mark.parametrize("name, read, default", FLAGS, ids=[f[0] for f in FLAGS])
@pytest.mark.parametrize("bad", ["abc", "2", "-1", "yes please"])
def test_a_flag_with_a_value_it_cannot_hold_is_refused(monkeypatch, name, read, default, bad):
    monkeypatch.setenv(name, bad)
    with pytest.raises(flame.ArgumentError, match=rf"environment variable {name}='{bad}': expected 1 \(on\) or 0"):
        read()


@pytest.mark.parametrize(
    "name, read, default",
    [f for f in FLAGS if f[0] != "FLAME_SANITIZE"],
    ids=[f[0] for f in FLAGS if f[0] != "FLAME_SANITIZE"],
)  # sanitizing() on needs CuPy
def test_flags_keep_their_meaning(monkeypatch, name, read, default):
    monkeypatch.delenv(name, raising=False)
    assert read() is default
    monkeypatch.setenv(name, "")
    assert read() is default
    for text, value in (("0", False), ("1", True), ("off", False), ("ON", True), (" 1 ", True)):
        monkeypatch.setenv(name, text)
        assert read() is value


@pytest.mark.parametrize("bad", ["abc", "0", "-3", "2.5", "1e3"])
def test_cache_limit_from_the_environment_must_be_a_positive_int(monkeypatch, bad):
    monkeypatch.setenv("FLAME_CACHE_LIMIT", bad)
    with pytest.raises(flame.ArgumentError, match=rf"FLAME_CACHE_LIMIT='{bad}': expected an integer >= 1"):
        flame.compile(lambda x: x)
    assert flame.compile(lambda x: x, cache_limit=2).stats().cache_limit == 2  # the argument wins
    monkeypatch.setenv("FLAME_CACHE_LIMIT", " 5 ")
    assert flame.compile(lambda x: x).stats().cache_limit == 5


def test_cuda_graphs_setting(monkeypatch):
    for text, value in (("0", "never"), ("1", "always"), ("auto", "auto"), ("", "auto")):
        monkeypatch.setenv("FLAME_CUDA_GRAPHS", text)
        assert cuda_graphs.graphs_setting() == value
    monkeypatch.setenv("FLAME_CUDA_GRAPHS", "2")
    with pytest.raises(flame.ArgumentError, match=r"FLAME_CUDA_GRAPHS='2': expected one of 0, 1, auto"):
        cuda_graphs.graphs_setting()


def test_rows_schedule_setting(monkeypatch):
    monkeypatch.setenv("FLAME_ROWS_SCHEDULE", "new")
    assert rows_schedule() == "new"
    monkeypatch.setenv("FLAME_ROWS_SCHEDULE", "fast")
    with pytest.raises(flame.ArgumentError, match=r"FLAME_ROWS_SCHEDULE='fast': expected one of auto, old, new"):
        rows_schedule()


def test_device_setting(monkeypatch):
    monkeypatch.setattr(device, "_chosen", [])
    monkeypatch.setenv("FLAME_DEVICE", "gpu")
    with pytest.raises(flame.ArgumentError, match=r"FLAME_DEVICE='gpu': expected one of cuda, reference"):
        device.get_device()
    assert device._chosen == []
