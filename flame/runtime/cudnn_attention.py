"""cuDNN fused attention (forward and backward) through nvidia-cudnn-frontend's Python graph API, on
CuPy device memory (ARCHITECTURE.md "Library steps"), called by the plan's `AttentionCall` steps (runtime/cuda.py).

    spec = AttentionSpec.of(q_shape, k_shape, v_shape, "bf16", scale, is_causal, enable_gqa, mask_shape)
    why = unsupported_reason(spec)            # "" when cuDNN can run it, else the reason to fall back
    att = cudnn_attention(spec)               # graphs built once per spec and cached
    att.forward(q, k, v, out, stats, mask=None, workspace=ptr)   # workspace: att.workspace(...) bytes
    att.backward(q, k, v, out, grad_out, stats, grads, mask=None, workspace=ptr)

Operands are CuPy arrays or raw device pointers (ints) of contiguous row-major tensors in the IR's
shapes: q [..., H, L, E], k [..., Hkv, S, E], v [..., Hkv, S, Ev], out [..., H, L, Ev], stats
[..., H, L] f32; the leading dimensions are flattened into one batch. `grads` is the packed result of
scaled_dot_product_attention_backward: dq, dk, dv back to back. An additive mask broadcasts through
zero strides (a bool mask must be turned into an additive one by the caller). Both calls run on the
current CuPy stream and allocate nothing, so they can be captured into a CUDA graph.

`stats` are cuDNN's softmax statistics (generate_stats=True): per query row, the natural-log
log-sum-exp of the scaled, masked scores, in f32 — what IR op scaled_dot_product_attention_stats is
(ir/ops/attention.py). The forward writes them for the backward, which reads them instead of running
the forward again. A forward call whose statistics nobody keeps (inference: the graph has no stats
op) gets stats=None and writes them to the start of its workspace; a call for the statistics alone
(out=None: the stats op was not joined to its forward, e.g. the forward is recomputed in the
backward) writes the forward's output there. The backward's workspace is cuDNN's alone."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache

from flame.ir.indexmap import contiguous_strides
from flame.ir.ops.attention import BACKWARD, BIAS_GRAD, FORWARD, STATS, mask_of
from flame.plan.steps import aligned
from flame.runtime import cudnn_cache, determinism
from flame.runtime.cudnn_graph import cudnn_module, device_ptr, execute, handle, refusals

DTYPES = ("f16", "bf16")
NO_SCORE_MOD = "cuDNN's fused attention cannot express a score modification (score_mod)"
# the graphs' tensors by uid: a graph read back from the cache of built graphs runs the same way
UIDS = {"q": 1, "k": 2, "v": 3, "o": 4, "stats": 5, "bias": 6, "dO": 7, "dq": 8, "dk": 9, "dv": 10}
TENSORS = {
    "forward": ("q", "k", "v", "bias", "o", "stats"),
    "backward": ("q", "k", "v", "o", "dO", "stats", "bias", "dq", "dk", "dv"),
}


@dataclass(frozen=True)
class AttentionSpec:
    """What a cuDNN attention graph is built for: the flattened batch, heads, lengths, head sizes,
    dtype, scale, causality and the mask's dims broadcast to [B, H, L, S] (() for no mask)."""

    batch: int
    heads: int
    kv_heads: int
    q_len: int
    kv_len: int
    head_dim: int
    value_dim: int
    dtype: str
    scale: float
    causal: bool
    mask_dims: tuple[int, ...] = ()
    strides: tuple[tuple[str, tuple[int, ...]], ...] = ()  # (name, [b, h, l, e] strides): strided operands

    @staticmethod
    def of(
        q_shape,
        k_shape,
        v_shape,
        dtype: str,
        scale: float,
        is_causal: bool,
        enable_gqa: bool,
        mask_shape: tuple[int, ...] | None = None,
    ) -> AttentionSpec:
        """The spec of one scaled_dot_product_attention op (shapes as in the IR)."""
        q_shape, k_shape, v_shape = tuple(q_shape), tuple(k_shape), tuple(v_shape)
        heads = q_shape[-3] if len(q_shape) >= 3 else 1
        kv_heads = k_shape[-3] if enable_gqa else heads
        batch = math.prod(q_shape[:-2]) // heads if heads else 0
        mask_dims = ()
        if mask_shape is not None:
            full = (1,) * (len(q_shape) - len(mask_shape)) + tuple(mask_shape)
            lead = math.prod(full[:-3]) if len(full) > 3 else 1
            mask_dims = (lead, full[-3] if len(full) >= 3 else 1, *full[-2:])
        return AttentionSpec(
            batch,
            heads,
            kv_heads,
            q_shape[-2],
            k_shape[-2],
            q_shape[-1],
            v_shape[-1],
            dtype,
            float(scale),
            bool(is_causal),
            mask_dims,
        )

    def dims(self, which: str) -> tuple[int, ...]:
        b, h, hk, lq, lk, e, ev = (
            self.batch,
            self.heads,
            self.kv_heads,
            self.q_len,
            self.kv_len,
            self.head_dim,
            self.value_dim,
        )
        return {
            "q": (b, h, lq, e),
            "k": (b, hk, lk, e),
            "v": (b, hk, lk, ev),
            "o": (b, h, lq, ev),
            "stats": (b, h, lq, 1),
        }[which]

    def numel(self, which: str) -> int:
        return math.prod(self.dims(which))

    def stride(self, name: str, which: str) -> list[int]:
        """The strides of operand `name` (q, k, v, o, grad_out, dq, dk, dv: of dims `which`)."""
        return list(dict(self.strides).get(name, contiguous_strides(self.dims(which))))


