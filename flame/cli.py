"""The `flame` command: dump, explain, viz, profile, check, cache, bench. Every subcommand but cache and
bench runs a user script with a hook on @flame.compile, then reports on what was compiled (bench runs
the benchmark suite, flame.bench). Errors are one line, no traceback: a bad command line exits 2 (as
argparse does), a failure while running exits 1."""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import traceback

from flame import debug
from flame.errors import FlameError


class CliError(Exception):
    """A user-facing error: printed as one line, exit code 1."""


def run_script(script: str, argv: list[str], on_record=None) -> list[debug.CompileRecord]:
    """Run a user script as __main__ with argv; return what it compiled (on_record(record) is also
    called as each function compiles, before it first runs). Its own exceptions become a CliError
    naming the script line that raised."""
    if not os.path.isfile(script):
        raise CliError(f"no such script: {script}")
    records: list[debug.CompileRecord] = []

    def seen(record: debug.CompileRecord) -> None:
        records.append(record)
        if on_record is not None:
            on_record(record)
    old_argv, old_path = sys.argv[:], sys.path[:]
    sys.argv = [script, *argv]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        with debug.observe(seen):
            runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code not in (0, None):
            raise CliError(f"{script} exited with status {e.code}") from None
    except Exception as e:
        frames = [f for f in traceback.extract_tb(e.__traceback__)
                  if os.path.abspath(f.filename) == os.path.abspath(script)]
        where = f" (at {os.path.basename(script)}:{frames[-1].lineno})" if frames else ""
        first = str(e).splitlines()[0] if str(e) else ""
        raise CliError(f"{script} raised {type(e).__name__}: {first}{where}") from None
    finally:
        sys.argv, sys.path[:] = old_argv, old_path
    if not records:
        raise CliError(f"{script} compiled nothing: decorate a function with @flame.compile and call it")
    return records


def cmd_dump(a) -> int:
    stages = None if a.stage is None else {a.stage}
    os.environ["FLAME_DUMP"] = a.out
    try:
        records = run_script(a.script, a.args)
    finally:
        del os.environ["FLAME_DUMP"]
    for r in records:
        names = [s for s, _, _ in r.stages]
        if stages and not stages & set(names):
            raise CliError(f"unknown stage {a.stage!r}; stages are: {', '.join(names)}")
    print(f"dumped {len(records)} compiled function(s) to {a.out}")
    return 0


def cmd_explain(a) -> int:
    from flame.explain import explain_plan

    for title, r in debug.titled(_named(run_script(a.script, a.args), a.function)):
        print(explain_plan(title, r.graph, r.plan))
    return 0


def _named(records: list[debug.CompileRecord], name: str | None) -> list[debug.CompileRecord]:
    """The records of the compiled function `name` (all of them when name is None)."""
    if name is None:
        return records
    mine = [r for r in records if r.name == name]
    if not mine:
        names = ", ".join(dict.fromkeys(r.name for r in records))
        raise CliError(f"no compiled function named {name!r}; the script compiled: {names}")
    return mine


def cmd_viz(a) -> int:
    from flame.viz import write_viz

    folder = os.path.dirname(os.path.abspath(a.output))
    if not os.path.isdir(folder):
        raise CliError(f"cannot write {a.output}: directory {folder} does not exist")
    records = _named(run_script(a.script, a.args), a.function)
    for line in write_viz(debug.titled(records), a.output, ops=a.ops):
        print(line)
    return 0


def cmd_profile(a) -> int:
    from flame.runtime.device import get_device
    from flame.runtime.profile import profile_records, profile_records_reference

    records = _named(run_script(a.script, a.args), a.function)
    if get_device() == "cuda":
        print(profile_records(debug.titled(records), repeat=a.repeat))
    else:
        print(profile_records_reference(debug.titled(records), repeat=a.repeat))
    return 0


def cmd_check(a) -> int:
    from flame.runtime.check import NanWatch, check_records
    from flame.runtime.device import get_device
    from flame.runtime.reference import watch_steps

    watch = NanWatch()
    counted: dict[str, int] = {}

    def on_record(r: debug.CompileRecord) -> None:  # numbered as debug.titled numbers them afterwards
        counted[r.name] = counted.get(r.name, 0) + 1
        watch.watch(debug.title(r, counted[r.name]), r.plan)

    if a.nan:
        with watch_steps(watch):
            records = run_script(a.script, a.args, on_record)
    else:
        records = run_script(a.script, a.args)
    gpu = get_device() == "cuda"
    report, ok = check_records(debug.titled(records), rtol=a.rtol, atol=a.atol, nan_watch=a.nan, gpu=gpu,
                               watch=watch if a.nan and not gpu else None)
    print(report)
    return 0 if ok else 2


