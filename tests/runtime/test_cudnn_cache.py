"""The cache of built cuDNN graphs (flame.runtime.cudnn_cache) on the CPU, with a stand-in for
nvidia-cudnn-frontend's `cudnn` module that records what it is asked to do (building, serializing,
reading back) and serializes a graph as the description of what was built: a second process (the
in-process graph caches emptied) reads the convolution and attention graphs back instead of building
them, with the same tensors by uid and the same workspace; a damaged, forged or unreadable entry warns
once and is rebuilt and stored anew; FLAME_CACHE_SIZE=0 stores nothing; a graph without a serialized
form is not stored; the key tells specs, directions, GPUs and versions apart; the CUDA executor's
`prepare` makes the graphs of a plan's library calls (timed); `flame cache` counts and clears them.
The GPU half is tests/runtime/test_gpu_cudnn_cache.py."""

from __future__ import annotations

import json
import logging
import sys
import types
import warnings

import numpy as np
import pytest

from flame import cli
from flame.codegen import disk_cache, nvrtc
from flame.plan import cache as plan_cache
from flame.runtime import cudnn_attention, cudnn_cache, cudnn_conv, cudnn_graph
from flame.runtime.cudnn_attention import AttentionSpec
from flame.runtime.cudnn_conv import ConvSpec

PREFIX = b"FAKEGRAPH"


class _Tensor:
    def __init__(self, graph, name: str, **attrs):
        self.graph, self.name, self.attrs, self.uid = graph, name, attrs, None

    def _set(self, key, value):
        self.attrs[key] = value
        return self

    def set_uid(self, uid):
        self.uid = uid
        return self

    def set_output(self, flag):
        return self._set("output", flag)

    def set_dim(self, dim):
        return self._set("dim", list(dim))

    def set_stride(self, stride):
        return self._set("stride", list(stride))

    def set_data_type(self, dt):
        return self._set("data_type", dt)


class _Graph:
    """A frontend graph that records its tensors and ops; built by build_plans() or build()."""

    def __init__(self, module, **kw):
        self.module, self.kw, self.tensors, self.ops, self.built, self.loaded = module, kw, [], [], False, None

    def tensor(self, name, dim, stride, data_type=None):
        t = _Tensor(self, name, dim=list(dim), stride=list(stride), data_type=data_type)
        self.tensors.append(t)
        return t

    def _op(self, kind, inputs, n_out, **attrs):
        outs = [_Tensor(self, f"{kind}.{i}") for i in range(n_out)]
        self.tensors += outs
        self.ops.append(
            {"op": kind, "in": [t.uid for t in inputs if t is not None], "attrs": repr(sorted(attrs.items()))}
        )
        return outs

    def conv_fprop(self, image, weight, **attrs):
        return self._op("fprop", [image, weight], 1, **attrs)[0]

    def conv_dgrad(self, loss, filter, **attrs):  # noqa: A002 - the frontend's name
        return self._op("dgrad", [loss, filter], 1, **attrs)[0]

    def conv_wgrad(self, image, loss, **attrs):
        return self._op("wgrad", [image, loss], 1, **attrs)[0]

    def sdpa(self, name, q, k, v, bias=None, **attrs):
        return tuple(self._op("sdpa", [q, k, v, bias], 2, **attrs))

    def sdpa_backward(self, name, q, k, v, o, dO, stats, bias=None, **attrs):  # noqa: N803 - the frontend's name
        return tuple(self._op("sdpa_backward", [q, k, v, o, dO, stats, bias], 3, **attrs))

    def _step(self, what):
        self.module.calls.append(what)

    def validate(self):
        self._step("validate")

    def build_operation_graph(self):
        self._step("build_operation_graph")

    def create_execution_plans(self, modes):
        self._step("create_execution_plans")

    def deselect_numeric_notes(self, notes):
        pass

    def deselect_workspace_greater_than(self, n):
        pass

    def check_support(self):
        self._step("check_support")

    def build_plans(self):
        self._step("build")
        self.built = True

    def build(self, modes):
        self._step("build")
        self.built = True

    def description(self) -> dict:
        if self.loaded is not None:
            return self.loaded
        ts = sorted(
            (t.uid, t.name, json.dumps(t.attrs, sort_keys=True, default=str)) for t in self.tensors if t.uid is not None
        )
        return json.loads(json.dumps({"tensors": ts, "ops": self.ops}))  # as it reads back

    def get_workspace_size(self):
        return 256 * len(json.dumps(self.description()))

    def serialize(self):
        self._step("serialize")
        if not self.module.serializable:
            raise self.module.cudnnGraphNotSupportedError("no serialized form for this engine")
        assert self.built
        return list(PREFIX + json.dumps(self.description()).encode())  # the binding returns a list of ints

    def deserialize(self, handle, data):
        self._step("deserialize")
        if isinstance(data, (bytes, str)):  # pybind11 casts no bytes to std::vector<uint8_t>
            raise TypeError("deserialize(): incompatible function arguments")
        data = bytes(data)
        if not data.startswith(PREFIX):
            raise RuntimeError("[cudnn_frontend] json parse error")
        self.loaded, self.built = json.loads(data[len(PREFIX) :]), True


