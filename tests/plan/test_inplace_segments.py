"""In-place sharing inside one kernel is safe only within one segment: the segments of a horizontal
kernel run on different blocks with their own index maps, so a buffer one segment writes must not
take the bytes of a buffer another segment still reads (gpt_train's gradients were wrong on the GPU
when a recomputation joined a backward kernel as a sibling segment)."""

from types import SimpleNamespace

from flame.ir import Builder, Graph, TensorType, dtype_of
from flame.plan.memory import _one_segment


def _two_segments():
    g = Graph("h")
    b = Builder(g)
    t = TensorType((4, 8), dtype_of("f32"))
    x, w = g.add_input(t), g.add_input(t)
    y = b.mul(x, x)  # segment A reads x
    z = b.add(w, w)  # segment B writes z
    ops = [y.producer, z.producer]
    return SimpleNamespace(ops=ops), {x: 1, w: 2, y: 3, z: 4}


def test_a_segment_never_writes_over_what_another_segment_reads():
    step, buffer_of = _two_segments()
    assert not _one_segment(step, {1}, {4}, buffer_of)  # x read by A, z written by B
    assert not _one_segment(step, {1}, {4}, None)  # without the value map: refuse
    assert _one_segment(step, {1}, {3}, buffer_of)  # A reads x and writes y: one segment, pointwise


def test_a_one_segment_kernel_may_share():
    g = Graph("v")
    b = Builder(g)
    x = g.add_input(TensorType((4, 8), dtype_of("f32")))
    y = b.mul(x, x)
    z = b.add(y, x)
    assert _one_segment(SimpleNamespace(ops=[y.producer, z.producer]), {1}, {3}, {x: 1, z: 3})
