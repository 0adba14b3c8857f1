"""How many threads work on one row of a row kernel (codegen/fused_rows.py), G, by schedule: "old"
by the row's length alone (old_threads); "new" the fewest at which the row's held data fits the
registers (new_threads), or, for short rows, fewer than a warp (sub_warp_threads) or, for column sums
only, as many as cover the row with a vector each (narrow_threads); streamed rows enough that each
thread takes a few vectors a pass (stream_threads). `make(G, carry=False, hold=True)` gives the
kernel's row segments (fused_rows._RowSegment) at G threads per row."""

from __future__ import annotations

from flame.codegen.kernel import Config, sub_warp_rows
from flame.ir import symbolic

_THREAD_CHOICES = (32, 64, 128, 256, 512, 1024)  # "new": threads per row, fewest first
FEW_ROWS_VECTORS = 2  # "new", fewer rows than multiprocessors: at most this many vectors per thread
# streamed rows: threads per row doubled from Config.row_stream_threads up to 1024 while a thread would
# take more vectors than this in a pass: gpt_train's loss (rows of 32768, bf16 read as f32) 470 us at
# 1024 threads, 623 at 512; FP8's SwiGLU amax (rows of 11008 bf16) 143 us at 512, 231 at 1024 (H100)
STREAM_VECTORS = 4


def old_threads(R: int) -> int:
    """"old": a warp per row of up to 256 elements, else a block of 128, 512 or 1024 threads by R."""
    return 32 if R <= 256 else 128 if R <= 2048 else 512 if R <= 8192 else 1024


def new_threads(make, config: Config, few: bool = False) -> tuple[int, list]:
    """"new": (G threads per row, the segments at G): rows of at most 16 vectors several to a warp
    (sub_warp_threads, Config.sub_warp_rows); else the fewest threads, a warp or more, at which every segment keeps
    its row in registers and the held data fits Config.row_regs registers per thread, carrying
    costly values (Config.row_carry) if some G fits with them; else 1024 threads, the row in
    registers only if it fits the 64 registers a thread of a 1024-thread block has (streamed else).
    few: the group has fewer rows than the GPU has multiprocessors, so a row's threads are all that
    work on it: at least enough that each holds FEW_ROWS_VECTORS vectors (a loss's label count, one
    row of 8192 i64 labels, took 32 threads of 256 elements each, whose unrolled code NVRTC compiled
    in 27 s)."""
    if sub_warp_rows(config):
        got = sub_warp_threads(make, config.row_carry)
        if got is not None:
            return got
    for carry in (True, False) if config.row_carry else (False,):
        for G in _THREAD_CHOICES:
            parts = make(G, carry)
            if few and G < 1024 and any(p.J > FEW_ROWS_VECTORS for p in parts):
                continue
            if all(p.cached for p in parts) and max(p.data_regs() for p in parts) <= config.row_regs:
                return G, parts
    parts = make(1024)
    if all(p.cached for p in parts) and max(p.data_regs() for p in parts) <= 40:
        return 1024, parts
    return 1024, make(1024, hold=False)


def stream_threads(make, config: Config) -> tuple[int, list]:
    """Streamed rows: (G threads per row, the segments at G). Config.row_stream_threads, doubled up to
    1024 while a thread would take more than STREAM_VECTORS vectors a pass; with Config.row_stream_fit,
    half as many instead where that leaves fewer threads idle in a row's last step: an FP8 backward's
    SwiGLU rows of 688 16-element vectors take 3 steps of 256 threads (10 % of them idle in all) rather
    than 2 of 512 (33 %)."""
    G, parts = config.row_stream_threads, make(config.row_stream_threads, hold=False)
    while G < 1024 and max(p.J for p in parts) > STREAM_VECTORS:
        G, parts = 2 * G, make(2 * G, hold=False)
    if not config.row_stream_fit or G // 2 < 32:
        return G, parts
    half = make(G // 2, hold=False)

    def idle(g: int, segs: list) -> float:  # the thread steps of a row that have no vector
        return sum(p.J * g - -(-p.CH // p.V) for p in segs) / sum(p.J * g for p in segs)

    if max(p.J for p in half) <= STREAM_VECTORS and idle(G // 2, half) < idle(G, parts) - 0.05:
        return G // 2, half
    return G, parts


def narrow_threads(make) -> tuple[int, list] | None:
    """"new", column sums only (a channels-last BatchNorm's statistics, a LayerNorm backward's
    recomputed output beside its weight and bias gradients): no row total, so no shuffle needs a
    whole warp: (the fewest threads, a power of two of at least 4, that cover a row with one vector
    each, the segments at it), or None when that takes more than 1024 threads or the row is not held
    in registers. Rows of more than 16 vectors (whole warps) gain too: gpt_block_train's
    LayerNorm-backward kernel of [8192, 1024] bf16 (the recomputed normalised input beside dweight
    and dbias) runs in 17.7 + 3.6 us (fold) against 25.3 + 8.0 on the old schedule on an H200
    (benchmarks/results/2026-11-29-H200-column-rows/)."""
    parts = make(32)
    V, R = parts[0].V, max(p.R for p in parts)
    G = next((g for g in (4, 8, 16, 32, 64, 128, 256, 512, 1024) if g * V >= R), 0)
    if not G or (G < 32 and not all(p.cached for p in parts)):
        return None
    parts = parts if G == 32 else make(G)
    return (G, parts) if all(p.cached for p in parts) else None


def _static(n) -> bool:
    return isinstance(n, int) and not isinstance(n, symbolic.SymInt)


def sub_warp_threads(make, carry: bool = True) -> tuple[int, list] | None:
    """"new", rows of at most 16 vectors with no column sums: (G, the segments at G), G the fewest
    threads, a power of two below 32, that cover the row with one vector each, so a warp works on 32 / G
    rows at once and no lane of it idles (a warp per row of 16 vectors left half its lanes without
    one: FP8 training's amax of an attention output, rows of 128 bf16, at 53 % of copy on an H100);
    a row's total is folded by shuffles among its own G lanes. None where a row needs a whole warp,
    where a segment's rows are not whole warps' worth (a warp's lanes must all reach its shuffles) or
    the row is not held in registers."""
    parts = make(32, carry)
    # a size that is a kernel parameter (a dynamic batch) takes a warp per row: whether its rows are whole
    # warps' worth would depend on the size, and every size of its class runs the one kernel
    if any(p.columns or p.P > 1 or not _static(p.M) or not _static(p.CH) for p in parts):
        return None
    need = max(-(-p.CH // p.V) for p in parts)  # vectors per row
    G = next((g for g in (1, 2, 4, 8, 16) if g >= need), 0)
    if not G or any(p.M % (32 // G) for p in parts):
        return None
    parts = make(G, carry)
    return (G, parts) if all(p.cached for p in parts) else None
