"""Eager views share storage and version counter with their base, as PyTorch's do: writes through a view
reach the base and every other view of it, in values and in gradients, eagerly and under @flame.compile;
the layout queries (is_contiguous, stride, storage_offset, storage identity) answer as torch's."""

import numpy as np
import pytest
import torch

import flame
from flame.errors import FlameError, ShapeError

VIEWS = {
    "view": lambda x: x.view(4, 6),
    "reshape": lambda x: x.reshape(-1),
    "t_of_2d": lambda x: x[0].t(),
    "transpose": lambda x: x.transpose(0, 2),
    "permute": lambda x: x.permute(2, 0, 1),
    "int_index": lambda x: x[1],
    "slices": lambda x: x[:, 1:, ::2],
    "expand": lambda x: x[:, :1].expand(2, 5, 4),
    "unsqueeze": lambda x: x.unsqueeze(1),
    "squeeze": lambda x: x[:, :1].squeeze(1),
    "narrow": lambda x: x.narrow(2, 1, 2),
    "select": lambda x: x.select(1, 2),
    "unbind": lambda x: x.unbind(2)[3],
    "split": lambda x: x.split(2, 1)[1],
    "chunk": lambda x: x.chunk(2, 2)[1],
    "movedim": lambda x: x.movedim(0, 2),
    "flatten": lambda x: x.flatten(1),
    "view_of_view": lambda x: x.transpose(0, 1)[1:].unsqueeze(0),
}


def _pair():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    return flame.tensor(a), torch.tensor(a)


@pytest.mark.parametrize("name", VIEWS)
def test_views_share_storage_and_answer_layout_queries_as_torch(name):
    x, tx = _pair()
    v, tv = VIEWS[name](x), VIEWS[name](tx)
    np.testing.assert_array_equal(v.numpy(), tv.numpy())
    assert v._is_view() == tv._is_view()
    assert v.is_contiguous() == tv.is_contiguous()
    if tv.numel() > 1:
        assert v.stride() == tv.stride()
    assert v.storage_offset() == tv.storage_offset()
    assert (v.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()) == \
        (tv.untyped_storage().data_ptr() == tx.untyped_storage().data_ptr())
    assert (v.data_ptr() - x.data_ptr()) // 4 == (tv.data_ptr() - tx.data_ptr()) // 4


@pytest.mark.parametrize("name", [n for n in VIEWS if n != "expand"])
def test_a_write_through_a_view_reaches_the_base_and_other_views(name):
    x, tx = _pair()
    results = []
    for base in (x, tx):
        other = base[:, 1]  # a second view, taken before the write
        v = VIEWS[name](base)
        v.mul_(-1)
        v[...] = v + 0.5
        results.append((base.numpy().copy(), other.numpy().copy(), v.numpy().copy()))
    for got, want in zip(*results):
        np.testing.assert_array_equal(got, want)


def test_writes_into_the_base_are_seen_by_its_views_and_versions_are_shared():
    x, tx = _pair()
    for base in (x, tx):
        v = base.transpose(0, 2)
        base.add_(1)
        base[1, 2, 3] = 100
        assert v._version == base._version == 2
    np.testing.assert_array_equal(x.transpose(0, 2).numpy(), tx.transpose(0, 2).numpy())


TRACED_LAYOUTS = {
    **VIEWS,
    "t": lambda x: x[0].t(),
    "expand_new_dim": lambda x: x[0].expand(3, 3, 4),
    "reshape_that_copies": lambda x: x.transpose(0, 1).reshape(-1),
    "contiguous_of_a_transpose": lambda x: x.transpose(0, 1).contiguous(),
    "detach_then_permute": lambda x: x.detach().permute(1, 2, 0),
    "computed_then_transposed": lambda x: (x * 2).transpose(0, 2),
}


@pytest.mark.parametrize("name", TRACED_LAYOUTS)
def test_layout_queries_inside_compile_answer_as_torch(name):
    """stride(), stride(dim), is_contiguous() and storage_offset() of a traced tensor follow the view ops
    that made it from its base, as torch's (and as flame's eager answers)."""
    _, tx = _pair()
    tv = TRACED_LAYOUTS[name](tx)
    want = (tv.stride(), tv.stride(-1), tv.is_contiguous(), tv.storage_offset())
    seen = {}

    @flame.compile
    def f(x):
        v = TRACED_LAYOUTS[name](x)
        seen["traced"] = (v.stride(), v.stride(-1), v.is_contiguous(), v.storage_offset())
        return v * 1

    x, _ = _pair()
    np.testing.assert_array_equal(f(x).numpy(), tv.numpy())
    v = TRACED_LAYOUTS[name](x)
    assert seen["traced"] == want == (v.stride(), v.stride(-1), v.is_contiguous(), v.storage_offset())


