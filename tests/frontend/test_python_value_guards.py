"""Python values a trace bakes in are guards, as torch.compile's are: a global read by a helper the
compiled function calls, and a plain value read from a module's own attribute. A call after one
changed traces again (saying which, as a flame.RecompileWarning) instead of replaying the old value;
unchanged, the trace replays."""

from __future__ import annotations

import numpy as np
import pytest

import flame
import flame.nn as nn

LR = 0.5


def _scaled(x):
    return x * LR


def _twice_scaled(x):
    return _scaled(x) * 2.0


def test_a_global_a_helper_reads_is_a_guard():
    global LR

    @flame.compile
    def f(x):
        return _twice_scaled(x)  # LR is read two calls down

    x = flame.ones(3)
    try:
        np.testing.assert_array_equal(f(x).numpy(), 1.0)
        np.testing.assert_array_equal(f(x).numpy(), 1.0)
        assert f.stats().traces == 1
        LR = 2.0
        with pytest.warns(flame.RecompileWarning, match=r"global 'LR' \(read by _scaled\): 0.5 -> 2.0"):
            out = f(x)
        np.testing.assert_array_equal(out.numpy(), 4.0)
    finally:
        LR = 0.5


class _Scale(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x) * self.scale


def test_a_plain_value_read_from_a_modules_attribute_is_a_guard():
    m = _Scale(0.5)

    @flame.compile
    def f(x):
        return m(x)

    x = flame.ones(2, 3)
    first = f(x).numpy()
    f(x)
    assert f.stats().traces == 1
    m.scale = 3.0
    with pytest.warns(flame.RecompileWarning, match=r"attribute 'scale' of _Scale 'm': 0.5 -> 3.0"):
        again = f(x).numpy()
    np.testing.assert_allclose(again, first * 6.0, rtol=1e-6)
    m.other = 7  # an attribute the trace never read changes nothing
    f(x)
    assert f.stats().traces == 2


def test_modules_record_attribute_reads_only_while_a_body_is_traced():
    assert "__getattribute__" not in nn.Module.__dict__
    m = _Scale(0.5)
    flame.compile(lambda x: m(x))(flame.ones(2, 3))
    assert "__getattribute__" not in nn.Module.__dict__


SCALE = 0.5


class _GlobalScale(nn.Module):
    def forward(self, x):
        return x * SCALE


def test_a_global_a_modules_forward_reads_is_a_guard():
    global SCALE
    m = _GlobalScale()

    @flame.compile
    def f(x):
        return m(x)

    x = flame.ones(3)
    try:
        np.testing.assert_array_equal(f(x).numpy(), 0.5)
        SCALE = 4.0
        with pytest.warns(flame.RecompileWarning, match=r"global 'SCALE' \(read by _GlobalScale.forward\)"):
            np.testing.assert_array_equal(f(x).numpy(), 4.0)
    finally:
        SCALE = 0.5


class _Config:
    beta = 0.5


def test_values_reached_through_a_dict_a_list_or_a_config_are_guards():
    cfg, w, opts = {"w": 1.0}, [2.0], _Config()

    @flame.compile
    def f(x):
        return x * cfg["w"] * w[0] * opts.beta

    x = flame.ones(3)
    np.testing.assert_array_equal(f(x).numpy(), 1.0)
    f(x)
    assert f.stats().traces == 1
    cfg["w"] = 3.0
    with pytest.warns(flame.RecompileWarning, match=r"closure variable 'cfg'\['w'\]: 1.0 -> 3.0"):
        np.testing.assert_array_equal(f(x).numpy(), 3.0)
    w[0] = 4.0
    with pytest.warns(flame.RecompileWarning, match=r"closure variable 'w'\[0\]: 2.0 -> 4.0"):
        np.testing.assert_array_equal(f(x).numpy(), 6.0)
    opts.beta = 1.0
    with pytest.warns(flame.RecompileWarning, match=r"closure variable 'opts'.beta: 0.5 -> 1.0"):
        np.testing.assert_array_equal(f(x).numpy(), 12.0)
    cfg["other"] = 7  # an entry the body never read changes nothing
    f(x)
    assert f.stats().traces == 4


class _Trainer:
    def __init__(self):
        self.beta = 1.0
        self.step = flame.compile(self._step)

    def weight(self, x):
        return x * self.beta

    def _step(self, x):
        return self.weight(x) + 1.0


