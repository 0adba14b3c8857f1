"""The Kernel record the runtime launches, and what every lowering shares (the one home of the emit
helpers): the tuning Config, the Jinja environment, the leading IR comment, kernel parameter lists,
launch-size helpers and unique, descriptive kernel names."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import jinja2

from flame._env import env_choice, env_flag, env_int
from flame.codegen import cuda_c
from flame.codegen.snippets import prelude
from flame.codegen.template_cache import SignedTemplates
from flame.errors import ArgumentError
from flame.ir import symbolic
from flame.ir.graph import FusionGroup, Op, Value
from flame.ir.printer import format_attr, format_op

BLOCK = 256
MAX_GRID = 8192  # grid-stride loops cover the rest; a few waves on any current GPU
NAME_TOKEN = "FLAME_KERNEL_NAME"  # replaced by the final name once the source is hashed
INT32_LIMIT = 1 << 31


@dataclass(frozen=True)
class Config:
    """Launch-shape tuning of the fused kernels, passed to codegen.lower (the tune_fused benchmark script
    times variants of it). The defaults are the fastest variants measured on H100 and H200 GPUs; each
    field says what decided it, with the results folder under benchmarks/results/ that holds the figures.

    unroll: vectors per thread per grid-stride step of an elementwise kernel, all loaded before the
    first is used; grid_cap: its grid, in blocks. 1 vector per step with a grid capped at MAX_GRID
    blocks beats 2 or 4 (fewer threads resident at 34-40 registers) and uncapped or one-wave grids for
    erf/tanh-heavy chains (2026-11-22-H200-fused-tuning). cache_invariant: row kernels keep inputs that
    are the same for every row (weights) in registers too; reg_budget: threads per row -> registers per
    thread for cached row elements (default 64); min_blocks: __launch_bounds__ minimum blocks per
    multiprocessor (0: the compiler's choice); column_threads: threads per multiprocessor
    (Target.sm_count) of a row kernel that carries column partials (its grid; one partial per
    block); column_only_threads: the same for one without row reductions (a channels-last
    BatchNorm's statistics, rows of C channels): 2048 runs [64, 64, 64, 128] bf16 forward sums at 91 %
    of copy against 83 % at 1024 (the rows_schedules script on an H200); rows of over 16 vectors (a thread per vector,
    whole warps) take column_threads, which halves the partials their fold reads at the same kernel
    time (2026-11-29-H200-column-rows). columns_new_min: under the "auto" rows schedule, a row kernel
    carrying column sums beside row totals (a LayerNorm's or RMSNorm's backward with its weight
    gradients) takes the "new" schedule for rows of at least this many elements, holding up to
    columns_row_regs registers of row data per thread (fewer threads per row, more vectors each), and
    the old one for shorter rows. On an H100 (rows_schedules script, the kernels of the suite's
    plans, fold included): RMSNorm backward [4096, 4096] 90.9 -> 80.7 us, its FP8 form with the
    gradient's amax 98.4 -> 91.3, [8192, 2048] 97.8 -> 79.7, LayerNorm backward [8192, 1024] 63.1 ->
    44.9; but gpt_train's [8192, 768] 34.9 old against 39.7-44.5 new
    (benchmarks/results/2026-12-07-H100-column-rows/). row_unroll: `#pragma unroll` of the row loop of a row kernel
    carrying column partials (1: none), so that the compiler may issue the next rows' loads before the
    partials take this row's; 2 gains under 4 % on BatchNorm statistics and 4 or 8 are slower, so it
    stays 1 (2026-11-27-H100-gpt-kernels). row_barriers: the reductions of a row kernel with several
    rows per block wait at the row's own named barrier (`bar.sync`, G threads) instead of the block's,
    one per reduction (a shared slot each), so a block's rows do not wait for each other: gpt_train's
    LayerNorm backward (4 rows of 128 threads per block) 52.8 -> 48.0 us (2026-11-27-H100-gpt-kernels);
    kernels of one row per block or warp rows are unchanged. split_threads, split_elements: threads per
    chunk and elements per thread of a row split across blocks (Target.splits_rows): chunks of 2048
    elements give an 8M-element loss 4096 blocks.
    balanced: a horizontal elementwise kernel of at least this many segments (a multi-tensor update)
    spreads all its segments' work evenly over one flat space of items (fused._lower_balanced) instead
    of giving each segment its own blocks (0: never; pairs such as a GELU backward and its
    recomputation keep the grid-stride schedule); balanced_steps: steps of U * block items per block
    (many waves of short blocks), 0: one wave of balanced_threads threads per multiprocessor, each
    block an equal chunk; balanced_threads: the threads per multiprocessor that __launch_bounds__ asks
    to keep resident (1024 leave 64 registers per thread); balanced_unroll (U): items per thread per
    step (g, g + block, ...), all their 16-byte loads issued before the first is used where they are
    full aligned vectors of one segment. The AdamW update (bf16) needs 64-68 registers at one item and
    spills at two (NVRTC 12.9, sm_90), so U stays 1. Short blocks beat one wave of long chunks (the
    52-tensor bf16 update of adamw_multi_tensor at 83 % of copy against 62 %: 2026-11-27-H100-multi-tensor),
    and four steps per block beat one (161.0 against 170.8 us on an H200, bit-identical:
    2026-11-29-H200-bias-grad); L2 prefetches of the streamed inputs make it slower (2026-11-29-H200-adamw).
    balanced_streaming: the vector loads and stores carry the streaming cache hint (__ldcs / __stcs:
    every byte of an update is touched once): mlp_bf16_train's update at 95 % of copy, 7 % faster
    than without, bit-identical (2026-11-29-H200-adamw).
    tiled_maps: a fused group writing pointwise values of one tensor only transposed (an FP8 cast a
    backward GEMM reads transposed) is the tiled transpose with the pointwise ops in it
    (transpose.lower_tiled_map); None: $FLAME_TILED_MAP, else on. wide_byte_tiles: tiled transposes of
    1-byte elements take 128 x 128 tiles (codegen/transpose.py); None: $FLAME_WIDE_BYTE_TILES, else off
    (the 64 x 64 tiles are the GPU-verified ones; the wide ones ran slower on an H100, 48-67 % of copy
    against 70-80 % in llama7b_block_train_fp8: benchmarks/results/2026-12-06-H100-fp8-rows/).
    row_stream_min: "new" row kernels of at least Target.sm_count rows of at least this many elements
    re-read their inputs in each pass (streamed, row_stream_threads or more per row; a row's second read comes from
    L2) instead of holding the row in registers, which at this length leaves one block of 1024 threads,
    one row, per multiprocessor, whose loads wait at every row's barriers: FP8 training's SwiGLU amax
    kernel (4096 rows of 11008 bf16, three inputs) 368 -> 299 us on an H100, and gpt_train's loss
    (8192 rows of 32768 logits, with the one-hot it then also read) streamed at 98 % of copy
    (2026-12-06-H100-fp8-rows; without it, 78 %: 2026-12-06-H100-stream-rows); None:
    $FLAME_ROW_STREAM_MIN, else 8192 (0: never). A kernel streams only when every one of its segments'
    rows is that long: FP8's amax of seven weights (rows of 4096, one weight's of 11008) ran at 99.6 %
    of copy held in registers and 28 % streamed. row_stream_threads: the fewest threads per streamed
    row (more, up to 1024, for rows a thread would take more than fused_rows.STREAM_VECTORS vectors of):
    512 against 1024: FP8's SwiGLU amax kernels 298 and 138 us against 428 and 226 on an H100.
    row_stream_fit: streamed rows take half that many threads where that leaves fewer of them idle in
    a row's last step (fused_rows._stream_threads).
    byte_words: tiled transposes with 1-byte results (FP8 casts and their transposes), 64 x 64 tiles and
    whole 16-byte result vectors fill the tile with words packed from 4 x 4 blocks and empty it by 16
    bytes (transpose.cu.j2's `packed`) instead of a byte per shared-memory access; None:
    $FLAME_BYTE_WORDS, else on. Sources of 1 or 2 bytes only: H100, FP8 casts writing both layouts,
    bf16 [4096, 11008] 81.6 -> 74.0 us (86 -> 95 % of copy), f32 [4096, 4096] 40.4 -> 44.2 us
    (benchmarks/results/2026-12-06-H100-byte-words/).
    splat_loads: an elementwise kernel's input constant along the innermost dim (a norm's per-row
    statistic in the kernel recomputing its output, [rows, 1] of [rows, d]) is read once per vector on
    the vector path, so it no longer holds the kernel to one element per thread: FP8 training's cast of
    a Llama-7B-width RMSNorm output (1-byte stores) 39.4 -> 20.8 us, 43 -> 81 % of copy, on an H100
    (benchmarks/results/2026-12-06-H100-merged-row-passes/); None: $FLAME_SPLAT_LOADS, else on.
    merge_row_passes: a row kernel computes in one pass over the row every reduction whose input reads
    no result of that pass, and stores its per-element results in the first pass that has what they
    read (codegen/fused_rows.py `_schedule`), instead of a pass per reduction and one for the stores:
    an FP8 backward's SwiGLU kernel with the amaxes of its two gradients went over its three streamed
    input rows three times (304 -> 257 us on an H100), the SwiGLU amax over its two twice (130 -> 97
    us; benchmarks/results/2026-12-06-H100-merged-row-passes/). None: $FLAME_MERGE_ROW_PASSES, else on.
    sub_warp_rows: "new" row kernels of rows of at most 16 vectors with a total each and no column sums
    take fewer threads per row than a warp, several rows to a warp (codegen/row_threads.py
    sub_warp_threads); None: $FLAME_SUB_WARP_ROWS, else on: FP8 training's amax of an attention output
    ([131072, 128] bf16) runs 16 threads per row, 16.9 us on an H100, where a warp per row took 21.3 us
    (benchmarks/results/2026-12-07-H100-base2-flash-sub-warp-rows/)."""

    unroll: int = 1
    grid_cap: int = MAX_GRID
    cache_invariant: bool = True
    reg_budget: tuple[tuple[int, int], ...] = ((1024, 32),)
    min_blocks: int = 0
    column_threads: int = 1024
    column_only_threads: int = 2048
    columns_new_min: int = 1024
    columns_row_regs: int = 128
    row_unroll: int = 1
    row_barriers: bool = True
    split_threads: int = 256
    split_elements: int = 8
    rows_schedule: str = ""
    row_regs: int = 48
    row_carry: bool = True
    balanced: int = 3
    balanced_threads: int = 1024
    balanced_unroll: int = 1
    balanced_steps: int = 4
    balanced_streaming: bool = True
    balanced_scalars: bool | None = None
    tiled_maps: bool | None = None
    wide_byte_tiles: bool | None = None
    row_stream_min: int | None = None
    row_stream_threads: int = 512
    row_stream_fit: bool = True
    byte_words: bool | None = None
    splat_loads: bool | None = None
    merge_row_passes: bool | None = None
    sub_warp_rows: bool | None = None


DEFAULT_CONFIG = Config()
ROWS_SCHEDULES = ("auto", "old", "new")  # codegen/fused_rows.py says what each does
ROWS_SCHEDULE_ENV = "FLAME_ROWS_SCHEDULE"


def rows_schedule(config: Config = DEFAULT_CONFIG) -> str:
    """The row kernels' schedule: config.rows_schedule, else $FLAME_ROWS_SCHEDULE, else "auto" (the new
    schedule where it is faster, old elsewhere: codegen/fused_rows.py says which kernels take which)."""
    if not config.rows_schedule:
        return env_choice(ROWS_SCHEDULE_ENV, ROWS_SCHEDULES, "auto")
    if config.rows_schedule not in ROWS_SCHEDULES:
        raise ArgumentError(f"Config.rows_schedule={config.rows_schedule!r}: expected one of "
                            f"{', '.join(ROWS_SCHEDULES)}")
    return config.rows_schedule


BALANCED_SCALARS_ENV = "FLAME_BALANCED_SCALARS"


def balanced_scalars(config: Config = DEFAULT_CONFIG) -> bool:
    """Whether a horizontal kernel of scalar (0-d) segments takes the balanced form too (codegen/fused.py
    _lower_balanced: one body per class of alike segments, so an optimizer's per-parameter bias
    corrections, 79 segments in gpt_train, compile in 0.4 s instead of 2 s, the source 285 lines
    instead of 2260): config.balanced_scalars, else $FLAME_BALANCED_SCALARS, else on
    (FLAME_BALANCED_SCALARS=0: segments side by side, a branch each)."""
    if config.balanced_scalars is None:
        return env_flag(BALANCED_SCALARS_ENV, True)
    return config.balanced_scalars


FLASH_PIPELINE_ENV = "FLAME_FLASH_PIPELINE"


FLASH_WGMMA_ENV = "FLAME_FLASH_WGMMA"


def flash_wgmma() -> bool:
    """$FLAME_FLASH_WGMMA: whether the generated flash-attention forward of f16 / bf16 at head dim 64 takes
    its Hopper form on an sm_90 target (codegen/flash_attention.py: two warpgroups of 64 query rows on
    wgmma, key and value tiles of 128 in wgmma's swizzled shared-memory layout); else the mma.sync one."""
    return env_flag(FLASH_WGMMA_ENV, False)


def flash_pipeline() -> bool:
    """$FLAME_FLASH_PIPELINE: whether the generated flash-attention kernels of f16 / bf16
    (codegen/flash_attention.py) take their pipelined form (key and value tiles, query and output-gradient
    tiles double-buffered in dynamic shared memory through cp.async, operand fragments read by ldmatrix;
    the default), else the synchronous one (FLAME_FLASH_PIPELINE=0)."""
    return env_flag(FLASH_PIPELINE_ENV, True)


def tiled_maps(config: Config = DEFAULT_CONFIG) -> bool:
    """config.tiled_maps, else $FLAME_TILED_MAP, else on (Config says what it does)."""
    return env_flag("FLAME_TILED_MAP", True) if config.tiled_maps is None else config.tiled_maps


def wide_byte_tiles(config: Config = DEFAULT_CONFIG) -> bool:
    """config.wide_byte_tiles, else $FLAME_WIDE_BYTE_TILES, else off (Config says what it does)."""
    return env_flag("FLAME_WIDE_BYTE_TILES", False) if config.wide_byte_tiles is None else config.wide_byte_tiles


def byte_words(config: Config = DEFAULT_CONFIG) -> bool:
    """config.byte_words, else $FLAME_BYTE_WORDS, else on (Config says what it does)."""
    return env_flag("FLAME_BYTE_WORDS", True) if config.byte_words is None else config.byte_words


def splat_loads(config: Config = DEFAULT_CONFIG) -> bool:
    """config.splat_loads, else $FLAME_SPLAT_LOADS, else on (Config says what it does)."""
    return env_flag("FLAME_SPLAT_LOADS", True) if config.splat_loads is None else config.splat_loads


def merge_row_passes(config: Config = DEFAULT_CONFIG) -> bool:
    """config.merge_row_passes, else $FLAME_MERGE_ROW_PASSES, else on (Config says what it does)."""
    if config.merge_row_passes is None:
        return env_flag("FLAME_MERGE_ROW_PASSES", True)
    return config.merge_row_passes


def sub_warp_rows(config: Config = DEFAULT_CONFIG) -> bool:
    """config.sub_warp_rows, else $FLAME_SUB_WARP_ROWS, else on (Config says what it does)."""
    if config.sub_warp_rows is None:
        return env_flag("FLAME_SUB_WARP_ROWS", True)
    return config.sub_warp_rows


ROW_STREAM_MIN = 8192  # Config.row_stream_min's default


def row_stream_min(config: Config = DEFAULT_CONFIG) -> int:
    """config.row_stream_min, else $FLAME_ROW_STREAM_MIN, else ROW_STREAM_MIN (Config says what it does)."""
    if config.row_stream_min is not None:
        return config.row_stream_min
    return env_int("FLAME_ROW_STREAM_MIN", ROW_STREAM_MIN, minimum=0)


def codegen_settings(config: Config = DEFAULT_CONFIG) -> tuple:
    """The settings codegen reads from the environment (rows_schedule, balanced_scalars, tiled_maps,
    wide_byte_tiles, byte_words, splat_loads, merge_row_passes, row_stream_min, sub_warp_rows,
    flash_pipeline): part of every key under which rendered kernels or compiled plans are kept."""
    return (rows_schedule(config), balanced_scalars(config), tiled_maps(config), wide_byte_tiles(config),
            byte_words(config), splat_loads(config), merge_row_passes(config), row_stream_min(config),
            sub_warp_rows(config), flash_pipeline())


@dataclass(frozen=True)
class Kernel:
    """One launch. Arguments: the op's input pointers in op.inputs order, then the output pointer,
    then (only if scratch > 0) a device scratch pointer. Kernels returned for ONE op share ONE scratch
    buffer of max(scratch) bytes, 256-byte aligned, whose contents need not be initialized; they must
    be launched in order on one stream."""

    name: str  # descriptive and unique per distinct source, e.g. "add_f32_4x5_bcast_1a2b3c4d"
    source: str  # full CUDA C++; begins with a comment quoting the IR op it implements
    grid: int  # blocks (1-D)
    block: int  # threads per block (1-D)
    n_inputs: int
    smem: int = 0  # dynamic shared memory bytes
    scratch: int = 0  # bytes of device scratch; if > 0 an extra `void*` argument comes last
    n_outputs: int = 1  # fused kernels (codegen/fused.py) write several outputs, after the inputs
    in_place_safe: bool = True  # element i of an output is written by the thread that reads element i
    sizes: tuple[int, ...] = ()  # passed after every other argument: the size s0 (flame.ir.symbolic)
    deterministic: bool = True  # False: it adds floating-point values with atomics, in an order that varies


_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "templates")),
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
    bytecode_cache=SignedTemplates(),  # each template's compiled code, kept between processes
)
_ENV.filters["chomp"] = lambda s: str(s)[:-1] if str(s).endswith("\n") else str(s)


