"""The persistent plan cache (flame.plan.cache): a later process loads a compiled trace instead of
running the passes, with bit-identical results; flame's version, the Target, the executor's identity
and the guards are part of the key; damaged, forged and stale entries are rebuilt with one warning;
concurrent writers leave whole entries; FLAME_CACHE_SIZE evicts the least recently used entries;
`flame cache` shows and clears plans. Each test has a cache directory of its own."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import os
import pickle
import subprocess
import sys
import time
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

import flame
from flame import _version, cli, compiler
from flame.codegen import disk_cache, nvrtc
from flame.errors import ArgumentError
from flame.plan import cache as plan_cache
from flame.plan import serial
from flame.plan.steps import format_plan
from flame.runtime import backend

ROOT = Path(__file__).resolve().parent.parent.parent
MODE = "a"  # read by `guarded`: a guard of its trace that leaves the graph as it is


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("FLAME_CACHE_DIR", str(d))
    monkeypatch.delenv("FLAME_CACHE_SIZE")  # the default size: the cache is on
    return d


def guarded(x, w):
    if MODE in ("a", "b"):
        return (x @ w).relu().sum(-1) * 0.5
    return x.sum()


def _inputs():
    rng = np.random.default_rng(3)
    return rng.standard_normal((6, 5)).astype(np.float32), rng.standard_normal((5, 7)).astype(np.float32)


def _first_call(monkeypatch) -> tuple[np.ndarray, dict]:
    """What a new process's first call of `guarded` computes, and what the plan cache did meanwhile:
    a new compiled function with the in-process compile cache emptied."""
    monkeypatch.setattr(compiler, "_CACHE", type(compiler._CACHE)())
    before = dataclasses.replace(plan_cache.COUNTS)
    x, w = _inputs()
    out = flame.compile(guarded)(flame.tensor(x), flame.tensor(w)).numpy()
    after = plan_cache.COUNTS
    return out, {k: getattr(after, k) - getattr(before, k) for k in ("hits", "misses", "stored", "rebuilt")}


def _torch_guarded() -> np.ndarray:
    x, w = (torch.from_numpy(a).double() for a in _inputs())
    return ((x @ w).relu().sum(-1) * 0.5).numpy()


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*" + plan_cache.SUFFIX))


def test_a_second_call_in_a_fresh_compile_loads_the_plan(cache_dir, monkeypatch):
    first, did = _first_call(monkeypatch)
    assert did == {"hits": 0, "misses": 1, "stored": 1, "rebuilt": 0}
    np.testing.assert_allclose(first, _torch_guarded(), rtol=1e-5, atol=1e-5)
    again, did = _first_call(monkeypatch)
    assert did == {"hits": 1, "misses": 0, "stored": 0, "rebuilt": 0}
    assert first.tobytes() == again.tobytes()
    assert len(_entries(cache_dir)) == 1


@pytest.mark.parametrize("change", ["flame version", "target", "executor identity", "guard"])
def test_what_the_key_holds_misses_when_it_changes(change, cache_dir, monkeypatch):
    first, _ = _first_call(monkeypatch)
    if change == "flame version":
        monkeypatch.setattr(_version, "__version__", _version.__version__ + ".post1")
    elif change == "target":
        other = dataclasses.replace(backend.capabilities("reference"), sm_count=100)
        monkeypatch.setattr(compiler, "_target", lambda *settings: other)
    elif change == "executor identity":  # another GPU, driver or library version
        monkeypatch.setattr(backend, "_executor_identity", lambda name, gpu=None: f"executor {name}, driver 0")
    else:
        monkeypatch.setattr(sys.modules[__name__], "MODE", "b")
    out, did = _first_call(monkeypatch)
    assert did == {"hits": 0, "misses": 1, "stored": 1, "rebuilt": 0}
    assert out.tobytes() == first.tobytes()
    assert len(_entries(cache_dir)) == 2


def _forge(entry: Path) -> None:
    """What someone without the key can write: a well-formed entry signed with another key."""
    payload = entry.read_bytes()[len(plan_cache.MAGIC) + 65 :]
    mac = hmac.new(b"k" * 32, entry.name.encode() + b"\0" + payload, hashlib.sha256).hexdigest().encode()
    entry.write_bytes(plan_cache.MAGIC + mac + b"\n" + payload)


@pytest.mark.parametrize("damage", ["truncated", "forged", "stale", "json", "class"])
def test_a_damaged_entry_is_rebuilt_with_one_warning(damage, cache_dir, monkeypatch):
    first, _ = _first_call(monkeypatch)
    (entry,) = _entries(cache_dir)
    if damage == "truncated":
        entry.write_bytes(entry.read_bytes()[: entry.stat().st_size // 2])
    elif damage == "forged":
        _forge(entry)
    elif damage == "stale":  # signed with the user's key, but not a payload this flame reads
        nvrtc.write_signed(entry, b"not a plan", plan_cache.MAGIC)
    elif damage == "json":  # signed, in an earlier layout: the data as JSON text
        nvrtc.write_signed(entry, zlib.compress(json.dumps({"format": 5}).encode()), plan_cache.MAGIC)
    else:  # signed, but naming a class, which no payload dumps makes does: refused, the class not looked up
        data = pickle.dumps({"format": serial.FORMAT, "trace_ops": None, "path": Path("x")})
        nvrtc.write_signed(entry, zlib.compress(data), plan_cache.MAGIC)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, did = _first_call(monkeypatch)
    said = [w for w in caught if issubclass(w.category, RuntimeWarning) and "cached plan" in str(w.message)]
    assert len(said) == 1 and "guarded" in str(said[0].message), [str(w.message) for w in caught]
    assert did == {"hits": 0, "misses": 0, "stored": 1, "rebuilt": 1}
    assert out.tobytes() == first.tobytes()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        again, did = _first_call(monkeypatch)
    assert did["hits"] == 1 and again.tobytes() == first.tobytes()


def _script(*args: str, env: dict) -> dict:
    """Run tests/plan/plan_cache_script.py in a new process; its JSON line."""
    e = dict(os.environ, FLAME_DEVICE=env.pop("FLAME_DEVICE", "reference"), **env)
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    r = subprocess.run(
        [sys.executable, "-m", "tests.plan.plan_cache_script", *args],
        capture_output=True,
        text=True,
        env=e,
        timeout=300,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_new_process_skips_the_passes_and_matches_bit_for_bit(dynamic, tmp_path):
    """Process 1 trains at batch sizes 8 and 5 (the second makes the batch dim dynamic; dynamic=True:
    from the first call); process 2, after it, at 8, 5 and a size new to both, 11: it runs no pass
    (the new size is instantiated from the plans it loaded), and agrees bit for bit with process 1
    and, at the new size, with a process without the cache."""
    env = {"FLAME_CACHE_DIR": str(tmp_path / "cache"), "FLAME_CACHE_SIZE": ""}
    flag = ("--dynamic",) if dynamic else ()
    one = _script("8", "5", *flag, env=dict(env))
    assert one["cache"]["misses"] >= 2 and one["cache"]["stored"] >= 2 and one["runs"]["passes"] >= 2
    two = _script("8", "5", "11", *flag, env=dict(env))
    assert two["runs"]["passes"] == 0 and two["cache"]["hits"] >= 2 and two["cache"]["stored"] == 0, two
    assert two["losses"][:2] == one["losses"]
    if not dynamic:
        off = _script("8", "5", "11", env={"FLAME_CACHE_DIR": str(tmp_path / "other"), "FLAME_CACHE_SIZE": "0"})
        assert off["runs"]["passes"] >= 2 and off["cache"]["stored"] == 0
        assert two["losses"] == off["losses"] and two["params"] == off["params"]


@pytest.mark.gpu
def test_a_new_process_on_the_gpu_runs_no_pass_and_no_nvrtc(tmp_path):
    env = {"FLAME_CACHE_DIR": str(tmp_path / "cache"), "FLAME_CACHE_SIZE": "", "FLAME_DEVICE": "cuda"}
    one = _script("8", "5", env=dict(env))
    two = _script("8", "5", "11", env=dict(env))
    assert one["runs"]["nvrtc"] > 0
    assert two["runs"] == {"passes": 0, "nvrtc": 0}, two["compiled"]
    assert two["losses"][:2] == one["losses"]


_WRITER = """
import sys, warnings
warnings.simplefilter("error", RuntimeWarning)
import numpy as np
import flame
from flame import compiler
from flame.plan import cache
from flame.plan.steps import format_plan
def guarded(x, w):
    return (x @ w).relu().sum(-1) * 0.5