def test_an_attribute_a_compiled_method_or_a_method_it_calls_reads_is_a_guard():
    t = _Trainer()
    x = flame.ones(2)
    np.testing.assert_array_equal(t.step(x).numpy(), 2.0)
    t.beta = 3.0
    with pytest.warns(flame.RecompileWarning, match=r"argument 'self'.beta \(read by _Trainer.weight\): 1.0 -> 3.0"):
        np.testing.assert_array_equal(t.step(x).numpy(), 4.0)

    helper = _Trainer()

    @flame.compile
    def g(x):
        return helper.weight(x)

    np.testing.assert_array_equal(g(x).numpy(), 1.0)
    helper.beta = 5.0
    with pytest.warns(flame.RecompileWarning, match=r"'self'.beta \(read by _Trainer.weight\): 1.0 -> 5.0"):
        np.testing.assert_array_equal(g(x).numpy(), 5.0)


def test_an_entry_the_body_stores_into_is_its_output_not_a_guard():
    stats = {"calls": 0}

    @flame.compile
    def f(x):
        stats["calls"] = 1
        return x * 2.0

    x = flame.ones(2)
    f(x)
    stats["calls"] = 5
    f(x)
    assert f.stats().traces == 1


WEIGHTS = None


def test_another_tensor_or_object_bound_to_a_name_the_body_reads_is_a_guard():
    global WEIGHTS
    WEIGHTS, box = flame.ones(3), {"w": flame.ones(3)}

    @flame.compile
    def f(x):
        return x * WEIGHTS * box["w"]

    x = flame.ones(3)
    try:
        np.testing.assert_array_equal(f(x).numpy(), 1.0)
        f(x)
        assert f.stats().traces == 1
        WEIGHTS = flame.full((3,), 5.0)
        with pytest.warns(flame.RecompileWarning, match=r"global 'WEIGHTS': a Tensor -> another Tensor"):
            np.testing.assert_array_equal(f(x).numpy(), 5.0)
        box["w"] = flame.full((3,), 2.0)
        with pytest.warns(flame.RecompileWarning, match=r"closure variable 'box'\['w'\]: a Tensor -> another Tensor"):
            np.testing.assert_array_equal(f(x).numpy(), 10.0)
        box["w"].mul_(3.0)  # the same tensor, updated in place: read at every call, no re-trace
        np.testing.assert_array_equal(f(x).numpy(), 30.0)
        assert f.stats().traces == 3
    finally:
        WEIGHTS = None


BANK: list = []


class _Mixer:
    def __init__(self):
        self.scales = [1.0]

    def run(self, x):
        return sum(x * a for a in self.scales).sum()


def test_the_items_of_a_list_the_body_iterates_are_guards():
    """A list iterated by the body (a global of tensors, a dict's entry, a trainer's attribute; a dict's
    items()): an item appended, removed or replaced between calls re-traces, as torch.compile's guards on
    a list's length and items do, instead of replaying the loop over the old items; the same items replay."""
    cfg = {"ws": [1.0, 2.0]}

    def bank_sum(x):
        s = x.sum() * 0
        for t in BANK:
            s = s + (x * t).sum()
        return s

    def weighted(x):
        return sum(w * x for w in cfg["ws"]).sum()

    def by_name(x):
        return sum(w * x for _, w in cfg["named"].items()).sum()

    cfg["named"] = {"a": 1.0}
    mixer = _Mixer()
    cases = [
        (by_name, lambda: cfg["named"].__setitem__("b", 2.0), lambda: cfg["named"].__setitem__("a", 3.0),
         r"the items of closure variable 'cfg'\['named'\]: (2 items -> 4|item 1: 1.0 -> 3.0)"),
        (bank_sum, lambda: BANK.append(flame.full((3,), 2.0)), lambda: BANK.__setitem__(0, flame.full((3,), 10.0)),
         r"the items of global 'BANK': (1 items -> 2|item 0: a Tensor -> another Tensor)"),
        (weighted, lambda: cfg["ws"].append(5.0), lambda: cfg["ws"].__setitem__(0, -1.0),
         r"the items of closure variable 'cfg'\['ws'\]: (2 items -> 3|item 0: 1.0 -> -1.0)"),
        (mixer.run, lambda: mixer.scales.append(2.0), lambda: mixer.scales.pop(0),
         r"the items of argument 'self'.scales: (1 items -> 2|2 items -> 1)"),
    ]
    BANK[:] = [flame.ones(3)]
    x = flame.ones(3)
    for fn, grow, change, message in cases:
        f = flame.compile(fn)
        for edit in (None, grow, change):
            if edit is not None:
                edit()
                with pytest.warns(flame.RecompileWarning, match=message):
                    got = f(x)
            else:
                got = f(x)
            np.testing.assert_allclose(got.numpy(), fn(x).numpy())
        f(x)
        assert f.stats().traces == 3