def render_template(template: str, **params) -> str:
    return _ENV.get_template(template).render(**params)


def kernel_fields(dtypes, params: str) -> dict:
    """The fields every kernel template takes besides its header: the headers its `dtypes` need
    (includes), the token `finish` replaces with the kernel's name (name) and its parameters (params)."""
    return dict(includes=cuda_c.includes(dtypes), name=NAME_TOKEN, params=params)


def group_header(group: FusionGroup, inputs: list[Value], what: str) -> str:
    """The leading comment of a fused kernel: its IR ops (values numbered from its inputs), why."""
    ids = {v: i for i, v in enumerate(inputs)}
    local = dict(ids)
    lines = []
    for op in group.ops:
        for v in [*op.inputs, op.out]:
            local.setdefault(v, len(local))
        lines.append(format_op(op, local))
    out = [f"// flame fused kernel ({group.kind}) for IR ops: {'; '.join(lines)}"]
    out.append("//   inputs: " + ", ".join(f"%{i}: {v.type}" for v, i in ids.items()))
    out.append(f"//   {what}; boundary: {group.reason}")
    return "\n".join(out)


def op_line(op: Op) -> str:
    """The op as IR text with its inputs numbered %0.. and its result %n (value ids are local)."""
    n = len(op.inputs)
    args = ", ".join(f"%{i}" for i in range(n))
    attrs = ", ".join(f"{k}={format_attr(v)}" for k, v in op.attrs.items())
    text = f"%{n} = {op.name}" + (f" {args}" if args else "") + (f" {{{attrs}}}" if attrs else "")
    return f"{text} : {op.out.type}"


