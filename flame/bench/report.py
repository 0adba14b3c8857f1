"""Turning a run into files: results.json (every figure), results.md (the tables) and, when
matplotlib imports, relative.png (each framework's time over the best peer's, per case).

Derived figures use the MINIMUM bytes and flops of each case (inputs read once, outputs written
once) and the two ceilings measured at the start of the same run, so "% of copy" says how close a
memory-bound case came to the device's own copy bandwidth.
"""

from __future__ import annotations

import json
import math
import os

REFERENCE_NOTE = ("**FUNCTIONAL CHECK on the NumPy reference executor, not a measurement.** No GPU was used; the "
                  "times below only show that the harness runs end to end and mean nothing about speed.")


def derive(case: dict, ceilings: dict) -> None:
    """Add floor, achieved rates and percentages of the ceilings, best peer and speed-up to a case."""
    copy = (ceilings.get("copy") or {}).get("gbs")
    mm = (ceilings.get("matmul") or {}).get("tflops")
    byte_floor = case["min_bytes"] / (copy * 1e6) if copy else None
    flop_floor = case["min_flops"] / (mm * 1e9) if mm and case["min_flops"] else None
    if byte_floor is not None or flop_floor is not None:
        case["floor_ms"] = max(x for x in (byte_floor, flop_floor) if x is not None)
        case["bound"] = "compute" if (flop_floor or 0) > (byte_floor or 0) else "memory"
    else:
        case["floor_ms"], case["bound"] = None, "compute" if case["min_flops"] else "memory"
    for res in [case["flame"], *case["peers"].values()]:
        ms = res.get("median_ms")
        if not ms:
            continue
        res["gbs"] = case["min_bytes"] / ms / 1e6
        res["pct_copy"] = 100 * res["gbs"] / copy if copy else None
        if case["min_flops"]:
            res["tflops"] = case["min_flops"] / ms / 1e9
            res["pct_matmul"] = 100 * res["tflops"] / mm if mm else None
        if res.get("b2b_ms"):  # against the copy ceiling measured back to back too, when it was
            copy_b2b = (ceilings.get("copy") or {}).get("gbs_b2b") or copy
            res["pct_copy_b2b"] = 100 * case["min_bytes"] / res["b2b_ms"] / 1e6 / copy_b2b if copy_b2b else None
            if case["min_flops"]:
                res["pct_matmul_b2b"] = 100 * case["min_flops"] / res["b2b_ms"] / 1e9 / mm if mm else None
    for key, suffix in (("median_ms", ""), ("b2b_ms", "_b2b")):
        timed = {n: p[key] for n, p in case["peers"].items() if p.get(key)}
        case["best_peer" + suffix] = min(timed, key=timed.get) if timed else None
        fl = case["flame"].get(key)
        case["speedup_vs_best_peer" + suffix] = timed[case["best_peer" + suffix]] / fl if timed and fl else None


def _ms(x) -> str:
    if x is None:
        return "—"
    return f"{x:.3g}" if x < 100 else f"{x:.0f}"


def _peer_cell(p: dict | None) -> str:
    if p is None:
        return "—"
    if p.get("median_ms"):
        compiled = f" (compile {p['compile_s']:.3g} s)" if p.get("compile_s") is not None else ""
        return _ms(p["median_ms"]) + compiled
    return str(p.get("status", "n/a"))


def _flame_cells(case: dict, mode: str) -> list[str]:
    f = case["flame"]
    kernels = str(f.get("kernels_per_call", "—"))
    if f["status"] == "WRONG":
        errs = "; ".join(f"{k} {f[key]:.2e}" for k, key in (("outputs", "rel_error"), ("updates", "rel_error_state"))
                         if f.get(key) is not None)
        return [f"WRONG (rel. error {errs})", "—", "—", kernels]
    if f["status"] == "FAILED":
        return [f"FAILED: {f.get('error', '')}", "—", "—", kernels]
    ms = _ms(f.get("median_ms")) + (" (unchecked)" if f["status"] == "UNCHECKED" else "")
    if mode == "reference":
        return [ms, "—", "—", kernels]  # NumPy wall clock: a rate would suggest a measurement
    if case["bound"] == "compute" and f.get("tflops") is not None:
        rate = f"{f['tflops']:.3g} TFLOP/s"
        pct = f"{f['pct_matmul']:.0f}% matmul" if f.get("pct_matmul") is not None else "—"
    else:
        rate = f"{f['gbs']:.3g} GB/s" if f.get("gbs") is not None else "—"
        pct = f"{f['pct_copy']:.0f}% copy" if f.get("pct_copy") is not None else "—"
    return [ms, rate, pct, kernels]