def test_contiguous_inside_compile_copies_a_view_that_is_not_as_torch():
    """x.t().contiguous() is a new tensor (a write into it never reaches x), x.contiguous() is x."""

    def fn(x):
        c = x.transpose(0, 2).contiguous()
        c.zero_()
        same = x.contiguous()
        return x * 1, c * 1, same is x

    x, tx = _pair()
    tout, out = fn(tx.clone()), flame.compile(fn)(x)
    np.testing.assert_array_equal(out[0].numpy(), tout[0].numpy())
    np.testing.assert_array_equal(out[1].numpy(), tout[1].numpy())
    assert out[2] is tout[2] is True


def test_reshape_copies_where_the_strides_allow_no_view_and_view_raises():
    x, tx = _pair()
    r, tr = x.transpose(0, 1).reshape(-1), tx.transpose(0, 1).reshape(-1)
    np.testing.assert_array_equal(r.numpy(), tr.numpy())
    assert r._is_view() == tr._is_view() is False
    with pytest.raises(ShapeError, match=r"view size is not compatible .* Use .reshape\(...\) instead"):
        x.transpose(0, 1).view(-1)


VIEW_ERRORS = {
    "t_view": lambda x, o: x.t().view(-1),
    "view_as_of_t": lambda x, o: x.t().view_as(o),
    "view_of_permuted_view": lambda x, o: x.unsqueeze(0).permute(2, 0, 1).view(-1, 2),
}


@pytest.mark.parametrize("name", VIEW_ERRORS)
@pytest.mark.parametrize("compiled", [False, True])
def test_a_view_the_strides_allow_not_raises_torchs_runtime_error(name, compiled):
    """torch raises a RuntimeError naming .reshape(...); flame's is a RuntimeError (and a ShapeError) with
    torch's text and the user's line, eagerly and under @flame.compile."""
    fn = VIEW_ERRORS[name]
    a = np.arange(12, dtype=np.float64).reshape(4, 3)
    with pytest.raises(RuntimeError) as want:
        fn(torch.tensor(a), torch.zeros(12, dtype=torch.float64))
    run = flame.compile(lambda x, o: fn(x, o) * 2) if compiled else fn
    with pytest.raises(RuntimeError) as got:
        run(flame.tensor(a), flame.zeros(12, dtype=flame.float64))
    assert isinstance(got.value, flame.ViewError) and isinstance(got.value, ShapeError)
    assert str(want.value) in str(got.value)
    assert "test_views.py" in str(got.value)  # the user's line


def test_contiguous_is_the_tensor_itself_or_a_row_major_copy():
    x, _ = _pair()
    assert x.contiguous() is x
    t = x.transpose(0, 2)
    c = t.contiguous()
    assert not t.is_contiguous() and c.is_contiguous() and not c._is_view()
    np.testing.assert_array_equal(c.numpy(), t.numpy())
    c.zero_()
    assert x.numpy().sum() == np.arange(24).sum()  # the copy does not write back


def test_a_write_into_an_expanded_view_is_refused():
    x = flame.zeros(1, 4)
    with pytest.raises(FlameError, match="more than one element of the written-to tensor refers to a single"):
        x.expand(3, 4).add_(1)
    with pytest.raises(FlameError, match="more than one element"):
        x.expand(3, 4).copy_(flame.ones(3, 4))
    with pytest.raises(FlameError, match="more than one element"):
        x.expand(3, 4)[:, 1] = flame.ones(3)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_writing_an_expanded_tensors_own_source_into_it_writes_nothing_as_torch(compiled):
    """x.expand(...)[k] = x: the value, broadcast as torch's setitem does (leading ones dropped, then
    expanded), is the destination's own memory, and torch's copy_ of a tensor onto itself writes nothing
    and refuses nothing; another value is refused as overlapping."""

    def body(m, x):
        with m.no_grad():
            x.expand(2, 3, 3, 2)[-1] = x
        return x * 1

    a = np.arange(6, dtype=np.float32).reshape(1, 3, 2)
    got = (flame.compile(lambda x: body(flame, x)) if compiled else lambda x: body(flame, x))(flame.tensor(a))
    np.testing.assert_array_equal(got.numpy(), body(torch, torch.tensor(a)).numpy())
    x = flame.tensor(a)
    with pytest.raises(FlameError, match="more than one element"), flame.no_grad():
        x.expand(2, 3, 3, 2)[-1] = x * 2


