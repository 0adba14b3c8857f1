"""The generated flash-attention kernels (templates/flash_attention.cu.j2) of a scaled_dot_product_attention
op and its backward, with the op's score modification (flame/ir/ops/attention.py) inlined into the tile
loop as device functions (codegen/score_mod.py). FlashAttention-2's schedule:

- forward: one block of 4 warps per 64 * MT query rows of one (batch, head), each warp MT m16 tiles of
  rows (MT 2 at head dim 64, so every K and V fragment read from shared memory feeds two products; 1 at
  128), the last query tiles (under a causal mask the longest) first; K and V stream through shared
  memory in tiles of BN keys (64 for head dim 64, 32 for 128); S = Q K^T and O += P V run on tensor cores
  (mma.sync m16n8k16, bf16 / f16 in, f32 accumulation), f32 takes a plain path (a thread per query
  row); the softmax is online (running max and sum in f32); the scores are scaled, modified and masked
  in registers; whole key tiles outside the causal triangle or the band of a constant keep mask (a
  sliding window) are skipped; the log-sum-exp of each row is written for the backward (the stats op's
  buffer, or scratch when nothing keeps it). A row no key takes part in gives 0 and statistics -inf.
- backward: a prep kernel (Delta = rowsum(dO * O) in f32, the f32 dQ accumulator zeroed), the main
  kernel (one block per BN keys; P = exp(S - LSE) and dS = P (dP - Delta) recomputed from the saved
  statistics, dS taken through the modification's VJP graph, dK and dV accumulated in registers, dQ
  added to the f32 accumulator with atomics; f16 / bf16: S^T = K Q^T, dP^T = V dO^T, dV += P^T dO,
  dK += dS^T Q and dQ += dS K on tensor cores, 16 keys per warp; f32: a thread per key on CUDA cores)
  and a kernel converting dQ into the packed result.
- pipelined form (f16 / bf16; the default, FLAME_FLASH_PIPELINE=0 gives the synchronous one,
  codegen.kernel.flash_pipeline): the streamed tiles (forward: K and V; backward: Q, dO and
  their statistics) are double-buffered in dynamic shared memory (the layout: _forward_shared,
  _backward_shared) and copied by 16-byte cp.async, tile j + 1 in flight while tile j is computed, one
  barrier per tile; every tensor-core operand is read by ldmatrix (x4; .trans for the transposed ones) from
  rows padded to D + 8 elements, so the 8 rows of each 8x8 matrix fall in distinct banks. On sm_90 the
  backward stages each warp's 16 dQ rows in shared memory (in the tile's Q and dO buffers, once its
  products are done with them; in mma.sync's C-fragment order, which the accumulator keeps: the
  template's flame_dq_index) and adds them to the f32 accumulator with one bulk reduction
  (cp.reduce.async.bulk, done in L2) instead of an atomic addition per element; P and dS are packed to pairs
  once (the A fragments of dV and dK, and dS^T's 32-bit shared stores), and the head-dim-64 kernel is
  held to 168 registers (3 blocks per multiprocessor: 12 warps instead of 8).

- Hopper form of the forward (FLAME_FLASH_WGMMA=1, codegen.kernel.flash_wgmma; f16 / bf16, head dim 64,
  an sm_90 target): two warpgroups of 64 query rows a block; Q and the 128-key K and V tiles in wgmma's
  128-byte swizzled shared-memory layout (cp.async, double-buffered); S = Q K^T on wgmma from shared memory,
  O += P V with P from registers and V read transposed; the source declares nvrtc.ARCH_SPECIFIC, so NVRTC
  compiles it for sm_90a. Each warpgroup waits for its products before its softmax and nothing overlaps
  one warpgroup's softmax with another's products yet: it ran slower than the mma.sync form on an H100
  (benchmarks/results/2026-12-07-H100-delayed-casts-wgmma/), so it is off by default.

Kernel ABI (codegen.lower's): the op's inputs in order, then its result(s), then the scratch pointer.
Forward: q, k, v, *extras, out, stats (stats: the joined stats op's buffer or the scratch); backward:
q, k, v, out, grad_out, stats, *extras, packed grads, scratch (dQ in f32, then Delta).
`unsupported(op)` says what the template does not cover; the op is then decomposed (or runs on cuDNN)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from flame.codegen import cuda_c, score_mod
from flame.codegen.kernel import Kernel, finish, flash_pipeline, flash_wgmma, header, kernel_fields, render_template
from flame.codegen.nvrtc import ARCH_SPECIFIC
from flame.ir.dtypes import f32
from flame.ir.evaluate import constant_value
from flame.ir.graph import Graph, Op, Value
from flame.ir.ops.attention import BACKWARD, FORWARD, STATS, extras_of, float_extras
from flame.ir.ops.elementwise import LOGICAL_AND

HEAD_DIMS = (64, 128)
DTYPES = ("f16", "bf16", "f32")
MAX_BAND_EVAL = 1 << 26  # constant keep masks up to this many elements are evaluated for tile skipping


def unsupported(op: Op) -> str:
    """Why the flash template cannot compute attention op `op` ("" if it can)."""
    q, k, v = (x.type for x in op.inputs[:3])
    if op.name not in (FORWARD, STATS, BACKWARD):
        return f"{op.name} has no flash kernel"
    if not all(type(d) is int for d in (*q.shape, *k.shape)):
        return "the flash kernel takes static shapes"
    if q.dtype.name not in DTYPES:
        return f"the flash kernel takes f16, bf16 or f32, not {q.dtype}"
    if q.shape[-1] not in HEAD_DIMS or v.shape[-1] != q.shape[-1]:
        dims = " and ".join(map(str, HEAD_DIMS))
        return f"the flash kernel takes head dims {dims} (E={q.shape[-1]}, Ev={v.shape[-1]})"
    if op.attrs["enable_gqa"] and k.shape[-3] != q.shape[-3]:
        return "the flash kernel does not take grouped-query attention"
    if q.shape[:-2] != k.shape[:-2] or 0 in q.shape or 0 in k.shape:
        return "the flash kernel takes equal batch and head dims and no empty dims"
    if len(op.inputs) > (6 if op.name == BACKWARD else 3) and op.attrs["score_mod"] is None:
        return "the flash kernel takes a score modification, not a mask input"
    mod = op.attrs["score_mod"]
    if mod is not None:
        why = score_mod.unsupported(mod.graph)
        if why:
            return f"its score modification: {why}"
        if op.name == BACKWARD:
            if float_extras(extras_of(op)):
                return "the flash backward does not compute the gradients of the modification's float operands"
            why = score_mod.unsupported(op.attrs["score_mod_grad"].graph)
            if why:
                return f"its score modification's gradient: {why}"
    return ""


def _conjuncts(v: Value) -> list[Value]:
    op = v.producer
    if op is not None and op.name == LOGICAL_AND.name:
        return [c for x in op.inputs for c in _conjuncts(x)]
    return [v]


def _constant(sub: Graph, v: Value) -> np.ndarray | None:
    """v's value when it reads none of the graph's inputs and is small enough to evaluate, else None."""
    return constant_value(sub, v, MAX_BAND_EVAL)


def _keep_band(sub: Graph, length: int, keys: int) -> tuple[int | None, int | None]:
    """(lo, hi): every kept (i, j) has lo <= j - i <= hi, from the conjuncts of the keep mask that read no
    operand (the positions alone: a sliding window); (None, None) when there is none."""
    lo = hi = None
    for c in _conjuncts(sub.outputs[1]) if len(sub.outputs) == 2 else ():
        value = _constant(sub, c)
        if value is None:
            continue
        mask = np.broadcast_to(value, c.shape[:-2] + (length, keys)).reshape(-1, length, keys).any(0)
        rows, cols = np.nonzero(mask)
        if rows.size == 0:
            return 0, -1
        diff = cols - rows
        lo = int(diff.min()) if lo is None else max(lo, int(diff.min()))
        hi = int(diff.max()) if hi is None else min(hi, int(diff.max()))
    return lo, hi


def _fields(op: Op) -> dict:
    """What every flash template kind takes."""
    q, k = op.inputs[0].type, op.inputs[1].type
    length, keys, dim = q.shape[-2], k.shape[-2], q.shape[-1]
    mod = op.attrs["score_mod"]
    lo, hi = _keep_band(mod.graph, length, keys) if mod is not None else (None, None)
    if op.attrs["is_causal"]:
        hi = 0 if hi is None else min(hi, 0)
    extras = extras_of(op)
    fields = dict(
        stats_only=False,
        L=length,
        S=keys,
        D=dim,
        BH=math.prod(q.shape[:-2]),
        lead=list(q.shape[:-2]),
        scale=cuda_c.literal(op.attrs["scale"], f32),
        # the tensor-core forward's whole tiles: exp(x - max) as 2^(s * scale * log2 e - shift) by one fused
        # multiply-add, the max taken of the raw products (a positive scale keeps their order)
        scale_log2=cuda_c.literal(op.attrs["scale"] * math.log2(math.e), f32) if op.attrs["scale"] > 0 else "",
        causal=op.attrs["is_causal"],
        band_lo=lo,
        band_hi=hi,
        storage=q.dtype.cuda_type,
        has_mod=mod is not None,
        has_keep=mod is not None and len(mod.graph.outputs) == 2,
        n_extras=len(extras),
        extra_types=[e.dtype.cuda_type for e in extras],
        mod_fn="",
        grad_fn="",
        prelude="",
        mma_type="bf16" if q.dtype.name == "bf16" else "f16",
        BN=64 if dim == 64 else 32,
        # the tensor-core forward's m16 tiles of query rows per warp (its block: 64 * MT rows)
        MT=2 if dim == 64 and q.dtype.name in ("f16", "bf16") else 1,
        s_round="X",
        q_regs=True,  # the forward keeps its Q fragments in registers
        pipeline=flash_pipeline() and q.dtype.name in ("f16", "bf16"),
    )
    if mod is not None:
        sub = mod.graph
        rank = len(sub.inputs[0].shape)
        s_dtype = sub.inputs[0].dtype
        fields["s_round"] = cuda_c.load(cuda_c.convert("(X)", cuda_c.compute_dtype(s_dtype), s_dtype), s_dtype)
        fields["mod_fn"] = score_mod.device_function(sub, "flame_score_mod", rank, _out_types(sub))
        grad = op.attrs["score_mod_grad"]
        if op.name == BACKWARD and grad is not None:
            fields["grad_fn"] = score_mod.device_function(
                grad.graph, "flame_score_mod_grad", rank, ("float",), seed=True
            )
        fields["prelude"] = score_mod.preludes(sub, *((grad.graph,) if grad is not None else ()))
    return fields


def _shared(*arrays: tuple[str, int]) -> tuple[dict[str, int], int]:
    """The byte offset of each (name, bytes) array placed one after another in dynamic shared memory, each
    at a 16-byte boundary (cp.async and ldmatrix move 16-byte rows), and the total bytes."""
    offsets, total = {}, 0
    for name, size in arrays:
        offsets[name] = total
        total += -(-size // 16) * 16
    return offsets, total


def _forward_shared(fields: dict) -> tuple[dict[str, int], int]:
    """The pipelined forward's shared memory: the query tile, two key and two value tiles (rows padded to
    D + 8 elements of 2 bytes)."""
    row = (fields["D"] + 8) * 2
    return _shared(("sQ", 64 * fields["MT"] * row), ("sK", 2 * fields["BN"] * row), ("sV", 2 * fields["BN"] * row))


def _backward_shared(fields: dict) -> tuple[dict[str, int], int]:
    """The pipelined backward's shared memory: the block's key and value tiles, two query, two
    output-gradient and two statistics tiles of BQ (= BN) rows, and dS^T (BN rows of BQ + 8). On sm_90 the
    tile's dQ rows (f32, in the accumulator's order: the bulk reduction adds them as stored) are staged in
    the Q and dO buffers of the tile, once its products no longer read them."""
    bn, row = fields["BN"], (fields["D"] + 8) * 2
    return _shared(
        ("sK", bn * row),
        ("sV", bn * row),
        ("sQ", 2 * bn * row),
        ("sG", 2 * bn * row),
        ("sDS", bn * (bn + 8) * 2),
        ("sL", 2 * bn * 4),
        ("sD", 2 * bn * 4),
    )


def _out_types(sub: Graph) -> tuple[str, ...]:
    return tuple(cuda_c.compute_dtype(v.dtype).cuda_type for v in sub.outputs)


def _render(op: Op, kind: str, what: str, fields: dict) -> str:
    dtypes = {op.inputs[0].dtype, *(v.dtype for v in op.inputs)}
    return render_template(
        "flash_attention.cu.j2", header=header(op, what), kind=kind, **kernel_fields(dtypes, ""), **fields
    )


WGMMA_GROUPS, WGMMA_BN = 2, 128  # the Hopper forward's warpgroups (64 query rows each) and key tile


def _wgmma_shared_bytes() -> int:
    """The Hopper forward's dynamic shared memory: the query tile and two key and two value tiles, rows of
    128 bytes (head dim 64), and 1024 bytes to align the first tile as the swizzled layout needs."""
    return (64 * WGMMA_GROUPS + 4 * WGMMA_BN) * 128 + 1024


def lower_forward(op: Op, with_stats: bool, arch: str = "") -> list[Kernel]:
    """The forward kernel of attention op `op`: a forward (with_stats: the statistics go to a second
    output, the joined stats op's buffer, else to the kernel's scratch) or a stats op standing alone (its
    result is the statistics; the forward's output goes to the scratch). `arch`: the target's GPU ("sm_90"
    takes the wgmma form at head dim 64 where FLAME_FLASH_WGMMA asks for it)."""
    fields = _fields(op)
    q = op.inputs[0].type
    mma = q.dtype.name in ("f16", "bf16")
    wgmma = mma and arch == "sm_90" and fields["D"] == 64 and fields["pipeline"] and flash_wgmma()
    kind = "forward_wgmma" if wgmma else "forward_mma" if mma else "forward_plain"
    alone = op.name == STATS
    if wgmma:
        fields.update(WGS=WGMMA_GROUPS, BN=WGMMA_BN, arch_specific=ARCH_SPECIFIC)
        smem, smem_bytes, block, block_rows = {}, _wgmma_shared_bytes(), 128 * WGMMA_GROUPS, 64 * WGMMA_GROUPS
    else:
        if mma and fields["D"] == 64 and fields["pipeline"]:
            # key tiles of 128: half the per-tile work (the rescale of O, the max's shuffles, the barrier) per
            # key; S's 128 accumulators take the registers of Q's fragments, read from shared memory instead
            fields.update(BN=128, q_regs=False)
        smem, smem_bytes = _forward_shared(fields) if fields["pipeline"] else ({}, 0)
        block, block_rows = 128 if mma else 64, 64 * fields["MT"]
    source = _render(
        op,
        kind,
        "flash attention forward (online softmax, the score modification inlined)",
        {**fields, "stats_only": alone, "smem": smem},
    )
    tiles = -(-fields["L"] // block_rows) * fields["BH"]
    stem = f"flash_attention_{'stats' if alone else 'fwd'}_{q.dtype.name}_d{fields['D']}"
    rows = fields["BH"] * fields["L"]
    scratch = rows * fields["D"] * q.dtype.itemsize if alone else 0 if with_stats else rows * 4
    kernel = finish(stem, source, tiles, block, len(op.inputs), scratch, 2 if with_stats else 1)
    return [replace(kernel, smem=smem_bytes)]


def lower_backward(op: Op) -> list[Kernel]:
    """The backward's three kernels (prep, main, dQ), sharing one scratch buffer (dQ in f32, Delta); the
    main one on tensor cores for f16 / bf16 (BN keys per block, 16 per warp), on CUDA cores for f32."""
    fields = _fields(op)
    q = op.inputs[0].type
    bh, length, keys, dim = fields["BH"], fields["L"], fields["S"], fields["D"]
    padded = -(-length // 16) * 16  # the dQ accumulator's rows per (batch, head): whole 16-row groups
    scratch = (bh * padded * dim + bh * length) * 4
    mma = q.dtype.name in ("f16", "bf16")
    main = (
        ("backward_mma", -(-keys // fields["BN"]) * bh, 2 * fields["BN"])
        if mma
        else ("backward", -(-keys // 32) * bh, 32)
    )
    smem, smem_bytes = _backward_shared(fields) if fields["pipeline"] else ({}, 0)
    out = []
    for kind, grid, block in (
        ("backward_prep", -(-bh * padded // 8), 256),  # a warp per accumulator row
        main,
        ("backward_dq", -(-bh * length * dim // 256), 256),
    ):
        source = _render(op, kind, f"flash attention {kind.replace('_', ' ')}", {**fields, "smem": smem})
        kernel = finish(f"flash_attention_{kind}_{q.dtype.name}_d{dim}", source, grid, block, len(op.inputs), scratch)
        # the main kernel adds each key tile's dQ products into the f32 accumulator with atomics
        out.append(replace(kernel, smem=smem_bytes if kind == "backward_mma" else 0,
                           deterministic=kind == "backward_prep" or kind == "backward_dq"))
    return out
