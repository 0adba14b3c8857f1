"""A tensor a compiled step reads through a module or an optimizer, replaced by another object between
steps (a buffer or a parameter assigned anew, register_buffer again, load_state_dict(assign=True), an
optimizer's state tensor replaced), trains as torch's: the step re-traces with the new tensor instead of
replaying the update of the one it bound. Values changed in place (load_state_dict, copy_, zero_())
replay without a re-trace."""

from __future__ import annotations

import warnings

import pytest
import torch

import flame
from tests.training_idioms.common import assert_same_params, batches, maybe_compile, numpy_of, to_lib, twin


class _Scaled:
    """BatchNorm1d, then a Linear whose output is multiplied by a buffer `scale`."""

    @staticmethod
    def build(lib):
        nn = lib.nn

        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.l = nn.Linear(4, 3)
                self.bn = nn.BatchNorm1d(4)
                self.register_buffer("scale", lib.ones(3))

            def forward(self, x):
                return self.l(self.bn(x)) * self.scale

        return M()


def _f64(lib, *values):
    return lib.tensor(list(values), dtype=lib.float64)


def _scale_assigned(lib, m, opt, ckpt):
    m.scale = _f64(lib, 2.0, 0.5, 1.5)


def _scale_registered(lib, m, opt, ckpt):
    m.register_buffer("scale", _f64(lib, 0.5, 2.0, 3.0))


def _running_var_assigned(lib, m, opt, ckpt):
    m.bn.running_var = _f64(lib, 2.0, 3.0, 4.0, 5.0)


def _weight_replaced(lib, m, opt, ckpt):  # the optimizer keeps the old one, as torch's
    m.l.weight = lib.nn.Parameter(m.l.weight.detach() * 2)


def _weight_deleted_for_a_tensor(lib, m, opt, ckpt):
    w = m.l.weight.detach() * 2
    del m.l.weight
    m.l.weight = w


def _loaded_by_assignment(lib, m, opt, ckpt):
    m.load_state_dict(ckpt, assign=True)


def _loaded_in_place(lib, m, opt, ckpt):
    m.load_state_dict(ckpt)


def _exp_avg_replaced(lib, m, opt, ckpt):
    for p in m.parameters():
        opt.state[p]["exp_avg"] = lib.zeros_like(opt.state[p]["exp_avg"]) + 0.1


def _step_replaced(lib, m, opt, ckpt):
    for p in m.parameters():
        opt.state[p]["step"] = opt.state[p]["step"] * 0 + 1


def _state_dict_replaced(lib, m, opt, ckpt):
    p = m.l.bias
    opt.state[p] = {k: v.clone() * 0.5 for k, v in opt.state[p].items()}


def _exp_avg_zeroed(lib, m, opt, ckpt):
    for p in m.parameters():
        opt.state[p]["exp_avg"].zero_()


CHANGES = {  # change -> whether the compiled step re-traces
    "buffer assigned": (_scale_assigned, True),
    "buffer registered again": (_scale_registered, True),
    "running_var assigned": (_running_var_assigned, True),
    "parameter replaced": (_weight_replaced, True),
    "parameter deleted, a tensor assigned": (_weight_deleted_for_a_tensor, True),
    "load_state_dict(assign=True)": (_loaded_by_assignment, True),
    "load_state_dict": (_loaded_in_place, False),
    "exp_avg replaced": (_exp_avg_replaced, True),
    "step replaced": (_step_replaced, True),
    "a parameter's state dict replaced": (_state_dict_replaced, True),
    "exp_avg zeroed in place": (_exp_avg_zeroed, False),
}


def _train(lib, model, change, compiled):
    """Losses of 5 Adam steps with `change` made before the third, and the RecompileWarnings."""
    opt = lib.optim.Adam(model.parameters(), lr=0.05)
    ckpt = {k: v.detach().clone() for k, v in model.state_dict().items()}

    @maybe_compile(lib, compiled)
    def step(x, y):
        loss = lib.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    losses = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", flame.RecompileWarning)
        for i, (x, y) in enumerate(batches(5, (6, 4))):
            if i == 2:
                change(lib, model, opt, ckpt)
            losses.append(float(numpy_of(step(*to_lib(lib, x, y[:, [0, 0, 0]])))))
    return losses, [w for w in caught if issubclass(w.category, flame.RecompileWarning)]


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("case", list(CHANGES))
def test_a_tensor_replaced_between_steps_trains_as_torch(case, compiled):
    change, retraces = CHANGES[case]
    theirs, mine = twin(_Scaled.build)
    t_losses, _ = _train(torch, theirs, change, False)
    f_losses, warned = _train(flame, mine, change, compiled)
    assert f_losses == pytest.approx(t_losses, rel=1e-9, abs=1e-12)
    assert_same_params(mine, theirs, what=case)
    if compiled:
        assert len(warned) == retraces, [str(w.message) for w in warned]


def test_the_recompile_warning_names_the_replaced_state_tensor():
    m = flame.nn.Linear(3, 2)
    opt = flame.optim.Adam(m.parameters(), lr=0.1)

    @flame.compile
    def step(x):
        m(x).sum().backward()
        opt.step()
        opt.zero_grad()

    x = flame.ones(4, 3)
    step(x)
    opt.state[m.weight]["exp_avg_sq"] = flame.zeros(2, 3)
    with pytest.warns(flame.RecompileWarning, match=r"state tensors of Adam.state: .*exp_avg_sq"):
        step(x)


def test_reregistering_keeps_the_place_of_a_name_as_torch():
    for lib in (torch, flame):
        seq = lib.nn.Sequential(lib.nn.Linear(2, 3), lib.nn.ReLU(), lib.nn.Linear(3, 1))
        seq.add_module("0", lib.nn.Tanh())
        lin = lib.nn.Linear(2, 2)
        lin.register_parameter("weight", lib.nn.Parameter(lib.ones(2, 2)))
        bn = lib.nn.BatchNorm1d(2)
        bn.register_buffer("running_mean", lib.ones(2))
        got = ([type(m).__name__ for m in seq], list(lin.state_dict()), list(bn.state_dict()))
        if lib is torch:
            expected = got
    assert got == expected
