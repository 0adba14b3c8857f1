"""In-place updates as PyTorch's: `p -= lr * p.grad`, `x += y`, `add_`, `.data`, eager and compiled."""

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn
from flame.errors import DTypeError, FlameError, ShapeError

X = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
Y = np.random.default_rng(1).standard_normal((8, 3)).astype(np.float32)
W = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
B = np.random.default_rng(3).standard_normal(3).astype(np.float32)


def _torch_manual_sgd(steps: int) -> list[float]:
    m = torch.nn.Linear(4, 3)
    with torch.no_grad():
        m.weight.copy_(torch.from_numpy(W))
        m.bias.copy_(torch.from_numpy(B))
    x, y, losses = torch.from_numpy(X), torch.from_numpy(Y), []
    for _ in range(steps):
        loss = ((m(x) - y) ** 2).mean()
        losses.append(loss.item())
        m.zero_grad()
        loss.backward()
        with torch.no_grad():
            for p in m.parameters():
                p -= 0.1 * p.grad
    return losses


def _flame_linear() -> nn.Linear:
    m = nn.Linear(4, 3)
    with flame.no_grad():
        m.weight.copy_(flame.tensor(W))
        m.bias.copy_(flame.tensor(B))
    return m


def test_the_textbook_manual_update_trains_as_torch():
    m = _flame_linear()
    x, y, losses = flame.tensor(X), flame.tensor(Y), []
    params = list(m.parameters())
    for _ in range(6):
        loss = ((m(x) - y) ** 2).mean()
        losses.append(loss.item())
        m.zero_grad()
        loss.backward()
        with flame.no_grad():
            for p in m.parameters():
                p -= 0.1 * p.grad
    assert [p is q for p, q in zip(params, m.parameters())] == [True, True]
    np.testing.assert_allclose(losses, _torch_manual_sgd(6), rtol=1e-5)
    assert losses[-1] < losses[0]


def test_the_manual_update_inside_a_compiled_step_trains_as_torch():
    m = _flame_linear()

    @flame.compile
    def step(x, y):
        loss = ((m(x) - y) ** 2).mean()
        loss.backward()
        with flame.no_grad():
            for p in m.parameters():
                p -= 0.1 * p.grad
                p.grad = None
        return loss

    losses = [step(flame.tensor(X), flame.tensor(Y)).item() for _ in range(6)]
    np.testing.assert_allclose(losses, _torch_manual_sgd(6), rtol=1e-5)


def test_a_single_tensor_keeps_its_identity_grad_and_requires_grad():
    w = flame.tensor(np.ones(3, np.float32), requires_grad=True)
    tw = torch.ones(3, requires_grad=True)
    for t, lib in ((w, flame), (tw, torch)):
        (t * t).sum().backward()
        with lib.no_grad():
            t -= 0.25 * t.grad
        t.grad.zero_()
    assert w.requires_grad and w.grad is not None
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy())
    (w * w).sum().backward()  # the same leaf goes on recording gradients
    np.testing.assert_allclose(w.grad.numpy(), 2 * tw.detach().numpy())


@pytest.mark.parametrize("op", ["iadd", "isub", "imul", "itruediv", "add_", "sub_", "mul_", "div_"])
def test_an_inplace_op_on_an_intermediate_differentiates_through_the_write(op):
    def run(lib, x):
        y = x * 2.0
        if op.startswith("i"):
            y = {"iadd": y.__iadd__, "isub": y.__isub__, "imul": y.__imul__, "itruediv": y.__itruediv__}[op](x)
        else:
            getattr(y, op)(x)
        (y * y).sum().backward()
        return y.detach().numpy(), x.grad.numpy()

    v = np.array([0.5, -1.5, 2.0], np.float32)
    got = run(flame, flame.tensor(v, requires_grad=True))
    want = run(torch, torch.tensor(v, requires_grad=True))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("write", ["fill_", "zero_", "copy_"])
