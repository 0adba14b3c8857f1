"""A small GELU MLP's compiled loss-and-backward step (Linear 32 -> 128, GELU, Linear 128 -> 32): its
backward kernel recomputes the GELU output beside the GELU's gradient, the case the in-place and
memory-report tests look at."""

import numpy as np

import flame
import flame.nn as nn


def gelu_mlp_step():
    """(compiled step, an input batch [64, 32])."""
    flame.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 32))

    @flame.compile
    def step(x):
        loss = (model(x) ** 2).mean()
        loss.backward()
        return loss

    return step, flame.tensor(np.ones((64, 32), np.float32))
