"""The default generator is one per device, as PyTorch's: a process that switches executors (the GPU
tests compute their references on the reference executor) draws on the current one's, and
manual_seed reseeds them all. Regression: the one default generator's state tensors, made under the
reference executor, met the CUDA executor (`manual_seed` / `nn.Linear` init raised)."""

from __future__ import annotations

import numpy as np

import flame
from flame.frontend import creation
from flame.runtime import device


def test_manual_seed_reseeds_in_place_and_repeats_draws():
    g = flame.manual_seed(3)
    a = flame.rand(5).numpy()
    assert flame.manual_seed(3) is g  # in place: compiled functions that captured it see the new seed
    np.testing.assert_array_equal(flame.rand(5).numpy(), a)


def test_each_device_gets_its_own_generator(monkeypatch):
    monkeypatch.setattr(creation, "_default", creation._DefaultGenerator())
    flame.manual_seed(7)
    here = creation.default_generator()
    monkeypatch.setattr(device, "get_device", lambda: "other")
    other = creation.default_generator()
    assert other is not here and int(other.seed_tensor.item()) == 7  # made afresh from the last seed