def _b2b_table(cases: list[dict], peers: list[str]) -> list[str]:
    """Calls issued back to back (no synchronisation between calls): GPU-bound time per call."""
    out = ["Back to back — the same calls issued without a synchronisation between them (5 batches after an "
           "untimed one, CUDA events around each batch, issued after one untimed call so the batch starts on a "
           "busy GPU; JAX: wall clock to the last result), ms per call, median batch; % of the "
           "copy ceiling measured back to back as well. Host dispatch hides behind the previous call's GPU work "
           "here, as in a training loop; the table above times each call alone, dispatch included.", "",
           "| case | flame ms | % of ceiling | " + " | ".join(f"{p} ms" for p in peers) + " | speed-up vs best peer |",
           "|" + "---|" * (4 + len(peers))]
    for c in cases:
        f = c["flame"]
        if not f.get("b2b_ms"):
            continue
        pct = (f"{f['pct_matmul_b2b']:.0f}% matmul" if c["bound"] == "compute" and f.get("pct_matmul_b2b")
               else f"{f['pct_copy_b2b']:.0f}% copy" if f.get("pct_copy_b2b") is not None else "—")
        sp = c.get("speedup_vs_best_peer_b2b")
        cells = [c["name"], _ms(f["b2b_ms"]), pct,
                 *[_ms(c["peers"][p].get("b2b_ms")) if c["peers"].get(p, {}).get("b2b_ms") else "—" for p in peers],
                 f"{sp:.2f}x vs {c['best_peer_b2b']}" if sp else "—"]
        out.append("| " + " | ".join(cells) + " |")
    return out + [""]


def _pct(x) -> str:
    return "—" if x is None else f"{x:.0f}%"


def _matmul_table(cases: list[dict], peers: list[str], reference: bool) -> list[str]:
    """Each case that does matmul work: its matmul flops per call and the fraction of the measured bf16
    matmul ceiling that flame and each peer reach (their median time; flame's back to back too)."""
    rows = [c for c in cases if c.get("min_flops")]
    if not rows:
        return []
    out = ["Fraction of the matmul ceiling — each case's matmul flops (GEMMs and attention's two products, "
           "forward and backward) over the framework's median time, against the bf16 matmul rate measured at the "
           "start of this run" + (" (not measured on the reference executor)." if reference else "."), "",
           "| case | matmul GFLOP/call | flame | flame back to back | " + " | ".join(peers) + " |",
           "|" + "---|" * (4 + len(peers))]
    for c in rows:
        f = c["flame"]
        cells = [c["name"], f"{c['min_flops'] / 1e9:.4g}", _pct(f.get("pct_matmul")), _pct(f.get("pct_matmul_b2b")),
                 *[_pct(c["peers"].get(p, {}).get("pct_matmul")) for p in peers]]
        out.append("| " + " | ".join(cells) + " |")
    return out + [""]


def _mib(x) -> str:
    return "—" if x is None else f"{x / 2**20:.1f}"


def _memory_table(cases: list[dict], peers: list[str]) -> list[str]:
    """Peak device memory of every framework over one steady-state call (timing.MemoryWatch)."""
    rows = [c for c in cases if c["flame"].get("peak_memory_bytes") is not None
            or any(p.get("peak_memory_bytes") is not None for p in c["peers"].values())]
    if not rows:
        return []
    out = ["Peak device memory (MiB) over one steady-state call, counted from before each framework set up its "
           "arrays (parameters, optimizer state, arena and caches count; the suite's own input sets do not). "
           "flame: planned (arena + bound buffers), CuPy pool used high-water, and pool total (reserved); torch: "
           "max_memory_allocated after reset_peak_memory_stats; JAX: peak_bytes_in_use (results.json says how and "
           "why a figure is n/a).", "",
           "| case | flame planned | flame pool used | flame pool total | " + " | ".join(peers) + " |",
           "|" + "---|" * (4 + len(peers))]
    for c in rows:
        f = c["flame"]
        cells = [c["name"], _mib(f.get("planned_bytes")), _mib(f.get("peak_memory_bytes")),
                 _mib(f.get("pool_total_peak_bytes")),
                 *[_mib(c["peers"].get(p, {}).get("peak_memory_bytes")) for p in peers]]
        out.append("| " + " | ".join(cells) + " |")
    return out + [""]


