import numpy as np
import torch

import flame


def _train(lib, compile_fn):
    w = lib.nn.Parameter(lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64))

    def step(x):
        loss = (x * w).sum()
        loss.backward()
        w.data.add_(w.grad, alpha=-0.1)
        w.grad = None
        return loss

    step = compile_fn(step)
    losses = [step(lib.ones(n, 3, dtype=lib.float64) * (n + 1)).item() for n in (4, 2, 4)]
    return losses, np.array(w.detach().tolist())


def test_a_data_update_traced_again_at_a_new_size_reads_only_its_own_trace():
    """A step updating a parameter through .data (an in-place op into a view of it) traced again at a new
    batch size: the new trace does not read the earlier trace's results (it raised 'a tensor from another
    trace')."""
    got = _train(flame, flame.compile)
    want = _train(torch, lambda f: f)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-12)
