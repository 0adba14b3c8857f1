"""Every elementwise op has a CUDA snippet for every compute kind it accepts; every reduction has a
combine rule."""

from __future__ import annotations

import pytest

from flame.codegen import cuda_c
from flame.codegen.snippets import REDUCTIONS, SNIPPETS, snippet
from flame.errors import DTypeError
from flame.ir import ALL_DTYPES, REGISTRY, TensorType, i64

ELEMENTWISE = sorted(n for n, d in REGISTRY.items() if d.category == "elementwise")


def test_every_elementwise_op_has_a_snippet():
    missing = [n for n in ELEMENTWISE if n not in SNIPPETS]
    assert not missing, f"ops without a CUDA snippet in flame/codegen/snippets.py: {missing}"
    assert not set(SNIPPETS) - set(REGISTRY), "snippets for ops the registry does not know"


def test_every_reduction_has_a_rule():
    assert {n for n, d in REGISTRY.items() if d.category == "reduction"} == set(REDUCTIONS)


def _accepts(name, dt) -> bool:
    opdef = REGISTRY[name]
    arity = opdef.arity if opdef.arity >= 0 else 1
    if name == "where":
        types = [TensorType((2,), ALL_DTYPES[-1]), TensorType((2,), dt), TensorType((2,), dt)]
    elif name.startswith("random_"):
        types = [TensorType((), i64)] * 2
    else:
        types = [TensorType((2, 2), dt)] * arity
    attrs = {"dtype": dt, "shape": (2,), "value": 1, "start": 0, "stop": 2, "fn": "and", "n": 1}
    try:
        opdef.infer(types, **opdef.normalize_attrs({k: v for k, v in attrs.items() if k in opdef.attrs}))
    except DTypeError:
        return False
    return True


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_snippet_for_every_accepted_dtype(name):
    for dt in ALL_DTYPES:
        if _accepts(name, dt):
            text = snippet(name, cuda_c.kind(dt), "and" if name == "bitwise" else None)  # bitwise: fn's variant
            assert text.count("(") == text.count(")")


def test_literals_round_like_numpy():
    from flame.ir import bf16, f16, f32, i32

    assert cuda_c.literal(0.1, f16) == "0.099975586f"  # 0.1 rounded to f16 first, as np.full does
    assert cuda_c.literal(2.5, i64) == "2LL"
    assert cuda_c.literal(-(2**31), i32) == "(-2147483647 - 1)"
    assert cuda_c.literal(float("inf"), f32) == "__int_as_float(0x7f800000)"
    assert cuda_c.literal(1, bf16) == "1.0f"
