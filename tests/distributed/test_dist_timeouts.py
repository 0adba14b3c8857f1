"""Every wait of a process group is bounded: a rank stopped with SIGSTOP (the store's own host
included, whose connections are accepted but never answered) makes every other rank fail within
the timeout with an error naming it, what it waited for and from which rank; a join that fails
leaves the process uninitialised, and joining again works. Real processes, FLAME_DIST_TIMEOUT=2."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import threading
import time

import pytest

from flame.distributed import auth
from flame.distributed.store import DistributedError, StoreClient
from tests.distributed.launch import kill_all, run, start_ranks, wait_for_files

TIMEOUT = 2.0
SLACK = 6.0  # the reply margin (1 s), the process's exit and a loaded machine


@pytest.mark.parametrize("victim,world", [(0, 3), (1, 2)])
def test_a_stopped_rank_makes_every_other_rank_fail_within_the_timeout(victim, world, tmp_path):
    procs = start_ranks(
        "hang_worker.py", "--out", str(tmp_path), world=world, out=tmp_path, FLAME_DIST_TIMEOUT=str(TIMEOUT)
    )
    try:
        wait_for_files([tmp_path / f"rank{r}.ready" for r in range(world)], 60)
        time.sleep(0.3)  # the ranks are in their loop of all_reduces
        procs[victim].send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        others = [r for r in range(world) if r != victim]
        for r in others:
            procs[r].wait(timeout=TIMEOUT + SLACK + 10)
        assert time.monotonic() - stopped < TIMEOUT + SLACK
        for r in others:
            log = (tmp_path / f"rank{r}.log").read_text()
            assert procs[r].returncode != 0, log
            if victim == 0:  # the store's host: its connections are accepted, never answered (the rank
                # may be posting, waiting, or deleting an earlier all_reduce's key when it stops)
                assert re.search(
                    rf"DistributedError: rank {r}: the process group's store at 127.0.0.1:\d+ did not "
                    rf"answer within [23] s while ((waiting for|posting) all_reduce #\d+|deleting '[^']+')",
                    log,
                ), log
                assert "is stopped or unreachable" in log, log
            else:  # the store answers: the wait for the stopped rank's post times out
                assert re.search(
                    rf"StoreTimeout: rank {r}: timed out after 2 s waiting for all_reduce #\d+ from "
                    rf"rank {victim} ",
                    log,
                ), log
        assert procs[victim].poll() is None  # still stopped, not ended by the others
    finally:
        kill_all(procs)


def test_a_stopped_rank_under_the_launcher_stops_the_job(tmp_path):
    """The launcher serves the store, so it keeps answering: rank 1 times out waiting for rank 0's
    post, fails, and the launcher ends the stopped rank 0 (SIGTERM, and SIGCONT so it acts on it)."""
    import subprocess
    import sys

    from tests.distributed.launch import ROOT, env

    log = open(tmp_path / "launcher.log", "w")
    launcher = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "flame.distributed.run",
            "--nproc-per-node",
            "2",
            "--grace",
            "0.5",
            "tests/distributed/hang_worker.py",
            "--out",
            str(tmp_path),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env(FLAME_DIST_TIMEOUT=str(TIMEOUT)),
        cwd=str(ROOT),
    )
    log.close()
    try:
        wait_for_files([tmp_path / "rank0.ready", tmp_path / "rank1.ready"], 60)
        time.sleep(0.3)
        os.kill(int((tmp_path / "rank0.ready").read_text()), signal.SIGSTOP)
        stopped = time.monotonic()
        code = launcher.wait(timeout=TIMEOUT + SLACK + 10)
        out = (tmp_path / "launcher.log").read_text()
        assert time.monotonic() - stopped < TIMEOUT + SLACK, out
        assert code != 0 and "rank 1: timed out after 2 s waiting for all_reduce #" in out, out
        assert "from rank 0" in out and "flame.distributed.run: rank 1 failed" in out, out
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait(timeout=10)
        pid = int((tmp_path / "rank0.ready").read_text()) if (tmp_path / "rank0.ready").exists() else None
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_store_that_accepts_but_never_answers_is_an_error_not_a_hang():
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # the kernel completes the connection; nobody ever reads or answers
    port = silent.getsockname()[1]
    try:
        start = time.monotonic()
        with pytest.raises(
            DistributedError,
            match=rf"rank 2: the process group's store at 127.0.0.1:{port} did not "
            r"answer within 0.3 s while connecting",
        ):
            StoreClient("127.0.0.1", port, timeout=0.3, rank=2)
        assert time.monotonic() - start < 5
    finally:
        silent.close()


def test_a_store_that_stops_answering_after_the_handshake_is_an_error_not_a_hang():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(2)
    port = listener.getsockname()[1]
    conns = []

    def store_that_stops():  # greets like an open store, then never answers a request
        for _ in range(2):
            conn, _ = listener.accept()
            conn.sendall(auth.HELLO + b"\x00")
            conns.append(conn)

    t = threading.Thread(target=store_that_stops)
    t.start()
    try:
        start = time.monotonic()
        c = StoreClient("127.0.0.1", port, timeout=0.3, rank=2)
        with pytest.raises(
            DistributedError,
            match=rf"rank 2: the process group's store at 127.0.0.1:{port} did not "
            r"answer within 1.3 s while waiting for all_reduce #4 from rank 0",
        ):
            c.get("k", what="all_reduce #4 from rank 0")
        with pytest.raises(DistributedError, match="rank 2: posting 'x': the store's connection failed earlier"):
            c.set("x", b"")
        d = StoreClient("127.0.0.1", port, timeout=0.3, rank=1)
        with pytest.raises(DistributedError, match=r"rank 1: .* did not answer within 0.3 s while posting 'x'"):
            d.set("x", b"1")
        assert time.monotonic() - start < 6
    finally:
        t.join(10)
        for conn in conns:
            conn.close()
        listener.close()


def test_a_failed_join_leaves_the_process_uninitialised_and_a_retry_works(tmp_path):
    proc = run(
        "retry_worker.py",
        "--out",
        str(tmp_path),
        timeout=90,
        RANK="0",
        LOCAL_RANK="0",
        WORLD_SIZE="2",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(_port()),
        FLAME_DIST_TIMEOUT="20",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "retry.json").read_text())
    assert (
        report["first"] == "rank 0: timed out after 1 s waiting for rank 1 to join the process group (a rank has "
        "stopped or is far behind; FLAME_DIST_TIMEOUT sets the limit)"
    )
    assert report["initialised_after_failure"] is False and report["world_after_failure"] == 1
    assert report["result"] == [3.0, 6.0] and report["rank1"] == 0


def _port() -> int:
    from tests.distributed.launch import free_port

    return free_port()


@pytest.mark.parametrize("victim", [0, 1])
def test_the_nccl_watchdog_stops_a_rank_whose_peer_is_stopped(victim, tmp_path):
    """The other rank sleeps as if blocked in an NCCL wait: its watchdog notices the stopped rank's
    heartbeat (or, when the stopped rank serves the store, the silent store) and aborts NCCL."""
    procs = start_ranks(
        "watchdog_worker.py", "--out", str(tmp_path), world=2, out=tmp_path, FLAME_DIST_TIMEOUT=str(TIMEOUT)
    )
    try:
        wait_for_files([tmp_path / f"rank{r}.ready" for r in range(2)], 60)
        procs[victim].send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        other = 1 - victim
        procs[other].wait(timeout=TIMEOUT + SLACK + 10)
        assert time.monotonic() - stopped < TIMEOUT + SLACK
        log = (tmp_path / f"rank{other}.log").read_text()
        assert procs[other].returncode == 1 and "fake NCCL communicator aborted" in log, log
        if victim == 1:
            assert "rank 0: stopping: rank 1 has not answered for 2 s (stopped, or its host unreachable" in log, log
        else:
            assert re.search(
                r"rank 1: stopping: the process group's store at 127.0.0.1:\d+ did not answer "
                r"within [0-9.]+ s while (posting a heartbeat|waiting for 'flame/abort')",
                log,
            ), log
    finally:
        kill_all(procs)


def test_the_nccl_watchdog_lets_ranks_leave_at_different_times(tmp_path):
    """A rank that left the group stops its heartbeat on purpose: the other, still sleeping for
    longer than the timeout, is not stopped for it."""
    procs = start_ranks(
        "watchdog_worker.py",
        "--out",
        str(tmp_path),
        "--sleeps",
        "3",
        "0",
        world=2,
        out=tmp_path,
        FLAME_DIST_TIMEOUT="1",
    )
    try:
        for p in procs:
            p.wait(timeout=60)
        logs = [(tmp_path / f"rank{r}.log").read_text() for r in range(2)]
        assert [p.returncode for p in procs] == [0, 0], logs
    finally:
        kill_all(procs)
