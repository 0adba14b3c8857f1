"""nn.Buffer as torch's: assigning one to a Module attribute registers it as a buffer (persistent or
not), replacing it with a plain tensor keeps it a buffer with its flag, isinstance sees the mark, and
a compiled step updates it in place like any buffer."""

from __future__ import annotations

import numpy as np
import pytest

import flame

torch = pytest.importorskip("torch")


def _summary(lib):
    m = lib.nn.Module()
    b = lib.nn.Buffer(lib.ones(2), persistent=False)
    m.x, m.y = b, lib.nn.Buffer(lib.zeros(1))
    first = (sorted(dict(m.named_buffers())), list(m.state_dict()), m.x is b, isinstance(m.x, lib.nn.Buffer),
             isinstance(lib.ones(1), lib.nn.Buffer), type(m.x).__name__)
    m.x = lib.full((2,), 3.0)
    g = lib.nn.Buffer(lib.ones(2, requires_grad=True))
    return first, (sorted(dict(m.named_buffers())), list(m.state_dict())), (g.requires_grad, g.is_leaf)


def test_buffer_registers_as_torch():
    assert _summary(flame) == _summary(torch)


def test_a_compiled_step_updates_a_buffer_set_by_assignment():
    class Counter(flame.nn.Module):
        def __init__(self):
            super().__init__()
            self.seen = flame.nn.Buffer(flame.zeros(()))

        def forward(self, x):
            self.seen += x.shape[0]
            return x * 2

    m = Counter()
    step = flame.compile(lambda x: m(x).sum())
    for _ in range(3):
        step(flame.ones(4))
    np.testing.assert_array_equal(m.seen.numpy(), 12.0)
    assert "seen" in m.state_dict()
