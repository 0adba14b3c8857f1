"""Garbage in the process group's environment (torchrun's variables, FLAME_DIST_TIMEOUT, the store's
port and secret) or arguments is a DistributedError naming the variable and its value, raised
before anything is started; the process stays uninitialised. torch.distributed's env:// rendezvous
refuses the same values (with a ValueError or RuntimeError of its own)."""

from __future__ import annotations

import datetime

import pytest

import flame.distributed as dist
from flame.distributed.run import _parse, main

# valid but for the one bad value of each case (a short timeout bounds a test whose check was missed)
GOOD = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29512", "FLAME_DIST_TIMEOUT": "3"}

CASES = [
    ({"MASTER_PORT": "70000"}, r"MASTER_PORT='70000' is out of range: a TCP port number in \[1, 65535\]"),
    ({"MASTER_PORT": "0"}, r"MASTER_PORT='0' is out of range"),
    ({"MASTER_PORT": "-1"}, r"MASTER_PORT='-1' is out of range"),
    ({"MASTER_PORT": "http"}, r"MASTER_PORT='http' is not a TCP port number"),
    ({"FLAME_STORE_PORT": "99999"}, r"FLAME_STORE_PORT='99999' is out of range"),
    ({"FLAME_DIST_TIMEOUT": "abc"}, r"FLAME_DIST_TIMEOUT='abc' is not a number of seconds"),
    ({"FLAME_DIST_TIMEOUT": "-1"}, r"FLAME_DIST_TIMEOUT='-1' must be a positive, finite number of seconds"),
    ({"FLAME_DIST_TIMEOUT": "0"}, r"FLAME_DIST_TIMEOUT='0' must be a positive"),
    ({"FLAME_DIST_TIMEOUT": "nan"}, r"FLAME_DIST_TIMEOUT='nan' must be a positive"),
    ({"FLAME_DIST_TIMEOUT": "inf"}, r"FLAME_DIST_TIMEOUT='inf' must be a positive, finite"),
    ({"WORLD_SIZE": "two"}, r"WORLD_SIZE='two' is not a number of ranks"),
    ({"WORLD_SIZE": "0"}, r"WORLD_SIZE='0' is out of range: a number of ranks >= 1"),
    ({"RANK": "x1"}, r"RANK='x1' is not a rank"),
    ({"RANK": "-1"}, r"RANK='-1' is out of range: a rank >= 0"),
    ({"RANK": "2"}, r"RANK=2 is not a rank of a world of 2 \(WORLD_SIZE\): expected 0 to 1"),
    ({"LOCAL_RANK": "gpu0"}, r"LOCAL_RANK='gpu0' is not a rank"),
    ({"MASTER_ADDR": " "}, r"MASTER_ADDR is set but empty"),
    ({"FLAME_DIST_SECRET": ""}, r"FLAME_DIST_SECRET is set but empty"),
]


@pytest.mark.parametrize("bad,message", CASES, ids=[f"{k}={v!r}" for (b, _) in CASES for k, v in b.items()])
def test_bad_environment_is_a_clear_error(bad, message, monkeypatch):
    for k in ("FLAME_STORE_PORT", "LOCAL_RANK", "FLAME_DIST_SECRET", "FLAME_AGENT_STORE"):
        monkeypatch.delenv(k, raising=False)
    for k, v in {**GOOD, **bad}.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(dist.DistributedError, match=message):
        dist.init_process_group("store")
    assert not dist.is_initialized()


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"timeout": -1}, r"timeout=-1 must be a positive, finite number of seconds"),
        ({"timeout": datetime.timedelta(seconds=-5)}, r"timeout=datetime.timedelta\(days=-1, seconds=86395\) must be"),
        ({"timeout": "soon"}, r"timeout='soon' is not a number of seconds"),
        ({"rank": 3, "world_size": 2}, r"rank=3 is not a rank of a world of 2: expected 0 to 1"),
        ({"rank": 0, "world_size": 0}, r"world_size=0 is not a number of ranks >= 1"),
        ({"rank": True, "world_size": 2}, r"rank=True is not a rank"),
    ],
)
def test_bad_arguments_are_a_clear_error(kwargs, message, monkeypatch):
    for k, v in GOOD.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(dist.DistributedError, match=message):
        dist.init_process_group("store", **kwargs)
    assert not dist.is_initialized()


def test_the_launcher_refuses_bad_ports(monkeypatch, capsys):
    with pytest.raises(SystemExit):
        _parse(["--master-port", "70000", "train.py"])
    assert "--master-port 70000 is not a TCP port number" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _parse(["--grace", "-1", "train.py"])
    monkeypatch.setenv("FLAME_STORE_PORT", "abc")
    assert main(["train.py"]) == 2
    assert "FLAME_STORE_PORT='abc' is not a TCP port number" in capsys.readouterr().err
