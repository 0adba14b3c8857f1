"""A tiny training script for the CLI tests: a 2-layer MLP, one compiled SGD step, called twice."""

import sys

import numpy as np

import flame
import flame.nn as nn
import flame.nn.functional as F

flame.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
opt = flame.optim.SGD(model.parameters(), lr=0.1)


@flame.compile
def train_step(x, y):
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


rng = np.random.default_rng(0)
x = flame.tensor(rng.standard_normal((32, 8)).astype(np.float32))
y = flame.tensor(rng.integers(0, 4, 32))
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 2):
    loss = train_step(x, y)
print(f"loss {loss.item():.4f}")
