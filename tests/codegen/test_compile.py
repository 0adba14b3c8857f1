"""Every registry op (but matmul) x every dtype it accepts is lowered and compiled by NVRTC to cubins
for sm_80 and sm_90 (no GPU needed): the CI proof that every generated kernel compiles."""

from __future__ import annotations

import pytest

from flame.codegen import Kernel, lower, single
from flame.codegen.nvrtc import compile_cubin
from flame.errors import DTypeError
from flame.ir import ALL_DTYPES, REGISTRY, Builder, Graph, TensorType, i32, i64
from flame.ir.graph import Op

ARCHS = ("sm_80", "sm_90")


def _inputs(g: Graph, *types: tuple) -> list:
    return [g.add_input(TensorType(shape, dt)) for shape, dt in types]


def _unary(b, g, dt, name):
    (x,) = _inputs(g, ((3, 5, 7), dt))
    getattr(b, name)(x)
    (s,) = _inputs(g, ((), dt))
    getattr(b, name)(s)


def _binary(b, g, dt, name):
    x, y, z, w, s = _inputs(g, ((4, 1, 6), dt), ((5, 1), dt), ((8, 16), dt), ((8, 16), dt), ((), dt))
    getattr(b, name)(x, y)  # broadcast both ways
    getattr(b, name)(z, w)  # same shape: vector path
    getattr(b, name)(z, s)  # scalar operand


def _polygamma(b, g, dt):
    x, s = _inputs(g, ((3, 5, 7), dt), ((), dt))
    for n in (1, 2, 5):  # trigamma's series, and the zeta series of the higher orders
        b.polygamma(x, n=n)
        b.polygamma(s, n=n)


def _bitwise(b, g, dt):
    x, y, z, w = _inputs(g, ((4, 1, 6), dt), ((5, 1), dt), ((8, 16), dt), ((8, 16), dt))
    for fn in ("and", "or", "xor") + (("lshift", "rshift") if dt.kind == "int" else ()):
        b.bitwise(x, y, fn=fn)
        b.bitwise(z, w, fn=fn)


def _where(b, g, dt):
    from flame.ir import boolean

    c, x, y = _inputs(g, ((4, 1), boolean), ((4, 6), dt), ((6,), dt))
    b.where(c, x, y)


def _cast(b, g, dt):
    x, y = _inputs(g, ((5, 7), dt), ((3, 1, 4), dt))
    for to in ALL_DTYPES:
        b.cast(x, dtype=to)
    b.cast(b.broadcast_to(y, shape=(3, 2, 4)), dtype=ALL_DTYPES[0])


def _scaled_cast(b, g, dt):
    from flame.ir import f32
    from flame.ir.dtypes import FP8_DTYPES

    x, y, s = _inputs(g, ((5, 7), dt), ((3, 1, 4), dt), ((), f32))
    for to in FP8_DTYPES:
        b.scaled_cast(x, s, dtype=to)
        b.scaled_cast(b.broadcast_to(y, shape=(3, 2, 4)), s, dtype=to)


def _full(b, g, dt):
    b.full(shape=(3, 4), value=2.5, dtype=dt)
    b.full(shape=(), value=-1, dtype=dt)
    if dt.is_float:
        b.full(shape=(5,), value=float("-inf"), dtype=dt)


def _arange(b, g, dt):
    b.arange(start=1, stop=10, step=0.5, dtype=dt)


def _tri(b, g, dt, name):
    (x,) = _inputs(g, ((2, 5, 7), dt))
    getattr(b, name)(x, k=1)
    getattr(b, name)(x, k=-2)


def _random(b, g, dt, name):
    seed, offset = _inputs(g, ((), i64), ((), i64))
    getattr(b, name)(seed, offset, shape=(3, 50), dtype=dt)


def _reduce(b, g, dt, name):
    (x,) = _inputs(g, ((6, 7, 9), dt))
    for axes in ([2], [0], [0, 2], [1], [0, 1, 2]):
        getattr(b, name)(x, axes=axes)
    getattr(b, name)(x, axes=[1], keepdim=True)
    if name != "reduce_max" and name != "reduce_min":
        getattr(b, name)(x, axes=[])
    long_rows, long_cols = _inputs(g, ((3, 200000), dt), ((100000, 3), dt))
    getattr(b, name)(long_rows, axes=[1])  # partials in scratch, then a final kernel
    getattr(b, name)(long_cols, axes=[0])
    (wide,) = _inputs(g, ((64, 3000), dt))
    getattr(b, name)(wide, axes=[1])  # a block per row


