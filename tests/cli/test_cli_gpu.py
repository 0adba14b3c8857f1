"""The GPU halves of the CLI: `flame check` names a deliberately broken kernel; `flame profile` times
every kernel of the step."""

import os

import pytest

from flame.cli import main

SCRIPT = os.path.join(os.path.dirname(__file__), "tiny_step.py")
pytestmark = pytest.mark.gpu


def test_check_passes_on_correct_kernels(capsys):
    assert main(["check", SCRIPT]) == 0
    assert "OK train_step" in capsys.readouterr().out


def test_check_names_a_broken_kernel(capsys, monkeypatch):
    from flame.codegen import snippets

    broken = dict(snippets.SNIPPETS["exp"], f32="(expf({0}) * 1.5f)")  # a wrong snippet
    monkeypatch.setitem(snippets.SNIPPETS, "exp", broken)
    assert main(["check", SCRIPT]) == 2
    out = capsys.readouterr().out
    first = out.split("FIRST BAD KERNEL", 1)[1].splitlines()[0]
    assert "diverges" in first
    assert " = exp " in out.split("IR:", 1)[1].split("source:", 1)[0]
    assert "* 1.5f" in out  # the bad kernel's source is shown


def test_check_nan_watch_names_first_nan(capsys, monkeypatch):
    from flame.codegen import snippets

    broken = dict(snippets.SNIPPETS["exp"], f32="(expf({0}) * __int_as_float(0x7fc00000))")  # NaN
    monkeypatch.setitem(snippets.SNIPPETS, "exp", broken)
    assert main(["check", "--nan", SCRIPT]) == 2
    out = capsys.readouterr().out
    assert "FIRST BAD KERNEL in train_step (trace 1; inputs f32[32,8], i64[32])" in out
    assert "produced NaN" in out and "on the GPU" in out


def test_profile_lists_kernels_with_rates(capsys):
    assert main(["profile", "--repeat", "5", SCRIPT]) == 0
    out = capsys.readouterr().out
    assert "== train_step (trace 1; inputs f32[32,8], i64[32]):" in out and "GB/s" in out and "TFLOP/s" in out
    assert "reference executor" not in out  # GPU time, not the CPU fallback


COPIES_SCRIPT = """
import numpy as np
import flame


@flame.compile
def views(x):
    y = x.exp()
    return y.reshape(3, 2), y, x.reshape(6), x  # the input and its view come back as copies


views(flame.tensor(np.arange(6, dtype=np.float32).reshape(2, 3)))
"""


def test_profile_counts_the_plans_copies(capsys, tmp_path):
    script = tmp_path / "copies.py"
    script.write_text(COPIES_SCRIPT)
    assert main(["dump", str(script), "--out", str(tmp_path / "d")]) == 0
    (plan,) = (tmp_path / "d").glob("*/plan.txt")
    n = plan.read_text().count(" = copy b")
    assert n >= 2
    capsys.readouterr()
    assert main(["profile", "--repeat", "3", str(script)]) == 0
    out = capsys.readouterr().out
    head = next(ln for ln in out.splitlines() if ln.startswith("== views"))
    assert f"kernels and {n} copies, " in head
    row = next(ln for ln in out.splitlines() if "copies:" in ln)
    assert f"copies: {n} device copies of" in row and float(row.split()[0]) > 0
