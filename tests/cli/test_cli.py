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
    # each section is headed by the function, its trace number and its input types
    assert "== train_step (trace 1; inputs f32[32,8], i64[32]):" in r.stdout and "boundary:" in r.stdout
    assert "matmul (cuBLASLt call)" in r.stdout and "memory plan of train_step: peak" in r.stdout
    assert "saved for backward:" in r.stdout


def test_viz_writes_dot_with_one_box_per_kernel(tmp_path):
    out = tmp_path / "g.dot"
    r = run_cli("viz", SCRIPT, "-o", str(out))
    assert r.returncode == 0, r.stderr
    dot = out.read_text()
    assert dot.startswith('digraph "train_step"') and 'label="train_step (trace 1; inputs f32[32,8], i64[32])"' in dot
    assert "[0] matmul" in dot and "reads x0 f32[32,8]" in dot and "-> k" in dot
    assert "(output 0)" in dot and "updates param input" in dot  # the loss, and the SGD update
    ops = tmp_path / "ops.dot"
    assert run_cli("viz", SCRIPT, "--ops", "-o", str(ops)).returncode == 0
    assert "subgraph cluster_0" in ops.read_text()  # the op-level view: kernels as clusters


def test_profile_without_gpu_times_the_reference_executor():
    from flame.runtime.device import cuda_available

    if cuda_available():
        pytest.skip("this machine has a GPU; covered by the gpu tests")
    r = run_cli("profile", SCRIPT, "--repeat", "2")
    assert r.returncode == 0, r.stderr
    head = "== train_step (trace 1; inputs f32[32,8], i64[32]): reference executor, wall time, not GPU time:"
    assert head in r.stdout and "ms per call" in r.stdout
    rows = [ln for ln in r.stdout.splitlines() if ln.strip().endswith(")") and " us " in ln]
    assert any("matmul (matmul)" in ln for ln in rows) and len(rows) >= 5


def test_check_without_gpu_says_what_it_compared():
    from flame.runtime.device import cuda_available

    if cuda_available():
        pytest.skip("this machine has a GPU; covered by the gpu tests")
    r = run_cli("check", SCRIPT)
    assert r.returncode == 0, r.stderr
    assert "compared the reference executor running the plan" in r.stdout
    assert "with the graph interpreter" in r.stdout and "no CUDA kernel was run or checked" in r.stdout


NAN_SCRIPT = """
import numpy as np
import flame

@flame.compile
def step(x):
    return (x.log() * 2.0).sum()

for v in (1.0, 2.0, -1.0, 3.0):
    step(flame.tensor(np.full(4, v, np.float32)))
"""


def test_check_nan_on_the_reference_names_the_call_and_kernel(tmp_path):
    script = tmp_path / "nan_step.py"
    script.write_text(NAN_SCRIPT)
    r = run_cli("check", "--nan", str(script))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "FIRST BAD KERNEL in step (trace 1; inputs f32[4]), call 3:" in r.stdout
    assert "produced NaN (1 of 1 elements)" in r.stdout and "(reference executor)" in r.stdout
    assert "= log %0" in r.stdout and "nan_step.py:7" in r.stdout  # the kernel's IR, with the user's line
    ok = tmp_path / "ok_step.py"
    ok.write_text(NAN_SCRIPT.replace("-1.0", "5.0"))
    r = run_cli("check", "--nan", str(ok))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK step (trace 1; inputs f32[4]): no NaN/Inf" in r.stdout and "over all 4 call(s)" in r.stdout


def test_check_nan_names_an_input_that_is_already_bad(tmp_path):
    script = tmp_path / "bad_input.py"
    script.write_text(NAN_SCRIPT.replace("(1.0, 2.0, -1.0, 3.0)", "(1.0, float('nan'))"))
    r = run_cli("check", "--nan", str(script))
    assert r.returncode == 2
    assert "BAD INPUT in step (trace 1; inputs f32[4]), call 2: input 0 (data, f32[4]) already holds NaN" in r.stdout


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


def test_function_flag_picks_one_function_or_names_them():
    r = run_cli("explain", SCRIPT, "--function", "train_step")
    assert r.returncode == 0 and r.stdout.count("== train_step (trace") == 1
    r = run_cli("explain", SCRIPT, "--function", "nope")
    assert r.returncode == 1 and "no compiled function named 'nope'; the script compiled: train_step" in r.stderr


def test_profile_runs_on_the_state_the_calls_left(monkeypatch):
    """A training step's first call starts from unset optimizer moments (and, under delayed FP8
    scaling, empty amax histories): the profile times the plan on what a further call would read."""
    import numpy as np

    import flame
    from flame import debug
    from flame.runtime import profile

    seen = []
    monkeypatch.setattr(profile, "profile_plan_reference",
                        lambda title, plan, inputs, on, repeat: seen.append((inputs, on)) or "")
    w = flame.nn.Parameter(flame.tensor(np.ones(4, np.float32)))
    opt = flame.optim.Adam([w], lr=0.5)

    @flame.compile
    def step(x):
        loss = (w * x).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    records = []
    x = flame.tensor(np.arange(4, dtype=np.float32))
    with debug.observe(records.append):
        for _ in range(3):
            step(x)
    (record,) = records
    profile.profile_records_reference(debug.titled(records), repeat=1)
    (inputs, on), = seen
    assert on == "the state the calls left"
    first = {a.tobytes() for a in record.inputs}
    assert w.numpy().tobytes() in {a.tobytes() for a in inputs}  # the weight after the third step
    assert w.numpy().tobytes() not in first and np.ones(4, np.float32).tobytes() in first
    moments = [a for a in inputs if a.shape == (4,) and a.tobytes() not in first]
    assert len(moments) >= 3  # the weight and its two moments have moved on from the first call's


def test_profile_falls_back_to_the_first_inputs_and_says_so():
    import numpy as np

    from flame import debug

    r = debug.CompileRecord("f", inputs=[np.zeros(2)])
    r.next_inputs = lambda: None.missing  # a .grad the plan reads, cleared after the calls
    inputs, on = r.steady_inputs()
    assert on == "the first call's inputs" and inputs is r.inputs
