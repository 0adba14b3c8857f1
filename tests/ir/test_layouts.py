"""indexmap.Layouts: derive's answers kept per group structure. A group alike in structure to one asked
before (another block of a model) gets derive's answer for its own values; a group that differs in an
attribute, a type or its wiring is derived anew; symbolic sizes are never kept."""

from __future__ import annotations

from flame.ir import Builder, Graph, TensorType, f32
from flame.ir.indexmap import Layout, Layouts, derive
from flame.ir.symbolic import SymInt


def _block(b: Builder, x, w, perm=(1, 0)):
    """A small group with a broadcast, a permute and a row reduction."""
    y = b.emit("mul", x, w)
    t = b.emit("permute", y, perm=list(perm))
    s = b.emit("add", t, b.emit("permute", x, perm=list(perm)))
    return [y.producer, t.producer, s.producer.inputs[1].producer, s.producer]


def _same(got: Layout | str, want: Layout | str) -> None:
    assert type(got) is type(want)
    if isinstance(want, str):
        assert got == want
        return
    assert list(got.maps.items()) == list(want.maps.items())
    assert list(got.stores.items()) == list(want.stores.items())
    assert list(got.through.items()) == list(want.through.items())
    assert got.guarded == want.guarded and (got.domain, got.n_red) == (want.domain, want.n_red)


def _graph():
    g = Graph("blocks")
    b = Builder(g)
    x1, x2 = g.add_input(TensorType((4, 4), f32)), g.add_input(TensorType((4, 4), f32))
    w = g.add_input(TensorType((4,), f32))
    return b, x1, x2, w


def test_an_alike_group_gets_the_answer_for_its_own_values():
    b, x1, x2, w = _graph()
    first, second = _block(b, x1, w), _block(b, x2, w)
    memo = Layouts()
    for ops, x in ((first, x1), (second, x2)):
        got = memo.derive(ops, [ops[-1].out], (4, 4), 0)
        _same(got, derive(ops, [ops[-1].out], (4, 4), 0))
        assert isinstance(got, Layout) and x in got.maps
    assert len(memo._found) == 1  # the second block was answered from the first


def test_groups_that_differ_are_derived_anew():
    b, x1, x2, w = _graph()
    first = _block(b, x1, w)
    other_perm = _block(b, x2, w, perm=(0, 1))
    memo = Layouts()
    for ops, exposed, domain in (
        (first, [first[-1].out], (4, 4)),
        (other_perm, [other_perm[-1].out], (4, 4)),
        (first, [first[0].out, first[-1].out], (4, 4)),  # another value stored
        (first[:2], [first[1].out], (4, 4)),
    ):
        _same(memo.derive(ops, exposed, domain, 0), derive(ops, exposed, domain, 0))
    assert len(memo._found) == 4
    # a value read twice is wired differently from two values read once each
    g = Graph("wiring")
    bb = Builder(g)
    p, q = g.add_input(TensorType((4,), f32)), g.add_input(TensorType((4,), f32))
    twice, once_each = bb.emit("mul", p, p).producer, bb.emit("mul", p, q).producer
    for op in (twice, once_each):
        _same(memo.derive([op], [op.out], (4,), 0), derive([op], [op.out], (4,), 0))
    assert len(memo._found) == 6


def test_symbolic_sizes_are_not_kept():
    g = Graph("dynamic")
    b = Builder(g)
    n = SymInt(8, 2, 0)  # 2*s0 at s0=4
    x = g.add_input(TensorType((n, 4), f32))
    op = b.emit("exp", x).producer
    memo = Layouts()
    for _ in range(2):
        _same(memo.derive([op], [op.out], (n, 4), 0), derive([op], [op.out], (n, 4), 0))
    assert not memo._found


def test_the_limit_bounds_what_is_kept():
    b, x1, x2, w = _graph()
    ops = _block(b, x1, w)
    memo = Layouts(limit=2)
    for k in range(1, 5):
        _same(memo.derive(ops[:k], [ops[k - 1].out], (4, 4), 0), derive(ops[:k], [ops[k - 1].out], (4, 4), 0))
    assert len(memo._found) == 2
