"""Module hooks against torch: forward pre-hooks, forward hooks (with_kwargs, prepend, always_call),
full backward hooks and backward pre-hooks, the global ones, handles; the order they fire in (a
recorded list), their arguments and what they change, eagerly and inside @flame.compile."""

import warnings

import numpy as np
import pytest
import torch

import flame
from flame.errors import TraceError

W = np.random.RandomState(0).randn(2, 3)
B = np.array([0.1, -0.2])
X = np.random.RandomState(1).randn(4, 3)


def _model(lib):
    """Linear(3, 2) -> Tanh in f64, with the same weights in torch and flame."""
    lin = lib.nn.Linear(3, 2).double() if lib is torch else lib.nn.Linear(3, 2, dtype=flame.float64)
    with lib.no_grad():
        lin.weight.copy_(lib.tensor(W))
        lin.bias.copy_(lib.tensor(B))
    return lin, lib.nn.Sequential(lin, lib.nn.Tanh())


def _arr(t):
    return None if t is None else np.array(t.tolist())


def _hooked_run(lib, compiled=False):
    """Every kind of module hook on a Linear, a Tanh and their Sequential; (output, x.grad, weight.grad,
    the log of (hook, module, arguments))."""
    log = []
    lin, seq = _model(lib)

    def pre(m, args):
        log.append(("pre", type(m).__name__, [tuple(a.shape) for a in args]))

    def fwd(m, args, out):
        log.append(("fwd", type(m).__name__, tuple(out.shape)))
        return out * 2 if isinstance(m, lib.nn.Linear) else None

    def bpre(m, gout):
        log.append(("bpre", type(m).__name__, [tuple(g.shape) for g in gout]))
        return (gout[0] * 3,)

    def full(m, gin, gout):
        log.append(("full", type(m).__name__, [None if g is None else tuple(g.shape) for g in gin]))
        return tuple(None if g is None else g * 0.5 for g in gin)

    for m in (lin, seq[1], seq):
        m.register_forward_pre_hook(pre)
        m.register_forward_hook(fwd)
        m.register_full_backward_pre_hook(bpre)
        m.register_full_backward_hook(full)
    x = lib.tensor(X, requires_grad=True) if lib is torch else flame.tensor(X, dtype=flame.float64, requires_grad=True)

    def step(x):
        out = seq(x)
        out.sum().backward()
        return out

    out = (flame.compile(step) if compiled else step)(x)
    return _arr(out), _arr(x.grad), _arr(lin.weight.grad), log


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_all_module_hooks_fire_in_torch_order_with_torch_arguments(compiled):
    want = _hooked_run(torch)
    got = _hooked_run(flame, compiled)
    assert got[3] == want[3]
    for g, w in zip(got[:3], want[:3]):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_backward_hook_arguments_are_torch_values():
    seen = {}
    for lib in (torch, flame):
        lin, _ = _model(lib)
        got = seen.setdefault(lib.__name__, [])
        lin.register_full_backward_hook(lambda m, gin, gout, got=got: got.append([_arr(g) for g in gin + gout]))
        x = (
            lib.tensor(X, requires_grad=True)
            if lib is torch
            else flame.tensor(X, dtype=flame.float64, requires_grad=True)
        )
        (lin(x) ** 2).sum().backward()
    for g, w in zip(seen["flame"][0], seen["torch"][0]):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def test_backward_hook_with_no_input_requiring_grad_gets_nones():
    seen = {}
    for lib in (torch, flame):
        lin, _ = _model(lib)
        got = seen.setdefault(lib.__name__, [])
        lin.register_full_backward_hook(lambda m, gin, gout, got=got: got.append((gin, _arr(gout[0]))))
        x = lib.tensor(X) if lib is torch else flame.tensor(X, dtype=flame.float64)
        lin(x).sum().backward()
    ((gin, gout),) = seen["flame"]
    assert gin == (None,) == seen["torch"][0][0]
    np.testing.assert_allclose(gout, seen["torch"][0][1])