g = flame.compile(guarded).trace(flame.tensor(np.ones((6, 5), np.float32)), flame.tensor(np.ones((5, 7), np.float32)))
c = compiler.compile_graph(g)
for i in range(20):
    assert cache.store("concurrent", c.graph, c.plan)
    got = cache.load("concurrent", "guarded")
    assert got is not None and format_plan(got[1]) == format_plan(c.plan)
print("ok")
"""


def test_concurrent_writers_leave_whole_entries(cache_dir):
    env = dict(os.environ, FLAME_DEVICE="reference", FLAME_CACHE_DIR=str(cache_dir), FLAME_CACHE_SIZE="")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        for _ in range(3)
    ]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and out.strip() == "ok", err
    assert plan_cache.entry_name("concurrent") in {p.name for p in _entries(cache_dir)}
    assert not [p for p in cache_dir.iterdir() if p.name.endswith(".part")]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        graph, plan = plan_cache.load("concurrent", "guarded")
    assert plan.graph is graph and graph.name == "guarded"


def _compiled(monkeypatch) -> compiler.CompiledGraph:
    """`guarded` compiled, with the plan cache off meanwhile (tracing compiles too)."""
    monkeypatch.setenv("FLAME_CACHE_SIZE", "0")
    x, w = _inputs()
    c = compiler.compile_graph(flame.compile(guarded).trace(flame.tensor(x), flame.tensor(w)))
    monkeypatch.delenv("FLAME_CACHE_SIZE")
    return c


def test_the_size_limit_evicts_the_least_recently_used(cache_dir, monkeypatch):
    c = _compiled(monkeypatch)
    assert plan_cache.store("a", c.graph, c.plan) and plan_cache.store("b", c.graph, c.plan)
    size = _entries(cache_dir)[0].stat().st_size
    kernel = cache_dir / ("0" * 64 + ".cubin")  # a kernel entry, used longest ago: evicted first
    kernel.write_bytes(b"x" * 100)
    now = time.time()
    a, b = (cache_dir / plan_cache.entry_name(k) for k in "ab")
    for path, age in ((kernel, 300), (a, 200), (b, 100)):
        os.utime(path, (now - age, now - age))
    assert plan_cache.load("a", "guarded") is not None  # a read: a is now the most recently used
    monkeypatch.setenv("FLAME_CACHE_SIZE", str(2 * size + size // 2))
    assert plan_cache.store("c", c.graph, c.plan)
    assert a.exists() and (cache_dir / plan_cache.entry_name("c")).exists()
    assert not b.exists() and not kernel.exists()
    assert sum(p.stat().st_size for p in _entries(cache_dir)) <= 2 * size + size // 2


def test_cache_size_setting(cache_dir, monkeypatch):
    monkeypatch.setenv("FLAME_CACHE_SIZE", "500M")
    assert disk_cache.size_limit() == 500 << 20
    monkeypatch.setenv("FLAME_CACHE_SIZE", "2G")
    assert disk_cache.size_limit() == 2 << 30
    monkeypatch.setenv("FLAME_CACHE_SIZE", "lots")
    with pytest.raises(ArgumentError, match="FLAME_CACHE_SIZE='lots'"):
        disk_cache.size_limit()
    monkeypatch.setenv("FLAME_CACHE_SIZE", "0")  # off: nothing is read or written
    _, did = _first_call(monkeypatch)
    assert did == {"hits": 0, "misses": 0, "stored": 0, "rebuilt": 0}
    assert not cache_dir.exists() or not _entries(cache_dir)


def test_a_stored_plan_reads_back_as_the_same_plan(cache_dir, monkeypatch):
    c = _compiled(monkeypatch)
    graph, plan = serial.loads(serial.dumps(c.graph, c.plan))
    assert format_plan(plan) == format_plan(c.plan)
    assert [str(op.loc) for op in graph.ops] == [str(op.loc) for op in c.graph.ops]
    assert [type(op.loc) for op in graph.ops] == [type(op.loc) for op in c.graph.ops]


def test_flame_cache_shows_and_clears_plans(cache_dir, monkeypatch, capsys):
    _first_call(monkeypatch)
    assert cli.main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert "plan cache: " + str(cache_dir) in out and "entries: 1" in out.split("plan cache:")[1]
    assert cli.main(["cache", "clear"]) == 0
    assert "1 cached plan(s)" in capsys.readouterr().out
    assert not _entries(cache_dir)


def _library_step(q, k, v, x, w):
    """Attention and a convolution with their backward: the CUDA target's library calls (cuDNN)."""
    a = flame.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    y = flame.nn.functional.conv2d(x, w, padding=1).relu()
    loss = (a * a).sum() + (y * y).mean()
    loss.backward()
    return loss, q.grad, w.grad


