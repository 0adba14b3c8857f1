"""Where a new process's cold compile goes on the GPU: per `flame bench` case (default gpt_train and
unet_train, full size), one @flame.compile traced, optimised, planned and compiled for the CUDA executor
in an empty temporary FLAME_CACHE_DIR, with the process's kernel table emptied and its built cuDNN graphs
forgotten (what `flame bench`'s "compile cold" column measures), under cProfile: the stages, what the
cuDNN graph cache did (cudnn_cache.COUNTS: graphs built and their seconds), and the top functions by
cumulative and by own time. The process is warmed first by a tiny compiled matmul (CUDA context,
cuBLASLt, NVRTC's first use), so imports and handles a cold compile of a case makes on its own show.

    PYTHONPATH=. python3 -m benchmarks.scripts.cold_compile [case ...] [--no-profile]

--no-profile: the stages' seconds without cProfile's overhead (it slows Python-heavy stages severalfold),
no function tables."""

from __future__ import annotations

import io
import os
import pstats
import sys
import tempfile

import flame
from benchmarks.scripts.compile_profile import _bound, _report, compile_once
from flame.bench.suite import _empty_loaded_kernels, _forget_cudnn_graphs
from flame.bench.table import CASES
from flame.runtime import cudnn_cache


def _top(prof, key: str, n: int) -> str:
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats(key).print_stats(n)
    return out.getvalue()


def main(names: list[str], profile: bool = True) -> None:
    @flame.compile
    def tiny(a, b):
        return (a @ b).relu().sum()

    x = flame.randn(64, 64)
    tiny(x, x)
    for case in CASES:
        if case.name not in names:
            continue
        call, data = _bound(case, case.sizes(False))
        with tempfile.TemporaryDirectory(prefix="flame-cold-") as d:
            os.environ["FLAME_CACHE_DIR"] = d
            _forget_cudnn_graphs()
            with _empty_loaded_kernels():
                r = compile_once(call, data, profile)
            _report(case.name + " cold", r)
            print("cudnn counts", cudnn_cache.COUNTS, flush=True)
            if profile:
                print(_top(r["prof"], "cumulative", 45))
                print(_top(r["prof"], "tottime", 25))


if __name__ == "__main__":
    names = [a for a in sys.argv[1:] if not a.startswith("-")]
    main(names or ["gpt_train", "unet_train"], "--no-profile" not in sys.argv)
