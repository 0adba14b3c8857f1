"""The convolutions of flame.nn.functional (PyTorch names and semantics), over the conv ops of
flame/ir/ops/conv.py with the bias as a broadcast add:
- convNd: one `conv` op; "same" padding is resolved here (asymmetric for even kernels, as PyTorch).
- conv_transposeNd: one `conv_grad_input` op (its data gradient) with the output shape implied by
  output_padding."""

from __future__ import annotations

from flame.errors import FlameError
from flame.frontend.autocast import cast_inputs
from flame.frontend.dispatch import apply
from flame.frontend.promotion import same_dtype
from flame.frontend.spatial import _batched, _err, _pad_spatial, ntuple
from flame.frontend.tensor import Tensor
from flame.ir.dtypes import f64

__all__ = ["conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"]


def _call(name: str, op: str, *inputs, **attrs) -> Tensor:
    """apply() with the user's function named in front of the op's own message."""
    try:
        return apply(op, *inputs, **attrs)
    except FlameError as e:
        raise type(e)(f"{name}: {e}") from None


def _channel_view(t: Tensor, d: int) -> Tensor:
    """A per-channel vector [C] as [C, 1, ...] broadcasting over d spatial dims."""
    return t.reshape(t.shape[0], *([1] * d))


def _conv_padding(name, padding, k, stride, dilation, d) -> tuple[tuple[int, int], ...]:
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * d
        if padding != "same":
            raise _err(f"{name}: padding must be 'same', 'valid', an int or {d} ints, got {padding!r}")
        if any(s != 1 for s in stride):
            raise _err(f"{name}: padding='same' is not supported for strided convolutions (stride={list(stride)})")
        total = [dl * (kk - 1) for kk, dl in zip(k, dilation)]
        return tuple((t // 2, t - t // 2) for t in total)  # the extra one at the end, as PyTorch
    return tuple((p, p) for p in ntuple(padding, d, "padding", name))


def _check_weight_channels(name: str, weight: Tensor, outputs: int, groups) -> None:
    """PyTorch's refusal of a weight with no output channels (fewer than groups along dim 0, or an
    empty second dim for a transposed convolution's [C_in, C_out/groups, ...])."""
    if weight.shape[0] < int(groups) or outputs < 1:
        raise _err(
            f"{name}: given groups={int(groups)}, expected the weight to have at least {int(groups)} "
            f"output channel(s), got weight of size {list(weight.shape)}"
        )


def _conv(d: int, x: Tensor, weight: Tensor, bias, stride, padding, dilation, groups) -> Tensor:
    name = f"conv{d}d"
    x, weight, bias = cast_inputs("lower", (x, weight, bias))  # autocast: PyTorch's lower-precision list
    same_dtype(name, input=x, bias=bias)  # (a weight of another dtype: the IR op's error)
    x, unbatched = _batched(name, x, d)
    if weight.ndim != d + 2:
        raise _err(
            f"{name}: the weight must be [C_out, C_in/groups, {', '.join('k' * d)}], got "
            f"{weight.dtype}{list(weight.shape)}"
        )
    _check_weight_channels(name, weight, weight.shape[0], groups)
    stride, dilation = ntuple(stride, d, "stride", name), ntuple(dilation, d, "dilation", name)
    pads = _conv_padding(name, padding, weight.shape[2:], stride, dilation, d)
    y = _call(name, "conv", x, weight, stride=stride, padding=pads, dilation=dilation, groups=int(groups))
    if bias is not None:
        if tuple(bias.shape) != (weight.shape[0],):
            raise _err(f"{name}: bias must be [{weight.shape[0]}] (one per output channel), got {list(bias.shape)}")
        y = y + _channel_view(bias, d)
    return y.squeeze(0) if unbatched else y


def conv1d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride=1,
    padding=0,
    dilation=1,  # noqa: A002
    groups: int = 1,
) -> Tensor:
    """1-D convolution (cross-correlation) of [N, C_in, L] with weight [C_out, C_in/groups, k]."""
    return _conv(1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride=1,
    padding=0,
    dilation=1,  # noqa: A002
    groups: int = 1,
) -> Tensor:
    """2-D convolution of [N, C_in, H, W] with weight [C_out, C_in/groups, kh, kw]; padding an int, a
    pair, "valid" or "same" (stride 1)."""
    return _conv(2, input, weight, bias, stride, padding, dilation, groups)


def conv3d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride=1,
    padding=0,
    dilation=1,  # noqa: A002
    groups: int = 1,
) -> Tensor:
    """3-D convolution of [N, C_in, D, H, W] with weight [C_out, C_in/groups, kd, kh, kw]."""
    return _conv(3, input, weight, bias, stride, padding, dilation, groups)


# ---- transposed convolutions ---------------------------------------------------------------------