@pytest.mark.parametrize("memory_budget", [None, 1.0])
def test_a_cuda_targets_plan_reads_back_and_runs_alike(memory_budget, cuda_target):
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((2, 2, 8, 16),) * 3 + ((2, 3, 6, 6), (4, 3, 3, 3))]
    args = [flame.tensor(a, requires_grad=i in (0, 1, 2, 4)) for i, a in enumerate(arrays)]
    g = flame.compile(_library_step).trace(*args)
    c = compiler.compile_graph(g, memory_budget=memory_budget)
    assert any(type(s).__name__ in ("AttentionCall", "ConvCall") for s in c.plan.steps)
    graph, plan = serial.loads(serial.dumps(c.graph, c.plan))
    assert format_plan(plan) == format_plan(c.plan) and plan.memory_budget == c.plan.memory_budget
    from flame.runtime.reference import run_plan

    assert [v.type.shape for v in g.inputs] == [a.shape for a in arrays]
    want = run_plan(c.plan, [a.copy() for a in arrays])
    got = run_plan(plan, [a.copy() for a in arrays])
    assert all(np.array_equal(a, b) for a, b in zip(want, got))
    t = [torch.from_numpy(a).double().requires_grad_(i in (0, 1, 2, 4)) for i, a in enumerate(arrays)]
    ta = torch.nn.functional.scaled_dot_product_attention(*t[:3], is_causal=True)
    ty = torch.nn.functional.conv2d(t[3], t[4], padding=1).relu()
    ((ta * ta).sum() + (ty * ty).mean()).backward()
    np.testing.assert_allclose(np.asarray(got[1]), t[0].grad.numpy(), rtol=1e-4, atol=1e-4)


