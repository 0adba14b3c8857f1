"""Data parallel on two ranks (two processes, flame's launcher, the reference executor exchanging
through the TCP store) against one process with the whole batch: the parameters after every step
agree to a relative error <= 1e-6 (f32), with and without ZeRO-1, compiled and eager, with gradient
clipping and accumulation (no_sync); a rank that raises stops every rank with a clear error; the
checkpoint rank 0 writes is the single-process one and every rank loads it; the averaged gradient is
written into the existing .grad, as torch's DistributedDataParallel writes it (ddp_grad_worker.py)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from flame.checkpoint import load
from tests.distributed.launch import ok, relative_errors, run

CASES = {
    "mlp": ["--model", "mlp"],
    "mlp-zero-clip-accum": ["--model", "mlp", "--zero", "--clip", "0.5", "--accum", "2"],
    "mlp-eager-zero-clip": ["--model", "mlp", "--eager", "--zero", "--clip", "0.5"],
    "gpt-zero": ["--model", "gpt", "--zero", "--steps", "2"],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_two_ranks_match_one_process_with_the_whole_batch(case, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    ok(run("ddp_worker.py", *CASES[case], "--out", str(one)))
    ok(run("ddp_worker.py", *CASES[case], "--out", str(two), nproc=2))
    errs = relative_errors(one, two)
    args = CASES[case]
    assert len(errs) == (int(args[args.index("--steps") + 1]) if "--steps" in args else 3)
    assert max(errs) <= 1e-6, errs


@pytest.mark.parametrize(
    "args",
    [[], ["--eager"], ["--accum", "2"], ["--eager", "--accum", "2"], ["--set-to-none"]],
    ids=["compiled", "eager", "compiled-no_sync", "eager-no_sync", "set_to_none"],
)
def test_averaged_gradient_is_written_into_the_existing_grad(args):
    out = ok(run("ddp_grad_worker.py", *args, nproc=2, timeout=180))
    assert "rank 0: ok" in out and "rank 1: ok" in out


def test_a_raising_rank_stops_every_rank_with_its_error(tmp_path):
    start = time.monotonic()
    proc = run("ddp_worker.py", "--model", "mlp", "--fail-rank", "1", "--out", str(tmp_path), nproc=2, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "ValueError: boom" in out and "rank 1 failed" in out
    assert time.monotonic() - start < 90


def test_checkpoint_is_the_single_process_file_and_every_rank_loads_it(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    args = ["--model", "mlp", "--zero", "--steps", "2"]
    ok(run("ddp_worker.py", *args, "--out", str(one), "--checkpoint", str(one / "ck.safetensors")))
    ok(run("ddp_worker.py", *args, "--out", str(two), "--checkpoint", str(two / "ck.safetensors"), nproc=2))
    a, b = load(one / "ck.safetensors"), load(two / "ck.safetensors")
    assert sorted(a) == sorted(b) and any(k.startswith("optimizer/state/") for k in a)
    for k in a:
        x, y = a[k].numpy().astype(np.float64), b[k].numpy().astype(np.float64)
        np.testing.assert_allclose(y, x, rtol=1e-5, atol=1e-7, err_msg=k)
    last = np.load(two / "step1.npz")
    loaded = np.load(two / "loaded.npz")  # written by the last rank after loading
    for k in last:
        np.testing.assert_array_equal(loaded[k], last[k])
    assert not list(two.glob(".ck.safetensors.*"))  # no temporary file left behind