def _conv_transpose(d, x, weight, bias, stride, padding, output_padding, groups, dilation) -> Tensor:
    name = f"conv_transpose{d}d"
    x, weight, bias = cast_inputs("lower", (x, weight, bias))  # autocast: PyTorch's lower-precision list
    if d < 3 and x.dtype == f64 and bias is not None:  # torch's CPU kernel for f64 (no oneDNN) converts the bias
        bias = bias.to(f64)
    same_dtype(name, input=x, bias=bias)  # (torch's oneDNN kernel, the one for f32 but the smallest shapes, refuses)
    x, unbatched = _batched(name, x, d)
    if weight.ndim != d + 2:
        raise _err(
            f"{name}: the weight must be [C_in, C_out/groups, {', '.join('k' * d)}], got "
            f"{weight.dtype}{list(weight.shape)}"
        )
    _check_weight_channels(name, weight, weight.shape[1], groups)
    stride, dilation = ntuple(stride, d, "stride", name), ntuple(dilation, d, "dilation", name)
    pad, out_pad = ntuple(padding, d, "padding", name), ntuple(output_padding, d, "output_padding", name)
    if x.shape[1] != weight.shape[0]:
        raise _err(
            f"{name}: the input has {x.shape[1]} channels but the weight {list(weight.shape)} expects "
            f"{weight.shape[0]} (weight is [C_in, C_out/groups, ...])"
        )
    for op, s, dl in zip(out_pad, stride, dilation):
        if not 0 <= op < max(s, dl):
            raise _err(
                f"{name}: output_padding {list(out_pad)} must be smaller than either stride {list(stride)} "
                f"or dilation {list(dilation)}"
            )
    size = [
        (n - 1) * s - 2 * p + dl * (k - 1) + op + 1
        for n, s, p, dl, k, op in zip(x.shape[2:], stride, pad, dilation, weight.shape[2:], out_pad)
    ]
    if min(size) < (0 if x.shape[0] == 0 else 1):  # PyTorch: an empty batch may have an empty output
        raise _err(f"{name}: the output size {size} is not positive (input {list(x.shape)}, padding {list(pad)})")
    cout = weight.shape[1] * int(groups)
    if bias is not None and tuple(bias.shape) != (cout,):
        raise _err(f"{name}: bias must be [{cout}] (one per output channel), got {list(bias.shape)}")
    if x.shape[0] == 0 and (0 in size or 0 in x.shape[2:]):  # PyTorch: an empty batch's output, any size
        parts = [t.reshape(-1)[:0].to(x.dtype) for t in (x, weight, bias) if t is not None]
        return sum(parts[1:], parts[0]).reshape(0, cout, *size)  # in the operands' graph: zero gradients
    pads, extra = _transpose_padding(pad, out_pad, stride)
    shape = (x.shape[0], cout, *(n - e for n, e in zip(size, extra)))
    y = _call(
        name,
        "conv_grad_input",
        x,
        weight,
        stride=stride,
        padding=pads,
        dilation=dilation,
        groups=int(groups),
        input_shape=shape,
    )
    if any(extra):
        y = _pad_spatial(y, [(0, e) for e in extra], 0.0)
    if bias is not None:
        y = y + _channel_view(bias, d)
    return y.squeeze(0) if unbatched else y


def _transpose_padding(pad, out_pad, stride) -> tuple[list[tuple[int, int]], list[int]]:
    """The data gradient's [lo, hi] padding per spatial dim and the zeros appended after it, for a transposed
    convolution's padding p and output_padding op. op < stride: (p, p), none appended (the convolution of the
    padded output has the input's length, the floor of its division absorbs op). op >= stride (allowed when
    the dilation exceeds it): the output's last op positions lie beyond every window of a (p, p) padding's
    convolution, so the high padding shrinks by op (p >= op) or, where p < op, to 0 with op - p zeros
    appended: the positions no input element reaches, as in PyTorch."""
    pads, extra = [], []
    for p, op, s in zip(pad, out_pad, stride):
        hi = p if op < s else max(p - op, 0)
        pads.append((p, hi))
        extra.append(0 if op < s else max(op - p, 0))
    return pads, extra


def conv_transpose1d(
    input,
    weight,
    bias=None,
    stride=1,
    padding=0,
    output_padding=0,
    groups=1,  # noqa: A002
    dilation=1,
) -> Tensor:
    """The transposed 1-D convolution (the data gradient of conv1d), weight [C_in, C_out/groups, k]."""
    return _conv_transpose(1, input, weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose2d(
    input,
    weight,
    bias=None,
    stride=1,
    padding=0,
    output_padding=0,
    groups=1,  # noqa: A002
    dilation=1,
) -> Tensor:
    """The transposed 2-D convolution, weight [C_in, C_out/groups, kh, kw]; output size
    (H - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1."""
    return _conv_transpose(2, input, weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose3d(
    input,
    weight,
    bias=None,
    stride=1,
    padding=0,
    output_padding=0,
    groups=1,  # noqa: A002
    dilation=1,
) -> Tensor:
    """The transposed 3-D convolution, weight [C_in, C_out/groups, kd, kh, kw]."""
    return _conv_transpose(3, input, weight, bias, stride, padding, output_padding, groups, dilation)
