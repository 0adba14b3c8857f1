"""An in-place op whose input shares part of the written tensor's memory is refused, as torch refuses it
("unsupported operation: some elements of the input tensor and the written-to tensor refer to a single
memory location"), eagerly and inside @flame.compile (from the layout the trace keeps), naming the user's
line; an input that is the written tensor itself, or the same elements in the same layout, is fine; the
index family (index_add_, index_copy_, scatter_, index_put_, x[tensor] = v) refuses any shared memory,
as torch's. Everything torch computes, flame computes to torch's values and gradients."""

import numpy as np
import pytest
import torch

import flame
from flame.errors import FlameError, OverlapError
from flame.frontend import views

MESSAGE = (
    "unsupported operation: some elements of the input tensor and the written-to tensor refer to a single "
    "memory location. Please clone() the tensor before performing the operation."
)


def _setitem(t, key, value):
    t[key] = value
    return t


def _set_itself(t, key):
    t[key] = t
    return t


def _ones(lib, *shape):
    return lib.ones(*shape, dtype=lib.float64)


# (a: arange(6).reshape(2, 3), b: arange(9).reshape(3, 3), lib) -> the written tensor
CASES = {
    "sub_ a row": lambda a, b, lib: a.sub_(a[0]),
    "add_ its transpose": lambda a, b, lib: b.add_(b.t()),
    "copy_ its transpose": lambda a, b, lib: b.copy_(b.t()),
    "add_ a shifted view": lambda a, b, lib: a.view(-1)[1:].add_(a.view(-1)[:-1]),
    "add_ a 0-d element": lambda a, b, lib: a.add_(a[0, 0]),
    "add_ a broadcast row": lambda a, b, lib: a.add_(a[0:1]),
    "sub_ alpha": lambda a, b, lib: a.sub_(a[0], alpha=2),
    "mul_ a row": lambda a, b, lib: a.mul_(a[1]),
    "div_ a row": lambda a, b, lib: a.div_(a[1]),
    "div_ trunc": lambda a, b, lib: a.div_(a[1], rounding_mode="trunc"),
    "+= a row": lambda a, b, lib: a.__iadd__(a[0]),
    "-= its transpose": lambda a, b, lib: b.__isub__(b.t()),
    "transpose add_ base": lambda a, b, lib: b.t().add_(b),
    "clamp_ min": lambda a, b, lib: a.clamp_(min=a[0]),
    "clamp_ max": lambda a, b, lib: a.clamp_(max=a[1]),
    "addcmul_ tensor1": lambda a, b, lib: a.addcmul_(a[0], _ones(lib, 3)),
    "addcmul_ tensor2": lambda a, b, lib: a.addcmul_(_ones(lib, 3), a[1]),
    "addcdiv_": lambda a, b, lib: a.addcdiv_(a[0], _ones(lib, 3)),
    "lerp_ end": lambda a, b, lib: a.lerp_(a[0], 0.5),
    "lerp_ weight": lambda a, b, lib: a.lerp_(_ones(lib, 2, 3), a[0] / 8),
    "copy_ a row": lambda a, b, lib: a.copy_(a[0]),
    "copy_ rectangular transpose": lambda a, b, lib: a.view(3, 2).copy_(a.t()),
    "detach row": lambda a, b, lib: a.add_(a.detach()[0]),
    "overlapping halves": lambda a, b, lib: a.view(-1)[:4].add_(a.view(-1)[2:]),
    "index_add_ itself": lambda a, b, lib: b.index_add_(0, lib.tensor([0, 1, 2]), b),
    "index_copy_ a row": lambda a, b, lib: a.index_copy_(0, lib.tensor([0]), a[1:]),
    "scatter_ itself": lambda a, b, lib: a.scatter_(0, lib.tensor([[1, 0, 1], [0, 1, 0]]), a),
    "scatter_add_ a row": lambda a, b, lib: a.scatter_add_(0, lib.tensor([[1, 0, 1]]), a[1:]),
    "index_put_ a row": lambda a, b, lib: a.index_put_((lib.tensor([1]),), a[0]),
    "x[v[1:]] = v[:-1]": lambda a, b, lib: _setitem(a.view(-1), slice(1, None), a.view(-1)[:-1]),
    "x[:] = x.t()": lambda a, b, lib: _setitem(b, slice(None), b.t()),
    "x[tensor] = row": lambda a, b, lib: _setitem(a, lib.tensor([1]), a[0]),
    "x[:, tensor] = x (dense, a leading 1)": lambda a, b, lib: _set_itself(a[:1], (slice(None), lib.tensor([2, 0, 1]))),
    # torch computes these
    "copy_ itself": lambda a, b, lib: a.copy_(a),
    "mul_ itself": lambda a, b, lib: a.mul_(a),
    "add_ a view of the same layout": lambda a, b, lib: a.add_(a.view(2, 3)),
    "add_ a 0-d view of itself": lambda a, b, lib: a[0, 0].mul_(a[0, 0]),
    "add_ detach": lambda a, b, lib: a.add_(a.detach()),
    "add_ a disjoint row": lambda a, b, lib: a[0].add_(a[1]),
    "copy_ a disjoint row": lambda a, b, lib: a[1].copy_(a[0]),
    "addcmul_ itself": lambda a, b, lib: a.addcmul_(a, a),
    "clamp_ by itself": lambda a, b, lib: a.clamp_(a, a),
    "masked_fill_ an element": lambda a, b, lib: a.masked_fill_(lib.tensor([True, False, True]), a[0, 1]),
    "fill_ an element": lambda a, b, lib: a.fill_(a[1, 1]),
    "index_fill_ an element": lambda a, b, lib: a.index_fill_(0, lib.tensor([0]), a[1, 1]),
    "index_add_ a disjoint row": lambda a, b, lib: a[0:1].index_add_(0, lib.tensor([0]), a[1:]),
    "x[1:] = x[:1]": lambda a, b, lib: _setitem(a, slice(1, None), a[:1]),
    "x[:] = x": lambda a, b, lib: _setitem(a, slice(None), a),
    "x[0] = x[0]": lambda a, b, lib: _setitem(a, 0, a[0]),
    "x[:] = a row (expanded first)": lambda a, b, lib: _setitem(a, slice(None), a[0]),
    "x[mask] = an element": lambda a, b, lib: _setitem(a, a > 2, a[0, 0]),
    # torch drops the value's leading 1s first: a view of its own, whose gaps torch does not examine
    "x[:, :, tensor] = x (gaps, a leading 1)": lambda a, b, lib: _set_itself(
        a.view(1, 2, 3)[:, :, :1], (slice(None), slice(None), lib.tensor([0, 0]))),
}


