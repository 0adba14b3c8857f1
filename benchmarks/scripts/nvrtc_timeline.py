"""When a cold compile's kernels are handed to NVRTC, when its compile processes start, and how long each
compile takes, on a GPU host: each named `flame bench` case at its full sizes is compiled once in this
process with an empty temporary FLAME_CACHE_DIR (as the suite's "compile cold" column), and the script
prints the compile's stages, then every compile a worker process ran (seconds since the script
started: asked -> answered, whether it was that worker's first, the source's length, when the worker
started).

    PYTHONPATH=. python3 -m benchmarks.scripts.nvrtc_timeline gpt_train [unet_train ...] [--all]

Without --all only the summary and the first 30 compiles are printed. A worker's first compile pays
for its interpreter, NVRTC's libraries and NVRTC's first program (codegen/nvrtc_pool.py).
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time

from flame.codegen import nvrtc_pool

T0 = time.perf_counter()
_events: list[tuple] = []
_lock = threading.Lock()


def _now() -> float:
    return time.perf_counter() - T0


def _instrument() -> None:
    """Record every worker's start and every compile it answers (wrapping nvrtc_pool._Worker)."""
    init, call = nvrtc_pool._Worker.__init__, nvrtc_pool._Worker.call

    def started(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.started = _now()

    def answered(self, request, timeout):
        asked, first = _now(), not getattr(self, "used", False)
        self.used = True
        try:
            return call(self, request, timeout)
        finally:
            with _lock:
                _events.append((asked, _now(), first, len(request[0]), self.started))

    nvrtc_pool._Worker.__init__, nvrtc_pool._Worker.call = started, answered


def main(argv: list[str]) -> None:
    _instrument()
    from benchmarks.scripts.compile_profile import _bound, compile_once
    from flame.bench.suite import _empty_loaded_kernels, _forget_cudnn_graphs
    from flame.bench.table import CASES

    show_all = "--all" in argv
    for name in [a for a in argv if not a.startswith("--")]:
        case = next(c for c in CASES if c.name == name)
        call, data = _bound(case, case.sizes(False))
        with tempfile.TemporaryDirectory(prefix="flame-timeline-") as folder:
            os.environ["FLAME_CACHE_DIR"] = folder
            _forget_cudnn_graphs()
            with _lock:
                _events.clear()
            start = _now()
            with _empty_loaded_kernels():
                r = compile_once(call, data)
            end = _now()
        stages = ", ".join(f"{k} {v:.2f}" for k, v in r["stages"].items() if v >= 0.005)
        print(f"{name}: compiled from {start:.2f} to {end:.2f} s ({end - start:.2f} s): {stages}")
        with _lock:
            calls = sorted(e for e in _events if e[0] >= start)
        first = sorted(b - a for a, b, f, _, _ in calls if f)
        later = sorted(b - a for a, b, f, _, _ in calls if not f)
        for label, xs in (("a worker's first compile", first), ("later compiles", later)):
            if xs:
                print(f"  {label}: {len(xs)}, median {xs[len(xs) // 2]:.2f} s, longest {xs[-1]:.2f} s")
        if calls:
            print(f"  last answer at {max(b for _, b, _, _, _ in calls):.2f} s")
        for asked, answered, is_first, size, born in calls if show_all else calls[:30]:
            print(f"    {asked:6.2f} -> {answered:6.2f}  {'first' if is_first else '     '}  {size:7d} chars  "
                  f"worker started {born:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
