"""A compiled function treats its arguments as eager code does: in-place updates reach the caller's
tensor (as aliased outputs, like parameters) and loss.backward() fills their .grad (issue 14, item 2)."""

import numpy as np
import pytest
import torch

import flame


def test_add_and_copy_into_arguments_reach_the_caller():
    @flame.compile
    def step(x, y, z):
        x.add_(1)
        y.copy_(z * 2)
        return z.sum()

    x, y, z = flame.zeros(3), flame.zeros(3), flame.ones(3)
    for k in range(1, 3):
        step(x, y, z)
        np.testing.assert_array_equal(x.numpy(), np.full(3, k, np.float32))
        np.testing.assert_array_equal(y.numpy(), np.full(3, 2, np.float32))


def test_backward_inside_the_step_fills_argument_grads_and_accumulates():
    @flame.compile
    def step(w, x):
        loss = (w * x).sum()
        loss.backward()
        return loss

    w = flame.tensor(np.ones(3, np.float32), requires_grad=True)
    x = flame.tensor(np.array([1.0, 2.0, 3.0], np.float32))
    step(w, x)
    np.testing.assert_array_equal(w.grad.numpy(), x.numpy())
    assert x.grad is None
    step(w, x)  # accumulates, as two eager backward() calls do
    np.testing.assert_array_equal(w.grad.numpy(), 2 * x.numpy())


def test_argument_without_backward_keeps_its_grad():
    @flame.compile
    def f(w):
        return w * 2

    w = flame.tensor(np.ones(2, np.float32), requires_grad=True)
    (w * 3).sum().backward()
    f(w)
    np.testing.assert_array_equal(w.grad.numpy(), np.full(2, 3, np.float32))


def test_constant_arguments_are_keyed_by_type_and_bits():
    """Issue 14 item 3: -0.0 after 0.0, 1.0 after 1, and NaN each get the right trace."""
    from flame import debug

    @flame.compile
    def f(x, c):
        return x / flame.tensor(c[0] if isinstance(c, tuple) else c, dtype=flame.float32)

    x = flame.ones(1)
    assert f(x, 0.0).item() == np.inf
    assert f(x, -0.0).item() == -np.inf
    assert f(x, (1,)).item() == 1.0
    assert f(x, (2.0,)).item() == 0.5

    @flame.compile
    def g(x, c):
        return x + c

    records = []
    with debug.observe(records.append):
        for _ in range(3):
            assert np.isnan(g(x, float("nan")).item())
    assert len(records) == 1


@pytest.mark.gpu
def test_argument_mutation_and_grads_on_the_gpu():
    """The same on the CUDA executor (arguments' buffers are bound per call, CUDA graphs included)."""
    test_add_and_copy_into_arguments_reach_the_caller()
    test_backward_inside_the_step_fills_argument_grads_and_accumulates()


@pytest.mark.parametrize("budget", [1.5, 2.25, 0, 0.0, -1, -0.5, float("nan"), float("inf"), -float("inf")])
def test_a_memory_budget_that_is_neither_bytes_nor_a_fraction_is_refused(budget):
    """memory_budget is a whole number of bytes (an int, or a float above 1 with no fraction) or a
    fraction in (0, 1] of the unconstrained peak; 1.5 was read as 1 byte and inf raised OverflowError."""
    with pytest.raises(flame.ArgumentError, match=r"flame\.compile\(step\): memory_budget=") as e:
        flame.compile(lambda x: x, name="step", memory_budget=budget)
    assert isinstance(e.value, ValueError)
    if budget == 1.5:
        assert "fraction of a byte" in str(e.value) and "(0, 1]" in str(e.value)


@pytest.mark.parametrize("budget", [True, False, "0.5", [0.5], 1j])
def test_a_memory_budget_that_is_not_a_number_is_refused(budget):
    with pytest.raises(flame.ArgumentTypeError, match=rf"memory_budget must be .* got {type(budget).__name__}") as e:
        flame.compile(lambda x: x, memory_budget=budget)
    assert isinstance(e.value, TypeError)


def test_memory_budget_bytes_and_fractions_keep_their_meaning():
    def step(w, x):
        loss = ((x @ w).tanh() * 2).sum()
        loss.backward()
        return loss

    w = flame.tensor(np.ones((8, 8), np.float32), requires_grad=True)
    x = flame.ones(4, 8)
    free = flame.compile(step).memory_report(w, x).peak
    whole = flame.compile(step, memory_budget=1.0).memory_report(w, x).budget
    assert (whole.bytes, whole.unconstrained_peak) == (free, free)
    as_float = flame.compile(step, memory_budget=float(free)).memory_report(w, x).budget
    as_int = flame.compile(step, memory_budget=np.int64(free)).memory_report(w, x).budget
    assert as_float.bytes == as_int.bytes == free