def cmd_cache(a) -> int:
    from flame.codegen import disk_cache, nvrtc

    if a.action == "clear":
        n = nvrtc.cache_clear()
        plans = disk_cache.cache_clear()
        graphs = disk_cache.cache_clear(disk_cache.CUDNN_SUFFIX)
        templates = disk_cache.cache_clear(disk_cache.TEMPLATE_SUFFIX)
        print(f"removed {n} cached kernel(s), {plans} cached plan(s), {graphs} cached cuDNN graph(s) and "
              f"{templates} compiled template(s) from {nvrtc.cache_dir()}")
        return 0
    info = nvrtc.cache_info()
    plans = disk_cache.cache_info()
    graphs = disk_cache.cache_info(disk_cache.CUDNN_SUFFIX)
    templates = disk_cache.cache_info(disk_cache.TEMPLATE_SUFFIX)
    limit = (f"{plans['limit']} (FLAME_CACHE_SIZE)" if plans["limit"]
             else "0: the plan and cuDNN graph caches are off (FLAME_CACHE_SIZE)")
    print(f"kernel cache: {info['dir']}\n  entries: {info['entries']}\n  bytes:   {info['bytes']}\n"
          f"plan cache: {plans['dir']}\n  entries: {plans['entries']}\n  bytes:   {plans['bytes']}\n"
          f"cuDNN graph cache: {graphs['dir']}\n  entries: {graphs['entries']}\n  bytes:   {graphs['bytes']}\n"
          f"compiled kernel templates: {templates['dir']}\n  entries: {templates['entries']}\n"
          f"  bytes:   {templates['bytes']}\n"
          f"size limit of all four: {limit}")
    return 0


def cmd_bench(a) -> int:
    from flame.bench.run import run_from_args

    return run_from_args(a)


def _number(ok, what: str, kind=float):
    """An argparse type: a `kind` number for which ok(x) holds, else a usage error (exit 2)."""

    def parse(text: str):
        try:
            x = kind(text)
        except ValueError:
            x = None
        if x is None or x != x or not ok(x):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return x

    parse.__name__ = what  # argparse names the type in its messages
    return parse


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flame", description="flame's debug tools: see what the compiler did "
                                "and why.")
    sub = p.add_subparsers(dest="cmd", required=True)

    def script_cmd(name, help_, fn):
        s = sub.add_parser(name, help=help_, description=help_)
        s.add_argument("script", help="a Python script that calls an @flame.compile function")
        s.set_defaults(fn=fn)
        return s

    d = script_cmd("dump", "write the IR after every stage, the plan and the CUDA source of each compiled "
                   "function", cmd_dump)
    d.add_argument("--out", default="flame_dump", help="output directory (default: flame_dump)")
    d.add_argument("--stage", default=None, help="fail unless this stage exists (e.g. traced)")
    e = script_cmd("explain", "one line per kernel (ops, bytes, why the kernel boundary is there), then the "
                   "memory plan; each compiled function headed by its name, trace number and input types",
                   cmd_explain)
    v = script_cmd("viz", "draw each compiled function: kernels and library calls as boxes, repeated "
                   "layers collapsed (Graphviz; an HTML view when Graphviz is missing)", cmd_viz)
    v.add_argument("-o", "--output", default="graph.svg",
                   help="graph.svg, graph.html or graph.dot; with several compiled functions, one file "
                   "per function (graph.NAME.svg) or one HTML page")
    v.add_argument("--ops", action="store_true", help="draw every IR op, kernels as coloured clusters "
                   "(instead of one box per kernel)")
    pr = script_cmd("profile", "per-kernel GPU time, achieved bandwidth and share of the step; without a "
                    "GPU, per-step wall time on the reference executor", cmd_profile)
    pr.add_argument("--repeat", type=_number(lambda x: x >= 1, "an integer >= 1", int), default=20,
                    help="timed runs per step (median)")
    c = script_cmd("check", "run every compiled step on the GPU and the reference; name the first kernel "
                   "whose output diverges (or produces NaN/Inf with --nan). Without a GPU: the reference "
                   "plan executor against the graph interpreter, and the NaN/Inf watch over every call",
                   cmd_check)
    c.add_argument("--rtol", type=_number(lambda x: x >= 0, "a number >= 0"), default=1e-3,
                   help="relative tolerance (default 1e-3); 0 compares with --atol alone, as numpy.allclose does")
    c.add_argument("--atol", type=_number(lambda x: x >= 0, "a number >= 0"), default=1e-4,
                   help="absolute tolerance (default 1e-4)")
    c.add_argument("--nan", action="store_true", help="NaN/Inf watch: name the first kernel producing one")
    for sp in (e, v, pr):
        sp.add_argument("--function", default=None, metavar="NAME",
                        help="only the compiled function NAME (default: every compiled function)")
    k = sub.add_parser("cache", help="size and entries of the kernel, plan and cuDNN graph caches, or clear them",
                       description="size and entries of the kernel, plan and cuDNN graph caches, or clear them")
    k.add_argument("action", choices=["info", "clear"])
    k.set_defaults(fn=cmd_cache)
    b = sub.add_parser("bench", help="the fusion benchmark suite: flame vs PyTorch eager, torch.compile and JAX",
                       description="the fusion benchmark suite: flame vs PyTorch eager, torch.compile and JAX "
                       "(benchmarks/README.md)")
    from flame.bench.run import add_arguments

    add_arguments(b)
    b.set_defaults(fn=cmd_bench)
    return p


def main(argv: list[str] | None = None) -> int:
    # flame's own options may come anywhere; everything else after the script belongs to the script
    args, rest = _parser().parse_known_args(argv)
    args.args = rest
    if rest and args.cmd in ("cache", "bench"):  # these run no script that could take them
        _parser().error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        return args.fn(args)
    except (CliError, FlameError) as e:
        print(f"flame {args.cmd}: error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    except OSError as e:  # an output path that cannot be written, a cache path that is a file, ...
        where = f": {e.filename}" if e.filename else ""
        print(f"flame {args.cmd}: error: {e.strerror or e}{where}", file=sys.stderr)
        return 1