def _fake() -> types.ModuleType:
    m = types.ModuleType("cudnn")
    m.__version__ = "1.16.0"
    m.calls, m.serializable, m.version = [], True, 91000
    m.data_type = types.SimpleNamespace(FLOAT="float", HALF="half", BFLOAT16="bfloat16")
    m.heur_mode = types.SimpleNamespace(A="A", FALLBACK="FALLBACK")
    m.numerical_note = types.SimpleNamespace(TENSOR_CORE="tc", DOWN_CONVERT_INPUTS="dci")
    m.cudnnGraphNotSupportedError = type("cudnnGraphNotSupportedError", (RuntimeError,), {})
    m.pygraph = lambda **kw: _Graph(m, **kw)
    m.create_handle = lambda: 0x1234
    m.backend_version = lambda: m.version
    return m


def _new_process() -> None:
    """What a new process starts with: no graph built in it."""
    cudnn_conv.cudnn_conv.cache_clear()
    cudnn_conv.refusal.cache_clear()
    cudnn_attention.cudnn_attention.cache_clear()


@pytest.fixture
def fake(tmp_path, monkeypatch):
    m = _fake()
    monkeypatch.setitem(sys.modules, "cudnn", m)
    monkeypatch.setattr(cudnn_graph._local, "handle", None, raising=False)
    monkeypatch.setattr(cudnn_cache, "_device", lambda: "Fake GPU sm_90 132 SMs")
    monkeypatch.setattr(cudnn_cache, "COUNTS", cudnn_cache.Counts())
    monkeypatch.setenv("FLAME_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FLAME_CACHE_SIZE")  # the default size: the cache is on
    _new_process()
    yield m
    _new_process()


CONV = ConvSpec.of("fprop", "f16", (2, 8, 9, 9), (16, 8, 3, 3), (2, 16, 9, 9), [(1, 1), (1, 1)], (1, 1), (1, 1))
ATTENTION = AttentionSpec.of((2, 4, 64, 32), (2, 4, 64, 32), (2, 4, 64, 32), "bf16", 32**-0.5, True, False)


def _graphs() -> dict:
    """Every graph of CONV and ATTENTION made in this process: (description, workspace, tensors by uid)."""
    conv = cudnn_conv.cudnn_conv(CONV)
    att = cudnn_attention.cudnn_attention(ATTENTION)
    return {
        "conv": (conv._graph.description(), conv.workspace, conv._tensors),
        "forward": (att._forward_graph[0].description(), att.forward_workspace, att._forward_graph[1]),
        "backward": (att._backward_graph[0].description(), att.backward_workspace, att._backward_graph[1]),
    }


def _entries(fake_dir) -> list:
    return sorted(p.name for p in fake_dir.glob("*" + disk_cache.CUDNN_SUFFIX)) if fake_dir.exists() else []


def test_a_new_process_reads_the_graphs_back_instead_of_building(fake, tmp_path):
    first = _graphs()
    assert fake.calls.count("build") == 3 and fake.calls.count("serialize") == 3
    assert len(_entries(tmp_path / "cache")) == 3
    c = cudnn_cache.COUNTS
    assert (c.built, c.stored, c.loaded, c.rebuilt) == (3, 3, 0, 0) and c.build_seconds > 0
    _new_process()
    fake.calls.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        second = _graphs()
    assert "build" not in fake.calls and "build_operation_graph" not in fake.calls, fake.calls
    assert fake.calls == ["deserialize"] * 3
    assert second == first
    assert first["conv"][2] == (1, 2, 3)  # x, w -> y by their uids
    assert first["forward"][2]["bias"] is None and first["backward"][2]["dq"] == cudnn_attention.UIDS["dq"]
    assert (c.built, c.stored, c.loaded) == (3, 3, 3) and c.load_seconds > 0


