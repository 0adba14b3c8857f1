"""Bad command lines exit 2 with argparse's message; failures exit 1 with one line; never a traceback
(issue 14 item 12)."""

from __future__ import annotations

import os

import pytest

from flame import cli

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "tiny_step.py")


@pytest.mark.parametrize("args", [
    ["check", "--rtol", "0", SCRIPT],
    ["check", "--rtol", "nan", SCRIPT],
    ["check", "--atol", "-1", SCRIPT],
    ["profile", "--repeat", "0", SCRIPT],
    ["bench", "--no-such-flag"],
    ["cache", "info", "extra"],
])
def test_bad_arguments_exit_2(args, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(args)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err


@pytest.mark.parametrize("action", ["info", "clear"])
def test_cache_dir_that_is_a_file_is_one_line(action, tmp_path, monkeypatch, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    monkeypatch.setenv("FLAME_CACHE_DIR", str(f))
    assert cli.main(["cache", action]) == 1
    err = capsys.readouterr().err
    assert err.startswith("flame cache: error:") and str(f) in err and len(err.strip().splitlines()) == 1


def test_viz_into_a_missing_directory_is_one_line(tmp_path, capsys):
    out = tmp_path / "missing" / "g.svg"
    assert cli.main(["viz", "-o", str(out), SCRIPT]) == 1
    err = capsys.readouterr().err
    assert "does not exist" in err and len(err.strip().splitlines()) == 1


def test_unwritable_output_is_one_line(tmp_path, capsys):
    out = tmp_path / "g.dot"
    out.mkdir()  # a directory where the .dot file should go: open() fails
    assert cli.main(["viz", "-o", str(out), SCRIPT]) == 1
    assert "error:" in capsys.readouterr().err
