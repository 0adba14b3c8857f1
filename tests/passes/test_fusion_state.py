"""The fusion pass's reachability between kernels (passes/fusion_state.py): the bitset closure kept
through merges, and the one-walk question over several kernels, agree with walking the kernels' edges."""

from __future__ import annotations

import random

import pytest

from flame.ir import Builder, Graph, TensorType, f32
from flame.ir.graph import Kind
from flame.passes.fusion_state import Closure, State, merge
from flame.target import DEFAULT_TARGET


def _random_state(seed: int, n: int = 40) -> State:
    """A graph of n elementwise ops, each reading one or two earlier values at random, one kernel per op."""
    rng = random.Random(seed)
    g = Graph("g")
    values = [g.add_input(TensorType((4,), f32)) for _ in range(3)]
    b = Builder(g)
    for _ in range(n):
        if rng.random() < 0.5:
            values.append(b.exp(rng.choice(values)))
        else:
            values.append(b.add(rng.choice(values), rng.choice(values)))
    g.outputs = values[-3:]
    st = State(g, DEFAULT_TARGET)
    for op in g.ops:
        st.new([op], Kind.ELEMENTWISE, domain=(4,))
    return st


def _walked(st: State) -> dict:
    return {(a, b): st.reaches(a, b) for a in st.groups for b in st.groups}


@pytest.mark.parametrize("seed", range(8))
def test_the_closure_kept_through_merges_is_what_a_walk_finds(seed: int) -> None:
    st = _random_state(seed)
    reach = Closure.of(st)
    assert reach is not None
    rng = random.Random(seed)
    merges = 0
    for _ in range(200):
        a, b = rng.sample(st.groups, 2)
        if st.reaches(a, b) or st.reaches(b, a):
            continue  # (the horizontal rule merges kernels neither of which reaches the other)
        reach.merge(a, b)
        merge(st, a, b)
        merges += 1
        walked = _walked(st)
        assert {pair: reach.reaches(*pair) for pair in walked} == walked
    assert merges > 3


@pytest.mark.parametrize("seed", range(8))
def test_reaches_any_is_reaches_for_some_pair(seed: int) -> None:
    st = _random_state(seed)
    rng = random.Random(seed)
    for _ in range(100):
        srcs, dsts = rng.sample(st.groups, rng.randint(0, 3)), rng.sample(st.groups, rng.randint(0, 3))
        assert st.reaches_any(srcs, dsts) == any(st.reaches(s, d) for s in srcs for d in dsts)
