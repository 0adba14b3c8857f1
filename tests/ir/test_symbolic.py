"""SymInt: its value everywhere, an expression of flame_s0 where codegen renders it."""

from fractions import Fraction

import pytest

from flame.ir import symbolic
from flame.ir.symbolic import NotSymbolic, SymInt, finish_source


def test_symint_is_its_value_and_keeps_affine_forms():
    n = SymInt(6, Fraction(2), Fraction(0))  # 2*s0 at s0=3
    assert n == 6 and hash(n) == hash(6) and repr(n) == "6" and n < 7
    m = n * 784 + 4
    assert isinstance(m, SymInt) and m == 4708 and m.form() == "1568*s0+4"
    assert (n * 4) // 8 == 3 and isinstance((n * 4) // 8, SymInt)  # exact at every size
    assert isinstance(n // 4, int) and not isinstance(n // 4, SymInt)  # not exact: the value here
    assert (n * 4 + 3) % 8 == 3 and not isinstance((n * 4 + 3) % 8, SymInt)  # the same at every size
    assert not isinstance(n * n, SymInt) and n * n == 36


def test_rendered_sizes_become_the_kernel_parameter_typed_as_the_literal_was():
    n = SymInt(6, Fraction(2), Fraction(0))
    with symbolic.rendering(3):
        text = f"extern \"C\" __global__ void K(const float* in0) {{ const unsigned n = {n}u; int m = {n}; }}"
    source, sized = finish_source(text, "K")
    assert sized
    assert "K(const float* in0, const long long flame_s0)" in source
    assert "n = ((unsigned)(2*flame_s0));" in source and "m = ((int)(2*flame_s0));" in source
    with symbolic.rendering(3):
        bad = f"void K() {{ float x = {n}.0f; }}"
    with pytest.raises(NotSymbolic):
        finish_source(bad, "K")
    assert str(n) == "6"  # outside rendering: the value