def test_copying_a_leaf_that_requires_grad_onto_itself_is_torchs_leaf_error():
    """torch checks the leaf before it finds the copy writes nothing."""
    x = flame.randn(3, requires_grad=True)
    with pytest.raises(flame.errors.AutogradError, match="a leaf Variable that requires grad is being used"):
        x.copy_(x)

    @flame.compile
    def step(x):
        x.copy_(x)
        return x * 1

    with pytest.raises(flame.errors.AutogradError, match="a leaf Variable that requires grad is being used"):
        step(flame.randn(3, requires_grad=True))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_copying_an_expanded_view_onto_itself_writes_nothing_as_torch(compiled):
    def body(m, x):
        e = x.expand(2, 2, 4)
        e.detach().copy_(e)
        e.copy_(e)
        return x * 1

    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    got = (flame.compile(lambda x: body(flame, x)) if compiled else lambda x: body(flame, x))(flame.tensor(a))
    np.testing.assert_array_equal(got.numpy(), body(torch, torch.tensor(a)).numpy())


SELF_COPIES = {
    "copy_": lambda e: e.copy_(e),
    "x[:] = x": lambda e: e.__setitem__(slice(None), e),
    "x[...] = x": lambda e: e.__setitem__(Ellipsis, e),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", SELF_COPIES)
def test_a_recorded_copy_of_an_expanded_view_onto_itself_is_refused_as_torchs_backward_refuses_it(name, compiled):
    """Copying an expanded view that requires grad onto itself writes nothing, but torch records the copy and
    its backward refuses it as an overlapping write; flame refuses it at the write (as a recorded fill),
    with torch's RuntimeError, where it gave the gradient of no write."""

    def body(m, x):
        e = (x * 1).expand(3, 4)
        SELF_COPIES[name](e)
        (e * m.arange(12.0).reshape(3, 4)).sum().backward()
        return x.grad

    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor refers to a single"):
        body(torch, torch.arange(4.0, requires_grad=True))
    run = flame.compile(lambda x: body(flame, x)) if compiled else lambda x: body(flame, x)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor refers to a single") as e:
        run(flame.arange(4.0, requires_grad=True))
    assert "test_views.py" in str(e.value)
    row = flame.arange(4.0, requires_grad=True)  # a row of it is no overlapping view: written, as torch's
    e = (row * 1).expand(3, 4)
    e[0] = e[0]
    (e * 2).sum().backward()
    trow = torch.arange(4.0, requires_grad=True)
    te = (trow * 1).expand(3, 4)
    te[0] = te[0]
    (te * 2).sum().backward()
    np.testing.assert_array_equal(row.grad.numpy(), trow.grad.numpy())


FILLS = {
    "fill_": lambda m, e: e.fill_(1.5),
    "zero_": lambda m, e: e.zero_(),
    "item": lambda m, e: e.__setitem__(0, 5.0),
    "element": lambda m, e: e.__setitem__((1, 2), 7.0),
    "masked_fill_": lambda m, e: e.masked_fill_(m.tensor([[True, False, True, False]] * 3), 2.0),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", FILLS)
def test_fills_of_an_expanded_view_are_written_as_torch_writes_them(name, compiled):
    def body(m, x):
        FILLS[name](m, x.expand(3, 4))
        return x * 1

    a = np.arange(4, dtype=np.float32).reshape(1, 4)
    got = (flame.compile(lambda x: body(flame, x)) if compiled else lambda x: body(flame, x))(flame.tensor(a))
    np.testing.assert_array_equal(got.numpy(), body(torch, torch.tensor(a)).numpy())


def test_zero_size_views_flatten_and_take_writes_as_torch():
    for m in (flame, torch):
        x = m.zeros(0, 2, 1)
        x[0::3].mul_(x)
        assert tuple(m.zeros(1, 0, 2).flatten(1).shape) == (1, 0)
        assert tuple(m.zeros(0, 2, 6).flatten(1).shape) == (0, 12)


def test_detach_shares_storage_and_version_counter():
    x, tx = _pair()
    for base in (x, tx):
        d = base.detach()
        d.zero_()
        assert base._version == 1 and float(base.sum()) == 0.0


def test_views_are_made_without_copying_the_storage():
    x = flame.zeros(256, 256)
    for v in (x.view(-1), x.t(), x[3:, 5], x.unsqueeze(0).expand(4, 256, 256), x.chunk(4, 1)[2]):
        assert v.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()


# ---- gradients through writes into views (torch as the oracle) -----------------------------------------

def _g_base_scaled(m, x, w):
    y = x * 2
    y[0].mul_(3)
    return (y * y).sum()


def _g_transposed_add(m, x, w):
    y = x * 2
    y.t()[0].add_(w[0])
    return (y * y).sum()


def _g_stale_view(m, x, w):
    y = x * 2
    a = y[0]
    y.mul_(w[0])  # a, taken before, reads the scaled values afterwards
    return (a * a).sum()


def _g_buffer_filled_through_a_view(m, x, w):
    buf = m.zeros(3, 4)
    buf[1].copy_(w * 2)
    return (buf * buf).sum() + x.sum()


def _g_one_view_into_another(m, x, w):
    y = x * 1
    a, b = y.narrow(1, 0, 2), y.narrow(1, 2, 2)
    b.mul_(a * 1)
    return (y * y).sum()


def _g_flat_slice_assignment(m, x, w):
    y = x + 0
    z = y.view(-1)
    z[2:5] = w[:3]
    return (y * y * y).sum()


def _g_rows(m, x, w):
    y = x * 3
    r = [y.select(0, i) for i in range(3)]
    s = r[0] * 1
    r[1].add_(r[2])
    r[0].zero_()
    return (y.sum(1) * w[:3]).sum() + (s * s).sum()


def _g_overlapping_views(m, x, w):
    y = x * 2
    a, b = y[1], y[:, 1]
    b.mul_(3)
    a.add_(w)
    return (y * a.sum()).sum() + (b * b).sum()


GRADS = [_g_base_scaled, _g_transposed_add, _g_stale_view, _g_buffer_filled_through_a_view,
         _g_one_view_into_another, _g_flat_slice_assignment, _g_rows, _g_overlapping_views]


def _grads(m, fn, compiled: bool):
    rng = np.random.default_rng(0)
    xa, wa = rng.standard_normal((3, 4)), rng.standard_normal(4)
    dt = torch.float64 if m is torch else flame.float32
    x, w = m.tensor(xa, dtype=dt, requires_grad=True), m.tensor(wa, dtype=dt, requires_grad=True)
    if compiled:
        @flame.compile
        def step(x, w):
            loss = fn(m, x, w)
            loss.backward()
            return loss
        loss = step(x, w)
    else:
        loss = fn(m, x, w)
        loss.backward()
    return [float(loss.item())] + [None if t.grad is None else t.grad.numpy() for t in (x, w)]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("fn", GRADS, ids=[g.__name__[3:] for g in GRADS])
def test_gradients_follow_writes_through_views_as_in_torch(fn, compiled):
    got, want = _grads(flame, fn, compiled), _grads(torch, fn, False)
    for g, t in zip(got, want):
        assert (g is None) == (t is None)
        if t is not None:
            np.testing.assert_allclose(g, t, rtol=1e-5, atol=1e-5)


def test_a_view_of_a_leaf_that_requires_grad_is_written_only_under_no_grad():
    w = flame.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with pytest.raises(FlameError, match="a view of a leaf Variable that requires grad is being used in an in-place"):
        w[:2].mul_(2)
    with flame.no_grad():
        w[:2].mul_(2)
        w.view(-1)[2] = 7
    np.testing.assert_array_equal(w.numpy(), [2.0, 4.0, 7.0])
    (w * w).sum().backward()  # still a leaf, its gradient at the new values
    np.testing.assert_array_equal(w.grad.numpy(), [4.0, 8.0, 14.0])


def test_a_saved_leaf_changed_through_its_base_makes_backward_raise():
    x = flame.zeros(4)
    xv = x[:2]
    w = flame.tensor([1.0, 2.0], requires_grad=True)
    loss = (w * xv).sum()
    x.add_(1)  # xv's values change with it, as torch's version counter shows
    with pytest.raises(FlameError, match="modified in place"):
        loss.backward()


def test_the_textbook_update_through_views_trains():
    """SGD written by hand on flattened views of the parameters, as in tutorials."""
    rng = np.random.default_rng(1)
    xa, ya = rng.standard_normal((16, 3)), rng.standard_normal((16, 1))
    losses = {}
    for m in (flame, torch):
        dt = torch.float64 if m is torch else flame.float32
        lin = (flame.nn if m is flame else torch.nn).Linear(3, 1)
        with m.no_grad():
            lin.weight.copy_(m.tensor([[0.1, -0.2, 0.3]], dtype=dt))
            lin.bias.zero_()
        lin = lin.double() if m is torch else lin
        x, y = m.tensor(xa, dtype=dt), m.tensor(ya, dtype=dt)
        out = []
        for _ in range(5):
            loss = ((lin(x) - y) ** 2).mean()
            lin.zero_grad()
            loss.backward()
            with m.no_grad():
                for p in lin.parameters():
                    p.view(-1).sub_(0.1 * p.grad.view(-1))
            out.append(float(loss.item()))
        losses[m] = out
    np.testing.assert_allclose(losses[flame], losses[torch], rtol=1e-5)
    assert losses[flame][-1] < losses[flame][0]


def test_compiled_writes_through_views_of_captured_tensors_update_them():
    buf = flame.zeros(3, 4)

    @flame.compile
    def step(x):
        buf[1].copy_(x)
        buf.t()[0].add_(1)
        return buf.sum()

    for _ in range(2):
        total = step(flame.ones(4))
    want = torch.zeros(3, 4)
    for _ in range(2):
        want[1].copy_(torch.ones(4))
        want.t()[0].add_(1)
    np.testing.assert_array_equal(buf.numpy(), want.numpy())
    assert float(total) == float(want.sum())


def test_a_strided_view_is_a_valid_argument_of_a_compiled_function():
    x, tx = _pair()

    @flame.compile
    def f(a):
        return a * 2 + 1

    np.testing.assert_array_equal(f(x.transpose(0, 2)).numpy(), (tx.transpose(0, 2) * 2 + 1).numpy())
    np.testing.assert_array_equal(f(x.permute(2, 1, 0)).numpy(), (tx.permute(2, 1, 0) * 2 + 1).numpy())


@pytest.mark.gpu
def test_views_share_device_memory_on_the_gpu():
    for dtype in (flame.float32, flame.bf16):
        x = flame.zeros(64, 32, dtype=dtype)
        t = x.t()
        assert t.untyped_storage().data_ptr() == x.untyped_storage().data_ptr() and not t.is_contiguous()
        t[3].fill_(2.0)
        x[:, 5].add_(1.0)
        want = np.zeros((64, 32), np.float32)
        want[:, 3] = 2.0
        want[:, 5] += 1.0
        np.testing.assert_array_equal(x.float().numpy(), want)
        np.testing.assert_array_equal((t @ x).float().numpy(), want.T @ want)
        np.testing.assert_array_equal(t.contiguous().float().numpy(), want.T)


def test_an_expanded_view_whose_elements_do_not_share_memory_is_writable():
    """expand adding a dim of size 1 (or keeping every size) shares no memory between elements: torch
    writes through it; a write into a really expanded view is refused (above)."""
    got = []
    for m in (flame, torch):
        x = m.tensor(np.arange(6.0).reshape(2, 3))
        e = x.expand(1, 2, 3)
        e.add_(1)
        e[0, 1].fill_(7)
        x[0].expand(1, 3).mul_(2)
        got.append(x.numpy().copy())
    np.testing.assert_array_equal(*got)


def _write_into_a_leaf(x):
    x.add_(1)


def _write_into_a_view_of_a_leaf(x):
    x[0].mul_(2)


@pytest.mark.parametrize("write", [_write_into_a_leaf, _write_into_a_view_of_a_leaf], ids=["leaf", "view"])
def test_compiled_writes_into_a_leaf_that_requires_grad_raise_as_in_torch(write):
    @flame.compile
    def step(x):
        write(x)
        return x.sum()

    @flame.compile
    def update(x):
        with flame.no_grad():
            write(x)
        return x.sum()

    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        write(torch.ones(2, 3, requires_grad=True))
    with pytest.raises(FlameError, match="leaf"):
        step(flame.ones(2, 3, requires_grad=True))
    x, tx = flame.ones(2, 3, requires_grad=True), torch.ones(2, 3, requires_grad=True)
    update(x)
    with torch.no_grad():
        write(tx)
    np.testing.assert_array_equal(x.numpy(), tx.detach().numpy())


def _g_zeroed_intermediate(m, x, w):
    y = x * w
    z = y * 1
    y.zero_()  # y still requires grad; nothing flows to x through it
    y.fill_(2.0)
    return (y * y).sum() + (z * w).sum()


def _g_copied_constant(m, x, w):
    y = x * 2
    y.copy_(m.ones(3, 4, dtype=y.dtype))
    return (y * w).sum()


def _g_leaf_copied_into_an_intermediate(m, x, w):
    y = x * 2
    y[:, :1].copy_(w[:3].reshape(3, 1))  # a view of y takes a leaf's values
    z = -x[0]
    z.copy_(w)  # y takes a leaf's values: its gradient reaches the leaf
    return (y * y).sum() + (z * z * x[1]).sum()


def _g_leaf_copied_into_a_view_of_a_buffer(m, x, w):
    buf = m.zeros(4, dtype=x.dtype)
    v = buf.view(-1)[-1]
    v.copy_(w[0])
    return (buf * x[0]).sum() + v * v


COPIES = [_g_zeroed_intermediate, _g_copied_constant, _g_leaf_copied_into_an_intermediate,
          _g_leaf_copied_into_a_view_of_a_buffer]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("fn", COPIES, ids=[g.__name__[3:] for g in COPIES])
def test_writes_of_constants_and_leaves_keep_the_gradient_history_as_in_torch(fn, compiled):
    got, want = _grads(flame, fn, compiled), _grads(torch, fn, False)
    for g, t in zip(got, want):
        if compiled and g is None and t is not None:  # compiled, a leaf no path reaches keeps .grad None
            g = np.zeros_like(t)
        assert (g is None) == (t is None)
        if t is not None:
            np.testing.assert_allclose(g, t, rtol=1e-5, atol=1e-5)
    y = flame.ones(2, requires_grad=True) * 2
    y.zero_()
    assert y.requires_grad and not y.is_leaf


NEW_TENSORS = {
    "repeat": lambda m, F, x: x.repeat(1, 1, 1),
    "tile": lambda m, F, x: x.tile((1,)),
    "roll_by_0": lambda m, F, x: x.roll(0, 0),
    "pad_of_zeros": lambda m, F, x: F.pad(x, (0, 0)),
    "interpolate_scale_1": lambda m, F, x: F.interpolate(x, scale_factor=1.0),
    "adaptive_max_pool_identity": lambda m, F, x: F.adaptive_max_pool1d(x, 4),
    "adaptive_avg_pool_identity": lambda m, F, x: F.adaptive_avg_pool1d(x, 4),
    "max_pool_kernel_1": lambda m, F, x: F.max_pool1d(x, 1),
    "max_pool2d_kernel_1": lambda m, F, x: F.max_pool2d(x, 1),
    "pixel_shuffle_1": lambda m, F, x: F.pixel_shuffle(x.reshape(1, 2, 3, 4), 1),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", NEW_TENSORS)
def test_functions_that_make_new_tensors_in_torch_never_return_a_view_of_their_input(name, compiled):
    """Built from view ops alone (an identity pooling, a pad of zeros), the result is still a new tensor:
    a write into it leaves the input as it was."""
    import torch.nn.functional as TF

    import flame.nn.functional as FF

    def body(m, F, x):
        y = NEW_TENSORS[name](m, F, x)
        y.add_(100)
        return x * 1, y * 1

    x, tx = _pair()
    got = flame.compile(lambda x: body(flame, FF, x))(x) if compiled else body(flame, FF, x)
    want = body(torch, TF, tx)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w.numpy())
    np.testing.assert_array_equal(x.numpy(), tx.numpy())


# (F, x of shape (1, 2, 1, 2)) -> a result flame computes along one spatial axis only (a matmul with the
# axis moved last, then moved back), which torch returns contiguous
ONE_AXIS = {
    "adaptive_avg_pool2d_rows": lambda F, x: F.adaptive_avg_pool2d(x, 2),
    "adaptive_avg_pool2d_rows_kept_cols": lambda F, x: F.adaptive_avg_pool2d(x.expand(1, 2, 3, 2) * 1, (2, None)),
    "interpolate_bilinear_rows": lambda F, x: F.interpolate(x, size=(3, 2), mode="bilinear"),
    "interpolate_area_rows": lambda F, x: F.interpolate(x.repeat(1, 1, 3, 1), size=(2, 2), mode="area"),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", ONE_AXIS)
def test_a_pooling_result_is_contiguous_so_its_flatten_sees_a_later_write_as_torch(name, compiled):
    """A view taken of the result (flatten) shares its memory, as torch's: a write into the result after
    it shows in the view, values and gradients against torch in float64."""
    import torch.nn.functional as TF

    import flame.nn.functional as FF

    def body(m, F, x, w):
        y = ONE_AXIS[name](F, x)
        flat = y.flatten(2)
        y.add_(w)
        return (flat * flat).sum() + (y * x.sum()).sum(), flat

    a, b = np.array([[[[0.3, -1.2]], [[0.8, 2.1]]]]), np.array([0.5, -0.7])
    tx, tw = (torch.tensor(v, requires_grad=True) for v in (a, b))
    x, w = (flame.tensor(v, dtype=flame.float64, requires_grad=True) for v in (a, b))

    def step(x, w):
        loss, flat = body(flame, FF, x, w)
        loss.backward()
        return loss, flat

    got = flame.compile(step)(x, w) if compiled else step(x, w)
    want = body(torch, TF, tx, tw)
    want[0].backward()
    assert ONE_AXIS[name](FF, x.detach()).is_contiguous()
    for g, t in [(got[0], want[0]), (got[1], want[1]), (x.grad, tx.grad), (w.grad, tw.grad)]:
        np.testing.assert_allclose(g.detach().numpy(), t.detach().numpy(), rtol=1e-12, atol=1e-12)


def test_no_grad_inside_a_compiled_step_stops_gradients_as_in_torch():
    grads = []
    for m in (torch, flame):
        x = m.tensor([1.0, 2.0, 3.0], requires_grad=True)

        def step(x, m=m):
            with m.no_grad():
                y = x * 2
            loss = (y * x).sum()
            loss.backward()
            return loss

        (flame.compile(step) if m is flame else step)(x)
        grads.append(x.grad.numpy())
    np.testing.assert_array_equal(grads[1], grads[0])


def test_intermediates_inside_a_compiled_step_require_grad_as_in_torch():
    seen = []

    @flame.compile
    def step(x, c):
        y = x * 3
        seen.append((y.requires_grad, (c * 2).requires_grad, y.detach().requires_grad))
        with flame.no_grad():
            seen.append(((x * 2).requires_grad,))
        if y.requires_grad:  # a user's guard around backward() takes the same branch as eagerly
            y.sum().backward()
        return y

    x = flame.tensor([1.0, 2.0], requires_grad=True)
    step(x, flame.tensor([1.0, 1.0]))
    assert seen == [(True, False, False), (False,)]
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_reshape_that_must_copy_is_not_a_view_and_detach_is(compiled):
    """Inside @flame.compile as eagerly: reshape of a transpose copies (a later write into the base is not
    seen through it), view of the base and detach() share it."""
    def body(m, x):
        y = x * 1
        copied, viewed, detached = y.t().reshape(-1), y.view(-1), y.detach()
        y.add_(10)
        return copied * 1, viewed * 1, detached * 1

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = (flame.compile(lambda x: body(flame, x)) if compiled else lambda x: body(flame, x))(flame.tensor(a))
    for g, w in zip(got, body(torch, torch.tensor(a))):
        np.testing.assert_array_equal(g.numpy(), w.numpy())


def test_a_write_through_detach_of_a_leaf_inside_a_compiled_step_is_allowed_as_in_torch():
    xs = {m: m.tensor([1.0, 2.0], requires_grad=True) for m in (flame, torch)}

    def step(m, x):
        loss = (x * x).sum()
        loss.backward()
        x.detach().mul_(0.5)
        return loss

    flame.compile(lambda x: step(flame, x))(xs[flame])
    step(torch, xs[torch])
    np.testing.assert_array_equal(xs[flame].detach().numpy(), xs[torch].detach().numpy())
    np.testing.assert_array_equal(xs[flame].grad.numpy(), xs[torch].grad.numpy())


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_write_through_diagonal_reaches_the_matrix_as_in_torch(compiled):
    def body(m, x, w):
        y = x * 1
        y.diagonal().mul_(w)
        y.diagonal(1).fill_(-1.0)
        y.unsqueeze(0).diagonal(dim1=-2, dim2=-1).add_(2.0)
        loss = (y * y).sum()
        loss.backward()
        return y * 1

    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal(3)
    got_x, got_w = flame.tensor(a, dtype=flame.float32, requires_grad=True), flame.tensor(b, dtype=flame.float32,
                                                                                          requires_grad=True)
    want_x, want_w = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    run = flame.compile(lambda x, w: body(flame, x, w)) if compiled else (lambda x, w: body(flame, x, w))
    np.testing.assert_allclose(run(got_x, got_w).numpy(), body(torch, want_x, want_w).detach().numpy(), rtol=1e-5)
    np.testing.assert_allclose(got_x.grad.numpy(), want_x.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_w.grad.numpy(), want_w.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_the_diagonal_of_a_transposed_plane_is_a_view_as_in_torch(compiled):
    """x.t().diagonal(k), diagonal(dim1 > dim2) and the diagonal of a plane with a dim between its two are
    torch's views: a write through one reaches x, with torch's gradients."""
    def body(m, x, w):
        y = x * 1
        y.t().diagonal(-1).mul_(w)
        y.diagonal(1, 1, 0).fill_(-1.0)
        y.t().diagonal().add_(2.0)
        loss = (y * y).sum()
        loss.backward()
        return y * 1

    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((4, 4)), rng.standard_normal(3)
    got_x, got_w = (flame.tensor(v, dtype=flame.float32, requires_grad=True) for v in (a, b))
    want_x, want_w = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    run = flame.compile(lambda x, w: body(flame, x, w)) if compiled else (lambda x, w: body(flame, x, w))
    np.testing.assert_allclose(run(got_x, got_w).numpy(), body(torch, want_x, want_w).detach().numpy(), rtol=1e-5)
    np.testing.assert_allclose(got_x.grad.numpy(), want_x.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_w.grad.numpy(), want_w.grad.numpy(), rtol=1e-5, atol=1e-6)

    def apart(m, x):
        y = x * 1
        y.diagonal(0, 0, 2).fill_(-1.0)
        y.permute(2, 0, 1).diagonal(1, 2, 0).mul_(3.0)
        (y * y).sum().backward()
        return y * 1

    c = rng.standard_normal((2, 3, 4))
    got_c, want_c = flame.tensor(c, requires_grad=True), torch.tensor(c, requires_grad=True)
    run = flame.compile(lambda x: apart(flame, x)) if compiled else (lambda x: apart(flame, x))
    np.testing.assert_allclose(run(got_c).numpy(), apart(torch, want_c).detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(got_c.grad.numpy(), want_c.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_view_taken_before_a_write_is_read_as_it_is_after_it(compiled):
    """A view is copied from, returned and differentiated with the values its base holds when it is used."""
    def body(m, x):
        y = x.sin()
        v = y.permute(0, 1)
        y.masked_fill_(m.tensor([[True, False, True]]), 1.5)
        z = y * 1
        z.copy_(v)
        w = y[1]
        y.mul_(3)
        loss = (z * z).sum() + (w * w).sum()
        loss.backward()
        return z * 1, w

    a = np.random.default_rng(4).standard_normal((2, 3))
    x = flame.tensor(a, dtype=flame.float32, requires_grad=True)
    tx = torch.tensor(a, requires_grad=True)
    got = (flame.compile(lambda x: body(flame, x)) if compiled else (lambda x: body(flame, x)))(x)
    for g, w in zip(got, body(torch, tx)):
        np.testing.assert_allclose(g.numpy(), w.detach().numpy(), rtol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_index_reads_with_an_empty_index_are_new_tensors():
    for m in (flame, torch):
        x = m.ones(2, 3, requires_grad=True)
        idx = m.zeros(2, 0, dtype=m.int64)
        for out in (x.gather(1, idx), x.index_select(1, idx[0]), m.take_along_dim(x, idx, 1)):
            assert not out._is_view() or out.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
            out.add_(1)  # a leaf's view would be refused


def test_item_assignment_into_an_expanded_view_writes_the_named_view_as_torch():
    for m in (flame, torch):
        x = m.zeros(3, 3)
        e = x.expand(2, 3, 3)
        e[0] = m.ones(3, 3) * 2  # e[0] is x itself: no two of its elements share memory
        e[1:1] = m.ones(3)  # nothing named
        assert float(x.sum()) == 18.0
        with pytest.raises((FlameError, RuntimeError), match="more than one element"):
            e[:, 0] = m.ones(2, 3)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_masked_fill_of_an_expanded_view_writes_only_the_chosen_elements_as_torch(compiled):
    mask = np.array([[[False], [False], [True]], [[True], [False], [False]], [[True], [False], [False]]])

    def body(m, x):
        x.expand(3, 3, 3).masked_fill_(m.tensor(mask), 1.5)
        return x * 1

    a = np.arange(9, dtype=np.float32).reshape(1, 3, 3)
    got = (flame.compile(lambda x: body(flame, x)) if compiled else (lambda x: body(flame, x)))(flame.tensor(a))
    np.testing.assert_array_equal(got.numpy(), body(torch, torch.tensor(a)).numpy())


IDENTITY_VIEWS = {
    "transpose(1, 1)": lambda t: t.transpose(1, 1),
    "view(same shape)": lambda t: t.view(t.shape),
    "reshape(same shape)": lambda t: t.reshape(t.shape),
    "expand(same shape)": lambda t: t.expand(t.shape),
    "squeeze of no size-1 dim": lambda t: t.squeeze(0),
    "T of a 1-D tensor": lambda t: t[0].T,
}


@pytest.mark.parametrize("name", list(IDENTITY_VIEWS))
def test_a_view_that_changes_nothing_is_a_new_view_as_torchs(name):
    """torch's views return a new tensor even where they change nothing: its own object, a view of the
    tensor (writes reach it), not a leaf."""
    for lib in (torch, flame):
        x = lib.ones(2, 3, requires_grad=True)
        v = IDENTITY_VIEWS[name](x)
        assert v is not x and v._base is (x if v.shape == x.shape else v._base) and not v.is_leaf, lib.__name__
        with lib.no_grad():
            v.mul_(2)
        assert float(x.sum()) == (12.0 if v.shape == x.shape else 9.0), lib.__name__


def test_a_zero_size_write_of_an_identity_view_into_its_tensor_writes_nothing():
    """x[:, empty] = x.transpose(1, 1) of a zero-size x: torch checks a view of its own against x (no
    memory shared), flame did not refuse it either once the view is its own tensor."""
    for lib in (torch, flame):
        x = lib.zeros(4, 0)
        v = x.transpose(1, 1)
        x.zero_()
        x[:, lib.tensor([], dtype=lib.int64)] = v
        assert tuple(x.shape) == (4, 0)
