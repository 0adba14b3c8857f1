"""A trace never goes stale silently (issue 15, point 8): Python state the trace baked in -- a module's
train/eval mode, a global or closure value the function names -- is guarded; a change re-traces once
with a flame.RecompileWarning naming it, and switching back reuses the earlier trace."""

import warnings

import numpy as np
import pytest

import flame
import flame.nn as nn
from tests.frontend.expected_retrace import said_at_info

SCALE = 2.0
CALLS = 0


def test_eval_after_a_train_mode_trace_retraces_and_switching_back_reuses_the_train_trace(caplog):
    model = nn.Sequential(nn.Linear(4, 64), nn.Dropout(0.5))
    x = flame.ones(16, 4)

    @flame.compile
    def forward(x):
        return model(x)

    train_out = forward(x).numpy()
    assert (train_out == 0).mean() > 0.2  # dropout is on
    model.eval()
    with said_at_info(caplog, r"forward: Dropout 'model.1': training: True -> False"):
        eval_out = forward(x).numpy()
    with flame.no_grad():
        np.testing.assert_allclose(eval_out, model[0](x).numpy(), rtol=1e-6)  # identity in eval
    model.train()
    with warnings.catch_warnings():
        warnings.simplefilter("error", flame.RecompileWarning)
        again = forward(x).numpy()  # the train-mode trace, still cached
    assert (again == 0).mean() > 0.2 and not np.array_equal(again, train_out)  # fresh random mask
    assert forward.stats().traces == 2


def test_a_mode_nothing_reads_does_not_retrace():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU())

    @flame.compile
    def forward(x):
        return model(x)

    forward(flame.ones(2, 4))
    model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error", flame.RecompileWarning)
        forward(flame.ones(2, 4))
    assert forward.stats().traces == 1


def test_a_global_the_function_names_is_guarded():
    global SCALE

    @flame.compile
    def scaled(x):
        return x * SCALE

    x = flame.ones(3)
    SCALE = 2.0
    np.testing.assert_array_equal(scaled(x).numpy(), [2.0] * 3)
    SCALE = 3.0
    with pytest.warns(flame.RecompileWarning, match=r"scaled: global 'SCALE': 2.0 -> 3.0"):
        np.testing.assert_array_equal(scaled(x).numpy(), [3.0] * 3)
    SCALE = 2.0
    with warnings.catch_warnings():
        warnings.simplefilter("error", flame.RecompileWarning)
        np.testing.assert_array_equal(scaled(x).numpy(), [2.0] * 3)


def test_a_closure_variable_is_guarded():
    def make():
        k = 1

        @flame.compile
        def shifted(x):
            return x + k

        def set_k(v):
            nonlocal k
            k = v

        return shifted, set_k

    shifted, set_k = make()
    x = flame.zeros(2)
    np.testing.assert_array_equal(shifted(x).numpy(), [1.0, 1.0])
    set_k(5)
    with pytest.warns(flame.RecompileWarning, match=r"closure variable 'k': 1 -> 5"):
        np.testing.assert_array_equal(shifted(x).numpy(), [5.0, 5.0])


def test_a_global_the_function_itself_assigns_is_not_an_input():
    @flame.compile
    def counted(x):
        global CALLS
        CALLS += 1
        return x * 2

    with warnings.catch_warnings():
        warnings.simplefilter("error", flame.RecompileWarning)
        for _ in range(3):
            counted(flame.ones(2))
    assert counted.stats().traces == 1


def test_objects_and_functions_the_function_names_are_not_guarded_by_value():
    table = [1.0]  # a mutable object: read through, not baked as a plain value

    @flame.compile
    def f(x):
        return flame.relu(x) * len(table)

    f(flame.ones(2))
    table.append(2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", flame.RecompileWarning)
        f(flame.ones(2))
    assert f.stats().traces == 1


def test_a_converted_parameter_is_named_in_the_warning():
    model = nn.Linear(3, 2)

    @flame.compile
    def forward(x):
        return model(x)

    forward(flame.ones(1, 3))
    model.double()
    with pytest.warns(flame.RecompileWarning, match=r"param 'model.weight': f32\[2,3\] -> f64\[2,3\]"):
        forward(flame.ones(1, 3, dtype="f64"))


def test_an_optimizer_choice_made_in_python_is_guarded_but_its_value_is_a_scalar_input():
    import torch

    w = nn.Parameter(flame.ones(4))
    ref = torch.nn.Parameter(torch.ones(4))
    opt = flame.optim.SGD([w], lr=0.1)
    ref_opt = torch.optim.SGD([ref], lr=0.1)

    @flame.compile
    def step():
        (w * w).sum().backward()
        opt.step()
        opt.zero_grad()

    def torch_step():
        (ref * ref).sum().backward()
        ref_opt.step()
        ref_opt.zero_grad()

    step(), torch_step()
    for g in (opt.param_groups[0], ref_opt.param_groups[0]):
        g["weight_decay"] = 0.5
    with pytest.warns(flame.RecompileWarning, match=r"SGD.param_groups\[0\]\['weight_decay'\] != 0: False -> True"):
        step()
    torch_step()
    for g in (opt.param_groups[0], ref_opt.param_groups[0]):
        g["weight_decay"] = 0.25  # still nonzero: the trace reads the value at every call
    with warnings.catch_warnings():
        warnings.simplefilter("error", flame.RecompileWarning)
        step()
    torch_step()
    np.testing.assert_allclose(w.numpy(), ref.detach().numpy(), rtol=1e-6)
    assert step.stats().traces == 2


def test_modules_held_by_self_are_named_in_the_log(caplog):
    class Trainer:
        def __init__(self):
            self.model = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5))

        def forward(self, x):
            return self.model(x)

    trainer = Trainer()
    forward = flame.compile(trainer.forward)
    forward(flame.ones(1, 2))
    trainer.model.eval()
    with said_at_info(caplog, r"Dropout 'self.model.1': training: True -> False"):
        forward(flame.ones(1, 2))


DTYPE = flame.f32


def test_a_global_dtype_is_guarded():
    global DTYPE

    @flame.compile
    def cast(x):
        return x.to(DTYPE)

    DTYPE = flame.f32
    assert cast(flame.ones(2)).dtype == flame.f32
    DTYPE = flame.f64
    with pytest.warns(flame.RecompileWarning, match="global 'DTYPE'"):
        assert cast(flame.ones(2)).dtype == flame.f64
