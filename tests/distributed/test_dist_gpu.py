"""Data parallel on two GPUs through NCCL (each test starts its own ranks with flame's launcher):
every collective eager and compiled; the GPT example's model (f32) on 2 GPUs matches 1 GPU with the
same global batch to a relative error <= 1e-6 after each step, with and without ZeRO-1, with the
collectives overlapped on the communication stream inside CUDA graphs and without; a raising rank
stops every rank (the NCCL communicator aborted) instead of a hang. Run on a machine with 2 GPUs:

    NCCL_NVLS_ENABLE=0 PYTHONPATH=. python3 -m pytest -q -m multigpu tests/distributed
"""

from __future__ import annotations

import time

import pytest

from tests.distributed.launch import ok, relative_errors, run

pytestmark = [pytest.mark.gpu, pytest.mark.multigpu]

GPT = {
    "plain": [],
    "zero": ["--zero"],
    "clip-accum": ["--clip", "1.0", "--accum", "2"],
}


def test_every_collective_on_two_gpus():
    ok(run("collectives_worker.py", nproc=2, device="cuda"))


@pytest.mark.parametrize("graphs,stream", [("1", "1"), ("0", "0")])
@pytest.mark.parametrize("case", sorted(GPT))
def test_gpt_on_two_gpus_matches_one_gpu(case, graphs, stream, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    args = ["--model", "gpt", "--steps", "4", "--batch", "8", "--bucket-mb", "0.05", *GPT[case]]
    knobs = dict(FLAME_CUDA_GRAPHS=graphs, FLAME_COMM_STREAM=stream)
    ok(run("ddp_worker.py", *args, "--out", str(one), device="cuda", **knobs))
    ok(run("ddp_worker.py", *args, "--out", str(two), nproc=2, device="cuda", **knobs))
    errs = relative_errors(one, two)
    assert len(errs) == 4 and max(errs) <= 1e-6, errs


def test_a_raising_rank_stops_both_gpus(tmp_path):
    start = time.monotonic()
    proc = run(
        "ddp_worker.py",
        "--model",
        "gpt",
        "--fail-rank",
        "1",
        "--out",
        str(tmp_path),
        nproc=2,
        device="cuda",
        timeout=180,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "rank 1 failed" in out and "ValueError: boom" in out, out
    assert time.monotonic() - start < 150


def test_checkpoint_on_two_gpus(tmp_path):
    ok(
        run(
            "ddp_worker.py",
            "--model",
            "gpt",
            "--zero",
            "--steps",
            "2",
            "--out",
            str(tmp_path),
            "--checkpoint",
            str(tmp_path / "ck.safetensors"),
            nproc=2,
            device="cuda",
        )
    )
    assert (tmp_path / "ck.safetensors").exists() and (tmp_path / "loaded.npz").exists()


def test_mismatched_collectives_fail_on_both_gpus_before_nccl(tmp_path):
    import json

    proc = run(
        "mismatch_worker.py",
        "--backend",
        "nccl",
        "--numels",
        "4",
        "1",
        "--dtypes",
        "float32",
        "float32",
        "--out",
        str(tmp_path),
        nproc=2,
        device="cuda",
        timeout=120,
        FLAME_DIST_TIMEOUT="30",
    )
    assert proc.returncode != 0
    for r in range(2):
        err = json.loads((tmp_path / f"rank{r}.json").read_text())["error"]
        assert err.startswith(f"CollectiveMismatchError: rank {r}: the ranks' collectives do not match"), err
        assert "(f32[4]) -> f32[4]" in err and "(f32[1]) -> f32[1]" in err, err