def test_a_function_with_the_users_own_cuda_code_is_not_stored(cache_dir, monkeypatch):
    """A user op's CUDA code and NumPy reference live in the process's registry, not in the graph text
    that keys an entry: an edited kernel under the same name must not load the old plan."""
    gate = flame.cuda.elementwise(
        "x * (y > 0.f ? 1.f : 0.2f)", name="plan_cache_gate", reference=lambda x, y: x * np.where(y > 0, 1.0, 0.2)
    )
    x, y = _inputs()[0], -_inputs()[0]
    before = dataclasses.replace(plan_cache.COUNTS)
    out = flame.compile(lambda a, b: gate(a, b) * 2.0)(flame.tensor(x), flame.tensor(y)).numpy()
    assert (plan_cache.COUNTS.hits, plan_cache.COUNTS.misses, plan_cache.COUNTS.stored) == (
        before.hits,
        before.misses,
        before.stored,
    )
    assert not cache_dir.exists() or not _entries(cache_dir)
    tx, ty = torch.from_numpy(x).double(), torch.from_numpy(y).double()
    np.testing.assert_allclose(out, (tx * torch.where(ty > 0, 1.0, 0.2) * 2.0).numpy(), rtol=1e-6)


def test_a_plan_fitted_to_an_activation_budget_reads_back_with_its_choices(cache_dir):
    from flame.compiler import compile_graph
    from flame.ir.builder import Builder
    from flame.ir.graph import Graph
    from flame.ir.types import TensorType
    from flame.passes.autodiff import autodiff

    g = Graph("mlp")
    b = Builder(g)
    x = g.add_input(TensorType((16, 32), flame.float32), "data")
    ws = [g.add_input(TensorType((32, 32), flame.float32), "param") for _ in range(3)]
    h = x
    for w in ws:
        h = b.tanh(b.matmul(h, w))
    loss = b.reduce_sum(b.mul(h, h), axes=[0, 1], keepdim=False)
    g.outputs = [loss, *autodiff(g, loss, ws)]
    c = compile_graph(g, memory_budget=None, activation_budget=0.2)
    assert c.plan.activation_budget is not None and c.plan.activation_budget.choices
    graph, plan = serial.loads(serial.dumps(c.graph, c.plan))
    assert plan.activation_budget == c.plan.activation_budget
    assert format_plan(plan) == format_plan(c.plan)