def header(op: Op, what: str = "") -> str:
    """The leading comment of every kernel: the IR op line (nvrtc.py quotes it in errors)."""
    lines = [f"// flame kernel for IR op: {op_line(op)}"]
    if op.inputs:
        lines.append("//   inputs: " + ", ".join(f"%{i}: {v.type}" for i, v in enumerate(op.inputs)))
    if what:
        lines.append(f"//   {what}")
    return "\n".join(lines)


def params(inputs: Sequence[Value], outputs: Mapping[str, Value], scratch: bool = False) -> str:
    """`const T0* __restrict__ in0, ..., T* __restrict__ <output name>, ...[, void* __restrict__ scratch]`."""
    ps = [f"const {v.dtype.cuda_type}* __restrict__ in{i}" for i, v in enumerate(inputs)]
    ps += [f"{v.dtype.cuda_type}* __restrict__ {name}" for name, v in outputs.items()]
    if scratch:
        ps.append("void* __restrict__ scratch")
    return ", ".join(ps)


def shape_tag(shape: tuple[int, ...]) -> str:
    tag = "x".join(str(s) for s in shape) or "scalar"
    return tag if len(tag) <= 32 else f"rank{len(shape)}"


def op_params(op: Op, scratch: bool = False) -> str:
    """The parameters of a kernel with the op ABI: the op's inputs in order, then `out`."""
    return params(op.inputs, {"out": op.out}, scratch)


