"""What a module's forward reads besides plain attributes of its own is a guard of a compiled call: an
activation's keyword arguments (`m.negative_slope = 0.5`, `softmax.dim = 0`), a config a module holds
(`self.cfg["k"]`, `self.opts.k`) and a class attribute (`M.scale = 3.0`). A call after one changed
traces again, saying what changed, and gives what eager flame gives."""

from __future__ import annotations

import numpy as np
import pytest

import flame
import flame.nn as nn

X = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)


def _changed_then_same_as_eager(m, change, match):
    x = flame.tensor(X)
    f = flame.compile(m)
    np.testing.assert_allclose(f(x).numpy(), m(x).numpy(), rtol=1e-6)
    change()
    with pytest.warns(flame.RecompileWarning, match=match):
        out = f(x)
    np.testing.assert_allclose(out.numpy(), m(x).numpy(), rtol=1e-6)
    np.testing.assert_allclose(f(x).numpy(), m(x).numpy(), rtol=1e-6)
    assert f.stats().traces == 2


def test_an_activations_keyword_argument_set_between_calls_is_a_guard():
    m = nn.LeakyReLU(0.1)
    _changed_then_same_as_eager(m, lambda: setattr(m, "negative_slope", 0.5),
                                r"attribute 'negative_slope' of LeakyReLU.*: 0.1 -> 0.5")


def test_a_softmax_dim_set_between_calls_is_a_guard():
    m = nn.Softmax(dim=1)
    _changed_then_same_as_eager(m, lambda: setattr(m, "dim", 0), r"attribute 'dim' of Softmax.*: 1 -> 0")


class _Opts:
    k = 2.0


class _Configured(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.cfg = {"k": 2.0}
        self.opts = _Opts()
        self.ks = [1.0, 2.0]

    def forward(self, x):
        y = self.lin(x) * self.cfg["k"] + self.opts.k
        for k in self.ks:
            y = y * k
        return y


def test_a_dict_entry_a_module_holds_is_a_guard():
    m = nn.Sequential(nn.Linear(3, 3), _Configured())
    _changed_then_same_as_eager(m, lambda: m[1].cfg.update(k=3.0),
                                r"attribute cfg\['k'\] of _Configured '.*1': 2.0 -> 3.0")


def test_a_config_objects_field_a_module_holds_is_a_guard():
    m = _Configured()
    m.opts = _Opts()

    def change():
        m.opts.k = 5.0

    _changed_then_same_as_eager(m, change, r"attribute opts.k of _Configured.*: 2.0 -> 5.0")


def test_a_list_a_module_iterates_is_a_guard():
    m = _Configured()
    _changed_then_same_as_eager(m, lambda: m.ks.append(4.0),
                                r"the items of attribute ks of _Configured.*: 2 items -> 3")


def test_two_modules_of_one_class_each_guard_their_own_config():
    m = nn.Sequential(_Configured(), _Configured())
    _changed_then_same_as_eager(m, lambda: m[1].cfg.update(k=-1.0),
                                r"attribute cfg\['k'\] of _Configured '.*1': 2.0 -> -1.0")


class _ClassScaled(nn.Module):
    scale = 2.0

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x) * self.scale


def test_a_class_attribute_the_forward_reads_is_a_guard():
    m = _ClassScaled()
    try:
        _changed_then_same_as_eager(m, lambda: setattr(_ClassScaled, "scale", 3.0),
                                    r"attribute 'scale' of _ClassScaled.*: 2.0 -> 3.0")
    finally:
        _ClassScaled.scale = 2.0
