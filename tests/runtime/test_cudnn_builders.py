"""A compile's cuDNN graphs built in builder processes (flame.runtime.cudnn_builders) on the CPU, with
real worker processes running the stand-in `cudnn` module (tests/runtime/fake_cudnn.py): graphs handed
over are read back here, not built, the same graphs as built here, and stored in the cache of built
graphs; cuDNN's refusal arrives as it would have here; a graph known here (made, or in the cache) is
not handed over, nor is a lone graph; outside a session nothing is; a builder that gives nothing is warned about and the
graph built here; FLAME_CUDNN_BUILDERS=0 turns the builders off. The GPU half is
tests/runtime/test_gpu_cudnn_builders.py."""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import pytest

from flame.errors import ArgumentError
from flame.runtime import cudnn_attention, cudnn_builders, cudnn_cache, cudnn_conv, cudnn_graph
from flame.runtime.cudnn_attention import AttentionSpec
from flame.runtime.cudnn_builders import Request
from flame.runtime.cudnn_conv import ConvSpec
from tests.runtime import fake_cudnn

ROOT = Path(__file__).resolve().parent.parent.parent
CONV = ConvSpec.of("fprop", "f16", (2, 8, 9, 9), (16, 8, 3, 3), (2, 16, 9, 9), [(1, 1), (1, 1)], (1, 1), (1, 1))
REFUSED = ConvSpec.of("fprop", "f16", (2, 8, 13, 13), (16, 8, 3, 3), (2, 16, 13, 13), [(1, 1), (1, 1)], (1, 1),
                      (1, 1))
ATTENTION = AttentionSpec.of((2, 4, 64, 32), (2, 4, 64, 32), (2, 4, 64, 32), "bf16", 32**-0.5, True, False)
REQUESTS = [Request("conv", CONV, False), Request("attention forward", ATTENTION, False),
            Request("attention backward", ATTENTION, False)]


def _new_process() -> None:
    cudnn_conv.cudnn_conv.cache_clear()
    cudnn_conv.refusal.cache_clear()
    cudnn_attention.cudnn_attention.cache_clear()
    cudnn_cache.MADE.clear()


@pytest.fixture
def fake(tmp_path, monkeypatch):
    m = fake_cudnn.fake()
    monkeypatch.setitem(sys.modules, "cudnn", m)
    monkeypatch.setattr(cudnn_graph._local, "handle", None, raising=False)
    monkeypatch.setattr(cudnn_cache, "_device", lambda: "Fake GPU sm_90 132 SMs")
    monkeypatch.setattr(cudnn_cache, "COUNTS", cudnn_cache.Counts())
    monkeypatch.setattr(cudnn_builders, "worker_init", lambda: ("tests.runtime.fake_cudnn:init_worker", (0,)))
    monkeypatch.setenv("FLAME_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FLAME_CACHE_SIZE", raising=False)
    monkeypatch.setenv("FLAME_CUDNN_BUILDERS", "2")
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    _new_process()
    yield m
    _new_process()


def _graphs() -> dict:
    conv = cudnn_conv.cudnn_conv(CONV)
    att = cudnn_attention.cudnn_attention(ATTENTION)
    return {
        "conv": (conv._graph.description(), conv.workspace),
        "forward": (att._forward_graph[0].description(), att.forward_workspace),
        "backward": (att._backward_graph[0].description(), att.backward_workspace),
    }


def test_graphs_handed_over_are_read_back_not_built(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("FLAME_CACHE_SIZE", "0")
    built_here = _graphs()
    _new_process()
    monkeypatch.setattr(cudnn_cache, "COUNTS", cudnn_cache.Counts())
    monkeypatch.delenv("FLAME_CACHE_SIZE")
    fake.calls.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with cudnn_builders.session():
            assert cudnn_builders.prefetch(REQUESTS) == 3
            assert cudnn_builders.prefetch(REQUESTS) == 0  # handed over already
            got = _graphs()
    assert "build" not in fake.calls and fake.calls.count("deserialize") == 3, fake.calls
    assert got == built_here
    c = cudnn_cache.COUNTS
    assert (c.handed, c.built, c.stored) == (3, 0, 3)
    assert len(list((tmp_path / "cache").glob("*.cudnn"))) == 3
    _new_process()  # a new process loads what the builders made
    fake.calls.clear()
    assert _graphs() == built_here and fake.calls == ["deserialize"] * 3


def test_a_refusal_arrives_as_it_would_have_here(fake):
    with pytest.raises(NotImplementedError) as here:
        cudnn_conv.cudnn_conv(REFUSED)
    _new_process()
    with cudnn_builders.session():
        assert cudnn_builders.prefetch([Request("conv", REFUSED, False), *REQUESTS[:1]]) == 2
        with pytest.raises(NotImplementedError) as there:
            cudnn_conv.cudnn_conv(REFUSED)
    assert str(there.value) == str(here.value) and "dimension of 13" in str(here.value)


def test_only_graphs_not_known_here_are_handed_over(fake):
    cudnn_conv.cudnn_conv(CONV)  # made here, and stored
    _new_process()
    with cudnn_builders.session():
        assert cudnn_builders.prefetch(REQUESTS[:2]) == 0  # one graph left: a worker's start would delay it
        assert cudnn_builders.prefetch(REQUESTS) == 2  # the convolution is in the cache
    assert cudnn_builders.prefetch(REQUESTS) == 0  # outside a session
    assert not cudnn_builders.active()


def test_a_builder_that_gives_nothing_is_warned_about_and_the_graph_built_here(fake, monkeypatch):
    monkeypatch.setattr(cudnn_builders, "worker_init", lambda: ("math:sqrt", (-1.0,)))
    with cudnn_builders.session():
        cudnn_builders.prefetch(REQUESTS)
        with pytest.warns(RuntimeWarning, match="a cuDNN builder process gave no fprop convolution graph"):
            cudnn_conv.cudnn_conv(CONV)
    assert "build" in fake.calls and cudnn_cache.COUNTS.built == 1


def test_no_builders_with_the_switch_off(fake, monkeypatch):
    monkeypatch.setenv("FLAME_CUDNN_BUILDERS", "0")
    with cudnn_builders.session():
        assert not cudnn_builders.active() and cudnn_builders.prefetch(REQUESTS) == 0
    monkeypatch.setenv("FLAME_CUDNN_BUILDERS", "-1")
    with pytest.raises(ArgumentError, match="FLAME_CUDNN_BUILDERS"):
        cudnn_builders.builders()