def _argmax(b, g, dt):
    x, long_row, s = _inputs(g, ((6, 7, 9), dt), ((500000,), dt), ((), dt))
    for axis in (0, 1, 2):
        b.argmax(x, axis=axis)
    b.argmax(x, axis=-1, keepdim=True)
    b.argmax(long_row, axis=0)
    b.argmax(s, axis=0)


def _movement(b, g, dt, name):
    x, y, z = _inputs(g, ((6, 5), dt), ((5, 1), dt), ((2, 3, 4), dt))
    if name == "reshape":
        b.reshape(x, shape=(3, 10))
    elif name == "broadcast_to":
        b.broadcast_to(y, shape=(4, 5, 3))
    elif name == "permute":
        b.permute(z, perm=(2, 0, 1))
    elif name == "slice":
        b.slice(x, starts=(1, 0), stops=(6, 5), steps=(2, 3))
    elif name == "concat":
        b.concat(x, b.slice(x, starts=(0, 0), stops=(6, 2), steps=(1, 1)), x, axis=1)
    elif name == "flip":
        b.flip(z, axes=(0, 2))
    elif name == "diagonal":
        b.diagonal(z, offset=1, axis1=2, axis2=0)
        b.diagonal(x, offset=-2, axis1=0, axis2=1)
    elif name == "as_strided":
        flat = b.reshape(z, shape=(24,))
        b.as_strided(flat, size=(5, 4), stride=(3, 1), offset=2)  # overlapping windows
        b.as_strided(flat, size=(3, 2, 2), stride=(0, 8, 2), offset=1)  # a repeat and strided reads
    elif name == "squeeze":
        b.squeeze(y, axes=(1,))
    elif name == "unsqueeze":
        b.unsqueeze(x, axes=(0, 2))
    elif name == "pad":
        b.pad(z, pads=((1, 0), (0, 2), (1, 1)), value=1)


def _gather(b, g, dt, name):
    for it in (i32, i64):
        x, idx, src, sel = _inputs(g, ((4, 6), dt), ((4, 3), it), ((4, 3), dt), ((5,), it))
        if name == "gather":
            b.gather(x, idx, axis=1)
        elif name == "index_select":
            b.index_select(x, sel, axis=0)
        elif name == "scatter":
            b.scatter(x, idx, src, axis=1)
        else:
            b.scatter_add(x, idx, src, axis=1)


def _segment_sum(b, g, dt):
    """Slices of 4k elements (the vector path, 16-byte f32 atomics on sm_90) and of odd length."""
    for it in (i32, i64):
        idx, rows, cols, odd = _inputs(g, ((6,), it), ((6, 8), dt), ((3, 6), dt), ((2, 6, 3), dt))
        b.segment_sum(idx, rows, axis=0, size=5)
        b.segment_sum(idx, cols, axis=1, size=4)
        b.segment_sum(idx, odd, axis=1, size=7)
    empty, nothing = _inputs(g, ((0,), i64), ((0, 4), dt))  # no index: zeros
    b.segment_sum(empty, nothing, axis=0, size=3)


def _scan(b, g, dt, name):
    x, s = _inputs(g, ((6, 7, 9), dt), ((), dt))
    for axis in (0, 1, 2):
        getattr(b, name)(x, axis=axis)
    getattr(b, name)(s, axis=0)
    if name == "argsort":
        b.argsort(x, axis=-1, descending=True)


def _cumarg(b, g, dt):
    x, s = _inputs(g, ((6, 7, 9), dt), ((), dt))
    for axis in (0, 1, 2):
        b.cumarg(x, axis=axis, largest=axis != 1)
    b.cumarg(s, axis=0, largest=True)


