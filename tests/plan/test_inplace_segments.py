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
    return SimpleNamespace(ops=ops, in_place_safe=False), {x: 1, w: 2, y: 3, z: 4}  # as lower_map says of two parts


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


def _kernel(ops, ins: int, outs: int, in_place_safe: bool = True):
    from flame.plan.steps import KernelLaunch

    return KernelLaunch("k", "", 1, 1, 0, tuple(range(1, ins + outs + 1)), ins, tuple(ops), (0, 1), outs,
                        in_place_safe=in_place_safe)


def _buffers(n: int, t):
    from flame.plan.steps import Buffer

    return {i: Buffer(i, t.numel * 4, t.dtype, t.shape, "temporary") for i in range(1, n + 1)}


def test_an_output_takes_only_the_bytes_of_an_input_it_is_computed_from():
    """A thread stores an output once it has computed it, loading the inputs that needs and no more:
    an output not computed from the dying input would be stored over elements still to be loaded."""
    from flame.plan.memory import shares_in_place

    g = Graph("d")
    b = Builder(g)
    t = TensorType((4, 8), dtype_of("f32"))
    x, w = g.add_input(t), g.add_input(t)
    s = b.add(x, w)
    y = b.mul(s, s)  # from x and w
    z = b.mul(w, w)  # from w alone
    u = b.add(z, s)  # joins z's part to y's: the kernel is one segment
    step = _kernel([s.producer, y.producer, z.producer, u.producer], 2, 2)
    buffer_of = {x: 1, w: 2, y: 3, z: 4}
    bufs, ranges = _buffers(4, t), {1: (0, 0), 2: (0, 0), 3: (0, 1), 4: (0, 1)}
    assert shares_in_place(bufs, [step], ranges, 1, 3, buffer_of)  # y is computed from x
    assert not shares_in_place(bufs, [step], ranges, 1, 4, buffer_of)  # z is not
    assert shares_in_place(bufs, [step], ranges, 2, 4, buffer_of)  # z is computed from w


def test_parts_reading_a_value_in_common_share_when_lower_map_ran_them_as_one():
    """A GELU recomputed beside its gradient: two connected parts, one segment of the generated kernel
    (they read the pre-activation in common), so the recomputed output may take its bytes; a kernel
    lower_map could not run as one segment says so (in_place_safe) and keeps them apart."""
    g = Graph("g")
    b = Builder(g)
    t = TensorType((4, 8), dtype_of("f32"))
    h, dy = g.add_input(t), g.add_input(t)
    a = b.gelu(h)
    dh = b.mul(dy, b.erf(h))
    ops = [a.producer, *[v.producer for v in (dh.producer.inputs[1], dh)]]
    buffer_of = {h: 1, dy: 2, a: 3, dh: 4}
    assert _one_segment(_kernel(ops, 2, 2), {1}, {3}, buffer_of)
    assert not _one_segment(_kernel(ops, 2, 2, in_place_safe=False), {1}, {3}, buffer_of)


def test_a_gelu_backward_recomputes_the_gelu_output_over_its_input():
    """The MLP step's backward kernel reads the pre-activation h and the output's gradient, and writes
    the recomputed gelu(h) (for the weight gradient) in h's bytes and h's gradient in the output
    gradient's: two of the four [tokens, 4d] buffers a transformer's MLP backward held at its peak."""
    from flame.passes.remat import is_recompute
    from flame.plan.steps import KernelLaunch
    from tests.plan.gelu_mlp import gelu_mlp_step

    step, x = gelu_mlp_step()
    plan = step._lookup(step._args([x])).plan
    (k,) = [s for s in plan.steps if isinstance(s, KernelLaunch)
            and any(op.name == "gelu" and is_recompute(op) for op in s.ops)]
    gelu = next(op for op in k.ops if op.name == "gelu")
    pre, out = plan.buffers[plan.buffer_of[gelu.inputs[0]]], plan.buffers[plan.buffer_of[gelu.out]]
    assert pre.role == out.role == "temporary" and pre.offset == out.offset
