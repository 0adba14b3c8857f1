"""runtime/cuda_kernels.load_kernels without a GPU (a stand-in cupy): a kernel asking for more than 48 KiB
of dynamic shared memory is allowed it on the function it is launched with, also when the driver hands
a newly loaded module's function the handle of one freed before (the suite's cold compiles load
kernels anew and drop them)."""

from __future__ import annotations

import sys
import types

import pytest

from flame.runtime import cuda_kernels


class _Module:
    def load(self, cubin):
        self.cubin = cubin

    def get_function(self, name):
        return types.SimpleNamespace(ptr=0xF00, name=name)  # the driver reuses a freed handle


@pytest.fixture
def fake_cupy(monkeypatch):
    allowed = []
    cuda = types.SimpleNamespace(
        Device=lambda: types.SimpleNamespace(id=0),
        function=types.SimpleNamespace(Module=_Module),
        driver=types.SimpleNamespace(funcSetAttribute=lambda ptr, attr, value: allowed.append((ptr, attr, value))),
    )
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=cuda))
    cubins = lambda ks: {cuda_kernels.source_key(k.source): b"cubin" for k in ks}  # noqa: E731
    monkeypatch.setattr(cuda_kernels, "_compile_cubins", cubins)
    monkeypatch.setattr(cuda_kernels, "_LOADED", {})
    return allowed


def test_shared_memory_is_allowed_on_every_newly_loaded_function(fake_cupy):
    k = types.SimpleNamespace(source="extern \"C\" __global__ void k() {}", name="k", smem=96 * 1024)
    small = types.SimpleNamespace(source="extern \"C\" __global__ void s() {}", name="s", smem=1024)
    cuda_kernels.load_kernels([k, small])
    cuda_kernels.load_kernels([k])  # loaded and allowed already: no second call
    assert fake_cupy == [(0xF00, 8, 96 * 1024)]
    cuda_kernels._LOADED.clear()  # its module dropped; the next load gets the same handle
    cuda_kernels.load_kernels([k])
    assert fake_cupy == [(0xF00, 8, 96 * 1024)] * 2
    cuda_kernels.load_kernels([types.SimpleNamespace(source=k.source, name="k", smem=128 * 1024)])
    assert fake_cupy[-1] == (0xF00, 8, 128 * 1024) and len(fake_cupy) == 3
