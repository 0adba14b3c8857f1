"""Builder processes (flame.runtime.builders) with real worker processes on the CPU: jobs run in
another interpreter and answer; a job that raises or kills its worker fails with BuildFailed and the
other jobs go on; when no worker is left, waiting jobs fail at once rather than at their bound; a wait
is bounded; closing fails what has not started and the workers leave; a failing start fails the jobs;
and a script that makes a pool is not run again by its workers (no main-guard needed)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flame.runtime.builders import BuildFailed, Pool

ROOT = Path(__file__).resolve().parent.parent.parent
WAIT = 60.0  # seconds: a worker starts a Python interpreter and imports flame


def test_jobs_run_in_worker_processes_and_answer():
    with Pool(2) as pool:
        jobs = [pool.submit("os:getpid") for _ in range(4)] + [pool.submit("math:hypot", 3.0, 4.0)]
        pids = {job.result(WAIT) for job in jobs[:4]}
        assert jobs[4].result(WAIT) == 5.0
        assert os.getpid() not in pids and 1 <= len(pids) <= 2
        assert pool.workers <= 2


def test_a_raising_job_fails_alone():
    with Pool(1) as pool:
        bad, good = pool.submit("math:sqrt", -1.0), pool.submit("math:sqrt", 4.0)
        with pytest.raises(BuildFailed, match=r"math:sqrt raised ValueError: math domain error"):
            bad.result(WAIT)
        assert good.result(WAIT) == 2.0


def test_a_dead_worker_fails_its_job_and_the_others_go_on():
    with Pool(2) as pool:
        doomed, other = pool.submit("os:_exit", 3), pool.submit("math:sqrt", 4.0)  # two workers start
        with pytest.raises(BuildFailed, match="a build worker died"):
            doomed.result(WAIT)
        assert other.result(WAIT) == 2.0
        assert pool.submit("math:sqrt", 9.0).result(WAIT) == 3.0 and pool.workers == 1


def test_when_no_worker_is_left_waiting_jobs_fail_at_once():
    with Pool(1) as pool:
        doomed = pool.submit("os:_exit", 3)
        queued = [pool.submit("math:sqrt", 1.0) for _ in range(3)]
        start = time.monotonic()
        for job in [doomed, *queued]:
            with pytest.raises(BuildFailed, match="died"):
                job.result(WAIT)
        assert time.monotonic() - start < WAIT  # not each waiting out its bound
        late = pool.submit("math:sqrt", 1.0)
        with pytest.raises(BuildFailed, match="closed"):
            late.result(WAIT)


def test_a_wait_is_bounded():
    with Pool(1) as pool:
        slow = pool.submit("time:sleep", 30)
        with pytest.raises(BuildFailed, match=r"time:sleep gave no result within 0.2 s"):
            slow.result(0.2)


def test_closing_fails_what_has_not_started_and_the_workers_leave():
    pool = Pool(1)
    busy = pool.submit("time:sleep", 30)
    queued = pool.submit("math:sqrt", 1.0)
    procs = list(pool._procs)
    time.sleep(0.5)
    pool.close()
    with pytest.raises(BuildFailed, match="closed before the job started"):
        queued.result(WAIT)
    for proc in procs:
        proc.wait(timeout=WAIT)  # killed after EXIT_WAIT: its job outlasted the close
    with pytest.raises(BuildFailed, match="died"):
        busy.result(WAIT)
    with pytest.raises(BuildFailed, match="closed"):
        pool.submit("os:getpid").result(WAIT)


def test_a_failing_start_fails_the_jobs():
    with Pool(1, init=("math:sqrt", (-1.0,))) as pool:
        with pytest.raises(BuildFailed, match="a build worker could not start: math:sqrt raised ValueError"):
            pool.submit("os:getpid").result(WAIT)


def test_a_worker_runs_nothing_of_the_program_that_started_it(tmp_path):
    script = tmp_path / "train.py"  # no `if __name__ == "__main__"` guard, as many scripts
    script.write_text(
        "from flame.runtime.builders import Pool\n"
        "print('top level', flush=True)\n"
        "with Pool(2) as pool:\n"
        "    print('pid', pool.submit('os:getpid').result(60) != __import__('os').getpid(), flush=True)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["top level", "pid True"]


def test_a_pool_needs_a_worker():
    with pytest.raises(ValueError, match="at least one worker"):
        Pool(0)