def test_a_constant_written_over_a_tensor_that_requires_grad_keeps_it_requiring_grad(write, compiled):
    """fill_, zero_ and copy_ of a tensor that does not require grad, into one that does (a buffer a write
    of a tensor requiring grad made require grad, an intermediate): it goes on requiring grad, as in torch,
    and the gradient of what it held before is zero (compiled, it stopped requiring grad: the loss could
    not backward(), and the input's .grad stayed None)."""

    def run(lib, x, y):
        b = lib.zeros(3)
        b += y
        h = x * 2.0
        writes = {"fill_": lambda u: u.fill_(0.5), "zero_": lambda u: u.zero_(),
                  "copy_": lambda u: u.copy_(lib.ones(3))}
        for t in (b, h):
            writes[write](t)
        loss = (b * 3.0).sum() + (h * h).sum()
        assert b.requires_grad and h.requires_grad and loss.requires_grad
        loss.backward()
        return loss

    def grads(lib, step):
        x, y = lib.ones(3, requires_grad=True), lib.ones(3, requires_grad=True)
        loss = step(x, y)
        return [float(loss)] + [t.grad.numpy() for t in (x, y)]

    want = grads(torch, lambda x, y: run(torch, x, y))
    got = grads(flame, flame.compile(lambda x, y: run(flame, x, y)) if compiled else lambda x, y: run(flame, x, y))
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("compiled", [False, True])
def test_a_write_of_a_tensor_that_requires_grad_through_a_view_makes_the_base_require_grad(compiled):
    """zeros(3).view(-1).copy_(y) and e[1:] += y[1:]: the base and the view require grad afterwards, as in
    torch (compiled, both went on saying False), and a loss of them alone backward()s."""

    def run(lib, y):
        d, e = lib.zeros(3), lib.zeros(3)
        d.view(-1).copy_(y)
        v = e[1:]
        v += y[1:]
        assert d.requires_grad and e.requires_grad and v.requires_grad
        loss = (d * 3.0).sum() + (e * e).sum()
        loss.backward()
        return loss

    yt, yf = torch.arange(3.0, requires_grad=True), flame.arange(3.0).requires_grad_()
    want = run(torch, yt)
    got = (flame.compile(lambda y: run(flame, y)) if compiled else lambda y: run(flame, y))(yf)
    assert float(got) == float(want)
    np.testing.assert_array_equal(yf.grad.numpy(), yt.grad.numpy())


@pytest.mark.parametrize("through_view", [False, True])
@pytest.mark.parametrize("compiled", [False, True])
def test_an_argument_written_with_a_tensor_that_requires_grad_is_no_leaf(compiled, through_view):
    """buf (an argument that does not require grad) += y, or buf[1:] += y: buf requires grad and is no leaf,
    as in torch, so a later write into it is allowed, it gets no .grad, and a loss of it alone backward()s
    (compiled, the write left buf saying it did not require grad, and once it did, it was taken for a leaf: the second
    write was refused and buf got a .grad)."""

    def run(lib, buf, y):
        if through_view:
            v = buf[1:]
            v += y
        else:
            buf += y
        assert buf.requires_grad and not buf.is_leaf if lib is torch else buf.requires_grad
        buf.mul_(2.0)
        loss = (buf * buf).sum()
        loss.backward()
        return loss

    bt, yt = torch.ones(3), torch.tensor(0.5, requires_grad=True)
    bf, yf = flame.ones(3), flame.tensor(0.5, requires_grad=True)
    want = run(torch, bt, yt)
    got = (flame.compile(lambda b, y: run(flame, b, y)) if compiled else lambda b, y: run(flame, b, y))(bf, yf)
    assert float(got) == float(want) and bf.grad is None
    np.testing.assert_array_equal(yf.grad.numpy(), yt.grad.numpy())
    np.testing.assert_array_equal(bf.numpy(), bt.detach().numpy())


def test_an_inplace_op_on_a_leaf_that_requires_grad_raises():
    w = flame.ones(3, requires_grad=True)
    with pytest.raises(FlameError, match="leaf Variable that requires grad"):
        w += 1
    with pytest.raises(FlameError, match="leaf Variable that requires grad"):
        w.mul_(2)
    np.testing.assert_array_equal(w.numpy(), np.ones(3, np.float32))


