"""Ranks whose collectives differ (shape, dtype of the same byte size, reduce op, kind) fail, every one
of them, with an error naming each rank's collective, instead of returning bytes reduced across
tensors that do not fit together: through the TCP-store exchange (eager and compiled) and before any
NCCL call (runtime/nccl.py over a recording stand-in for cupy.cuda.nccl). Two real processes each."""

from __future__ import annotations

import json

import numpy as np
import pytest

from flame.runtime.communicator import CollectiveMismatchError, SignatureCheck
from tests.distributed.launch import run


def _ranks(tmp_path, *args: str) -> tuple[int, list[dict], str]:
    proc = run("mismatch_worker.py", *args, "--out", str(tmp_path), nproc=2, timeout=60, FLAME_DIST_TIMEOUT="20")
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    return proc.returncode, reports, proc.stdout + proc.stderr


MISMATCHES = {
    "shape-eager": (
        ["--numels", "4", "1", "--dtypes", "float32", "float32"],
        [
            "rank 0: all_reduce {op=sum, world_size=2} (f32[4]) -> f32[4]",
            "rank 1: all_reduce {op=sum, world_size=2} (f32[1]) -> f32[1]",
        ],
    ),
    "dtype-same-bytes-compiled": (
        ["--numels", "4", "4", "--dtypes", "float32", "int32", "--compiled"],
        ["(f32[4]) -> f32[4]", "(i32[4]) -> i32[4]"],
    ),
    "reduce-op": (
        ["--numels", "3", "3", "--dtypes", "float32", "float32", "--ops", "sum", "max"],
        ["rank 0: all_reduce {op=sum", "rank 1: all_reduce {op=max"],
    ),
    "shape-nccl": (
        ["--numels", "4", "1", "--dtypes", "float32", "float32", "--nccl"],
        ["(f32[4]) -> f32[4]", "(f32[1]) -> f32[1]"],
    ),
    "dtype-nccl-compiled": (
        ["--numels", "2", "2", "--dtypes", "float32", "int32", "--nccl", "--compiled"],
        ["(f32[2]) -> f32[2]", "(i32[2]) -> i32[2]"],
    ),
}


@pytest.mark.parametrize("case", sorted(MISMATCHES))
def test_mismatched_collectives_fail_on_every_rank(case, tmp_path):
    args, named = MISMATCHES[case]
    code, reports, out = _ranks(tmp_path, *args)
    assert code != 0, out
    for r, rep in enumerate(reports):
        err = rep.get("error", "")
        assert err.startswith(f"CollectiveMismatchError: rank {r}: the ranks' collectives do not match"), out
        for part in named:
            assert part in err, err
        assert "results" not in rep
        assert rep["nccl_calls"] == []  # NCCL never saw the mismatched call


def test_matching_collectives_check_each_signature_once_before_nccl(tmp_path):
    code, reports, out = _ranks(
        tmp_path, "--numels", "3", "3", "--dtypes", "float32", "float32", "--nccl", "--repeat", "3"
    )
    assert code == 0, out
    for rep in reports:
        assert rep["signature_exchanges"] == 1  # one agreement, then three NCCL calls
        assert [c[:2] for c in rep["nccl_calls"]] == [["allReduce", 3]] * 3


def test_matching_collectives_through_the_store_are_unchanged(tmp_path):
    code, reports, out = _ranks(
        tmp_path, "--numels", "3", "3", "--dtypes", "float64", "float64", "--compiled", "--repeat", "2"
    )
    assert code == 0, out
    want = (np.arange(3) + 0.0) + (np.arange(3) + 1.0)
    for rep in reports:
        assert len(rep["results"]) == 2
        for got in rep["results"]:
            np.testing.assert_array_equal(got, want)


def test_signature_check_agrees_once_and_names_every_rank():
    """SignatureCheck over a scripted exchange of three ranks: a signature every rank posts is
    exchanged once; one that rank 2 does not share raises, naming each rank's collective and the
    user's line."""
    mine, other = "all_reduce {op=sum} (f32[4]) -> f32[4]", "all_reduce {op=sum} (f32[1]) -> f32[1]"
    answers = [[mine.encode()] * 3, [mine.encode() + b"!"] * 2 + [other.encode()]]
    asked = []

    def exchange(what, post):
        asked.append(what)
        return answers[len(asked) - 1]

    check = SignatureCheck(0, exchange)
    check(mine)
    check(mine)
    assert asked == [f"the signature of {mine}"]
    with pytest.raises(CollectiveMismatchError) as e:
        check(mine + "!", "train.py:3  dist.all_reduce(x)")
    assert str(e.value) == (
        f"rank 0: the ranks' collectives do not match: ranks 0, 1: {mine}!; rank 2: {other}. "
        "Every rank must issue the same collectives, with the same reduce op, shapes and "
        "dtypes, in the same order\n  at train.py:3  dist.all_reduce(x)"
    )