def unsupported_reason(spec: AttentionSpec) -> str:
    """Why cuDNN cannot run `spec` (the op then stays the unfused graph), or "" if it can as far as
    flame knows; building the graph may still refuse (CudnnAttention raises NotImplementedError)."""
    if spec.dtype not in DTYPES:
        return f"cuDNN fused attention takes f16/bf16, not {spec.dtype}"
    if 0 in (spec.batch, spec.heads, spec.q_len, spec.kv_len):
        return (
            f"an empty attention (batch {spec.batch}, heads {spec.heads}, L={spec.q_len}, S={spec.kv_len}): "
            f"its results are constants"
        )
    if spec.head_dim % 8 or spec.value_dim % 8:
        return f"head sizes must be multiples of 8 (E={spec.head_dim}, Ev={spec.value_dim})"
    if max(spec.head_dim, spec.value_dim) > 256:
        return f"head sizes above 256 are not supported (E={spec.head_dim}, Ev={spec.value_dim})"
    if spec.heads % spec.kv_heads:
        return f"{spec.kv_heads} key/value heads do not divide {spec.heads} query heads"
    if spec.mask_dims and spec.mask_dims[0] not in (1, spec.batch):
        return f"a mask broadcast over only some of the batch dimensions ({list(spec.mask_dims)}) is not supported"
    if spec.mask_dims and spec.mask_dims[-2:] != (spec.q_len, spec.kv_len):
        return f"a mask broadcast over query or key positions ({list(spec.mask_dims)}) is not supported"
    return ""


def spec_of(op, layouts: tuple = ()) -> AttentionSpec:
    """The spec of a scaled_dot_product_attention(_stats, _backward) IR op whose call reads and writes
    the operands in `layouts` ((name, start, strides in the IR's shapes), AttentionCall.layouts)
    through those strides."""
    q, k, v = (x.type for x in op.inputs[:3])
    mask = mask_of(op)
    spec = AttentionSpec.of(
        q.shape,
        k.shape,
        v.shape,
        q.dtype.name,
        op.attrs["scale"],
        op.attrs["is_causal"],
        op.attrs["enable_gqa"],
        None if mask is None else mask.type.shape,
    )
    shapes = {"q": q.shape, "k": k.shape, "v": v.shape, "dq": q.shape, "dk": k.shape, "dv": v.shape}
    strides = tuple(
        (name, _strides4(shapes.get(name, op.inputs[0].type.shape[:-1] + (v.shape[-1],)), st))
        for name, _, st in layouts
    )
    return replace(spec, strides=strides)


