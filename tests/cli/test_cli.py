"""The `flame` command on a small training script, on the reference executor (no GPU needed)."""

import os
import subprocess
import sys

import pytest

import flame.ir
from flame.cli import main

HERE = os.path.dirname(__file__)
SCRIPT = os.path.join(HERE, "tiny_step.py")


def run_cli(*args, env=None) -> subprocess.CompletedProcess:
    e = dict(os.environ, FLAME_DEVICE="reference", **(env or {}))
    root = os.path.dirname(os.path.dirname(HERE))
    e["PYTHONPATH"] = root + os.pathsep + e.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "flame", *args], capture_output=True, text=True, env=e,
                          timeout=300)


def test_help_for_every_subcommand():
    for sub in ("dump", "explain", "viz", "profile", "check", "cache"):
        with pytest.raises(SystemExit) as e:
            main([sub, "--help"])
        assert e.value.code == 0


def test_dump_writes_every_stage_and_files_parse(tmp_path):
    out = tmp_path / "d"
    r = run_cli("dump", SCRIPT, "3", "--out", str(out))
    assert r.returncode == 0, r.stderr
    (fn_dir,) = list(out.iterdir())
    files = sorted(p.name for p in fn_dir.iterdir())
    assert files[0] == "00_traced.ir" and "plan.txt" in files and "kernels" in files
    sources = list((fn_dir / "kernels").iterdir())
    assert sources and all('extern "C" __global__' in p.read_text() for p in sources)
    for name in files:
        if name.endswith(".ir"):
            text = (fn_dir / name).read_text()
            assert text.startswith("# after ")
            g = flame.ir.parse(text)  # every dump round-trips through the parser
            assert flame.ir.print_graph(g, locs=True) in text
    # two dumps of the same run diff cleanly (deterministic numbering)
    out2 = tmp_path / "d2"
    assert run_cli("dump", SCRIPT, "--out", str(out2)).returncode == 0
    a = (fn_dir / "00_traced.ir").read_text().splitlines()[1:]
    b = (out2 / fn_dir.name / "00_traced.ir").read_text().splitlines()[1:]
    assert a == b


def test_flame_dump_env_var(tmp_path):
    e = dict(os.environ, FLAME_DEVICE="reference", FLAME_DUMP=str(tmp_path),
             PYTHONPATH=os.path.dirname(os.path.dirname(HERE)))
    r = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True, env=e, timeout=300)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "train_step" / "00_traced.ir").exists()


def test_explain_lists_kernels_and_memory():
    r = run_cli("explain", SCRIPT)
    assert r.returncode == 0, r.stderr
    assert "== train_step:" in r.stdout and "boundary:" in r.stdout
    assert "matmul (cuBLASLt call)" in r.stdout and "memory plan of train_step: peak" in r.stdout
    assert "saved for backward:" in r.stdout


def test_viz_writes_dot_with_clusters(tmp_path):
    out = tmp_path / "g.svg"
    r = run_cli("viz", SCRIPT, "-o", str(out))
    assert r.returncode == 0, r.stderr
    dot = (tmp_path / "g.dot").read_text()
    assert dot.startswith('digraph "train_step"') and "subgraph cluster_0" in dot


def test_cache_info_and_clear(tmp_path):
    env = {"FLAME_CACHE_DIR": str(tmp_path / "cache")}
    r = run_cli("cache", "info", env=env)
    assert r.returncode == 0 and "entries: 0" in r.stdout
    assert run_cli("cache", "clear", env=env).returncode == 0


@pytest.mark.parametrize("args, message", [
    (("dump", "no_such_script.py"), "no such script"),
    (("explain", HERE), "no such script"),
])
def test_errors_are_one_line(args, message):
    r = run_cli(*args)
    assert r.returncode != 0
    assert message in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_script_that_raises_is_one_line(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import flame\nraise ValueError('boom')\n")
    r = run_cli("explain", str(bad))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "ValueError: boom (at bad.py:2)" in r.stderr


def test_profile_without_gpu_is_a_clear_error():
    from flame.runtime.device import cuda_available

    if cuda_available():
        pytest.skip("this machine has a GPU; covered by the gpu tests")
    r = run_cli("profile", SCRIPT)
    assert r.returncode == 1 and "needs a CUDA GPU" in r.stderr
