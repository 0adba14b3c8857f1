"""`flame bench --quick` on the reference executor: every case runs, flame agrees with PyTorch eager
(CPU) on every case, and results.json / results.md are written and say they are a functional check.
Plus the harness's failure paths: a peer that raises is "n/a", a wrong flame result is WRONG and untimed."""

import importlib.util
import json

from flame.bench import run_suite, select
from flame.bench.spec import Bound, Case, Input
from flame.cli import main as cli_main

HAVE_TORCH = importlib.util.find_spec("torch") is not None


def test_quick_suite_writes_reports_and_flame_is_correct(tmp_path):
    run, paths = run_suite(select(None), quick=True, out=str(tmp_path), log=lambda *a: None)
    data = json.loads((tmp_path / "results.json").read_text())
    md = (tmp_path / "results.md").read_text()
    assert paths["json"].endswith("results.json") and paths["markdown"].endswith("results.md")
    assert data["mode"] == "reference" and "FUNCTIONAL CHECK on the NumPy reference executor" in md
    assert [c["name"] for c in data["cases"]] == [c.name for c in select(None)]
    for c in data["cases"]:
        f = c["flame"]
        assert f["status"] == ("ok" if HAVE_TORCH else "UNCHECKED"), (c["name"], f)
        assert f["median_ms"] > 0 and f["kernels_per_call"] >= 1 and f["planned_bytes"] > 0
        assert f["compile_cold_s"] >= 0 and f["compile_warm_s"] >= 0
        assert c["name"] in md
        if HAVE_TORCH:
            assert c["peers"]["torch"]["status"] == "ok" and c["peers"]["torch"]["timer"] == "wall"
    assert "no chart" in md or "chart" in paths


def _bad_torch(sizes, arrays, wrap):
    raise RuntimeError("peer exploded")


def _doubling_flame(sizes, arrays, wrap):
    return Bound(wrap(lambda x: x * 2.0))


def _torch_identity(sizes, arrays, wrap):
    return Bound(wrap(lambda x: x * 1.0))


def _tiny(name, flame, torch):
    return Case(name, "synthetic", sizes=lambda q: {"n": 64}, inputs=lambda s: {"x": Input((s["n"],))},
                min_bytes=lambda s: 8 * s["n"], flame=flame, torch=torch)


def test_failing_peer_is_na_and_wrong_flame_is_not_timed(tmp_path):
    ok_flame = lambda s, a, wrap: Bound(wrap(lambda x: x * 1.0))  # noqa: E731
    cases = [_tiny("peer_fails", ok_flame, _bad_torch)]
    if HAVE_TORCH:
        cases.append(_tiny("flame_wrong", _doubling_flame, _torch_identity))
    run, _ = run_suite(cases, quick=True, out=str(tmp_path), peers=["torch"],
                       log=lambda *a: None)
    first = run["cases"][0]
    assert first["peers"]["torch"]["status"].startswith("n/a: RuntimeError: peer exploded")
    assert first["flame"]["status"] == "UNCHECKED" and first["flame"]["median_ms"] > 0
    if HAVE_TORCH:
        wrong = run["cases"][1]["flame"]
        assert wrong["status"] == "WRONG" and "median_ms" not in wrong
        assert "WRONG" in (tmp_path / "results.md").read_text()


def _flame_exploding(sizes, arrays, wrap):
    def explode(x):
        raise ValueError("flame step exploded")

    return Bound(wrap(explode))


def test_failing_flame_is_failed_with_its_reason_and_where(tmp_path):
    run, _ = run_suite([_tiny("flame_fails", _flame_exploding, _torch_identity)], quick=True, out=str(tmp_path),
                       peers=[], log=lambda *a: None)
    f = run["cases"][0]["flame"]
    assert f["status"] == "FAILED" and f["error"] == "ValueError: flame step exploded"
    assert f["where"][-1].endswith("in explode") and __file__ in f["where"][-1]


def test_cli_rejects_unknown_case(capsys):
    assert cli_main(["bench", "--quick", "--cases", "nope"]) == 1
    assert "unknown case(s) nope" in capsys.readouterr().err
