"""Plain values a compiled function reads from other places than its globals and closure variables are guards
too: an attribute of a config module of the user's (`config.LR`), its default arguments, and a
functools.partial's keyword arguments and the globals its function reads. A call after one changed traces
again, saying what changed, and gives what eager flame gives."""

from __future__ import annotations

import functools
import importlib

import numpy as np
import pytest

import flame


def _same_as_eager_after(f, fn, change, match):
    x = flame.ones(3)
    np.testing.assert_array_equal(f(x).numpy(), fn(x).numpy())
    change()
    with pytest.warns(flame.RecompileWarning, match=match):
        out = f(x)
    np.testing.assert_array_equal(out.numpy(), fn(x).numpy())
    np.testing.assert_array_equal(f(x).numpy(), fn(x).numpy())
    assert f.stats().traces == 2


def test_an_attribute_of_a_config_module_is_a_guard(tmp_path, monkeypatch):
    (tmp_path / "flame_test_hparams.py").write_text("LR = 2.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    hparams = importlib.import_module("flame_test_hparams")

    def step(x):
        return x * hparams.LR

    try:
        _same_as_eager_after(flame.compile(step), step, lambda: setattr(hparams, "LR", 5.0),
                             r"closure variable 'hparams'.LR: 2.0 -> 5.0")
    finally:
        monkeypatch.delitem(__import__("sys").modules, "flame_test_hparams")


def test_a_default_argument_is_a_guard():
    def step(x, scale=2.0):
        return x * scale

    def change():
        step.__defaults__ = (3.0,)

    _same_as_eager_after(flame.compile(step), step, change, r"default arguments: \(2.0,\) -> \(3.0,\)")


def test_a_keyword_only_default_argument_is_a_guard():
    def step(x, *, scale=2.0):
        return x * scale

    _same_as_eager_after(flame.compile(step), step, lambda: step.__kwdefaults__.update(scale=4.0),
                         r"keyword-only default arguments: .*2.0.* -> .*4.0")


def test_a_partials_keyword_argument_is_a_guard():
    def scaled(x, scale):
        return x * scale

    step = functools.partial(scaled, scale=2.0)
    _same_as_eager_after(flame.compile(step), step, lambda: step.keywords.update(scale=7.0),
                         r"keyword arguments of functools.partial .*2.0.* -> .*7.0")


SCALE = 2.0


def test_a_global_a_partials_function_reads_is_a_guard():
    global SCALE

    def scaled(x, bias):
        return x * SCALE + bias

    step = functools.partial(scaled, bias=0.0)

    def change():
        global SCALE
        SCALE = 3.0

    try:
        _same_as_eager_after(flame.compile(step), step, change, r"global 'SCALE': 2.0 -> 3.0")
    finally:
        SCALE = 2.0
