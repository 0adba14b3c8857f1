"""The process group's store admits only processes that know the job's secret (HMAC challenge and
response both ways, auth.py) and listens on the rendezvous address only: a client without the
secret, or with a wrong one, is refused before it can read, post or abort anything; a process that
poses as the store is refused by the ranks; the launcher gives every rank of a job one secret."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import struct
import threading
import time

import pytest

from flame.distributed import auth
from flame.distributed.store import ABORT_KEY, GET, SET, DistributedError, StoreClient, StoreServer, StoreTimeout
from tests.distributed.launch import free_port, kill_all, run, start_ranks, wait_for_files

SECRET = b"4f1c the job's secret"


@pytest.fixture
def server():
    s = StoreServer("127.0.0.1", 0, SECRET, handshake_timeout=2.0)
    yield s
    s.close()


def _raw(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.settimeout(5)
    return sock


def _request(cmd: int, key: str, value: bytes) -> bytes:
    k = key.encode()
    return struct.pack("<BI", cmd, len(k)) + k + struct.pack("<Q", len(value)) + value


def _read_all(sock: socket.socket) -> bytes:
    got = b""
    while True:
        chunk = sock.recv(4096)
        if not chunk:
            return got
        got += chunk


def test_a_client_without_the_secret_can_neither_read_nor_post_nor_abort(server):
    owner = StoreClient("127.0.0.1", server.port, 5.0, secret=SECRET)
    owner.set("weights", b"the job's tensor bytes")
    for request in (
        _request(GET, "weights", struct.pack("<Q", 1000)),
        _request(SET, "weights", b"injected" * 20),
        _request(5, "", b"aborted by an intruder" * 4),
    ):  # 5: ABORT
        sock = _raw(server.port)
        hello = sock.recv(len(auth.HELLO) + 1 + 32)
        assert hello.startswith(auth.HELLO + b"\x01")
        sock.sendall(request.ljust(64, b"\x00"))  # the first 64 bytes are taken as its answer: wrong
        assert _read_all(sock) == b"\x00"  # refused, and the connection closed: nothing of the store's
        sock.close()
    assert owner.get("weights") == b"the job's tensor bytes"
    with pytest.raises(StoreTimeout):
        owner.get(ABORT_KEY, timeout=0)  # no abort was posted


def test_a_silent_client_is_dropped_after_the_handshake_timeout(server):
    sock = _raw(server.port)
    start = time.monotonic()
    assert sock.recv(len(auth.HELLO) + 33).startswith(auth.HELLO)
    assert _read_all(sock) == b""  # closed by the store
    assert time.monotonic() - start < 5
    sock.close()


def test_clients_with_a_wrong_or_no_secret_are_refused(server):
    with pytest.raises(
        DistributedError,
        match=f"rank 1: the store at 127.0.0.1:{server.port} refused this process: "
        "its FLAME_DIST_SECRET is not the job's",
    ):
        StoreClient("127.0.0.1", server.port, 5.0, rank=1, secret=b"a guess")
    with pytest.raises(DistributedError, match="requires the job's secret: set FLAME_DIST_SECRET"):
        StoreClient("127.0.0.1", server.port, 5.0)
    open_store = StoreServer("127.0.0.1", 0)
    try:
        with pytest.raises(
            DistributedError,
            match="does not authenticate its clients but this process has FLAME_DIST_SECRET: refusing to use it",
        ):
            StoreClient("127.0.0.1", open_store.port, 5.0, secret=SECRET)
    finally:
        open_store.close()


def test_a_process_posing_as_the_store_is_refused():
    """It took the port first and accepts any answer, but cannot prove it knows the secret."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    seen = []

    def impostor():
        conn, _ = listener.accept()
        conn.settimeout(5)
        conn.sendall(auth.HELLO + b"\x01" + b"n" * 32)
        seen.append(conn.recv(64))
        conn.sendall(b"\x01" + hmac.new(b"not the secret", b"x", hashlib.sha256).digest())
        time.sleep(0.5)
        conn.close()

    t = threading.Thread(target=impostor)
    t.start()
    try:
        with pytest.raises(DistributedError, match="did not prove that it knows the job's FLAME_DIST_SECRET"):
            StoreClient("127.0.0.1", listener.getsockname()[1], 5.0, secret=SECRET)
        assert SECRET not in seen[0]  # the client sends a proof, never the secret
    finally:
        t.join(10)
        listener.close()