def _inputs(lib):
    return lib.arange(6, dtype=lib.float64).reshape(2, 3) + 1, lib.arange(9, dtype=lib.float64).reshape(3, 3) + 1


def _torch(name):
    a, b = _inputs(torch)
    try:
        return CASES[name](a, b, torch).clone()
    except RuntimeError as e:
        return e


def _flame(name, compiled):
    if compiled:
        return flame.compile(lambda a, b: CASES[name](a, b, flame))(*_inputs(flame))
    return CASES[name](*_inputs(flame), flame)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("name", CASES)
def test_in_place_ops_refuse_partly_shared_inputs_as_torch(name, compiled):
    want = _torch(name)
    if isinstance(want, RuntimeError):
        assert MESSAGE in str(want)
        with pytest.raises(OverlapError) as info:
            _flame(name, compiled)
        assert isinstance(info.value, RuntimeError) and isinstance(info.value, FlameError)
        assert MESSAGE in str(info.value)
        assert "test_inplace_overlap.py" in str(info.value).splitlines()[-1]  # the user's line
        return
    np.testing.assert_allclose(_flame(name, compiled).numpy(), want.numpy(), rtol=1e-12)


@pytest.mark.parametrize("compiled", [False, True])
def test_a_refused_write_changes_nothing(compiled):
    a = flame.arange(6.0).reshape(2, 3)
    before = a.numpy().copy()
    fn = flame.compile(lambda x: x.sub_(x[0])) if compiled else (lambda x: x.sub_(x[0]))
    with pytest.raises(OverlapError):
        fn(a)
    np.testing.assert_array_equal(a.numpy(), before)


WRITES = {
    "add_ itself": lambda y: y.add_(y),
    "add_ a view of the same layout": lambda y: y.add_(y.view(2, 3)),
    "disjoint rows": lambda y: y[1].add_(y[0]),
    "x[1:] = x[:1]": lambda y: _setitem(y, slice(1, None), y[:1] * 2),
}


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("name", WRITES)
def test_writes_torch_takes_have_its_values_and_gradients(name, compiled):
    w0 = np.linspace(-1.0, 2.0, 6).reshape(2, 3)
    tw = torch.tensor(w0, requires_grad=True)
    ty = tw * 1.5
    WRITES[name](ty)
    (ty * torch.arange(6.0, dtype=torch.float64).reshape(2, 3)).sum().backward()

    def step(w):
        y = w * 1.5
        WRITES[name](y)
        loss = (y * flame.arange(6.0, dtype=flame.float64).reshape(2, 3)).sum()
        loss.backward()
        return y

    w = flame.tensor(w0, requires_grad=True)
    y = (flame.compile(step) if compiled else step)(w)
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("compiled", [False, True])
def test_a_refused_write_with_gradients_raises_as_torch(compiled):
    def step(w):
        y = w * 2
        return y.sub_(y[0])

    with pytest.raises(RuntimeError, match="some elements of the input tensor and the written-to"):
        step(torch.ones(2, 3, dtype=torch.float64, requires_grad=True))

    with pytest.raises(OverlapError, match="some elements of the input tensor and the written-to"):
        (flame.compile(step) if compiled else step)(flame.ones(2, 3, requires_grad=True))


