"""Anomaly detection (flame.autograd.detect_anomaly / set_detect_anomaly), against torch's: a gradient
computation returning NaN raises at that step, eagerly and in a compiled step (whose in-place updates
are then left undone); a forward NaN raises nothing; the modes nest and restore as torch's."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import flame
from flame import optim
from flame.autograd import detect_anomaly, is_anomaly_check_nan_enabled, is_anomaly_enabled, set_detect_anomaly
from flame.errors import AnomalyError

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _mode_off():
    """Each test starts and ends with anomaly detection off, as a fresh process has it."""
    set_detect_anomaly(False)
    yield
    set_detect_anomaly(False)


def _sqrt_of_zero(lib):  # d/dx sqrt(x) * 0 at 0: 0 / 0
    x = lib.zeros(3, dtype=lib.float64, requires_grad=True)
    return x, (x.sqrt() * 0).sum()


def _square_of_log(lib):  # log(-1) is NaN in the forward; its square's gradient 2 * NaN
    x = lib.tensor([-1.0, 2.0], dtype=lib.float64, requires_grad=True)
    return x, (lib.log(x) ** 2).sum()


def _log_of_negative(lib):  # a NaN in the forward only: d/dx log(x) = 1 / x is finite
    x = lib.tensor([-1.0, 2.0], dtype=lib.float64, requires_grad=True)
    return x, lib.log(x).sum()


def _torch_raises(case) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autograd.detect_anomaly():
            try:
                case(torch)[1].backward()
            except RuntimeError as e:
                assert "returned nan values" in str(e)
                return True
    return False


@pytest.mark.parametrize("case", [_sqrt_of_zero, _square_of_log])
def test_eager_backward_nan_raises_naming_the_op_and_the_forward_line(case):
    assert _torch_raises(case)
    x, loss = case(flame)
    with set_detect_anomaly(True), pytest.raises(AnomalyError, match="returned nan values") as got:
        loss.backward()
    text = str(got.value)
    assert "of the backward" in text and "test_anomaly.py:" in text  # the op and the user's forward line
    assert "return x, (" in text.split("the gradient of the forward line:")[1]  # the forward line's text
    assert x.grad is None  # nothing accumulated


def test_autograd_grad_and_create_graph_raise_too():
    x, loss = _sqrt_of_zero(flame)
    with set_detect_anomaly(True):
        with pytest.raises(AnomalyError, match="returned nan values"):
            flame.autograd.grad(loss, [x], retain_graph=True)
        with pytest.raises(AnomalyError, match="run eagerly, create_graph=True"):
            flame.autograd.grad(loss, [x], create_graph=True)
        with pytest.raises(AnomalyError, match="returned nan values"):  # JAX's form
            flame.grad(lambda x: (x.sqrt() * 0).sum())(x)
        y = x.sqrt()
        y.retain_grad()
        with pytest.raises(AnomalyError, match="returned nan values"):  # the backward that runs hooks
            (y * 0).sum().backward()


def test_a_forward_nan_raises_nothing():
    assert not _torch_raises(_log_of_negative)
    x, loss = _log_of_negative(flame)
    with set_detect_anomaly(True):
        assert np.isnan(loss.item())
        loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), [-1.0, 0.5])


def test_check_nan_false_and_mode_off_raise_nothing():
    for mode in (set_detect_anomaly(True, check_nan=False), set_detect_anomaly(False)):
        with mode:
            x, loss = _sqrt_of_zero(flame)
            loss.backward()
            assert np.isnan(x.grad.numpy()).all()


def test_modes_follow_and_restore_as_torch():
    assert not is_anomaly_enabled() and is_anomaly_check_nan_enabled()
    with set_detect_anomaly(True, check_nan=False):
        assert is_anomaly_enabled() and not is_anomaly_check_nan_enabled()
        with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"):
            manager = detect_anomaly()
        with manager:
            assert is_anomaly_enabled() and is_anomaly_check_nan_enabled()
        assert is_anomaly_enabled() and not is_anomaly_check_nan_enabled()
    assert not is_anomaly_enabled() and is_anomaly_check_nan_enabled()
    set_detect_anomaly(True)  # called on its own: from here on
    assert is_anomaly_enabled()
    set_detect_anomaly(False)
    assert not is_anomaly_enabled()


def test_detect_anomaly_decorates_a_function():
    with pytest.warns(UserWarning):

        @detect_anomaly()
        def step():
            assert is_anomaly_enabled()
            _sqrt_of_zero(flame)[1].backward()

    with pytest.raises(AnomalyError):
        step()
    assert not is_anomaly_enabled()


def _compiled_step(x0: float):
    w = flame.nn.Parameter(flame.tensor([x0, 1.0], dtype=flame.float64))
    opt = optim.Adam([w], lr=0.1)

    @flame.compile
    def step(x):
        loss = ((w * x).sqrt() * 0).sum() + (w * w).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    return w, opt, step


def test_compiled_step_raises_before_its_update():
    w, opt, step = _compiled_step(1.0)
    x = flame.tensor([1.0, 1.0], dtype=flame.float64)
    with set_detect_anomaly(True):
        step(x)  # finite: runs and updates
        before = w.numpy().copy()
        state = {k: v.numpy().copy() for k, v in opt.state[w].items() if isinstance(v, flame.Tensor)}
        with pytest.raises(AnomalyError, match="returned nan values") as got:
            step(flame.tensor([0.0, 1.0], dtype=flame.float64))  # sqrt(0)'s gradient
        assert "test_anomaly.py:" in str(got.value) and "left as they were" in str(got.value)
        np.testing.assert_array_equal(w.numpy(), before)  # the parameter and Adam's state unchanged
        for k, v in state.items():
            np.testing.assert_array_equal(opt.state[w][k].numpy(), v)
    step(flame.tensor([0.0, 1.0], dtype=flame.float64))  # off: runs, NaN and all
    assert np.isnan(w.numpy()[0])


def test_compiled_forward_nan_raises_nothing():
    @flame.compile
    def f(x):
        return flame.log(x)

    @flame.compile
    def g(x):
        flame.log(x).sum().backward()
        return x.grad

    with set_detect_anomaly(True):
        assert np.isnan(f(flame.tensor([-1.0], dtype=flame.float64)).numpy()).all()
        x = flame.tensor([-1.0, 2.0], dtype=flame.float64, requires_grad=True)
        np.testing.assert_allclose(g(x).numpy(), [-1.0, 0.5])


def test_on_the_cuda_executor_a_gradient_computation_says_where_to_look(monkeypatch):
    from flame.frontend import anomaly

    class Cuda:
        name = "cuda"

    x, loss = _sqrt_of_zero(flame)
    monkeypatch.setattr(anomaly, "executor", Cuda)
    with set_detect_anomaly(True):
        with pytest.raises(AnomalyError, match=r"reference executor.*flame check --nan"):
            loss.backward()
    with set_detect_anomaly(True, check_nan=False):
        loss.backward()  # nothing to check: runs


@pytest.mark.parametrize("bad", [False, True])
def test_gpu_plan_of_a_training_step_on_the_reference_executor(cuda_target, bad):
    """The CUDA backend's plan (GEMMs as library calls, fused kernels) run by the reference executor: a
    finite step runs watched and matches an unwatched one; sqrt(0)'s gradient raises."""
    flame.manual_seed(0)
    model = flame.nn.Sequential(flame.nn.Linear(8, 16), flame.nn.ReLU(), flame.nn.Linear(16, 4))
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    @flame.compile
    def step(x, y):
        out = model(x)
        loss = flame.nn.functional.mse_loss(out, y) + (out.abs() * y).sqrt().sum() * 0
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    x, y = flame.randn(32, 8), flame.ones(32, 4)
    step(x, y)
    before = [p.numpy().copy() for p in model.parameters()]
    if bad:
        y = flame.cat([flame.zeros(1, 4), flame.ones(31, 4)])
        with set_detect_anomaly(True), pytest.raises(AnomalyError, match="returned nan values"):
            step(x, y)
        for p, b in zip(model.parameters(), before):
            np.testing.assert_array_equal(p.numpy(), b)
    else:
        with set_detect_anomaly(True):
            watched = step(x, y).item()
        assert np.isfinite(watched)
        assert all(not np.array_equal(p.numpy(), b) for p, b in zip(model.parameters(), before))
