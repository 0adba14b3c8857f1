"""An epoch whose last batch is smaller: what it costs over an epoch of full batches, per
flame.compile(dynamic=...) mode, for the digits MLP of examples/train_mlp.py (64-128-128-10, AdamW,
batch 64: 1437 training digits make 22 full batches and a last one of 29). A benchmark, not a test:

    PYTHONPATH=. python3 -m benchmarks.scripts.last_batch [--epochs 5] [--device cuda]

Per mode it prints the wall time of each epoch (synchronised at its end) and, per epoch, the extra
over the same epoch with the last batch left out (`full`, timed right after). Epoch 1 is where the
smaller size first appears: dynamic=False traces and compiles it, None traces it once and makes the
batch dim dynamic, True instantiates it from the template its first call made; from epoch 2 on every
mode replays a cached plan (and CUDA graph) per size. The target (issue 15) is at most 5 ms extra per
epoch on the GPU. The compiled step's stats() closes each mode's block; a second run with the same
FLAME cache directory shows the cost without NVRTC compiles (kernels come from the disk cache).
Each mode then calls the step at a few sizes it has not seen and prints what the first call at each
cost (for a dynamic dim: the instantiation, i.e. the plan of that size; no passes, and kernels
taking the size as a parameter compile once for all sizes) and how many kernel sources it added."""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import flame
import flame.nn as nn
import flame.optim as optim


def _setup(dynamic, hidden: int, seed: int):
    gen = flame.Generator(seed)
    model = nn.Sequential(nn.Linear(64, hidden, generator=gen), nn.ReLU(),
                          nn.Linear(hidden, hidden, generator=gen), nn.ReLU(),
                          nn.Linear(hidden, 10, generator=gen))
    opt = optim.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-4)
    loss_fn = nn.CrossEntropyLoss()

    @flame.compile(dynamic=dynamic, name=f"step_dynamic_{dynamic}")
    def step(x, y):
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    return step


def _epoch(step, batches) -> float:
    t0 = time.perf_counter()
    loss = None
    for xb, yb in batches:
        loss = step(xb, yb)
    loss.item()  # waits for the device
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--device", choices=flame.runtime.device.DEVICES, default=None)
    ap.add_argument("--modes", default="False,None,True", help="the dynamic= modes to run, in order")
    ap.add_argument("--profile", action="store_true",
                    help="only cProfile the first calls of a dynamic=True step at four new sizes (host time)")
    args = ap.parse_args(argv)
    if args.device:
        flame.set_device(args.device)
    x, y = load_digits(return_X_y=True)
    x_train, _, y_train, _ = train_test_split((x / 16.0).astype(np.float32), y.astype(np.int64), test_size=0.2,
                                              random_state=0, stratify=y)
    bs = args.batch_size
    batches = [(flame.tensor(x_train[i:i + bs]), flame.tensor(y_train[i:i + bs])) for i in range(0, len(x_train), bs)]
    full = [b for b in batches if b[0].shape[0] == bs]
    print(f"device {flame.get_device()}; {len(full)} batches of {bs} and a last one of "
          f"{batches[-1][0].shape[0]}", flush=True)
    warnings.simplefilter("ignore", flame.RecompileWarning)
    if args.profile:
        _profile_new_sizes(_setup(True, args.hidden, 0), full, x_train, y_train)
        return 0
    for dynamic in [{"False": False, "None": None, "True": True}[m] for m in args.modes.split(",")]:
        step = _setup(dynamic, args.hidden, 0)
        # the full-batch trace, compile and CUDA graphs outside the timed epochs: three calls, as a loop
        # makes them (the third replays into a second output slab while `loss` holds the second's)
        _epoch(step, full[:3])
        print(f"dynamic={dynamic}:")
        for e in range(1, args.epochs + 1):
            t_all = _epoch(step, batches)
            t_full = _epoch(step, full)
            print(f"  epoch {e}: {t_all * 1e3:9.2f} ms, full batches only {t_full * 1e3:9.2f} ms, "
                  f"extra {(t_all - t_full) * 1e3:8.2f} ms", flush=True)
        _new_sizes(step, x_train, y_train, (17, 41, 50, 33))
        print("  " + str(step.stats()).replace("\n", "\n  "), flush=True)
    return 0


def _profile_new_sizes(step, full, x_train, y_train) -> None:
    """Where the host time of a first call at a new size goes: cProfile over four such calls (each
    ended by .item()), the 30 functions of most cumulative time."""
    import cProfile
    import pstats

    _epoch(step, full[:3])
    batches = [(flame.tensor(x_train[:n]), flame.tensor(y_train[:n])) for n in (17, 41, 50, 33)]
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    for xb, yb in batches:
        step(xb, yb).item()
    prof.disable()
    print(f"4 first calls at new sizes: {(time.perf_counter() - t0) * 1e3:.2f} ms (under cProfile)")
    pstats.Stats(prof).sort_stats("cumulative").print_stats(30)


def _new_sizes(step, x_train, y_train, sizes) -> None:
    """Call the step at sizes it has not seen: per size, the host time of its first call (the
    instantiation: plan, kernels from the cache, CUDA graph capture, one run) and of the second (a
    replay), and the kernel sources it added (each an NVRTC compile unless the disk cache has it)."""
    for n in sizes:
        xb, yb = flame.tensor(x_train[:n]), flame.tensor(y_train[:n])
        before = step.stats()
        t0 = time.perf_counter()
        step(xb, yb).item()
        t1 = time.perf_counter()
        step(xb, yb).item()
        t2 = time.perf_counter()
        after = step.stats()
        how = ("traced" if after.traces > before.traces else
               f"instantiated in {(after.instantiate_seconds - before.instantiate_seconds) * 1e3:.2f} ms, "
               f"{after.size_kernels - before.size_kernels} new kernel source(s)")
        print(f"  new size {n:3d}: first call {(t1 - t0) * 1e3:8.2f} ms ({how}), second {(t2 - t1) * 1e3:6.2f} ms",
              flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