def _strides4(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, ...] | None:
    """[b, h, l, e] strides of an operand of IR shape [..., (H,) L, E] with these strides (its leading
    dims flattened into the batch), or None when the leading dims cannot be flattened."""
    shape, strides = (1, 1, *shape)[-max(len(shape), 4) :], (0, 0, *strides)[-max(len(strides), 4) :]
    lead = [(n, st) for n, st in zip(shape[:-3], strides[:-3]) if n != 1]
    if any(a[1] != b[1] * b[0] for a, b in zip(lead, lead[1:])):
        return None
    h = strides[-3] if shape[-3] != 1 else strides[-2] * shape[-2]
    b = lead[-1][1] if lead else h * shape[-3]
    return (b, h, strides[-2] if shape[-2] != 1 else strides[-1] * shape[-1], strides[-1])


def layout_unsupported(op, name: str, shape: tuple[int, ...], layout) -> str:
    """Why cuDNN cannot take operand `name` of attention op `op` at a strided layout (start, strides
    in elements of its buffer): the head dim must be contiguous, the other strides positive, and the
    start and every stride 16-byte aligned (the TMA loads cuDNN's kernels use), the leading dims
    flattenable into one batch. "" if it can."""
    item = op.inputs[0].type.dtype.itemsize
    big = [st for n, st in zip(shape, layout.strides) if n != 1]
    if layout.strides[-1] != 1 and shape[-1] != 1:
        return f"cuDNN needs the head dim of {name} contiguous (strides {list(layout.strides)})"
    if any(st <= 0 for st in big):
        return f"cuDNN needs positive strides ({name}: {list(layout.strides)})"
    if (layout.start * item) % 16 or any((st * item) % 16 for st in big[:-1]):
        return (
            f"cuDNN needs 16-byte aligned strides and start ({name}: start {layout.start}, strides "
            f"{list(layout.strides)} of {item}-byte elements)"
        )
    if _strides4(tuple(shape), tuple(layout.strides)) is None:
        return f"the leading dims of {name} cannot be flattened into one batch (strides {list(layout.strides)})"
    return ""


def op_unsupported(op) -> str:
    """Why cuDNN cannot run attention op `op` ("" if it can): the spec's limits, bool masks (cuDNN
    takes an additive bias), and the bias gradient (cuDNN's dBias output is not wired in flame)."""
    if op.name == BIAS_GRAD:
        return (
            "the attention bias needs a gradient and flame does not wire cuDNN's dBias output: "
            "the bias gradient runs as primitive ops"
        )
    if op.attrs.get("score_mod") is not None:
        return NO_SCORE_MOD
    mask = mask_of(op)
    if mask is not None and mask.type.dtype.kind == "bool":
        return "cuDNN takes an additive mask, not a bool one"
    return unsupported_reason(spec_of(op))


def _kept_in_workspace(spec: AttentionSpec, op_name: str, with_stats: bool) -> int:
    """Bytes at the start of a call's workspace for what the call computes but nothing keeps: a
    forward's statistics when no buffer takes them, the forward's output when only the statistics
    are wanted."""
    if op_name == FORWARD and not with_stats:
        return aligned(spec.numel("stats") * 4)
    if op_name == STATS:
        return aligned(spec.numel("o") * 2)
    return 0


def workspace_bytes(op, with_stats: bool = False, exact: bool = False, att: CudnnAttention | None = None,
                    layouts: tuple = ()) -> int:
    """The workspace op's call needs (with_stats: a forward whose call also writes its statistics to
    a planned buffer): exact (cuDNN's own figure; builds the graphs of the call at `layouts`, its
    strided operands) when `exact`, else an upper bound from the shapes: cuDNN's backward accumulates
    dq (and, with GQA, dk/dv) in f32 plus per-row sums."""
    spec = spec_of(op)
    kept = _kept_in_workspace(spec, op.name, with_stats)
    if exact:
        att = att or cudnn_attention(spec_of(op, layouts))
        return kept + (att.backward_workspace if op.name == BACKWARD else att.forward_workspace)
    if op.name != BACKWARD:
        return kept + (1 << 20)
    accum = 4 * (spec.numel("q") + (spec.numel("k") + spec.numel("v") if spec.kv_heads != spec.heads else 0))
    return aligned(accum + 2 * spec.numel("stats") * 4) + (1 << 20)