def markdown(run: dict) -> str:
    """The report: header (device, mode, ceilings), the main table, then compile/memory/correctness."""
    env, ceil, cases = run["env"], run["ceilings"], run["cases"]
    peers = []
    for c in cases:
        peers += [p for p in c["peers"] if p not in peers]
    lines = [f"# flame benchmark suite: {env['gpu']}, {env['date']}", ""]
    if run["mode"] == "reference":
        lines += [REFERENCE_NOTE, ""]
    lines += [f"flame {env['flame']} on device `{env['flame_device']}`; cupy {env.get('cupy')}, torch "
              f"{env.get('torch')}, jax {env.get('jax')}; driver {env.get('driver') or '—'}. "
              f"{run['settings']['repeat']} timed calls per figure after {run['settings']['warmup']} warm-up "
              f"calls; medians.", ""]
    for key, label, unit, val in (("copy", "device copy", "GB/s", "gbs"), ("matmul", "matmul", "TFLOP/s", "tflops")):
        c = ceil.get(key) or {}
        lines.append(f"- {label} ceiling: " + (f"{c[val]:.4g} {unit} ({c['how']})" if val in c else
                                              c.get("status", "not measured"))
                     + (f"; back to back: {c[val + '_b2b']:.4g} {unit}" if c.get(val + "_b2b") else ""))
    lines += ["", "| case | flame ms | achieved | % of ceiling | kernels/call | "
              + " | ".join(f"{p} ms" for p in peers) + " | speed-up vs best peer |",
              "|" + "---|" * (6 + len(peers))]
    for c in cases:
        sp = c.get("speedup_vs_best_peer")
        spc = f"{sp:.2f}x vs {c['best_peer']}" if sp and run["mode"] != "reference" else "—"
        cells = [c["name"], *_flame_cells(c, run["mode"]), *[_peer_cell(c["peers"].get(p)) for p in peers], spc]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "achieved / % of ceiling: minimum bytes (or flops, for compute-bound cases) over flame's median "
              "time, against the ceiling measured above. speed-up = best peer's median / flame's median (above 1: "
              "flame is faster). A compiled peer's cell also gives its compile time: the seconds of its first "
              "call.", ""]
    if run["mode"] != "reference" and any(c["flame"].get("b2b_ms") for c in cases):
        lines += _b2b_table(cases, peers)
    lines += _matmul_table(cases, peers, run["mode"] == "reference")
    lines += _memory_table(cases, peers)
    lines += [
              "| case | rel. error vs torch | compile cold s | compile warm s | compile warm plan s | planned MiB | "
              "actual peak MiB | input sets | flame timer | spread |", "|" + "---|" * 10]
    for c in cases:
        f = c["flame"]
        errs = "; ".join(f"{k}{f[key]:.2e}" for k, key in (("", "rel_error"), ("updates ", "rel_error_state"))
                         if f.get(key) is not None)
        lines.append("| " + " | ".join([
            c["name"], errs or "—", _s(f.get("compile_cold_s")), _s(f.get("compile_warm_s")),
            _warm_plan(f), _mib(f.get("planned_bytes")), _mib(f.get("actual_peak_bytes")),
            str(c["input_sets"]),
            f.get("timer", "—"), "—" if f.get("spread") is None else f"{100 * f['spread']:.0f}%"]) + " |")
    lines += ["", "rel. error: ||flame - torch|| / ||torch|| over the outputs (worst output); updates: the same over "
              "what one step changed in the parameters (p_after - p_before). Tolerances are in results.json.",
              "", "Timers: " + "; ".join(f"`{k}`: {v}" for k, v in run["timers"].items()) + "."]
    notes = run.get("notes") or []
    if notes:
        lines += ["", "Notes:"] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def _s(x) -> str:
    return "—" if x is None else f"{x:.2f}"


def _warm_plan(f: dict) -> str:
    """The warm-plan compile's seconds, with the share spent making cuDNN graphs in brackets."""
    cudnn = f.get("compile_warm_plan_cudnn_s")
    return _s(f.get("compile_warm_plan_s")) + (f" (cuDNN {cudnn:.2f})" if cudnn else "")


def chart(run: dict, path: str) -> str:
    """A PNG of each framework's time over the best peer's, per case; '' or why it was skipped."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        return "no chart: matplotlib is not installed"
    rows = [c for c in run["cases"] if c.get("best_peer") and c["flame"].get("median_ms")]
    if not rows:
        return "no chart: no case has both a flame time and a peer time"
    names = ["flame"] + sorted({p for c in rows for p, r in c["peers"].items() if r.get("median_ms")})
    fig, ax = plt.subplots(figsize=(10, 0.6 * len(rows) * len(names) / 2 + 1.5))
    height = 0.8 / len(names)
    for j, n in enumerate(names):
        vals = []
        for c in rows:
            best = c["peers"][c["best_peer"]]["median_ms"]
            ms = c["flame"]["median_ms"] if n == "flame" else c["peers"].get(n, {}).get("median_ms")
            vals.append(ms / best if ms else math.nan)
        ax.barh([i + j * height for i in range(len(rows))], vals, height=height, label=n)
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(rows))], [c["name"] for c in rows])
    ax.axvline(1.0, color="k", lw=0.8)
    ax.invert_yaxis()
    ax.set_xlabel("time / best peer's time (lower is better)")
    title = f"{run['env']['gpu']} ({run['env']['date'][:10]})"
    ax.set_title(title + (" — reference executor, NOT a measurement" if run["mode"] == "reference" else ""))
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return ""


def write(run: dict, out_dir: str) -> dict[str, str]:
    """Write results.json, results.md and relative.png (if it can) into out_dir; returns the paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {"json": os.path.join(out_dir, "results.json"), "markdown": os.path.join(out_dir, "results.md")}
    why = chart(run, os.path.join(out_dir, "relative.png"))
    if why:
        run.setdefault("notes", []).append(why)
    else:
        paths["chart"] = os.path.join(out_dir, "relative.png")
    with open(paths["json"], "w") as f:
        json.dump(_finite(run), f, indent=1, default=_json_default)
    with open(paths["markdown"], "w") as f:
        f.write(markdown(run))
    return paths


def _finite(x):
    """NaN and infinities as strings, so results.json is strict JSON."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def _json_default(x):
    if hasattr(x, "item"):
        return x.item()
    return str(x)