@pytest.mark.parametrize("limit, error", [(0, flame.ArgumentError), (-2, flame.ArgumentError),
                                          (2.5, flame.ArgumentTypeError), (True, flame.ArgumentTypeError),
                                          ("4", flame.ArgumentTypeError)])
def test_a_cache_limit_that_is_not_a_positive_int_is_refused(limit, error):
    with pytest.raises(error, match=r"flame\.compile\(f\): cache_limit must be"):
        flame.compile(lambda x: x, name="f", cache_limit=limit)


def _same_structure(want, got) -> None:
    """got has want's nesting, containers (namedtuple types and fields too) and tensor values."""
    assert type(got) is type(want)
    if isinstance(want, dict):
        for k in want:
            _same_structure(want[k], got[k])
    elif isinstance(want, tuple):
        assert getattr(want, "_fields", None) == getattr(got, "_fields", None)
        for a, b in zip(want, got):
            _same_structure(a, b)
    else:
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_a_compiled_function_returns_namedtuples_as_the_body_does():
    """sort, max, topk, median, cummax results (namedtuples) come back as the same namedtuples, nested
    or not, with the eager values."""
    x = flame.tensor(np.array([[1.0, 3.0, 2.0], [0.5, -1.0, 4.0]], np.float32))
    bodies = [lambda a: a.sort(1), lambda a: a.max(1), lambda a: a.topk(2, 1), lambda a: (a.median(1), a.sum()),
              lambda a: {"c": a.cummax(0)}]
    for body in bodies:
        _same_structure(body(x), flame.compile(body)(x))
    assert type(x.max(1)).__name__ == "max" and type(x.min(1)).__name__ == "min"  # torch.return_types


def test_requires_grad_set_on_an_argument_in_the_body_reaches_the_callers_tensor_as_torchs():
    """x.requires_grad_() inside the compiled body (an input gradient, as FGSM takes) leaves the caller's
    tensor requiring grad after every call, the traced one and the replays, as torch's eager call does."""
    import torch

    flags = {}
    for lib in (torch, flame):
        w = lib.ones(3, requires_grad=True)

        def f(x, w=w):
            x.requires_grad_(True)
            (x * w).sum().backward()
            return x.grad * 1

        g = flame.compile(f) if lib is flame else f
        flags[lib] = []
        for i in range(3):
            x = lib.ones(3) * (i + 1)
            g(x)
            flags[lib].append((x.requires_grad, x.grad.tolist(), w.grad.tolist()))
    assert flags[flame] == flags[torch]


def _scaled(lib):
    def f(x, mask=None, shift=0.0, *, scale=1.0, **extra):
        y = x * scale + shift + extra.get("bias", 0.0)
        return y if mask is None else y * mask

    return f


@pytest.mark.parametrize(
    "call",
    [
        lambda f, lib, x: f(x),
        lambda f, lib, x: f(x, shift=2.0),
        lambda f, lib, x: f(x, scale=3.0),
        lambda f, lib, x: f(x, scale=3.0, mask=lib.tensor([0.0, 1.0, 1.0])),
        lambda f, lib, x: f(x, lib.tensor([1.0, 0.0, 1.0]), scale=-1.0, shift=1.0),
        lambda f, lib, x: f(x, bias=5.0, scale=2.0),
        lambda f, lib, x: f(x=x, shift=1.0),
    ],
)
def test_keyword_arguments_bind_as_in_the_eager_call(call):
    """A compiled function takes keyword arguments as its Python call does (a parameter's name, a
    keyword-only parameter, **kwargs), with torch eager's results, at every call."""
    f = flame.compile(_scaled(flame))
    for k in range(3):
        want = call(_scaled(torch), torch, torch.arange(3.0) + k)
        got = call(f, flame, flame.arange(3.0) + k)
        np.testing.assert_allclose(got.numpy(), want.numpy())


def test_a_keyword_the_function_does_not_take_raises_as_python_does():
    f = flame.compile(_scaled(flame))
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'|got an unexpected"):
        flame.compile(lambda x: x)(flame.ones(2), nope=1)
    with pytest.raises(TypeError, match="multiple values"):
        f(flame.ones(2), None, mask=None)


def test_a_tensor_given_by_keyword_is_an_argument_updated_in_place():
    @flame.compile
    def step(x, *, into):
        into.add_(x)
        return into.sum()

    acc = flame.zeros(2)
    for k in range(1, 4):
        step(flame.ones(2), into=acc)
        np.testing.assert_array_equal(acc.numpy(), np.full(2, k, np.float32))