def _two_input_hook_run(lib, b_grad: bool, use: str, compiled: bool = False):
    """A module of three inputs (a, b, an integer tensor) and two outputs with a full backward hook that
    adds the sums of grad_input's other entries to a's gradient; (the hook's view of grad_input and
    grad_output: None or (integer?, shape); a.grad; b.grad)."""

    class Two(lib.nn.Module):
        def forward(self, a, b, i, scale=1.0):
            return a * 2 * scale, (b * 3).sum()

    log, m = [], Two()

    def hook(mod, gin, gout):
        log.append([None if g is None else (g.dtype in (lib.int64,), tuple(g.shape)) for g in gin + gout])
        return (gin[0] + gin[1].sum() * 10 + gin[2].sum(), *gin[1:])

    m.register_full_backward_hook(hook)
    a = lib.tensor(np.array([1.0, 2.0]), requires_grad=True)
    b = lib.tensor(np.array([1.0, 2.0, 3.0]), requires_grad=b_grad)
    i = lib.tensor(np.array([1, 2]))

    def step(a, b, i):
        o1, o2 = m(a, b, i, scale=3.0)
        (o1.sum() if use == "first" else o1.sum() + o2).backward()
        return o1

    (flame.compile(step) if compiled else step)(a, b, i)
    return log, _arr(a.grad), _arr(b.grad)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("b_grad,use", [(False, "first"), (True, "first"), (True, "both")])
def test_backward_hook_sees_zeros_for_a_tensor_input_without_gradient(b_grad, use, compiled):
    """torch's full backward hook gets a zero tensor (of the input's dtype) for each tensor input that has
    no gradient, whether it needs none or the backward does not reach it, once some input needs one."""
    want = _two_input_hook_run(torch, b_grad, use)
    got = _two_input_hook_run(flame, b_grad, use, compiled)
    assert got[0] == want[0]
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
    if use == "both":  # (torch's hook also gives an input it does not reach a zero .grad; flame leaves None)
        np.testing.assert_allclose(got[2], want[2], rtol=1e-12)


def test_forward_pre_hook_and_forward_hook_change_args_and_output():
    outs = {}
    for lib in (torch, flame):
        lin, _ = _model(lib)
        lin.register_forward_pre_hook(lambda m, args: args[0] + 1)  # a non-tuple becomes (value,)
        lin.register_forward_hook(lambda m, args, out: out - args[0].sum())
        x = lib.tensor(X) if lib is torch else flame.tensor(X, dtype=flame.float64)
        outs[lib.__name__] = _arr(lin(x))
    np.testing.assert_allclose(outs["flame"], outs["torch"], rtol=1e-12)


def _kwargs_prepend_global_log(lib):
    log = []
    glob = lib.nn.modules.module if lib is torch else lib.nn

    class Scale(lib.nn.Module):
        def forward(self, x, scale=1.0):
            return x * scale

    m = Scale()
    m.register_forward_pre_hook(lambda mod, args: log.append("pre-a"))
    m.register_forward_pre_hook(lambda mod, args: log.append("pre-b"), prepend=True)
    m.register_forward_pre_hook(
        lambda mod, args, kw: (log.append(("pre-kw", kw)), (args, {"scale": 3.0}))[1], with_kwargs=True
    )
    m.register_forward_hook(lambda mod, args, kw, out: (log.append(("fwd-kw", kw)), out + 1)[1], with_kwargs=True)
    m.register_forward_hook(lambda mod, args, out: log.append("fwd-first"), prepend=True)
    handles = [
        glob.register_module_forward_pre_hook(lambda mod, args: log.append("global-pre")),
        glob.register_module_forward_hook(lambda mod, args, out: log.append("global-fwd")),
    ]
    try:
        out = m(lib.ones(2), scale=2.0)
    finally:
        for h in handles:
            h.remove()
    log.append(out.tolist())
    return log


def test_with_kwargs_prepend_and_global_hooks_order():
    assert _kwargs_prepend_global_log(flame) == _kwargs_prepend_global_log(torch)


@pytest.mark.parametrize("lib", [torch, flame], ids=["torch", "flame"])
def test_handles_remove_and_work_as_context_managers(lib):
    log = []
    lin, _ = _model(lib)
    x = lib.tensor(X) if lib is torch else flame.tensor(X, dtype=flame.float64)
    h = lin.register_forward_hook(lambda m, a, o: log.append("a"))
    with lin.register_forward_hook(lambda m, a, o: log.append("b")):
        lin(x)
    lin(x)
    h.remove()
    h.remove()  # again: nothing
    lin(x)
    assert log == ["a", "b", "a"], lib.__name__