def group_params(inputs: list[Value], outputs: list[Value], scratch: bool = False) -> str:
    """The parameters of a fused kernel: its inputs, then out0.. (one per value the group writes)."""
    return params(inputs, {f"out{i}": v for i, v in enumerate(outputs)}, scratch)


def group_dtypes(group: FusionGroup) -> set:
    """The dtypes of the values the group reads and computes (found by name: equal dtypes have one)."""
    found = {}
    for op in group.ops:
        t = op.out.type.dtype
        found[t.name] = t
        for v in op.inputs:
            t = v.type.dtype
            found[t.name] = t
    return set(found.values())


def group_prelude(group: FusionGroup) -> str:
    """The device functions the group's snippets call, each once."""
    return "\n".join(x for x in dict.fromkeys(prelude(op.name, op.out.dtype) for op in group.ops) if x)


def store(v: Value, expr: str) -> str:
    """A compute-typed value as v's storage type."""
    return cuda_c.convert(expr, v.dtype, v.dtype)


def render_op(template: str, op: Op, kind: str, n: int, comment: str, scratch: int = 0, **fields) -> Kernel:
    """One kernel of a single op with the op ABI (its inputs, then `out`, then the scratch pointer when
    `scratch` bytes are asked for) from `template`, over `n` threads' worth of work; `kind` is the
    template's branch and, when it is not the op's name, a suffix of the kernel's stem."""
    idx_t, off_t = index_types(n, op.out.type.numel, *(v.type.numel for v in op.inputs))
    block = block_for(n)
    source = render_template(template, header=header(op, comment),
                             **kernel_fields({op.out.dtype, *(v.dtype for v in op.inputs)}, op_params(op, scratch > 0)),
                             block=block, idx_t=idx_t, off_t=off_t, n=n, kind=kind, **fields)
    stem = f"{op.name}_{op.out.dtype.name}_{shape_tag(op.out.shape)}" + ("" if kind == op.name else f"_{kind}")
    return finish(stem, source, grid_for(n, block), block, len(op.inputs), scratch)


