"""Convolutions the backend cannot run as one library call become im2col + matmul (ARCHITECTURE.md "Patterns
become ops").

conv, conv_grad_input and conv_grad_weight are one op each so that the GPU runs each as one cuDNN
call; where cuDNN is absent or refuses (f64, a shape no engine takes ...), `supported(op)` gives the
reason and this pass replaces the op by movement ops and matmuls computing what its NumPy reference
computes (flame/ir/ops/conv.py). With x [N, C, *S], w [K, C/G, *R], G groups, Cg = C/G, Kg = K/G,
RR = prod(R) kernel offsets and P = prod(O) output positions:

    cols = im2col(x)      pad x, one strided slice per kernel offset r, stacked:  [N, G, Cg*RR, P]
    conv              y  = w[G, Kg, Cg*RR] @ cols                                 -> [N, K, *O]
    conv_grad_weight  dw = dy[G, Kg, N*P] @ cols^T[G, N*P, Cg*RR]                 -> [K, Cg, *R]
    conv_grad_input   dx = col2im(w^T[G, Cg*RR, Kg] @ dy[N, G, Kg, P])            -> [N, C, *S]

col2im scatters each kernel offset's [N, C, *O] slab back to its strided window of the padded input
(ir/ops/movement.place_strided, a strided slice's adjoint: zeros interleaved, then a pad to place
it), sums the RR slabs and cuts the padding away. Matmuls stay in the input dtype (f16/bf16
accumulate in f32 on the GPU, as the reference computes in f32); the weight gradient contracts over
N*P in one matmul per group, so a low-precision result is rounded once. The cost is RR copies of the
input (or the gradient): a fallback, not a fast path.

Every op that replaces a convolution carries the op's source line with `[decompose_conv: <reason>]`
appended (so dumps and `flame explain` say why it is not one call), and each reason is logged at
info level once per process."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

from flame.ir.builder import Builder
from flame.ir.graph import Graph, Op, Value
from flame.ir.ops.movement import place_strided
from flame.passes._rewrite import DECOMPOSE_ALL, Supported, decompose  # noqa: F401  (DECOMPOSE_ALL: re-exported)


def note(reason: str) -> str:
    """The text appended to the source line of the ops that replace a convolution."""
    return f"[decompose_conv: {reason}]"  # as passes._rewrite.decompose writes it


def _im2col(b: Builder, x: Value, k_shape, o_shape, attrs) -> Value:
    """x [N, C, *S] -> columns [N, G, Cg*RR, P]: the padded input at p*stride + r*dilation for every
    kernel offset r (in w's row-major order) and output position p."""
    n, c = x.shape[:2]
    g = attrs["groups"]
    pads = [(0, 0), (0, 0), *(tuple(p) for p in attrs["padding"])]
    if any(lo or hi for lo, hi in pads):
        x = b.pad(x, pads=pads, value=0)
    slabs = []
    for r in itertools.product(*(range(k) for k in k_shape)):
        starts = [0, 0, *(ri * d for ri, d in zip(r, attrs["dilation"]))]
        stops = [n, c, *(st + (o - 1) * s + 1 for st, o, s in zip(starts[2:], o_shape, attrs["stride"]))]
        slab = b.slice(x, starts=starts, stops=stops, steps=[1, 1, *attrs["stride"]])
        slabs.append(b.unsqueeze(slab, axes=[2]))
    cols = slabs[0] if len(slabs) == 1 else b.concat(*slabs, axis=2)  # [N, C, RR, *O]
    return b.reshape(cols, shape=(n, g, c // g * math.prod(k_shape), math.prod(o_shape)))


def _col2im(b: Builder, cols: Value, x_shape, k_shape, o_shape, attrs) -> Value:
    """columns [N, G, Cg*RR, P] -> dx [N, C, *S]: each kernel offset's slab added into its strided
    window of the padded input, the padding then cut away."""
    n, c, *spatial = x_shape
    rr = math.prod(k_shape)
    cols = b.reshape(cols, shape=(n, c, rr, *o_shape))
    padded = [s + lo + hi for s, (lo, hi) in zip(spatial, attrs["padding"])]
    total = None
    for i, r in enumerate(itertools.product(*(range(k) for k in k_shape))):
        starts, stops = [0] * cols.type.rank, list(cols.shape)
        starts[2], stops[2] = i, i + 1
        slab = b.reshape(b.slice(cols, starts=starts, stops=stops, steps=[1] * cols.type.rank),
                         shape=(n, c, *o_shape))
        for d, (ri, dil, s, length) in enumerate(zip(r, attrs["dilation"], attrs["stride"], padded)):
            slab = place_strided(b, slab, 2 + d, ri * dil, s, length)
        total = slab if total is None else b.add(total, slab)
    if any(lo or hi for lo, hi in attrs["padding"]):
        starts = [0, 0, *(lo for lo, _ in attrs["padding"])]
        stops = [n, c, *(lo + s for (lo, _), s in zip(attrs["padding"], spatial))]
        total = b.slice(total, starts=starts, stops=stops, steps=[1] * len(starts))
    return total


def _grouped_weight(b: Builder, w: Value, groups: int) -> Value:
    """w [K, Cg, *R] as [G, Kg, Cg*RR]."""
    return b.reshape(w, shape=(groups, w.shape[0] // groups, math.prod(w.shape[1:])))


def _grouped_grad(b: Builder, dy: Value, groups: int) -> Value:
    """dy [N, K, *O] as [N, G, Kg, P]."""
    n, k = dy.shape[:2]
    return b.reshape(dy, shape=(n, groups, k // groups, math.prod(dy.shape[2:])))


def _conv(b: Builder, op: Op) -> Value:
    x, w = op.inputs
    attrs = op.attrs
    cols = _im2col(b, x, w.shape[2:], op.out.shape[2:], attrs)
    y = b.matmul(_grouped_weight(b, w, attrs["groups"]), cols)  # [G, Kg, CgRR] @ [N, G, CgRR, P]
    return b.reshape(y, shape=op.out.shape)


def _grad_weight(b: Builder, op: Op) -> Value:
    x, dy = op.inputs
    attrs, g = op.attrs, op.attrs["groups"]
    cols = _im2col(b, x, op.out.shape[2:], dy.shape[2:], attrs)  # [N, G, CgRR, P]
    n, _, crr, p = cols.shape
    cols = b.reshape(b.permute(cols, perm=[1, 0, 3, 2]), shape=(g, n * p, crr))
    dyg = _grouped_grad(b, dy, g)  # [N, G, Kg, P]
    dyg = b.reshape(b.permute(dyg, perm=[1, 2, 0, 3]), shape=(g, dyg.shape[2], n * p))
    return b.reshape(b.matmul(dyg, cols), shape=op.out.shape)


def _grad_input(b: Builder, op: Op) -> Value:
    dy, w = op.inputs
    attrs = op.attrs
    cols = b.matmul(b.transpose_last(_grouped_weight(b, w, attrs["groups"])), _grouped_grad(b, dy, attrs["groups"]))
    return _col2im(b, cols, op.out.shape, w.shape[2:], dy.shape[2:], attrs)


_DECOMPOSITIONS: dict[str, Callable[[Builder, Op], Value]] = {
    "conv": _conv, "conv_grad_input": _grad_input, "conv_grad_weight": _grad_weight}




def decompose_conv(g: Graph, supported: Supported | None = None) -> Graph:
    """Replace each convolution op (conv, conv_grad_input, conv_grad_weight) that `supported(op)`
    gives a non-empty reason for by movement ops and matmuls computing the same (None: every one,
    reason DECOMPOSE_ALL).

    Before: a verified graph. After: the same function; the convolutions the backend cannot run are
    gone, and the ops replacing one carry its loc with note(reason) appended. g is not modified (it
    is returned as it is when no op needs decomposing)."""
    return decompose(g, _DECOMPOSITIONS, supported, "decompose_conv", "a convolution runs as im2col + matmul")