@pytest.mark.parametrize("compiled", [False, True])
def test_inputs_with_gaps_are_read_before_the_write(compiled):
    """torch does not examine views with gaps or repeats (its result then follows its loop order); flame
    computes such a write from the values before it, as a clone() of the input would."""

    def fn(b):
        return b[:, 1:].add_(b[:, :-1])

    tb = torch.arange(9.0, dtype=torch.float64).reshape(3, 3)
    want = tb[:, 1:].add_(tb[:, :-1].clone())
    got = (flame.compile(fn) if compiled else fn)(flame.arange(9.0, dtype=flame.float64).reshape(3, 3))
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def _refuse(*_):
    raise AssertionError("the layout was examined for tensors that cannot share memory")


@pytest.mark.parametrize("compiled", [False, True])
def test_the_check_reads_no_layout_when_the_input_is_another_tensor(compiled, monkeypatch):
    monkeypatch.setattr(views, "_eager_geometry", _refuse)
    monkeypatch.setattr(views, "_traced_geometry", _refuse)

    def step(p, g):
        p.sub_(g, alpha=0.1)
        p[0].add_(g[1])
        p.mul_(p)
        return p

    p0, g0 = np.arange(6.0).reshape(2, 3), np.ones((2, 3))
    p = flame.tensor(p0)
    (flame.compile(step) if compiled else step)(p, flame.tensor(g0))
    tp = torch.tensor(p0)
    step(tp, torch.tensor(g0))
    np.testing.assert_allclose(p.numpy(), tp.numpy(), rtol=1e-12)


def _write_then_read(a, b):
    r = b * 2
    a.add_(1)
    return r + b


@pytest.mark.parametrize("pair", ["same", "slices", "transposed"])
def test_compiled_arguments_sharing_memory_with_a_written_one_are_refused(pair):
    """A compiled function takes each argument as a buffer of its own: where it writes one in place and
    another argument shares its memory (torch's reads of that one see the write), the call raises instead
    of returning the other's stale values (r + b read b before a's write: 6 9 12 where torch gives 7 10 13);
    the same function runs on arguments that share nothing, and eagerly as torch's."""
    def args(lib):
        x = lib.arange(1.0, 5.0)
        return {"same": (x, x), "slices": (x[:3], x[1:]), "transposed": (x.view(2, 2), x.view(2, 2).t())}[pair]

    f = flame.compile(_write_then_read)
    with pytest.raises(OverlapError, match="shares memory with argument"):
        f(*args(flame))
    np.testing.assert_array_equal(_write_then_read(*args(flame)).numpy(), _write_then_read(*args(torch)).numpy())
    a, b = flame.arange(1.0, 4.0), flame.arange(2.0, 5.0)
    np.testing.assert_array_equal(f(a, b).numpy(), [6.0, 9.0, 12.0])
    np.testing.assert_array_equal(a.numpy(), [2.0, 3.0, 4.0])


def _write_a_row(e):
    e[1] += 5


def test_a_compiled_write_into_an_expanded_argument_is_refused():
    """e = x.expand(3, 4) as an argument: torch's e[1] += 5 writes x, so every row of e sees it; the plan
    takes e as a 3x4 buffer of its own, whose rows written back into x's one row left x unchanged (the
    last row wins), so the call raises; the same function runs eagerly as torch's, and compiled on the
    tensor before it is expanded."""
    want = torch.arange(4.0)
    _write_a_row(want.expand(3, 4))
    x = flame.arange(4.0)
    with pytest.raises(OverlapError, match="argument 0 is an expanded tensor"):
        flame.compile(_write_a_row)(x.expand(3, 4))
    np.testing.assert_array_equal(x.numpy(), np.arange(4.0))
    _write_a_row(x.expand(3, 4))
    np.testing.assert_array_equal(x.numpy(), want.numpy())
    y = flame.arange(4.0)
    flame.compile(lambda y: _write_a_row(y.expand(3, 4)))(y)
    np.testing.assert_array_equal(y.numpy(), want.numpy())