def _always_call_log(lib):
    log = []

    class Boom(lib.nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    m = Boom()
    m.register_forward_hook(lambda mod, a, o: log.append(("always", o)), always_call=True)
    m.register_forward_hook(lambda mod, a, o: log.append("not"))
    with pytest.raises(ValueError):
        m(lib.ones(1))
    return log


def test_always_call_forward_hook_runs_when_forward_raises():
    assert _always_call_log(flame) == _always_call_log(torch) == [("always", None)]


def test_backward_hook_returning_wrong_count_raises_like_torch():
    for lib, err in ((torch, RuntimeError), (flame, flame.errors.AutogradError)):
        lin, _ = _model(lib)
        lin.register_full_backward_hook(lambda m, gin, gout: (gin[0], gin[0]))
        x = (
            lib.tensor(X, requires_grad=True)
            if lib is torch
            else flame.tensor(X, dtype=flame.float64, requires_grad=True)
        )
        with pytest.raises(err, match="invalid number of grad_input"):
            lin(x).sum().backward()


def test_forward_hook_records_activations_eagerly_and_is_an_error_to_read_when_compiled():
    lin, seq = _model(flame)
    acts = []
    lin.register_forward_hook(lambda m, a, o: acts.append(o))
    x = flame.tensor(X, dtype=flame.float64)
    seq(x)
    tlin, tseq = _model(torch)
    np.testing.assert_allclose(acts[0].numpy(), tlin(torch.tensor(X)).detach().numpy(), rtol=1e-12)

    step = flame.compile(lambda x: seq(x))
    step(x)
    assert acts[-1].is_traced  # the hook ran while the step was traced: it holds a traced tensor
    with pytest.raises(TraceError, match="outlived the trace"):
        acts[-1].numpy()


def test_compiled_forward_hook_that_reads_values_names_the_hook():
    lin, _ = _model(flame)

    def peek(m, args, out):
        print(out.sum().item())

    lin.register_forward_hook(peek)
    step = flame.compile(lambda x: lin(x))
    with pytest.raises(
        TraceError,
        match=r"hook 'test_compiled_forward_hook_that_reads_values_names_the_hook\."
        r"<locals>\.peek' \(defined at .*test_module_hooks\.py:\d+\)",
    ):
        step(flame.tensor(X, dtype=flame.float64))


def test_compiled_backward_hook_returning_none_is_an_error():
    lin, _ = _model(flame)
    lin.register_full_backward_hook(lambda m, gin, gout: None)

    @flame.compile
    def step(x):
        lin(x).sum().backward()

    with pytest.raises(TraceError, match="returned None while @flame.compile traced the backward"):
        step(flame.tensor(X, dtype=flame.float64, requires_grad=True))


def test_hook_added_after_compiling_traces_again():
    lin, _ = _model(flame)
    step = flame.compile(lambda x: lin(x))
    x = flame.tensor(X, dtype=flame.float64)
    first = step(x).numpy()
    with lin.register_forward_hook(lambda m, a, o: o * 0):
        with pytest.warns(flame.RecompileWarning):
            assert not step(x).numpy().any()
    with warnings.catch_warnings():
        warnings.simplefilter("error", flame.RecompileWarning)  # the first trace holds again
        np.testing.assert_array_equal(step(x).numpy(), first)


def _side_path_run(lib, compiled: bool):
    """A module whose output is a dict (no tensor output for the hooks) and whose input also reaches the
    loss through an attribute: torch's full backward hook runs only on a gradient that passed the
    module's outputs, so here never (the gradient reaches the input through no output)."""
    log = []

    class Side(lib.nn.Module):
        def forward(self, x):
            self.side = x * 5
            return {"a": x * 2}

    m = Side()
    m.register_full_backward_hook(lambda mod, gi, go: (log.append(len(gi)), (gi[0] * 3,))[1])
    x = lib.tensor(X[0], dtype=lib.float64, requires_grad=True)

    def step(x):
        out = m(x)
        (m.side.sum() + out["a"].sum()).backward()

    (flame.compile(step) if compiled and lib is flame else step)(x)
    return log, _arr(x.grad)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_backward_hook_does_not_run_for_a_gradient_that_passed_no_output(compiled):
    want_log, want = _side_path_run(torch, False)
    got_log, got = _side_path_run(flame, compiled)
    assert got_log == want_log
    np.testing.assert_allclose(got, want, rtol=1e-12)