def test_another_program_on_the_port_is_named():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def http():
        conn, _ = listener.accept()
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n" + b" " * 64)
        time.sleep(0.5)
        conn.close()

    t = threading.Thread(target=http)
    t.start()
    try:
        with pytest.raises(DistributedError, match="is not a flame process group's store"):
            StoreClient("127.0.0.1", listener.getsockname()[1], 5.0)
    finally:
        t.join(10)
        listener.close()


def test_the_store_listens_on_the_rendezvous_address_only():
    s = StoreServer("127.0.0.1", 0)
    try:
        assert s.address == "127.0.0.1"
        with pytest.raises(ConnectionRefusedError):  # another loopback address of the same host
            socket.create_connection(("127.0.0.2", s.port), timeout=5).close()
    finally:
        s.close()


def test_ranks_of_a_job_with_a_secret_refuse_intruders_and_finish(tmp_path):
    """Two ranks started as torchrun does, FLAME_DIST_SECRET set by the user: rank 0's store is on
    MASTER_ADDR only, refuses clients without the secret, and the job still finishes."""
    port = free_port()
    stop = tmp_path / "stop"
    procs = start_ranks(
        "hang_worker.py",
        "--out",
        str(tmp_path),
        "--stop-file",
        str(stop),
        world=2,
        out=tmp_path,
        port=port,
        FLAME_DIST_SECRET="0123456789abcdef the user's secret",
        FLAME_DIST_TIMEOUT="20",
    )
    try:
        wait_for_files([tmp_path / "rank0.ready", tmp_path / "rank1.ready"], 60)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.2", port), timeout=5).close()
        with pytest.raises(DistributedError, match="requires the job's secret"):
            StoreClient("127.0.0.1", port, 5.0)
        with pytest.raises(DistributedError, match="refused this process"):
            StoreClient("127.0.0.1", port, 5.0, secret=b"wrong")
        stop.write_text("")
        for p in procs:
            p.wait(timeout=60)
        logs = [(tmp_path / f"rank{r}.log").read_text() for r in range(2)]
        assert [p.returncode for p in procs] == [0, 0], logs
        assert "admits any process" not in logs[0]
    finally:
        kill_all(procs)


def test_without_a_secret_rank_0_says_the_store_admits_anyone(tmp_path):
    procs = start_ranks("hang_worker.py", "--out", str(tmp_path), "--steps", "0", world=2, out=tmp_path)
    try:
        for p in procs:
            p.wait(timeout=60)
        log = (tmp_path / "rank0.log").read_text()
        assert [p.returncode for p in procs] == [0, 0], log
        assert "FLAME_DIST_SECRET is not set: the process group's store on 127.0.0.1:" in log
        assert "admits any process that reaches it" in log
    finally:
        kill_all(procs)


SECRET_SCRIPT = """
import json, os, sys
open(os.path.join(sys.argv[1], "rank%s.json" % os.environ["RANK"]), "w").write(json.dumps(
    os.environ.get("FLAME_DIST_SECRET")))
"""


def test_the_launcher_gives_each_job_one_fresh_secret_or_the_callers(tmp_path):
    script = tmp_path / "secret.py"
    script.write_text(SECRET_SCRIPT)
    jobs = []
    for extra in ({}, {}, {"FLAME_DIST_SECRET": "mine"}):
        proc = run(str(script), str(tmp_path), nproc=2, timeout=60, **extra)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        jobs.append([json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)])
    assert all(len(set(job)) == 1 for job in jobs)  # one secret per job, the same on every rank
    assert len(jobs[0][0]) == 64 and jobs[0][0] != jobs[1][0]  # fresh and random each time
    assert jobs[2][0] == "mine"


def test_the_launcher_needs_a_secret_for_several_hosts(monkeypatch):
    from flame.distributed.run import _parse

    monkeypatch.delenv("FLAME_DIST_SECRET", raising=False)
    with pytest.raises(SystemExit):
        _parse(["--nnodes", "2", "--master-port", "29500", "train.py"])
    monkeypatch.setenv("FLAME_DIST_SECRET", "shared")
    assert _parse(["--nnodes", "2", "--master-port", "29500", "train.py"]).nnodes == 2
