"""Your own CUDA code as flame ops, inside a compiled training step.

    python3 examples/custom_op.py [--steps 60]

Two ops of the user's own CUDA code:
- `leaky_gate(x, y) = x if y > 0 else 0.2 x`, one CUDA expression (flame.cuda.elementwise): it fuses
  with the elementwise ops around it into one kernel, and its backward is written with flame ops;
- `squared_relu(x) = relu(x)^2`, a raw kernel (flame.cuda.kernel) with its own grid, whose backward is
  another raw kernel, `squared_relu_backward(g, x) = 2 g relu(x)`.
Each comes with its NumPy reference, which the reference executor runs (so this runs on a CPU too; on a
GPU the CUDA code runs, compiled by NVRTC). The script checks both gradients against central
differences, trains a small gated MLP with a compiled step, and prints the `flame explain` lines of the
step's user kernels. Exits with status 1, saying so, if a check fails or the loss does not fall."""

from __future__ import annotations

import argparse
import sys

import numpy as np

import flame
import flame.nn as nn
import flame.optim as optim
from flame.debug import observe
from flame.explain import explain_plan

leaky_gate = flame.cuda.elementwise(
    "x * (y > 0.f ? 1.f : 0.2f)",
    name="leaky_gate",
    reference=lambda x, y: x * np.where(y > 0, 1.0, 0.2).astype(x.dtype),
    vjp=lambda grad, x, y, out: (flame.where(y > 0, grad, grad * 0.2), None),  # no gradient for the gate
)

# the backward of squared_relu, a kernel of its own: one thread per element, grid-stride
squared_relu_backward = flame.cuda.kernel(
    """
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < out_numel;
         i += (long long)gridDim.x * blockDim.x)
      out[i] = x[i] > x_t(0) ? x_t(2) * g[i] * x[i] : x_t(0);
    """,
    name="squared_relu_backward",
    reference=lambda g, x: np.where(x > 0, 2 * g * x, 0).astype(x.dtype),
)

squared_relu = flame.cuda.kernel(
    """
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < out_numel;
         i += (long long)gridDim.x * blockDim.x) {
      const x_t v = x[i] > x_t(0) ? x[i] : x_t(0);
      out[i] = v * v;
    }
    """,
    name="squared_relu",
    reference=lambda x: (np.maximum(x, 0) ** 2).astype(x.dtype),
    grid=lambda x, out: (min(-(-out.numel // 256), 1024), 256),
    vjp=lambda grad, x, out: (squared_relu_backward(grad, x),),
)


def gradcheck(fn, *arrays, eps: float = 1e-6, tol: float = 1e-6) -> float:
    """The largest gap between flame's gradient of sum(fn(*inputs) * c) (a fixed random c) and central
    differences of it, over every input, in float64; raises AssertionError beyond `tol`."""
    arrays = [np.asarray(a, np.float64) for a in arrays]
    c = np.random.default_rng(1).standard_normal(np.shape(fn(*map(flame.tensor, arrays)).numpy()))

    def loss(*xs):
        return float((fn(*map(flame.tensor, xs)).numpy() * c).sum())

    xs = [flame.tensor(a, requires_grad=True) for a in arrays]
    (fn(*xs) * flame.tensor(c)).sum().backward()
    worst = 0.0
    for k, a in enumerate(arrays):
        numeric = np.zeros_like(a)
        for pos in np.ndindex(*a.shape):
            hi, lo = [x.copy() for x in arrays], [x.copy() for x in arrays]
            hi[k][pos] += eps
            lo[k][pos] -= eps
            numeric[pos] = (loss(*hi) - loss(*lo)) / (2 * eps)
        got = np.zeros_like(a) if xs[k].grad is None else xs[k].grad.numpy()  # None: no gradient (zero)
        worst = max(worst, float(np.abs(got - numeric).max()))
    assert worst <= tol, f"gradient check failed: {worst:.3g} > {tol}"
    return worst


class GatedMLP(nn.Module):
    """x -> squared_relu(leaky_gate(W1 x, V1 x) * s) -> W2: a gated hidden layer of the user's kernels, with a
    learned scale per unit (which the leaky gate's kernel computes too: the two fuse)."""

    def __init__(self, d_in: int, hidden: int, d_out: int, gen):
        super().__init__()
        self.up = nn.Linear(d_in, hidden, generator=gen)
        self.gate = nn.Linear(d_in, hidden, generator=gen)
        self.down = nn.Linear(hidden, d_out, generator=gen)
        self.scale = nn.Parameter(flame.ones(hidden))

    def forward(self, x):
        return self.down(squared_relu(leaky_gate(self.up(x), self.gate(x)) * self.scale))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    print(f"device: {flame.get_device()}", flush=True)

    rng = np.random.default_rng(args.seed)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    print(f"gradcheck leaky_gate: max gap {gradcheck(leaky_gate, a, b):.2e}")
    print(f"gradcheck squared_relu: max gap {gradcheck(lambda x: squared_relu(x * 1.5), a):.2e}")

    # a teacher network labels random points; the student learns to match it
    x_all = rng.standard_normal((512, 16)).astype(np.float32)
    y_all = (x_all @ rng.standard_normal((16, 4))).argmax(1).astype(np.int64)
    model = GatedMLP(16, 64, 4, flame.Generator(args.seed))
    opt = optim.AdamW(model.parameters(), lr=3e-3)
    loss_fn = nn.CrossEntropyLoss()

    @flame.compile
    def train_step(x, y):
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    def batch():
        idx = rng.integers(0, len(x_all), 64)
        return flame.tensor(x_all[idx]), flame.tensor(y_all[idx])

    records = []
    with observe(records.append):  # the first call compiles the step: keep what it compiled
        losses = [train_step(*batch()).item()]
    losses += [train_step(*batch()).item() for _ in range(args.steps - 1)]
    print(
        f"loss {np.mean(losses[:5]):.4f} -> {np.mean(losses[-5:]):.4f} over {args.steps} compiled steps "
        f"({train_step.stats().traces} trace)"
    )
    report = explain_plan("train_step", records[0].graph, records[0].plan)
    print("flame explain, the launches of the user's ops:")
    for line in report.splitlines():
        if line.lstrip().startswith("[") and "user_" in line:
            print(line)
    if not np.mean(losses[-5:]) < 0.7 * np.mean(losses[:5]):
        print("the loss did not fall by 30%: exit status 1", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
