"""A stand-in for nvidia-cudnn-frontend's `cudnn` module that records what it is asked to do (building,
serializing, reading back), serializes a graph as the description of what was built and refuses
graphs with a dimension of REFUSED
(tests/runtime/test_cudnn_cache.py, tests/runtime/test_cudnn_builders.py); `init_worker` installs it
in a builder process (flame.runtime.builders)."""

from __future__ import annotations

import json
import sys
import types

PREFIX = b"FAKEGRAPH"
REFUSED = 13  # the stand-in refuses a graph with a tensor dimension of 13, as cuDNN one it cannot run


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
        if any(13 in t.attrs.get("dim", ()) for t in self.tensors):
            raise self.module.cudnnGraphNotSupportedError(f"no engine supports a dimension of {REFUSED}")

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


def fake() -> types.ModuleType:
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


def init_worker(device: int) -> None:
    """A builder process's start with the stand-in as its `cudnn` module (flame.runtime.cudnn_builders)."""
    sys.modules["cudnn"] = fake()