LEAVES_OF_THEIR_OWN = {  # each: lib -> a tensor torch refuses to write in place while recording gradients
    "detach().requires_grad_()": lambda lib: lib.ones(3).detach().requires_grad_(),
    "detach() of a result": lambda lib: (lib.ones(3, requires_grad=True) * 2).detach().requires_grad_(),
    "view(...).requires_grad_()": lambda lib: lib.ones(6).view(2, 3).requires_grad_(),
    "a slice, requires_grad_()": lambda lib: lib.ones(6)[1:].requires_grad_(),
    "a view of view(...).requires_grad_()": lambda lib: lib.ones(6).view(2, 3).requires_grad_().t(),
}
WRITES = {
    "add_": lambda t: t.add_(1),
    "fill_": lambda t: t.fill_(2.0),
    "x[0] = 5": lambda t: t.__setitem__(0, 5.0),
}


@pytest.mark.parametrize("write", WRITES)
@pytest.mark.parametrize("make", LEAVES_OF_THEIR_OWN)
def test_a_detached_or_view_leaf_that_requires_grad_refuses_an_inplace_write_as_in_torch(make, write):
    """torch refuses a write into a leaf that requires grad made by detach(), and into a view that
    requires grad of a tensor no op made (even one that does not require grad); under no_grad both take it."""
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        WRITES[write](LEAVES_OF_THEIR_OWN[make](torch))
    t = LEAVES_OF_THEIR_OWN[make](flame)
    with pytest.raises(FlameError, match="leaf Variable that requires grad"):
        WRITES[write](t)
    np.testing.assert_array_equal(t.numpy(), np.ones(t.shape, np.float32) * (2 if "result" in make else 1))
    got = {}
    for lib in (torch, flame):
        t = LEAVES_OF_THEIR_OWN[make](lib)
        with lib.no_grad():
            WRITES[write](t)
        got[lib] = (t.detach().numpy(), t.requires_grad)
    np.testing.assert_array_equal(got[flame][0], got[torch][0])
    assert got[flame][1] == got[torch][1]


def test_inplace_results_keep_shape_and_may_not_widen_the_dtype():
    a = flame.zeros(3)
    with pytest.raises(ShapeError, match=r"output with shape \[3\] doesn't match the broadcast shape \[2, 3\]"):
        a += flame.ones(2, 3)
    i = flame.tensor(np.array([1, 2], np.int64))
    with pytest.raises(DTypeError, match="can't be cast"):
        i += 0.5
    f = flame.zeros(2)
    f += flame.tensor(np.array([1, 2], np.int64))  # an integer into a float tensor is fine, as in torch
    f += flame.tensor(np.array([0.5, 0.5], np.float64))
    assert f.dtype == flame.float32
    np.testing.assert_array_equal(f.numpy(), [1.5, 2.5])
    with pytest.raises(TypeError, match="a = a @ b"):
        m = flame.ones(2, 2)
        m @= flame.ones(2, 2)


def test_data_shares_the_buffer_outside_autograd():
    p = flame.tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    d = p.data
    assert not d.requires_grad
    d.mul_(3)  # no error: .data is outside autograd, as in torch
    np.testing.assert_array_equal(p.numpy(), [3.0, 6.0])
    p.data = flame.tensor(np.array([7.0, 8.0, 9.0], np.float32))
    assert p.shape == (3,) and p.requires_grad
    (p * p).sum().backward()
    np.testing.assert_array_equal(p.grad.numpy(), [14.0, 16.0, 18.0])


def test_a_write_into_a_tensor_a_recorded_op_read_differentiates_through_its_old_history():
    def run(lib, v):
        x = lib.tensor(v, requires_grad=True)
        y = x.exp() * 1
        y[lib.tensor(np.array([0, 2]))] += lib.tensor(np.array([1.0, 3.0], np.float32))  # reads y[idx], writes y
        z = y[1:2]
        y[0] = z.sum() * 2  # z was read from y before this write
        (y * y).sum().backward()
        return y.detach().numpy(), x.grad.numpy()

    v = np.array([0.5, -1.0, 2.0], np.float32)
    for got, want in zip(run(flame, v), run(torch, v)):
        np.testing.assert_allclose(got, want, rtol=1e-5)


