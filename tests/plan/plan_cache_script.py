"""A process of the plan cache tests (tests/plan/test_plan_cache.py): trains a small model (LayerNorm,
GELU MLP, cross-entropy, AdamW) with @flame.compile for one step at each batch size given, and prints
one JSON line: each step's loss (as hex) and a digest of the parameters' bytes, how often the passes
and NVRTC ran, and what the plan cache did. FLAME_CACHE_DIR / FLAME_CACHE_SIZE come from the
environment.

    python -m tests.plan.plan_cache_script 8 5 11 [--dynamic]
"""

from __future__ import annotations

import hashlib
import json
import re
import sys

import numpy as np

import flame
import flame.nn as nn
import flame.nn.functional as F
from flame import compiler
from flame.codegen import nvrtc
from flame.plan import cache

RUNS = {"passes": 0, "nvrtc": 0}
COMPILED: list[str] = []  # the kernel names NVRTC compiled (said when a test expects none)


def _counting(module, name: str, what: str) -> None:
    inner = getattr(module, name)

    def counted(*a, **kw):
        RUNS[what] += 1
        if what == "nvrtc":
            COMPILED.append(re.findall(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s*)?(\w+)", a[0]))
        return inner(*a, **kw)

    setattr(module, name, counted)


def main(argv: list[str]) -> None:
    dynamic = True if "--dynamic" in argv else None
    sizes = [int(a) for a in argv if not a.startswith("--")]
    _counting(compiler, "run_pipeline", "passes")
    _counting(nvrtc, "_compile", "nvrtc")
    flame.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 24), nn.LayerNorm(24), nn.GELU(), nn.Linear(24, 5))
    opt = flame.optim.AdamW(model.parameters(), lr=1e-2)

    def train_step(x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    step = flame.compile(train_step, dynamic=dynamic)
    rng = np.random.default_rng(1)
    losses = []
    for n in sizes:
        x = flame.tensor(rng.standard_normal((n, 12)).astype(np.float32))
        y = flame.tensor(rng.integers(0, 5, n))
        losses.append(step(x, y).item().hex())
    params = hashlib.sha256(b"".join(p.numpy().tobytes() for p in model.parameters())).hexdigest()
    c = cache.COUNTS
    print(
        json.dumps(
            {
                "losses": losses,
                "params": params,
                "runs": RUNS,
                "compiled": COMPILED,
                "cache": {"hits": c.hits, "misses": c.misses, "stored": c.stored, "rebuilt": c.rebuilt},
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1:])