def finish(stem: str, source: str, grid: int, block: int, n_inputs: int, scratch: int = 0,
           n_outputs: int = 1) -> Kernel:
    """Name the kernel `<stem>_<hash of source>` so names are unique per distinct source. Sizes
    rendered as the size parameter (flame.ir.symbolic) become its C expressions, and the kernel
    takes the parameter."""
    source, sized = symbolic.finish_source(source, NAME_TOKEN)
    digest = hashlib.sha256(source.encode()).hexdigest()[:8]
    name = f"{symbolic.plain(stem)}_{digest}"
    sizes = (symbolic.SymInt(symbolic.current().size, 1, 0),) if sized else ()
    return Kernel(name, source.replace(NAME_TOKEN, name), symbolic.as_int(grid), int(block), n_inputs, 0,
                  symbolic.as_int(scratch), n_outputs, sizes=sizes)


def grid_for(work: int, block: int = BLOCK, cap: int = MAX_GRID) -> int:
    """ceil(work / block) blocks, at most cap (grid-stride loops do the rest), at least 1; a function
    of the size (flame.ir.symbolic.SizeExpr) when work is one."""
    return symbolic.SizeExpr.blocks(work, block, cap)


def block_for(work: int) -> int:
    """BLOCK threads, or fewer (a multiple of 32) for tiny tensors; BLOCK for a size of a dynamic dim
    (flame.ir.symbolic), which the kernel takes as a parameter and may be large at another call."""
    if isinstance(work, symbolic.SymInt) and symbolic.current() is not None:
        return BLOCK
    return max(32, min(BLOCK, -(-work // 32) * 32))


def index_types(*numels: int) -> tuple[str, str]:
    """(idx_t, off_t): unsigned/signed 32-bit unless some tensor has >= 2^31 elements."""
    if max(numels, default=0) >= INT32_LIMIT:
        return "unsigned long long", "long long"
    return "unsigned int", "int"
