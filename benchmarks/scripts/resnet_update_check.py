"""One SGD step of resnet_block_train at chosen sizes: the relative error of every checked state change
(b0.conva, the last convb, fc.w, the running statistics) of flame against torch eager in the case's
dtype and against torch in f64 from the same rounded inputs; with --reference, also flame on the
current device against flame's NumPy reference executor (same plan, same inputs), which separates a
kernel's fault from the graph's math. Inputs: NumPy, seed --seed (the suite draws CuPy's on a GPU).

    python3 -m benchmarks.scripts.resnet_update_check [--batch 64 --hw 64 --c 128 --blocks 4]
        [--dtype bf16] [--seed 0] [--no-f64] [--reference] [--torch-device cpu]

On a 2-core CPU the full size takes ~2 min for flame (reference), ~2 min for torch f64.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from flame.bench.cases_conv import resnet_state_names
from flame.bench.run import select
from flame.bench.spec import as_xp, convert, generate, rel_error
from flame.bench.suite import wrapper

(CASE,) = select("resnet_block_train")


def _host(a) -> np.ndarray:
    """A NumPy copy of an array that may live on the GPU (CuPy)."""
    return a.get() if hasattr(a, "get") else np.array(a)


def _step(framework: str, mode: str, s: dict, spec: dict, arrays: dict, torch_dev: str, f64: bool = False):
    """(loss, [state change per checked array]) of one step, as f64 NumPy."""
    a = {n: convert(framework, arrays[n], i.dtype, i.state, torch_dev) for n, i in spec.items()}
    if f64:
        a = {n: (t.double() if t.is_floating_point() else t) for n, t in a.items()}
    make = CASE.torch if framework == "torch" else CASE.flame
    bound = make(dict(s, dtype="f64") if f64 else s, a, wrapper(framework, mode))
    data = [a[n] for n, i in spec.items() if not i.state]

    def state():
        return [
            _host(as_xp(p, np, copy=True)).astype(np.float64) if not f64 else p.detach().cpu().numpy().copy()
            for p in bound.state()
        ]

    before, t0 = state(), time.perf_counter()
    out = bound.call(*data)
    after = state()
    print(f"{framework} {mode}{' f64' if f64 else ''}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    loss = float(out) if f64 else float(_host(as_xp(out, np)))
    return loss, [x - y for x, y in zip(after, before)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, default in (("batch", 64), ("hw", 64), ("c", 128), ("blocks", 4), ("seed", 0)):
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--no-f64", action="store_true")
    ap.add_argument("--reference", action="store_true")
    ap.add_argument("--torch-device", default="cpu")
    args = ap.parse_args(argv)
    s = {"batch": args.batch, "hw": args.hw, "c": args.c, "blocks": args.blocks, "dtype": args.dtype}
    spec = CASE.inputs(s)
    arrays = generate(spec, np, args.seed)
    names = resnet_state_names(s)
    runs = {
        "flame": _step("flame", "compiled", s, spec, arrays, args.torch_device),
        "torch": _step("torch", "eager", s, spec, arrays, args.torch_device),
    }
    if not args.no_f64:
        runs["f64"] = _step("torch", "eager", s, spec, arrays, args.torch_device, f64=True)
    if args.reference:
        import flame

        flame.set_device("reference")
        runs["flame-ref"] = _step("flame", "compiled", s, spec, arrays, args.torch_device)
    print("loss: " + "  ".join(f"{k} {v[0]:.6f}" for k, v in runs.items()))
    pairs = [("flame", k) for k in runs if k != "flame"] + ([("torch", "f64")] if "f64" in runs else [])
    print(f"{'state':<14}" + "".join(f"{a + '/' + b:>18}" for a, b in pairs))
    for k, n in enumerate(names):
        errs = [rel_error([runs[a][1][k]], [runs[b][1][k]], np) for a, b in pairs]
        print(f"{n:<14}" + "".join(f"{e:>18.3g}" for e in errs))


if __name__ == "__main__":
    main()
