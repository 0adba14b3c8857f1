"""NVRTC started ahead (codegen.nvrtc.compile_ahead): the plan builder starts each kernel's compile
as it renders it for a GPU target, and the executor's compile_many then waits for it instead of
compiling again; errors surface where the cubin is asked for; $FLAME_COMPILE_AHEAD=0 turns it off."""

from __future__ import annotations

import dataclasses
import os
import queue
import threading
import uuid

import numpy as np
import pytest

import flame
from flame.codegen import nvrtc
from flame.errors import FlameError
from flame.plan.build import to_plan


def _source(body: str = "x[0] = 1.0f;") -> str:
    tag = uuid.uuid4().hex  # a source no other test compiles
    return f'// {tag}\nextern "C" __global__ void k_{tag}(float* x) {{ {body} }}\n'


@pytest.fixture
def counted(monkeypatch, tmp_path):
    """An empty kernel cache, and the sources NVRTC compiles (from any thread)."""
    monkeypatch.setenv("FLAME_CACHE_DIR", str(tmp_path / "cache"))
    seen, lock, compile_ = [], threading.Lock(), nvrtc._compile

    def counting(source, arch, name_hint):
        with lock:
            seen.append(source)
        return compile_(source, arch, name_hint)

    monkeypatch.setattr(nvrtc, "_compile", counting)
    return seen


def test_a_compile_started_ahead_is_waited_for_not_repeated(counted):
    src = _source()
    nvrtc.compile_ahead(src, "sm_90", "k")
    nvrtc.compile_ahead(src, "sm_90", "k")  # under way already: not started twice
    cubin = nvrtc.compile_cubin(src, "sm_90")
    assert cubin[:4] == b"\x7fELF" and counted == [src]
    assert (src, "sm_90") not in nvrtc._AHEAD  # handed out once; a later call reads the disk cache
    assert nvrtc.compile_cubin(src, "sm_90") == cubin and counted == [src]


def test_an_error_surfaces_where_the_cubin_is_asked_for(counted):
    src = _source("x[0] = undefined_name;")
    nvrtc.compile_ahead(src, "sm_90", "broken")  # no error here
    with pytest.raises(FlameError, match=r"(?s)NVRTC could not compile kernel broken for sm_90.*undefined_name"):
        nvrtc.compile_many([src, _source()], "sm_90")


def test_off_with_the_setting(counted, monkeypatch):
    monkeypatch.setenv("FLAME_COMPILE_AHEAD", "0")
    src = _source()
    nvrtc.compile_ahead(src, "sm_90", "k")
    assert (src, "sm_90") not in nvrtc._AHEAD and counted == []
    monkeypatch.setenv("FLAME_COMPILE_AHEAD", "sometimes")
    with pytest.raises(flame.ArgumentError, match="FLAME_COMPILE_AHEAD='sometimes'"):
        nvrtc.compile_ahead(src, "sm_90", "k")


def test_compile_many_keeps_the_order_of_its_sources(counted):
    sources = [_source(), _source("for (int i = 0; i < 8; ++i) x[i] = i * 2.0f;"), _source("x[1] = 2.0f;")]
    cubins = nvrtc.compile_many(sources, "sm_90", workers=1)
    assert cubins == [nvrtc.compile_cubin(s, "sm_90") for s in sources]
    assert counted[0] == sources[1]  # the longest source compiles first (one worker: in turn)
    assert sorted(counted) == sorted(sources)


def test_the_plan_builder_starts_every_kernel_of_a_gpu_plan(counted, cuda_target):
    """A plan for a target with an architecture starts its kernels' compiles as it renders them; the
    executor's compile_many then compiles nothing again. Without one (a plan made on a host without a
    GPU) nothing starts."""
    from flame import compiler

    x = flame.tensor(np.random.default_rng(0).standard_normal((8, 33)).astype(np.float32))
    tag = float(uuid.uuid4().int % 1000) / 7 + 1.5  # a constant no other test's kernel holds

    @flame.compile
    def f(x):
        return (x * tag).softmax(-1).exp().sum(0)

    graph = f.optimized(x)
    target = compiler.capabilities("cuda")
    assert not target.arch
    plan = to_plan(graph, target=target)
    sources = list(dict.fromkeys(k.source for k in plan.kernels()))
    assert sources and not any((s, "sm_90") in nvrtc._AHEAD for s in sources)
    plan = to_plan(graph, target=dataclasses.replace(target, arch="sm_90"))
    assert [k.source for k in plan.kernels()] and set(k.source for k in plan.kernels()) == set(sources)
    cubins = nvrtc.compile_many(sources, "sm_90")
    assert all(c[:4] == b"\x7fELF" for c in cubins)
    assert sorted(counted) == sorted(sources)  # each compiled once, ahead


@pytest.mark.gpu
def test_gpu_step_compiles_each_kernel_once_ahead_and_runs(counted):
    """On the GPU (an empty kernel cache): the step's kernels compile once each, started by the plan
    builder, and the step computes what torch does."""
    import torch

    a = np.random.default_rng(1).standard_normal((64, 257)).astype(np.float32)
    tag = float(uuid.uuid4().int % 1000) / 7 + 1.5

    @flame.compile
    def f(x):
        return (x * tag).softmax(-1).exp().sum(0)

    got = f(flame.tensor(a)).numpy()
    want = (torch.tensor(a, dtype=torch.float64) * tag).softmax(-1).exp().sum(0).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5)
    sources = {k.source for k in f._last.plan.kernels()}
    assert sources and sorted(counted) == sorted(sources)


_EXITS_AT_ONCE = """
import sys
from flame.codegen import nvrtc
for path in sys.argv[1:]:
    nvrtc.compile_ahead(open(path).read(), "sm_90", "k")
"""


def test_a_process_that_exits_leaves_the_cubins_of_its_compiles_started_ahead(tmp_path):
    """A process that starts compiles ahead and exits at once (as one that stores a dynamic plan and
    ends before the sizes that need its kernels run) waits for them, so the next process finds every
    cubin in the disk cache."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    body = "".join(f"x[{i}] = x[{i}] * {i}.5f + sinf(x[{i} + 1]);" for i in range(64))  # long enough to be busy
    sources = [_source(body) for _ in range(6)]
    paths = []
    for i, s in enumerate(sources):
        paths.append(tmp_path / f"k{i}.cu")
        paths[-1].write_text(s)
    cache = tmp_path / "cache"
    env = dict(os.environ, FLAME_CACHE_DIR=str(cache), PYTHONPATH=str(Path(__file__).parents[2]))
    r = subprocess.run([sys.executable, "-c", _EXITS_AT_ONCE, *map(str, paths)], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert all((cache / f"{nvrtc._key(s, 'sm_90')}.cubin").is_file() for s in sources)


def test_the_longest_source_waiting_starts_first(monkeypatch):
    """With every thread busy, the compiles queue; a free thread takes the longest source waiting
    (a multi-tensor update rendered after a burst of short kernels does not wait behind them)."""
    monkeypatch.setattr(nvrtc, "_AHEAD", {})
    monkeypatch.setattr(nvrtc, "_ahead_queue", queue.PriorityQueue())
    monkeypatch.setattr(nvrtc, "_ahead_threads", [None] * min(os.cpu_count() or 1, 16))  # all taken: none starts
    short, long_, mid = _source(), _source("x[0] = 1.0f; " * 40), _source("x[0] = 1.0f; " * 4)
    for src in (short, long_, mid):
        nvrtc.compile_ahead(src, "sm_90", "k")
    taken = [nvrtc._ahead_queue.get_nowait()[3] for _ in range(3)]
    assert taken == [long_, mid, short]
