"""The NVRTC compile cache (hit, corruption, atomic writes, permissions, FLAME_CACHE_DIR) and
compile-error messages."""

from __future__ import annotations

import os
import stat

import pytest

from flame.codegen import lower, nvrtc, single
from flame.errors import FlameError
from flame.ir import Builder, Graph, TensorType, f32

SRC = (
    'extern "C" __global__ void flame_test_k(const float* __restrict__ in0, float* __restrict__ out) '
    "{ out[threadIdx.x] = 2.0f * in0[threadIdx.x]; }\n"
)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "nested" / "cache"
    monkeypatch.setenv("FLAME_CACHE_DIR", str(d))
    return d


def _entries(d):
    return sorted(p for p in d.glob("*.cubin"))


def test_cache_dir_from_env_with_mode_0700(cache):
    nvrtc.compile_cubin(SRC, "sm_80")
    assert nvrtc.cache_dir() == cache
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    assert len(_entries(cache)) == 1


def test_cache_hit_does_not_recompile(cache, monkeypatch):
    first = nvrtc.compile_cubin(SRC, "sm_80")
    monkeypatch.setattr(nvrtc, "_compile", lambda *a: pytest.fail("compiled although cached"))
    assert nvrtc.compile_cubin(SRC, "sm_80") == first
    assert first[:4] == b"\x7fELF"


def test_key_depends_on_arch_and_source(cache):
    nvrtc.compile_cubin(SRC, "sm_80")
    nvrtc.compile_cubin(SRC, "sm_90")
    nvrtc.compile_cubin(SRC.replace("2.0f", "3.0f"), "sm_90")
    assert len(_entries(cache)) == 3


@pytest.mark.parametrize("damage", ["flip_payload", "truncate", "garbage"])
def test_corrupted_entry_is_detected_and_rebuilt(cache, damage):
    good = nvrtc.compile_cubin(SRC, "sm_80")
    (entry,) = _entries(cache)
    data = bytearray(entry.read_bytes())
    if damage == "flip_payload":
        data[-10] ^= 0xFF
    elif damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data = bytearray(b"not a cache entry")
    entry.write_bytes(bytes(data))
    assert nvrtc._read(entry) is None and not entry.exists()  # detected and deleted
    assert nvrtc.compile_cubin(SRC, "sm_80") == good  # rebuilt
    assert nvrtc._read(entry) == good


def test_write_is_atomic(cache, monkeypatch):
    """A failure while writing leaves neither a partial entry nor a temporary file behind, and the
    final file only ever appears through os.replace."""
    nvrtc.cache_dir()
    target = cache / "x.cubin"
    replaced = []
    real_replace = os.replace
    monkeypatch.setattr(nvrtc.os, "replace", lambda a, b: (replaced.append((a, b)), real_replace(a, b)))
    nvrtc._write(target, b"payload")
    assert replaced and replaced[0][1] == target and not os.path.exists(replaced[0][0])
    assert nvrtc._read(target) == b"payload"

    def boom(*a):
        raise OSError("disk full")

    monkeypatch.setattr(nvrtc.os, "replace", boom)
    with pytest.raises(OSError):
        nvrtc._write(cache / "y.cubin", b"other")
    assert not (cache / "y.cubin").exists()
    assert list(cache.glob(".tmp-*")) == []


def test_cache_info_and_clear(cache):
    nvrtc.compile_cubin(SRC, "sm_80")
    info = nvrtc.cache_info()
    assert info["dir"] == str(cache) and info["entries"] == 1 and info["bytes"] > 0
    assert nvrtc.cache_clear() == 1
    assert nvrtc.cache_info()["entries"] == 0


def test_compile_many_keeps_order(cache):
    sources = [SRC.replace("flame_test_k", f"flame_test_k{i}") for i in range(4)]
    cubins = nvrtc.compile_many(sources, "sm_90")
    assert [f"flame_test_k{i}".encode() in c for i, c in enumerate(cubins)] == [True] * 4


def test_compile_error_shows_numbered_source_log_and_ir_op(cache):
    g = Graph()
    b = Builder(g)
    b.exp(g.add_input(TensorType((3, 4), f32)))
    (k,) = lower(single(g.ops[-1]))
    bad = k.source.replace("expf(a0)", "expf(a0, undefined_name)")
    with pytest.raises(FlameError) as e:
        nvrtc.compile_cubin(bad, "sm_90", k.name)
    msg = str(e.value)
    assert "IR op: %1 = exp %0 : f32[3,4]" in msg
    assert "undefined_name" in msg and "NVRTC log" in msg
    line_no = next(i + 1 for i, t in enumerate(bad.splitlines()) if "undefined_name" in t)
    assert f"{line_no} |" in msg and k.name in msg
    assert _entries(cache) == []


def test_include_dirs_exist():
    assert all(os.path.isdir(d) for d in nvrtc.include_dirs())
