"""The fusion pass's reachability between kernels (passes/fusion_state.py): the bitset closure kept
through merges, and the one-walk question over several kernels, agree with walking the kernels' edges;
the kernels' collection answers as a list does."""

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


def _walk_answer(st: State, srcs, dsts) -> bool:
    """reaches_any without the kept order: the plain walk down from srcs."""
    pos, st.pos = st.pos, None
    try:
        return st.reaches_any(srcs, dsts)
    finally:
        st.pos = pos


@pytest.mark.parametrize("seed", range(8))
def test_the_order_kept_while_ops_are_placed_is_topological_and_answers_as_a_walk(seed: int) -> None:
    """Ops placed in program order, each joining a kernel it reads where that makes no cycle, kernels
    merging where no third lies between them: the kept order stays topological through it all, and
    reaches_any's bounded two-way walk answers as walking every edge does."""
    rng = random.Random(seed)
    g = Graph("g")
    values = [g.add_input(TensorType((4,), f32)) for _ in range(3)]
    b = Builder(g)
    for _ in range(60):
        x, y = rng.choice(values), rng.choice(values)
        values.append(b.add(x, y) if rng.random() < 0.6 else b.exp(x))
    g.outputs = values[-3:]
    st = State(g, DEFAULT_TARGET)
    st.keep_order(True)
    joins = merges = 0
    for op in g.ops:
        producers = list(dict.fromkeys(st.group_of[v.producer] for v in op.inputs if v.producer in st.group_of))
        grp = rng.choice(producers) if producers and rng.random() < 0.7 else None
        others = [h for h in producers if h is not grp]
        if grp is None or st.reaches_any((grp,), others):
            st.new([op], Kind.ELEMENTWISE, domain=(4,))
        else:
            grp.ops.append(op)
            st.group_of[op] = grp
            st.placed(grp, [op])
            joins += 1
            for other in others:
                between = [k for k in st.succ(other) if k is not grp]
                if other in st.groups and not st.reaches_any(between, (grp,)) and not st.reaches(grp, other):
                    merge(st, grp, other)
                    merges += 1
        assert st.pos is not None
        assert all(st.pos[k] < st.pos[s] for k in st.groups for s in st.succ(k))
        for _ in range(10):
            srcs, dsts = rng.sample(st.groups, min(2, len(st.groups))), rng.sample(st.groups, min(2, len(st.groups)))
            assert st.reaches_any(srcs, dsts) == _walk_answer(st, srcs, dsts)
    assert joins > 5 and merges > 0


@pytest.mark.parametrize("seed", range(4))
def test_the_kernels_keep_a_lists_order_through_merges_and_returns(seed: int) -> None:
    """State.groups answers as the list it stands for: merges remove kernels, a kernel put back goes
    last, membership and [-1] follow."""
    st = _random_state(seed)
    mirror = list(st.groups)
    rng = random.Random(seed)
    for _ in range(30):
        a, b = rng.sample(st.groups, 2)
        merge(st, a, b)
        mirror.remove(b)
        if rng.random() < 0.3:  # put b back, as a rule undoing a change does
            st.groups.append(b)
            mirror.append(b)
        assert list(st.groups) == mirror and list(reversed(st.groups)) == mirror[::-1]
        assert st.groups[-1] is mirror[-1] and st.groups[0] is mirror[0] and len(st.groups) == len(mirror)
        assert all(k in st.groups for k in mirror) and (b in st.groups) == (b in mirror)