_MAKES = [lambda x: x[0], lambda x: x.t(), lambda x: x.view(-1), lambda x: x.unsqueeze(0), lambda x: x.narrow(1, 0, 2),
          lambda x: x.unbind(0)[1], lambda x: x.permute(1, 0)[0], lambda x: x.reshape(4, 3), lambda x: x[1:, ::2]]


@pytest.mark.parametrize("make", _MAKES)
def test_a_write_through_an_eager_view_reaches_its_base_as_in_torch(make):
    """PyTorch's views share storage: +=, copy_ and item assignment through one are seen by the base."""
    got, want = flame.zeros(3, 4), torch.zeros(3, 4)
    for x in (got, want):
        v = make(x)
        v += 1
        make(x).copy_(make(x) * 2 + 1)
        make(x)[...] = make(x) + 5
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_a_write_into_an_expanded_view_is_refused_as_in_torch():
    x = flame.zeros(1, 4)
    with pytest.raises(FlameError, match="more than one element of the written-to tensor refers to a single memory"):
        x.expand(3, 4).add_(1)
    np.testing.assert_array_equal(x.numpy(), np.zeros((1, 4), np.float32))


# keys of x.expand(3, 4)[key] = 7: torch copies the number into x[key], refused where the elements it names
# share memory (a dim of the expand kept), taken where they do not (a row picked)
EXPANDED_KEYS = {
    "[1:, 2]": (slice(1, None), 2),
    "[:, 2]": (slice(None), 2),
    "[...]": Ellipsis,
    "[1:]": slice(1, None),
    "[1]": 1,
    "[2, ::2]": (2, slice(None, None, 2)),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("key", EXPANDED_KEYS)
def test_a_number_assigned_into_expanded_elements_is_refused_as_in_torch(key, compiled):
    def write(lib, x):
        y = x * 1
        y.expand(3, 4)[EXPANDED_KEYS[key]] = 7.0
        return y

    try:
        want = write(torch, torch.zeros(1, 4)).numpy()
    except RuntimeError as e:
        assert "single memory location" in str(e)
        want = None
    x = flame.zeros(1, 4)
    run = flame.compile(lambda x: write(flame, x)) if compiled else (lambda x: write(flame, x))
    if want is None:
        with pytest.raises(RuntimeError, match="x\\[key\\] = value: unsupported operation: more than one element"):
            run(x)
    else:
        np.testing.assert_array_equal(run(x).numpy(), want)


def test_copies_and_views_of_temporaries_take_writes():
    x = flame.zeros(3, 4)
    y = x[0].clone()
    y += 1  # a copy, as in torch
    f = x.flip(0)
    f += 1  # flip copies in torch too
    t = flame.zeros(3, 4).t()
    t += 1  # nothing else sees the tensor it views
    x[0] += 1  # writes through the base tensor itself
    np.testing.assert_array_equal(x.numpy()[0], np.ones(4, np.float32))
    assert y.numpy().sum() == 4 and f.numpy().sum() == 12 and t.numpy().sum() == 12


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_detach_of_a_buffer_written_earlier_reads_its_new_values(compiled):
    """x.detach() after an in-place update of x earlier in the step (BatchNorm's running statistics,
    an optimizer's state) holds x's new values, as torch's: inside @flame.compile too, where x is a
    captured tensor the trace rebinds."""
    data = np.arange(6.0).reshape(3, 2)

    def run(lib, bn, out):
        bn(lib.tensor(data))
        with lib.no_grad():
            out.copy_(bn.running_mean.detach() * 2)
            bn.running_var.detach().mul_(3)  # a write through the detached view reaches the buffer

    tbn, tout = torch.nn.BatchNorm1d(2).double(), torch.zeros(2, dtype=torch.float64)
    fbn, fout = nn.BatchNorm1d(2).double(), flame.zeros(2, dtype=flame.float64)
    step = flame.compile(lambda: run(flame, fbn, fout)) if compiled else (lambda: run(flame, fbn, fout))
    for _ in range(2):
        run(torch, tbn, tout)
        step()
        np.testing.assert_allclose(fout.numpy(), tout.numpy(), rtol=1e-12)
        np.testing.assert_allclose(fbn.running_var.numpy(), tbn.running_var.numpy(), rtol=1e-12)