class CudnnAttention:
    """The forward (with stats) and backward cuDNN graphs of one AttentionSpec, each built (or read back
    from the cache of built graphs, runtime/cudnn_cache.py) at its first use."""

    def __init__(self, spec: AttentionSpec, deterministic: bool = False):
        why = unsupported_reason(spec)
        if why:
            raise NotImplementedError(f"cuDNN attention: {why}")
        self.spec = spec
        self.deterministic = deterministic  # the backward takes cuDNN's deterministic algorithm
        self._cudnn = cudnn_module("cuDNN attention")
        self._io = {"f16": self._cudnn.data_type.HALF, "bf16": self._cudnn.data_type.BFLOAT16}[spec.dtype]
        self.itemsize = 2

    def _built(self, direction: str, build):
        """(graph, {tensor name: uid, None for no mask}) of the `direction` graph: read back from the
        cache of built graphs (runtime/cudnn_cache.py) or build(cudnn); NotImplementedError where
        cuDNN refuses it. The forward and the backward graph are built at first use: a forward
        call's spec and its backward's differ where their other operands are strided."""
        try:
            g = cudnn_cache.graph(
                self._cudnn,
                f"attention {direction} {self.spec!r}" + (" deterministic" if self.deterministic else ""),
                f"attention {direction}",
                lambda: build(self._cudnn),
            )
        except refusals(self._cudnn) as e:
            raise NotImplementedError(f"cuDNN refused attention {self.spec}: {e}") from None
        return g, {n: None if n == "bias" and not self.spec.mask_dims else UIDS[n] for n in TENSORS[direction]}

    @cached_property
    def _forward_graph(self):
        return self._built("forward", self._build_forward)

    @cached_property
    def _backward_graph(self):
        return self._built("backward", self._build_backward)

    @property
    def forward_workspace(self) -> int:
        """The forward graph's own workspace (a call keeping its stats or output there adds
        _kept_in_workspace)."""
        return aligned(self._forward_graph[0].get_workspace_size())

    @property
    def backward_workspace(self) -> int:
        return aligned(self._backward_graph[0].get_workspace_size())

    def _graph(self, cudnn):
        return cudnn.pygraph(
            io_data_type=self._io,
            intermediate_data_type=cudnn.data_type.FLOAT,
            compute_data_type=cudnn.data_type.FLOAT,
            handle=handle(),
        )

    def _tensor(self, g, name: str, dims, data_type=None, strides=None):
        t = g.tensor(
            name=name,
            dim=list(dims),
            stride=strides or list(contiguous_strides(tuple(dims))),
            data_type=data_type or self._io,
        )
        t.set_uid(UIDS[name])
        return t

    def _mask(self, g):
        """The additive mask as cuDNN's bias: broadcast dimensions get stride 0."""
        if not self.spec.mask_dims:
            return None
        dims = (self.spec.batch, self.spec.heads, self.spec.q_len, self.spec.kv_len)
        own = contiguous_strides(self.spec.mask_dims)
        strides = [0 if m == 1 and d != 1 else s for m, d, s in zip(self.spec.mask_dims, dims, own)]
        return self._tensor(g, "bias", dims, strides=strides)

    def _operands(self, g, names=("q", "k", "v")):
        return [self._tensor(g, n, self.spec.dims(n), strides=self.spec.stride(n, n)) for n in names]

    def _output(self, t, name: str, dims, data_type=None, strides=None):
        t.set_output(True).set_dim(list(dims)).set_stride(strides or list(contiguous_strides(tuple(dims))))
        if data_type is not None:
            t.set_data_type(data_type)
        t.set_uid(UIDS[name])

    def _build_forward(self, cudnn):
        g = self._graph(cudnn)
        q, k, v = self._operands(g)
        bias = self._mask(g)
        o, stats = g.sdpa(
            name="sdpa",
            q=q,
            k=k,
            v=v,
            attn_scale=self.spec.scale,
            bias=bias,
            use_causal_mask=self.spec.causal,
            generate_stats=True,
        )
        self._output(o, "o", self.spec.dims("o"), strides=self.spec.stride("o", "o"))
        self._output(stats, "stats", self.spec.dims("stats"), cudnn.data_type.FLOAT)
        g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        return g

    def _build_backward(self, cudnn):
        g = self._graph(cudnn)
        q, k, v, o = self._operands(g, ("q", "k", "v", "o"))
        do = self._tensor(g, "dO", self.spec.dims("o"), strides=self.spec.stride("grad_out", "o"))
        stats = self._tensor(g, "stats", self.spec.dims("stats"), cudnn.data_type.FLOAT)
        bias = self._mask(g)
        dq, dk, dv = g.sdpa_backward(
            name="sdpa_backward",
            q=q,
            k=k,
            v=v,
            o=o,
            dO=do,
            stats=stats,
            attn_scale=self.spec.scale,
            bias=bias,
            use_causal_mask=self.spec.causal,
            **({"use_deterministic_algorithm": True} if self.deterministic else {}),
        )
        for t, which in ((dq, "q"), (dk, "k"), (dv, "v")):
            self._output(t, "d" + which, self.spec.dims(which), strides=self.spec.stride("d" + which, which))
        g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        return g

    def _run(self, g, pack: dict, workspace: int) -> None:
        execute(g, pack, workspace)

    def _forward_pack(self, q, k, v, out, stats: int, mask) -> dict:
        t = self._forward_graph[1]
        pack = {
            t["q"]: device_ptr(q),
            t["k"]: device_ptr(k),
            t["v"]: device_ptr(v),
            t["o"]: device_ptr(out),
            t["stats"]: stats,
        }
        if t["bias"] is not None:
            pack[t["bias"]] = device_ptr(mask)
        return pack

    def forward(self, q, k, v, out, stats, mask=None, workspace=0) -> None:
        """out = attention(q, k, v[, mask]) and stats = the log-sum-exp of each row of its scores.
        `out` or `stats` may be None (nobody keeps it): it is then written to the start of the
        workspace, which holds workspace_bytes of the call (forward_workspace + the kept bytes)."""
        scratch = device_ptr(workspace)
        if stats is None:
            stats, scratch = scratch, scratch + _kept_in_workspace(self.spec, FORWARD, False)
        if out is None:
            out, scratch = scratch, scratch + _kept_in_workspace(self.spec, STATS, False)
        self._run(self._forward_graph[0], self._forward_pack(q, k, v, out, device_ptr(stats), mask), scratch)

    def backward(self, q, k, v, out, grad_out, stats, grads, mask=None, workspace=0) -> None:
        """grads (dq, dk, dv packed flat, or a tuple of the three, each at its spec strides) of
        attention at q, k, v for cotangent grad_out, from the forward's out and stats; `workspace`:
        backward_workspace bytes."""
        if isinstance(grads, tuple):
            dq, dk, dv = (device_ptr(x) for x in grads)
        else:
            dq = device_ptr(grads)
            dk = dq + self.spec.numel("q") * self.itemsize
            dv = dk + self.spec.numel("k") * self.itemsize
        g, t = self._backward_graph
        pack = {
            t["q"]: device_ptr(q),
            t["k"]: device_ptr(k),
            t["v"]: device_ptr(v),
            t["o"]: device_ptr(out),
            t["dO"]: device_ptr(grad_out),
            t["stats"]: device_ptr(stats),
            t["dq"]: dq,
            t["dk"]: dk,
            t["dv"]: dv,
        }
        if t["bias"] is not None:
            pack[t["bias"]] = device_ptr(mask)
        self._run(g, pack, device_ptr(workspace))


def cudnn_attention(spec: AttentionSpec) -> CudnnAttention:
    """The built graphs for `spec` under the determinism setting (runtime/determinism.cudnn: the
    backward takes cuDNN's deterministic algorithm), cached (building takes milliseconds to seconds)."""
    return _built_attention(spec, determinism.cudnn())


@lru_cache(maxsize=256)
def _built_attention(spec: AttentionSpec, deterministic: bool) -> CudnnAttention:
    return CudnnAttention(spec, deterministic)


cudnn_attention.cache_clear = _built_attention.cache_clear