def _damage(path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "forged":  # a well-formed entry signed without the user's key
        payload = data.split(b"\n", 2)[2]
        path.write_bytes(cudnn_cache.MAGIC + b"0" * 64 + b"\n" + payload)
    else:  # signed with the key, but cuDNN cannot read it back
        nvrtc.write_signed(path, b"not a graph", cudnn_cache.MAGIC)


@pytest.mark.parametrize("how", ["truncated", "forged", "unreadable"])
def test_a_bad_entry_warns_once_and_is_rebuilt(fake, tmp_path, how):
    conv = cudnn_conv.cudnn_conv(CONV)
    first = conv._graph.description()
    (entry,) = _entries(tmp_path / "cache")
    _damage(tmp_path / "cache" / entry, how)
    _new_process()
    fake.calls.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = cudnn_conv.cudnn_conv(CONV)
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(said) == 1 and "cuDNN graph of a fprop convolution" in said[0], said
    assert fake.calls.count("build") == 1 and again._graph.description() == first
    assert cudnn_cache.COUNTS.rebuilt == 1 and _entries(tmp_path / "cache") == [entry]  # stored anew
    _new_process()
    fake.calls.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert cudnn_conv.cudnn_conv(CONV)._graph.description() == first
    assert fake.calls == ["deserialize"]


def test_the_cache_off_stores_nothing(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("FLAME_CACHE_SIZE", "0")
    _graphs()
    _new_process()
    _graphs()
    assert fake.calls.count("build") == 6 and "serialize" not in fake.calls and "deserialize" not in fake.calls
    assert _entries(tmp_path / "cache") == []
    assert cudnn_cache.COUNTS.built == 6 and cudnn_cache.COUNTS.build_seconds > 0  # timed all the same


def test_a_graph_without_a_serialized_form_is_not_stored(fake, tmp_path, caplog):
    fake.serializable = False
    with caplog.at_level(logging.DEBUG, logger="flame"), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        cudnn_conv.cudnn_conv(CONV)
    assert _entries(tmp_path / "cache") == [] and cudnn_cache.COUNTS.unstorable == 1
    assert any("is not stored" in r.getMessage() and "no serialized form" in r.getMessage() for r in caplog.records)
    _new_process()
    fake.calls.clear()
    cudnn_conv.cudnn_conv(CONV)
    assert fake.calls.count("build") == 1  # built again: nothing to read


def _names(fake) -> set:
    return {cudnn_cache.entry_name(fake, key) for key in _keys()}


def _keys() -> list[str]:
    conv = cudnn_conv.cudnn_conv(CONV)
    dgrad = ConvSpec.of("dgrad", "f16", CONV.x, CONV.w, CONV.y, [(1, 1), (1, 1)], (1, 1), (1, 1))
    wider = ConvSpec.of("fprop", "f16", (2, 8, 9, 10), CONV.w, (2, 16, 9, 10), [(1, 1), (1, 1)], (1, 1), (1, 1))
    f32 = ConvSpec.of("fprop", "f32", CONV.x, CONV.w, CONV.y, [(1, 1), (1, 1)], (1, 1), (1, 1))
    keys = [
        conv._key(),
        cudnn_conv.CudnnConv(dgrad)._key(),
        cudnn_conv.CudnnConv(wider)._key(),
        cudnn_conv.CudnnConv(f32)._key(),
    ]
    return keys + [f"attention {d} {ATTENTION!r}" for d in ("forward", "backward")]


def test_keys_tell_specs_directions_gpus_and_versions_apart(fake, tmp_path, monkeypatch):
    base = _names(fake)
    assert len(base) == 6  # conv fprop / dgrad / another shape / f32, attention forward / backward
    fake.version = 91100  # another cuDNN library
    assert _names(fake).isdisjoint(base)
    fake.version, fake.__version__ = 91000, "1.17.0"  # another frontend
    assert _names(fake).isdisjoint(base)
    fake.__version__ = "1.16.0"
    monkeypatch.setattr(cudnn_cache, "_device", lambda: "Fake GPU sm_100 148 SMs")
    assert _names(fake).isdisjoint(base)
    monkeypatch.setattr(cudnn_cache, "_device", lambda: "Fake GPU sm_90 132 SMs")
    assert _names(fake) == base
    monkeypatch.setattr(cudnn_conv, "allow_tf32", True)  # an f32 convolution's engines differ with TF32
    f32_key = _keys()[3]
    assert cudnn_cache.entry_name(fake, f32_key) not in base
    # a new cuDNN reads nothing an older one stored: the graph is built again
    _new_process()
    fake.version = 91100
    fake.calls.clear()
    cudnn_conv.cudnn_conv(CONV)
    assert fake.calls.count("build") == 1


def test_prepare_makes_the_graphs_of_a_plans_library_calls(fake, cuda_target):
    import flame
    from flame import compiler
    from flame.plan.steps import AttentionCall, ConvCall
    from flame.runtime import cuda_steps
    from tests.plan.test_plan_cache import _library_step

    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((2, 2, 8, 16),) * 3 + ((2, 3, 6, 6), (4, 3, 3, 3))]
    ts = [flame.tensor(a, requires_grad=i in (0, 1, 2, 4)) for i, a in enumerate(arrays)]
    plan = compiler.compile_graph(flame.compile(_library_step).trace(*ts)).plan
    calls = [s for s in plan.steps if isinstance(s, (AttentionCall, ConvCall))]
    assert {s.kind for s in calls if isinstance(s, ConvCall)} == {"fprop", "wgrad"}, calls
    _new_process()
    fake.calls.clear()
    cudnn_cache.COUNTS.build_seconds = 0.0

    class _NoKernels(dict):
        def __missing__(self, key):
            return None

    cuda_steps.prepare(plan.steps, _NoKernels())
    assert fake.calls.count("build") == 2 and cudnn_cache.COUNTS.build_seconds > 0  # fprop, wgrad: before any run


def test_flame_cache_counts_evicts_and_clears_cudnn_graphs(fake, tmp_path, capsys):
    _graphs()
    assert cli.main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert "cuDNN graph cache: " + str(tmp_path / "cache") in out and "entries: 3" in out.split("cuDNN graph")[1]
    assert cli.main(["cache", "clear"]) == 0
    assert "3 cached cuDNN graph(s)" in capsys.readouterr().out and _entries(tmp_path / "cache") == []
    _new_process()
    _graphs()
    assert plan_cache.evict(tmp_path / "cache", 0) == 3 and _entries(tmp_path / "cache") == []


def test_the_legalize_question_builds_the_graphs_the_plan_runs(fake, monkeypatch):
    """Whether cuDNN can run a convolution is asked before the layout pass makes it channels-last: it is
    asked about the channels-last call, so no NC* graph is built only to answer (half of a U-Net's)."""
    import flame
    from flame import compiler
    from flame.plan.steps import ConvCall
    from flame.runtime import backend
    from tests.plan.test_plan_cache import _library_step

    monkeypatch.setattr(backend, "cuda_available", lambda: True)
    monkeypatch.setattr(backend, "_arch", lambda: "sm_90")
    cuda = compiler.capabilities("cuda")
    monkeypatch.setattr(compiler, "capabilities", lambda name: cuda)
    monkeypatch.setattr(compiler, "_target", lambda *settings: cuda)
    monkeypatch.setattr(compiler, "_CACHE", type(compiler._CACHE)())
    built = []
    graph = cudnn_cache.graph
    monkeypatch.setattr(cudnn_cache, "graph", lambda cudnn, key, *a: built.append(key) or graph(cudnn, key, *a))
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((2, 2, 8, 16),) * 3 + ((2, 3, 6, 6), (4, 3, 3, 3))]
    ts = [flame.tensor(a, requires_grad=i in (0, 1, 2, 4)) for i, a in enumerate(arrays)]
    plan = compiler.compile_graph(flame.compile(_library_step).trace(*ts)).plan
    specs = {cudnn_conv.spec_of(s.op) for s in plan.steps if isinstance(s, ConvCall)}
    assert len(specs) == 2 and all(s.x_strides[1] == 1 for s in specs)  # fprop, wgrad: channels-last
    assert sorted(k.split(" tf32=")[0] for k in built if k.startswith("conv")) == sorted(f"conv {s!r}" for s in specs)
