"""The process group's TCP store and flame's launcher: waits, timeouts and aborts end with clear
errors instead of hangs; the launcher hands every rank the caller's environment unchanged plus the
torchrun variables, and stops every rank when one fails."""

from __future__ import annotations

import json
import threading
import time

import pytest

from flame.distributed.store import ABORT_KEY, DistributedError, StoreClient, StoreServer
from tests.distributed.launch import run


@pytest.fixture
def store():
    server = StoreServer("127.0.0.1", 0)
    clients = []

    def client(timeout: float = 5.0) -> StoreClient:
        c = StoreClient("127.0.0.1", server.port, timeout)
        clients.append(c)
        return c

    yield client
    for c in clients:
        c.close()
    server.close()


def test_set_get_add_wait_delete(store):
    a, b = store(), store()
    got = []
    t = threading.Thread(target=lambda: got.append(b.get("key")))
    t.start()
    time.sleep(0.05)
    a.set("key", b"\x00value\xff")
    t.join(5)
    assert got == [b"\x00value\xff"]
    assert a.add("n", 2) == 2 and b.add("n", 3) == 5
    b.wait("n", 5)
    a.delete("key")
    with pytest.raises(DistributedError, match="timed out after 0.2 s waiting for 'key'"):
        a.get("key", timeout=0.2)


def test_wait_times_out_with_what_it_waited_for(store):
    c = store(timeout=0.2)
    with pytest.raises(DistributedError, match="timed out after 0.2 s waiting for every rank"):
        c.wait("joined", 2, what="every rank")


def test_abort_wakes_every_waiter_with_the_message(store):
    waiter, other = store(timeout=30), store()
    errors = []

    def wait():
        try:
            waiter.get("never")
        except DistributedError as e:
            errors.append(str(e))

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.05)
    start = time.monotonic()
    other.abort("rank 1 failed: ValueError: boom")
    t.join(5)
    assert time.monotonic() - start < 5
    assert errors == ["the process group was aborted: rank 1 failed: ValueError: boom"]
    assert other.get(ABORT_KEY) == b"rank 1 failed: ValueError: boom"  # what a watchdog waits for
    with pytest.raises(DistributedError, match="aborted"):
        other.wait("anything", 1)


def test_unreachable_store_is_a_clear_error():
    server = StoreServer("127.0.0.1", 0)
    port = server.port
    server.close()
    with pytest.raises(DistributedError, match=f"cannot reach the process group's store at 127.0.0.1:{port}"):
        StoreClient("127.0.0.1", port, timeout=0.3)


ENV_SCRIPT = """
import json, os, sys
keep = {k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "FLAME_TEST_")) or k in
        ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK")}
open(os.path.join(sys.argv[1], "rank%s.json" % os.environ["RANK"]), "w").write(json.dumps(keep))
"""


def test_launcher_passes_the_environment_through(tmp_path):
    script = tmp_path / "env.py"
    script.write_text(ENV_SCRIPT)
    proc = run(str(script), str(tmp_path), nproc=3, NCCL_NVLS_ENABLE="0", NCCL_DEBUG="WARN",
               FLAME_TEST_MARK="x y")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(3)]
    for r, e in enumerate(seen):
        nccl = {k: v for k, v in e.items() if k.startswith("NCCL_")}
        assert nccl == {"NCCL_NVLS_ENABLE": "0", "NCCL_DEBUG": "WARN"}  # given, unchanged, nothing added
        assert e["FLAME_TEST_MARK"] == "x y"
        assert (e["RANK"], e["LOCAL_RANK"], e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"]) == (str(r), str(r), "3", "3")
        assert e["MASTER_ADDR"] == "127.0.0.1" and int(e["MASTER_PORT"]) > 0 and e["GROUP_RANK"] == "0"
    assert len({e["MASTER_PORT"] for e in seen}) == 1


FAIL_SCRIPT = """
import os, sys, time
if os.environ["RANK"] == "1":
    sys.exit(3)
time.sleep(120)
"""


def test_launcher_stops_every_rank_when_one_fails(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text(FAIL_SCRIPT)
    start = time.monotonic()
    proc = run(str(script), nproc=3, timeout=60, launcher=("--grace", "0.5"))
    assert proc.returncode == 3
    assert "rank 1 failed (exit code 3); stopping the other ranks" in proc.stderr
    assert time.monotonic() - start < 30


def test_launcher_arguments():
    from flame.distributed.run import _parse

    a = _parse(["--nproc-per-node", "4", "train.py", "--lr", "3e-4"])
    assert (a.nproc_per_node, a.script, a.args) == (4, "train.py", ["--lr", "3e-4"])
    with pytest.raises(SystemExit):
        _parse(["--nnodes", "2", "train.py"])  # several hosts must name the store's port
    with pytest.raises(SystemExit):
        _parse(["--nproc-per-node", "0", "train.py"])