def _maker(name: str):
    opdef = REGISTRY[name]
    special = {"where": _where, "cast": _cast, "scaled_cast": _scaled_cast, "full": _full, "arange": _arange,
               "cumarg": _cumarg, "segment_sum": _segment_sum,
               "argmax": _argmax, "bitwise": _bitwise, "polygamma": _polygamma}
    if name in ("cumsum", "cumprod", "logcumsumexp", "argsort"):
        return lambda b, g, dt: _scan(b, g, dt, name)
    if name in special:
        return special[name]
    if name in ("triu", "tril"):
        return lambda b, g, dt: _tri(b, g, dt, name)
    if name.startswith("random_"):
        return lambda b, g, dt: _random(b, g, dt, name)
    if name in ("gather", "index_select", "scatter_add", "scatter"):
        return lambda b, g, dt: _gather(b, g, dt, name)
    if opdef.category == "reduction":
        return lambda b, g, dt: _reduce(b, g, dt, name)
    if opdef.category == "movement":
        return lambda b, g, dt: _movement(b, g, dt, name)
    if opdef.category == "elementwise":
        fn = _unary if opdef.arity == 1 else _binary
        return lambda b, g, dt: fn(b, g, dt, name)
    return None


def build_ops(name: str, dtype) -> list[Op] | None:
    """Sample ops of `name` on `dtype` (several shapes, to reach every kernel path); None when the op
    does not accept the dtype."""
    g = Graph()
    try:
        _maker(name)(Builder(g), g, dtype)
    except DTypeError:
        return None
    return [op for op in g.ops if op.name == name]


OPS = sorted(n for n in REGISTRY if REGISTRY[n].category not in ("matmul", "library"))  # library calls: no kernel
CASES = [(n, dt.name) for n in OPS for dt in ALL_DTYPES if build_ops(n, dt) is not None]


def test_every_op_has_cases():
    assert all(_maker(n) is not None for n in OPS)
    assert {n for n, _ in CASES} == set(OPS)


@pytest.mark.parametrize("name,dtype", CASES, ids=[f"{n}-{d}" for n, d in CASES])
def test_op_compiles(name, dtype, tmp_path, monkeypatch):
    from flame.ir import dtype_of

    monkeypatch.setenv("FLAME_CACHE_DIR", str(tmp_path))
    kernels: list[Kernel] = [k for op in build_ops(name, dtype_of(dtype)) for k in lower(single(op))]
    assert kernels
    for k in kernels:
        assert f"void {k.name}(" in k.source or f") {k.name}(" in k.source
        assert k.source.startswith("// flame kernel for IR op: ") and f"= {name}" in k.source.splitlines()[0]
        assert k.grid >= 1 and 32 <= k.block <= 1024 and k.block % 32 == 0
    unique = {k.source: k for k in kernels}
    assert len({k.name for k in unique.values()}) == len(unique), "kernel names must be unique per source"
    # one module per arch (fast; also proves kernels of one plan can share a module)
    module = "\n".join(unique)
    for arch in ARCHS:
        cubin = compile_cubin(module, arch, f"{name}_{dtype}")
        assert cubin[:4] == b"\x7fELF"
        assert all(k.name.encode() in cubin for k in unique.values())


def test_matmul_is_a_library_call():
    g = Graph()
    a, c = _inputs(g, ((2, 3), ALL_DTYPES[0]), ((3, 4), ALL_DTYPES[0]))
    Builder(g).matmul(a, c)
    with pytest.raises(NotImplementedError):
        lower(single(g.ops[-1]))


def test_zero_size_output_gives_no_kernels():
    g = Graph()
    b = Builder(g)
    x = g.add_input(TensorType((0, 4), ALL_DTYPES[0]))
    for v in (b.exp(x), b.reduce_sum(x, axes=[1]), b.permute(x, perm=[1, 0]), b.full(shape=(3, 0), value=1, dtype=i64)):
        assert lower(single(v.producer)) == []
    mean = b.reduce_mean(x, axes=[0])  # 4 outputs over 0 elements: a kernel writing NaN
    assert len(lower(single(mean.producer))) == 1


def test_huge_tensors_use_64_bit_indexing(tmp_path, monkeypatch):
    monkeypatch.setenv("FLAME_CACHE_DIR", str(tmp_path))
    g = Graph()
    b = Builder(g)
    x = g.add_input(TensorType((1 << 31,), ALL_DTYPES[0]))
    small = g.add_input(TensorType((4, 5), ALL_DTYPES[0]))
    (big,) = lower(single(b.neg(x).producer))
    (little,) = lower(single(b.neg(small).producer))
    assert "typedef unsigned long long idx_t;" in big.source
    assert "typedef unsigned int idx_t;" in little.source
    assert compile_cubin(big.source, "sm_90")[:4] == b"\x7fELF"
