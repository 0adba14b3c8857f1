"""What a forward convolution's library call can compute after the convolution (DESIGN.md §8): the
fusion pass (passes/fuse.py) asks `conv_epilogue` whether an elementwise op reading a conv group's
result joins the call (the group's ops: the convolution, then one op per stage, in order). The stages
are flame.target.CONV_EPILOGUE_STAGES:

    bias       add of a per-channel vector (any shape whose one non-unit dim is the channel dim:
               the [1, 1, 1, C] view of a Conv2d bias over channels-last activations)
    residual   add of a tensor of the result's type (a ResNet block's skip connection)
    relu, silu, gelu (erf), gelu_tanh

The call computes them in f32 on the unrounded convolution and rounds once, as cuBLASLt's matmul
epilogues do. A stage joins only when the value before it has no other reader and is not returned
(the backward reads neither a bias add's operands nor ReLU's input: ReLU's gradient reads its output;
SiLU's and GELU's read their input, so in a training step they stay out), when its operand is held in
a buffer without a kernel of its own (not a `full` constant), and at most one activation per call."""

from __future__ import annotations

from flame.ir.graph import Op, Value, other_operand
from flame.ir.registry import get
from flame.passes.prepare_fusion import is_free
from flame.target import CONV_STAGE_SEP, Target, conv_stages

ACTIVATIONS = ("relu", "silu", "gelu", "gelu_tanh")
_FLOATS = ("f32", "f16", "bf16")


def conv_epilogue(ops: list[Op], epilogue: str, op: Op, private: bool, target: Target) -> str | None:
    """The epilogue of a conv group once `op` joins it, or None when it does not. ops: the group (the
    convolution, then one op per stage of `epilogue`); private: the group's last result is read only
    by op and is not a graph output."""
    conv, last = ops[0], ops[-1].out
    if conv.name != "conv" or not private or last.dtype.name not in _FLOATS:
        return None
    stage, have = _stage(conv, last, op), conv_stages(epilogue)
    if stage is None or stage in have or stage not in target.conv_epilogues:
        return None
    if stage in ACTIVATIONS and any(s in ACTIVATIONS for s in have):
        return None
    return CONV_STAGE_SEP.join([*have, stage])


def _stage(conv: Op, last: Value, op: Op) -> str | None:
    """The stage op computes on `last` (the convolution's result, or the previous stage's), or None."""
    if op.out.type != last.type or last not in op.inputs:
        return None
    if op.name in ("relu", "silu"):
        return op.name
    if op.name == "gelu":
        return "gelu_tanh" if op.attrs["approximate"] == "tanh" else "gelu"
    other = other_operand(op, last) if op.name == "add" else None
    if other is None or not _stored(other):
        return None
    if other.type == last.type:
        return "residual"
    axis = len(last.shape) - 1 if conv.attrs.get("channels_last") else 1
    return "bias" if other.dtype == last.dtype and _per_channel(other.shape, last.shape, axis) else None


def _per_channel(shape: tuple[int, ...], out: tuple[int, ...], axis: int) -> bool:
    """A value of `shape` broadcast over `out` holds one number per index of out's dim `axis`."""
    if len(shape) > len(out):
        return False
    full = (1,) * (len(out) - len(shape)) + tuple(shape)
    return full[axis] == out[axis] and all(d == 1 for i, d in enumerate(full) if i != axis)


def _stored(v: Value) -> bool:
    """v is in a buffer when the call runs with no kernel of its own: a graph input, a value some
    kernel computes, or a relabelling view of one (an Alias); not a `full` constant, which kernels
    recompute and nothing writes."""
    p = v.producer
    if p is None or not is_free(p):
        return True
    view = get(p.name).view
    return view is not None and view.relabel and _stored(p.inputs[0])
