"""Bad command lines exit 2 with argparse's message; failures exit 1 with one line; never a traceback
(issue 14 item 12)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from flame import cli

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "tiny_step.py")


@pytest.mark.parametrize("args", [
    ["check", "--rtol", "-0.1", SCRIPT],
    ["check", "--rtol", "nan", SCRIPT],
    ["check", "--atol", "-1", SCRIPT],
    ["check", "--atol", "nan", SCRIPT],
    ["check", "--rtol", "abc", SCRIPT],
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


@pytest.mark.parametrize("rtol, atol", [("0", "1e-5"), ("0", "0")])
def test_check_with_rtol_0_compares_with_atol_alone(rtol, atol, capsys):
    """rtol 0 with an atol is a valid request (numpy.allclose's meaning), not a usage error."""
    assert cli.main(["check", "--rtol", rtol, "--atol", atol, SCRIPT]) == 0
    out = capsys.readouterr().out
    assert f"(rtol {float(rtol)}, atol {float(atol)})" in out and "OK " in out


@pytest.mark.parametrize("rtol, atol", [(0.0, 1e-3), (0.0, 0.0), (1e-3, 0.0), (1e-2, 1e-4)])
def test_check_tolerance_is_numpys_allclose(rtol, atol):
    from flame.runtime.check import _close

    rng = np.random.default_rng(0)
    want = rng.standard_normal(1000).astype(np.float32)
    want[:3] = (0.0, np.inf, -np.inf)
    for noise in (0.0, 1e-6, 1e-4, 1e-2):
        got = (want + noise * rng.standard_normal(1000)).astype(np.float32)
        got[:3] = want[:3]
        ok, worst = _close(got, want, rtol, atol)
        assert ok == np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)
        err = np.abs(got[3:].astype(np.float64) - want[3:])
        if rtol == 0:
            assert worst == f"worst absolute error {err.max():.3g}"
        else:
            assert worst.startswith("worst relative error ") and "nan" not in worst
