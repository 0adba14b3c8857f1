"""The row kernels of gpt_train, mlp_bf16_train and a Llama-style block (RMSNorm forward and backward at
[4096, 4096], its loss over a 32000-word vocabulary) under each rows schedule (flame/codegen/fused_rows.py),
and the Llama block's rotary embedding kernels (elementwise: every schedule gives the same kernel),
timed on one GPU against a device copy of the same bytes, each checked against the reference
executor's computation of the same ops (flame.ir.evaluate.compute_op, as runtime/reference.py runs a
kernel launch) on the same inputs (of every row, or of the first --check-rows rows of large cases).

    PYTHONPATH=. python3 benchmarks/scripts/rows_schedules.py [--variants old,new,...] [--reps 50]

The cases named in PLAN_CASES are row kernels taken from a bench case's plan at its full size (the
first rows group whose ops start as given: gpt_train's LayerNorm backward and loss, FP8 training's amax
kernels), lowered as the plan lowers them; those too large for the host's reference are timed unchecked.

A variant is a schedule with optional Config knobs: "new:row_regs=96", "new:row_carry=0",
"auto:row_stream_threads=512" ("auto": the schedule flame picks for the kernel). Each case is
a small flame function traced and fused as in a training step; its largest rows group is lowered under
every variant (the rows kernel, plus the fold kernel of column reductions) and launched directly with
CuPy on random inputs. Times: CUDA events around each launch sequence, median of --reps after 5
warm-ups. "% copy": the time of a device-to-device copy of as many bytes (inputs read + outputs
written) over the variant's time. "max err": the largest |variant - reference| over the outputs,
each scaled by its largest reference magnitude (bf16 outputs: about 4e-3 is one rounding).
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from flame.runtime.profile import median_event_ms  # noqa: E402

DEFAULT_VARIANTS = "old,new,new:row_carry=0,new:row_regs=96"

# row kernels taken from the plans of bench cases at their full sizes: name -> (case, the group's ops
# joined by "+" as `flame profile` names them, up to this prefix); the first such group in plan order
PLAN_CASES = {
    "gpt_train LN bwd [8192,768]": ("gpt_train", "cast+cast+cast+sub+mul+mul+add+cast+cast+reduce_sum+mul+mul"),
    "gpt_train CE [8192,32768]": ("gpt_train", "cast+reduce_max+sub+exp+reduce_sum+log"),
    "llama7b RMSNorm bwd [4096,4096]": ("llama7b_block_train", "cast+cast+mul+mul+cast+add+cast+mul+mul+reduce_sum"),
    "llama RMSNorm bwd [8192,2048]": ("llama_block_train", "cast+cast+mul+mul+cast+add+cast+mul+mul+reduce_sum"),
    "gpt_block_train LN bwd [8192,1024]": ("gpt_block_train",
                                           "cast+cast+cast+sub+mul+mul+add+cast+cast+reduce_sum+mul+mul+reduce_sum"),
    "fp8 RMSNorm bwd amax [4096,4096]": ("llama7b_block_train_fp8",
                                         "cast+reshape+reshape+add+mul+cast+mul+mul+reduce_sum"),
    "fp8 SwiGLU amax [4096,11008]": ("llama7b_block_train_fp8", "reshape+silu+reshape+mul+abs+reduce_max"),
    "fp8 SwiGLU bwd amax [4096,11008]": ("llama7b_block_train_fp8", "reshape+reshape+silu+mul+reshape+reshape+mul"),
    "fp8 SwiGLU bwd cast amax [4096,11008]": ("llama7b_block_train_fp8",
                                              "reshape+reshape+silu+mul+reshape+scaled_cast"),
    "fp8 weight amax x7": ("llama7b_block_train_fp8", "abs+reduce_max+abs+reduce_max+abs+reduce_max"),
    # the attention output's amax, staged over rows of its head dim (passes/prepare_fusion.py stage_reductions)
    "fp8 attention-output amax [131072,128]": ("llama7b_block_train_fp8", "abs+reduce_max", "rows", (2, 32, 2048, 128)),
    "gpt_block_train LN bwd sums [8192,1024]": ("gpt_block_train",
                                               "cast+cast+cast+sub+mul+mul+add+cast+cast+reduce_sum+mul+reduce_sum+cast"),
    # elementwise groups: the FP8 casts writing both layouts through a tiled transpose, by source shape
    "fp8 cast bf16 [4096,11008] both layouts": ("llama7b_block_train_fp8", "scaled_cast+permute", "elementwise",
                                                 (4096, 11008)),
    "fp8 cast f32 [4096,4096] both layouts": ("llama7b_block_train_fp8", "scaled_cast+permute", "elementwise",
                                               (4096, 4096)),
}


def _cases() -> dict:
    """name -> (what, function, example arrays at the case's shape, rows)."""
    import flame
    import flame.nn.functional as F

    bf16 = flame.ir.dtype_of("bf16").np_dtype
    rng = np.random.default_rng(0)

    def ln_fwd(x, w, b):
        return F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)

    def ln_bwd(x, w, b, dy):
        def loss(x, w, b):
            return (F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5).float() * dy.float()).sum()

        return flame.grad(loss, (0, 1, 2))(x, w, b)

    def ce(logits, y):  # the loss and its gradient: one rows kernel in a training step
        def loss(z):  # summed, not averaged: the check at --check-rows rows has the same gradient scale
            return F.cross_entropy(z.float(), y, reduction="sum")

        return loss(logits), flame.grad(loss, (0,))(logits)

    def softmax(x):
        return F.softmax(x, -1)

    def rms_fwd(x, w):
        return F.rms_norm(x, (x.shape[-1],), w, 1e-5)

    def rms_bwd(x, w, dy):  # dx and the weight gradient (a column sum carried by the row kernel)
        def loss(x, w):
            return (F.rms_norm(x, (x.shape[-1],), w, 1e-5).float() * dy.float()).sum()

        return flame.grad(loss, (0, 1))(x, w)

    def rope(x, cos, sin):  # a Llama block's q after its projection: [B, T, H*D] -> [B, H, T, D], rotated
        b, t, hd = x.shape
        d = cos.shape[-1]
        q = x.reshape(b, t, hd // d, d).permute(0, 2, 1, 3)
        q1, q2 = q[..., : d // 2], q[..., d // 2:]
        return q * cos + flame.cat([-q2, q1], -1) * sin

    def rope_bwd(x, cos, sin, dy):  # its gradient: the halves placed back (pads), permuted for the GEMM
        return flame.grad(lambda x: (rope(x, cos, sin).float() * dy.float()).sum(), (0,))(x)

    def bn_stats(x):  # a channels-last BatchNorm's statistics: column sums, no row reduction
        xf = x.float()
        return xf.sum((0, 1, 2)), (xf * xf).sum((0, 1, 2))

    def bn_bwd_stats(x, dy, m):
        d = dy.float()
        return d.sum((0, 1, 2)), (d * (x.float() - m.float())).sum((0, 1, 2))

    def mk(*shapes):
        return [np.zeros(s, bf16) for s in shapes]

    return {
        "LN fwd [8192,768] bf16": (ln_fwd, mk((8192, 768), (768,), (768,))),
        "LN bwd [8192,768] bf16": (ln_bwd, mk((8192, 768), (768,), (768,), (8192, 768))),
        "CE [8192,32768] bf16": (ce, mk((8192, 32768)) + [rng.integers(0, 32768, 8192)]),
        "softmax [131072,1024] bf16": (softmax, mk((8 * 16 * 1024, 1024))),
        "CE mlp [8192,4096] bf16": (ce, mk((8192, 4096)) + [rng.integers(0, 4096, 8192)]),
        "BN stats [64,64,64,128] bf16": (bn_stats, mk((64, 64, 64, 128))),
        "BN bwd stats [64,64,64,128] bf16": (bn_bwd_stats, mk((64, 64, 64, 128), (64, 64, 64, 128), (1, 1, 1, 128))),
        "RMSNorm fwd [4096,4096] bf16": (rms_fwd, mk((4096, 4096), (4096,))),
        "RMSNorm bwd [4096,4096] bf16": (rms_bwd, mk((4096, 4096), (4096,), (4096, 4096))),
        "CE llama [4096,32000] bf16": (ce, mk((4096, 32000)) + [rng.integers(0, 32000, 4096)]),
        "RoPE fwd [2,2048,4096] bf16": (rope, mk((2, 2048, 4096), (2048, 128), (2048, 128)), "elementwise"),
        "RoPE bwd [2,2048,4096] bf16": (rope_bwd, mk((2, 2048, 4096), (2048, 128), (2048, 128), (2, 32, 2048, 128)),
                                        "elementwise"),
    }


def _config(variant: str):
    from flame.codegen.kernel import Config

    name, _, knobs = variant.partition(":")
    fields = {"rows_schedule": name}
    for kv in filter(None, knobs.split(";")):
        k, v = kv.split("=")
        kind = type(getattr(Config(), k))
        fields[k] = int(v) if kind is type(None) else kind(int(v))  # an optional knob (None: its default) takes ints
    return Config(**fields)


def _rows_group(fn, arrays, like=None, kind: str = "rows"):
    """The largest group of `kind` (rows, or elementwise) of fn traced on arrays (traced and fused only:
    nothing compiled); with
    `like`, the rows group holding the same ops as that group (None if none does: at another size
    the fusion pass may cut the kernels differently)."""
    import flame
    from flame.passes.fuse import fuse
    from flame.passes.pipeline import run_pipeline

    c = flame.compile(fn)
    graph = run_pipeline(c._build(c._args(arrays), compile=False).traced)
    groups = [g for g in fuse(graph).groups if g.kind == kind and g.ops]
    if like is not None:
        names = sorted(op.name for op in like.ops)
        return next((g for g in groups if sorted(op.name for op in g.ops) == names), None)
    return max(groups, key=lambda g: max(np.prod(v.shape) for op in g.ops for v in op.inputs))


@functools.cache
def _full_plan(case_name: str):
    """`case_name`'s plan for the CUDA target at its full sizes (benchmarks/scripts/plan_snapshot.py
    plans it; nothing is compiled)."""
    from benchmarks.scripts import plan_snapshot
    from flame.bench.table import CASES

    return plan_snapshot._plan(next(c for c in CASES if c.name == case_name), "cuda", quick=False)


def _by_row(a, n: int) -> bool:
    """Whether array a is indexed by the case's n rows: its first dim is n and it is not a weight
    vector (1-D floats; 1-D integers are labels, one per row)."""
    return a.ndim > 0 and a.shape[0] == n and (a.ndim > 1 or a.dtype.kind in "iu")


def _plan_group(case_name: str, prefix: str, kind: str = "rows", shape: tuple | None = None):
    """The first group of `kind` in `case_name`'s full-size plan whose ops, joined by "+", start with
    `prefix` (and, given `shape`, whose first op reads a value of that shape)."""
    return next(g for g in _full_plan(case_name).graph.groups
                if g.kind == kind and "+".join(op.name for op in g.ops).startswith(prefix)
                and (shape is None or tuple(g.ops[0].inputs[0].shape) == shape))


def _inputs(group, seed: int) -> list:
    """Random device inputs of the group's kernels: floats ~ N(0, 1) (rounded to their dtype; bf16
    held as its bits), integers (targets) in [0, row length)."""
    import cupy

    from flame.codegen import kernel_inputs

    ins = kernel_inputs(group)
    length = max(v.shape[-1] for v in ins if v.shape)
    rs = cupy.random.RandomState(seed)
    out = []
    for v in ins:
        if v.dtype.name == "bf16":
            bits = rs.standard_normal(v.shape, dtype=np.float32).view(np.uint32)
            out.append(((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16))  # round to nearest even
        elif v.dtype.is_float:
            out.append(rs.standard_normal(v.shape, dtype=np.float32).astype(v.dtype.np_dtype))
        else:
            out.append(rs.randint(0, length, v.shape).astype(v.dtype.np_dtype))
    return out


def _empty(v, poison: bool = True):
    """A device output for value v (bf16 as its bits), poisoned with NaN (floats) or zeros."""
    import cupy

    if v.dtype.name == "bf16":
        return cupy.full(v.shape, 0x7FC0, np.uint16)
    if v.dtype.is_float8:  # held as its bytes: 0x7F is NaN in both formats
        return cupy.full(v.shape, 0x7F, np.uint8)
    return cupy.full(v.shape, np.nan if v.dtype.is_float else 0, v.dtype.np_dtype)


def _host(a, v) -> np.ndarray:
    """A device array of value v's dtype as NumPy (bf16 bits viewed as the bf16 dtype)."""
    return a.get().view(v.dtype.np_dtype)


def _reference(group, arrays: list[np.ndarray]) -> list[np.ndarray]:
    from flame.codegen import kernel_inputs
    from flame.ir.evaluate import compute_op

    env = dict(zip(kernel_inputs(group), arrays))
    with np.errstate(all="ignore"):
        for op in group.ops:
            env[op.out] = compute_op(op, [env[v] for v in op.inputs])
    return [env[v] for v in group.outputs]


def _launcher(kernels, ins, outs):
    """fn() launching the kernels in order on the current stream (the shared scratch last)."""
    import cupy

    from flame.codegen import nvrtc

    scratch = max((k.scratch for k in kernels), default=0)
    buf = cupy.empty(max(scratch, 1), np.uint8)
    calls = []
    for k in kernels:
        mod = cupy.cuda.function.Module()
        mod.load(nvrtc.compile_cubin(k.source, nvrtc.device_arch()))
        args = (*ins, *outs, *([buf] if k.scratch else []))
        calls.append(functools.partial(mod.get_function(k.name), (k.grid,), (k.block,), args))
    return lambda: [c() for c in calls]


def main() -> None:
    import cupy

    from flame.codegen import kernel_inputs, lower

    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default=DEFAULT_VARIANTS)
    ap.add_argument("--cases", default="", help="comma-separated substrings of case names (default: all)")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--check-rows", type=int, default=512)
    opts = ap.parse_args()
    warnings.filterwarnings("ignore")
    t0 = time.perf_counter()
    dev = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    print(f"device: {props['name'].decode()}, {props['multiProcessorCount']} SMs", flush=True)
    variants = opts.variants.split(",")
    rows = []
    for case, (fn, arrays, *kind) in {**_cases(), **{n: (c, None) for n, c in PLAN_CASES.items()}}.items():
        # a plan case: fn = (bench case, ops prefix), arrays None
        if opts.cases and not any(c in case for c in opts.cases.split(",")):
            continue
        kind = kind[0] if kind else fn[2] if arrays is None and len(fn) > 2 else "rows"
        group = _rows_group(fn, arrays, kind=kind) if arrays is not None else _plan_group(*fn)
        ins = _inputs(group, seed=len(rows))
        outs = [_empty(v) for v in group.outputs]
        nbytes = sum(a.nbytes for a in ins) + sum(o.nbytes for o in outs)
        src = cupy.ones(nbytes // 8, np.float32)
        dst = cupy.empty_like(src)
        copy_ms = median_event_ms(functools.partial(cupy.copyto, dst, src), opts.reps, warmup=5)
        del src, dst
        # the reference: of every row (small cases: column sums need all rows) or of the first check_rows
        # rows of the row-indexed inputs, from the same function traced at that many rows
        n = arrays[0].shape[0] if arrays is not None else 0
        k = n if arrays is None or sum(a.size for a in ins) <= 1 << 25 else min(n, opts.check_rows)
        sgroup = group if k == n else _rows_group(fn, [np.zeros((k, *a.shape[1:]), a.dtype)
                                                       if _by_row(a, n) else a for a in arrays], group,
                                                  kind)
        same = sgroup is not None and [v.shape[1:] for v in kernel_inputs(sgroup)] == \
            [v.shape[1:] for v in kernel_inputs(group)] and (arrays is not None or sum(a.size for a in ins) <= 1 << 28)
        if not same:
            why = "too large to check on the host" if arrays is None else f"at {k} rows the ops fuse into other kernels"
            print(f"  {case}: not checked ({why})", flush=True)
        ref = _reference(sgroup, [_host(a[:k] if _by_row(a, n) else a, v)
                                  for a, v in zip(ins, kernel_inputs(group))]) if same else [None] * len(group.outputs)
        for variant in variants:
            cfg = _config(variant)
            kernels = lower(group, cfg)
            outs = [_empty(v) for v in group.outputs]  # poisoned: an unwritten element fails the check
            ms = median_event_ms(_launcher(kernels, ins, outs), opts.reps, warmup=5)
            err = 0.0
            for o, r, v in zip(outs, ref, group.outputs):
                got = _host(o[:k] if _by_row(o, n) else o, v).astype(np.float64)
                if r is None:
                    err = float("nan")
                    continue
                want = r.astype(np.float64)
                scale = max(float(np.max(np.abs(want))), 1e-30)
                if got.shape != want.shape:
                    e = float("nan")
                else:
                    e = float(np.max(np.abs(got - want))) / scale if np.isfinite(got).all() else float("inf")
                err = max(err, e)
            how = kernels[0].source.split("\n")[2].split(";")[0].strip("/ ")
            rows.append((case, variant, ms * 1e3, copy_ms / ms * 100, err, f"{kernels[0].block}thr", how))
            print(f"  {case:28s} {variant:22s} {ms * 1e3:8.1f} us  {copy_ms / ms * 100:5.1f}% copy  "
                  f"err {err:.2e}  grid {kernels[0].grid} x {kernels[0].block}: {how}", flush=True)
        del ins, outs
        cupy.get_default_memory_pool().free_all_blocks()
    print(f"\n(total {time.perf_counter() - t0:.0f} s; % copy: a cupy.copyto of the same bytes over the kernel "
          f"time; max err: max |kernel - reference| / max |reference|)")
    print(f"{'shape':28s} {'schedule':22s} {'us':>8s} {'% copy':>7s} {'max err':>9s} {'block':>7s}")
    for case, variant, us, pct, err, block, _ in rows:
        print(f"{case:28s} {variant:22s} {us:8.1f} {pct:7.1f} {err:9.1e} {block:>7s}")


if __name__ == "__main__":
    main()
