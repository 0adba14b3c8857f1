"""The op traits (OpDef.view / reduction / positional / library) agree with the rest of each op's
declaration and with codegen's tables, by walking the registry: a view's index map reads exactly
what its reference returns, every reduction has a fold snippet, a positional op is exactly one whose
snippet reads its own index `i`, a library op names a fusion Kind."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from flame.codegen import views
from flame.codegen.snippets import REDUCTIONS, SNIPPETS
from flame.ir import REGISTRY, f32
from flame.ir.graph import Kind
from tests.ops.test_registry import RECIPES, _one_op_graph, _rng

OPS = sorted(REGISTRY)
VIEW_OPS = sorted(n for n, d in REGISTRY.items() if d.view is not None)


@pytest.mark.parametrize("name", VIEW_OPS)
def test_view_index_map_reads_what_the_reference_returns(name: str) -> None:
    opdef = REGISTRY[name]
    assert opdef.category == "movement" and opdef.arity == 1
    for ins, attrs in RECIPES[name].make(_rng("traits", name), f32):
        (x,) = ins
        op = _one_op_graph(name, ins, attrs).ops[-1]
        want = np.asarray(opdef.ref(x, **op.attrs))
        m = opdef.view.index_map(op)
        if opdef.view.relabel:  # same elements in the same order
            np.testing.assert_array_equal(want.ravel(), x.ravel())
        if m is None:
            assert opdef.view.relabel, f"{name} {attrs}: only a relabel may lack an affine index map"
            continue
        view = views.of_map(m, x.shape)
        flat = x.ravel()
        for c in itertools.product(*(range(s) for s in want.shape)):
            src = tuple(b + sum(r * k for r, k in zip(row, c)) for row, b in zip(m.rows, m.base))
            assert want[c] == x[src], f"{name} {attrs}: out{c} is not in{src}"
            assert want[c] == flat[view.base + sum(s * k for s, k in zip(view.strides, c))]


@pytest.mark.parametrize("name", OPS)
def test_reduction_trait_matches_category_and_snippets(name: str) -> None:
    opdef = REGISTRY[name]
    assert (opdef.reduction is not None) == (opdef.category == "reduction")
    assert (name in REDUCTIONS) == (opdef.reduction is not None), f"{name}: reduction trait vs fold snippet"
    if opdef.reduction is not None:
        assert opdef.reduction.identity in ("zero", "lowest", "highest")


@pytest.mark.parametrize("name", OPS)
def test_positional_ops_are_the_snippets_that_read_their_index(name: str) -> None:
    opdef = REGISTRY[name]
    reads_i = any(re.search(r"\bi\b", text) for text in SNIPPETS.get(name, {}).values())
    assert opdef.positional == reads_i, f"{name}: positional={opdef.positional} but snippet reads i: {reads_i}"
    assert not opdef.positional or opdef.category == "elementwise"


@pytest.mark.parametrize("name", OPS)
def test_library_ops_name_a_fusion_kind(name: str) -> None:
    opdef = REGISTRY[name]
    if opdef.library:
        assert Kind(opdef.library) and opdef.category in ("matmul", "library")
    else:
        assert opdef.category not in ("matmul", "library")
