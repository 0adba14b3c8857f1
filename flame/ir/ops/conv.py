"""N-d convolution (1, 2 or 3 spatial dims) and its two gradients, one op each, in the NC* layout the
user sees (a backend may keep activations channels-last inside a step; the IR does not say).

  conv(x, w)                  x [N, C_in, *S], w [C_out, C_in/groups, *K] -> y [N, C_out, *O]
  conv_grad_input(dy, w)      dy [N, C_out, *O], w -> dx of the shape `input_shape` ([N, C_in, *S])
  conv_grad_weight(x, dy)     x, dy -> dw of the shape `weight_shape` ([C_out, C_in/groups, *K])

y[n, o, p] = sum_{c, k} x[n, g(o)*C_in/groups + c, p*stride + k*dilation - pad_lo] * w[o, c, k]
(cross-correlation, as PyTorch), with O = (S + lo + hi - dilation*(K-1) - 1) // stride + 1.

Attributes (every op): stride, dilation (one int per spatial dim), padding (one [lo, hi] pair per
spatial dim, explicit: the frontend resolves "same", asymmetric for even kernels as PyTorch does),
groups. conv_grad_input carries the FULL input shape (so a transposed convolution's output_padding
is implied: any S whose forward output is O is allowed), conv_grad_weight the FULL weight shape.
A bias is not part of the op: it is a broadcast add after it.

channels_last=true (set by passes/layout.py, never by the frontend): the activations (x, y and
their gradients) are stored channels-last, [N, *S, C], in the IR as in memory; `input_shape` is then
the channels-last shape too. The weight keeps its [C_out, C_in/groups, *K] layout.

The three are linear in each operand and adjoint to one another, so their VJPs are each other:
  conv(x, w):              dx = conv_grad_input(g, w),   dw = conv_grad_weight(x, g)
  conv_grad_input(d, w):   dd = conv(g, w),              dw = conv_grad_weight(g, d)
  conv_grad_weight(x, d):  dx = conv_grad_input(d, g),   dd = conv(x, g)
(<g, conv_grad_input(d, w)> = <conv(g, w), d>; <g, conv_grad_weight(x, d)> = <conv(x, g), d>).

References: im2col through sliding_window_view and one batched GEMM per call (the kernel offsets
are the only Python loop, in the data gradient's col2im); f16/bf16 compute in f32 (compute_f32), f64 in f64."""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from flame.errors import DTypeError, ShapeError
from flame.ir.registry import Attr, OpDef, check_dtype, register
from flame.ir.types import TensorType

ATTRS = {"stride": Attr("ints"), "padding": Attr("pairs"), "dilation": Attr("ints"), "groups": Attr("int", 1),
         "channels_last": Attr("bool", False)}
CONV_OPS = ("conv", "conv_grad_input", "conv_grad_weight")


def conv_output_size(size: int, k: int, stride: int, pad: tuple[int, int], dilation: int) -> int:
    """The output length of one spatial dim (may be <= 0: the kernel does not fit)."""
    return (size + pad[0] + pad[1] - dilation * (k - 1) - 1) // stride + 1


def to_channels_first(shape) -> tuple[int, ...]:
    """[N, *S, C] -> [N, C, *S] (a shape, or any per-dim sequence)."""
    return (shape[0], shape[-1], *shape[1:-1])


def to_channels_last(shape) -> tuple[int, ...]:
    """[N, C, *S] -> [N, *S, C]."""
    return (shape[0], *shape[2:], shape[1])


def _describe(name, types, stride, padding, dilation, groups) -> str:
    shown = ", ".join(str(t) for t in types)
    return (f"{name} {shown} (stride={list(stride)}, padding={[list(p) for p in padding]}, "
            f"dilation={list(dilation)}, groups={groups})")


def _nc(shape, channels_last: bool) -> tuple[int, ...]:
    """An activation's shape in the NC* order the checks use."""
    return to_channels_first(shape) if channels_last else tuple(shape)


def _ir(shape, channels_last: bool) -> tuple[int, ...]:
    """An NC* activation shape in the op's layout."""
    return to_channels_last(shape) if channels_last else tuple(shape)


def _check(name, types, x_shape, w_shape, stride, padding, dilation, groups) -> tuple[int, ...]:
    """Validate a convolution of an input of x_shape with a weight of w_shape; its output shape."""
    shown = _describe(name, types, stride, padding, dilation, groups)
    a = types[0]
    for t in types:
        if t.dtype != a.dtype:
            raise DTypeError(f"{shown}: dtypes differ")
    check_dtype(name, a, ("float",))
    d = len(x_shape) - 2
    if not 1 <= d <= 3:
        raise ShapeError(f"{shown}: the input must be [N, C, *spatial] with 1, 2 or 3 spatial dims")
    if len(w_shape) != d + 2:
        raise ShapeError(f"{shown}: the weight must be [C_out, C_in/groups, *kernel] with {d} kernel dims")
    if not len(stride) == len(dilation) == len(padding) == d or any(len(p) != 2 for p in padding):
        raise ShapeError(f"{shown}: stride, dilation and padding ([lo, hi] pairs) need one entry per "
                         f"spatial dim ({d})")
    if min(stride) < 1 or min(dilation) < 1 or min(min(p) for p in padding) < 0 or groups < 1:
        raise ShapeError(f"{shown}: stride and dilation must be >= 1, padding >= 0, groups >= 1")
    c_in, c_out = x_shape[1], w_shape[0]
    if c_out < groups:
        raise ShapeError(f"{shown}: the weight {list(w_shape)} has {c_out} output channels, fewer than groups")
    if c_in % groups or c_out % groups:
        raise ShapeError(f"{shown}: groups={groups} must divide the input channels ({c_in}) and the "
                         f"output channels ({c_out})")
    if w_shape[1] * groups != c_in:
        raise ShapeError(f"{shown}: the input has {c_in} channels but the weight expects "
                         f"{w_shape[1] * groups} (weight.shape[1]={w_shape[1]} x groups={groups})")
    out = []
    for i in range(d):
        o = conv_output_size(x_shape[2 + i], w_shape[2 + i], stride[i], padding[i], dilation[i])
        if o < 1 or w_shape[2 + i] < 1:
            k = dilation[i] * (w_shape[2 + i] - 1) + 1
            raise ShapeError(f"{shown}: the kernel (extent {k} in spatial dim {i}) is larger than the padded "
                             f"input ({x_shape[2 + i]} + {padding[i][0]} + {padding[i][1]})")
        out.append(o)
    return (x_shape[0], c_out, *out)


def _conv_infer(types, stride, padding, dilation, groups, channels_last):
    x, w = types
    y = _check("conv", types, _nc(x.shape, channels_last), w.shape, stride, padding, dilation, groups)
    return TensorType(_ir(y, channels_last), x.dtype)


def _grad_input_infer(types, stride, padding, dilation, groups, channels_last, input_shape):
    dy, w = types
    want = _check("conv_grad_input", types, _nc(input_shape, channels_last), w.shape, stride, padding, dilation,
                  groups)
    if dy.shape != _ir(want, channels_last):
        raise ShapeError(f"{_describe('conv_grad_input', types, stride, padding, dilation, groups)}: the "
                         f"gradient should be {list(_ir(want, channels_last))} for input_shape={list(input_shape)}")
    return TensorType(tuple(input_shape), dy.dtype)


def _grad_weight_infer(types, stride, padding, dilation, groups, channels_last, weight_shape):
    x, dy = types
    want = _check("conv_grad_weight", types, _nc(x.shape, channels_last), weight_shape, stride, padding, dilation,
                  groups)
    if dy.shape != _ir(want, channels_last):
        raise ShapeError(f"{_describe('conv_grad_weight', types, stride, padding, dilation, groups)}: the "
                         f"gradient should be {list(_ir(want, channels_last))} for weight_shape={list(weight_shape)}")
    return TensorType(tuple(weight_shape), x.dtype)


# ---- NumPy references ---------------------------------------------------------------------------------

def _windows(x, k_shape, out_shape, stride, padding, dilation):
    """im2col as a view: [N, C, *O, *K] with [n, c, p, k] = padded x[n, c, p*stride + k*dilation]."""
    d = len(k_shape)
    xp = np.pad(x, [(0, 0), (0, 0)] + [tuple(p) for p in padding])
    extent = [dl * (k - 1) + 1 for k, dl in zip(k_shape, dilation)]
    win = sliding_window_view(xp, extent, axis=tuple(range(2, 2 + d)))
    pick = (slice(None), slice(None))
    pick += tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(out_shape, stride))
    pick += tuple(slice(None, None, dl) for dl in dilation)
    return win[pick]


def _cols(x, k_shape, o_shape, stride, padding, dilation, groups):
    """im2col in the layout one batched GEMM reads, [G, C/G * prod(K), N * prod(O)], made by one copy
    whose innermost loop runs along the input's rows."""
    n, c, d = x.shape[0], x.shape[1], len(o_shape)
    win = _windows(x, k_shape, o_shape, stride, padding, dilation)  # [N, C, *O, *K], a view
    win = win.reshape((n, groups, c // groups) + tuple(o_shape) + tuple(k_shape))
    perm = (1, 2, *range(3 + d, 3 + 2 * d), 0, *range(3, 3 + d))
    rows = c // groups * math.prod(k_shape)  # sizes spelled out: no -1 to infer from an empty batch
    return np.ascontiguousarray(win.transpose(perm)).reshape(groups, rows, n * math.prod(o_shape))


def _rows_of(dy, groups):
    """dy [N, C_out, *O] as [G, C_out/G, N * prod(O)], the GEMM operand matching _cols."""
    n, c, d = dy.shape[0], dy.shape[1], dy.ndim - 2
    dyg = dy.reshape((n, groups, c // groups) + dy.shape[2:])
    return np.ascontiguousarray(dyg.transpose(1, 2, 0, *range(3, 3 + d))).reshape(groups, c // groups,
                                                                                   n * math.prod(dy.shape[2:]))


def _conv_ref(x, w, stride, padding, dilation, groups):
    n, d = x.shape[0], x.ndim - 2
    o_shape = tuple(conv_output_size(s, k, st, p, dl) for s, k, st, p, dl in
                    zip(x.shape[2:], w.shape[2:], stride, padding, dilation))
    cols = _cols(x, w.shape[2:], o_shape, stride, padding, dilation, groups)
    y = np.matmul(w.reshape(groups, w.shape[0] // groups, cols.shape[1]), cols)  # [G, C_out/G, N * O]
    y = y.reshape((groups, w.shape[0] // groups, n) + o_shape)
    return y.transpose(2, 0, 1, *range(3, 3 + d)).reshape((n, w.shape[0]) + o_shape)


def _grad_weight_ref(x, dy, stride, padding, dilation, groups, weight_shape):
    cols = _cols(x, weight_shape[2:], dy.shape[2:], stride, padding, dilation, groups)
    return np.matmul(_rows_of(dy, groups), cols.transpose(0, 2, 1)).reshape(weight_shape)


def _grad_input_ref(dy, w, stride, padding, dilation, groups, input_shape):
    """col2im: the columns w^T dy (one batched GEMM), each kernel offset added into its strided window
    of the padded input, then the padding cut away."""
    n, c, d = input_shape[0], input_shape[1], len(input_shape) - 2
    o_shape, k_shape = dy.shape[2:], w.shape[2:]
    wg = w.reshape(groups, w.shape[0] // groups, c // groups * math.prod(k_shape))
    cols = np.matmul(wg.transpose(0, 2, 1), _rows_of(dy, groups))  # [G, C_in/G * K, N * O]
    cols = cols.reshape((groups, c // groups) + k_shape + (n,) + o_shape)
    padded = [s + lo + hi for s, (lo, hi) in zip(input_shape[2:], padding)]
    dxp = np.zeros((n, groups, c // groups, *padded), cols.dtype)
    for k in np.ndindex(*k_shape):
        where = tuple(slice(ki * dl, ki * dl + (o - 1) * s + 1, s)
                      for ki, dl, o, s in zip(k, dilation, o_shape, stride))
        dxp[(Ellipsis, *where)] += cols[(slice(None), slice(None), *k)].transpose(2, 0, 1, *range(3, 3 + d))
    crop = tuple(slice(lo, lo + s) for s, (lo, _) in zip(input_shape[2:], padding))
    return dxp[(Ellipsis, *crop)].reshape(input_shape)


def _first(a: np.ndarray) -> np.ndarray:
    return np.moveaxis(a, -1, 1)


def _in_layout(ref, acts: tuple[bool, bool], out_act: bool):
    """The reference of a channels_last op from its NC* one: the activation operands (`acts`) moved to
    NC*, the result (when `out_act`) back to channels-last."""
    def run(a, b, channels_last, **attrs):
        if not channels_last:
            return ref(a, b, **attrs)
        if "input_shape" in attrs:
            attrs["input_shape"] = to_channels_first(attrs["input_shape"])
        a, b = (_first(v) if act else v for v, act in zip((a, b), acts))
        out = ref(a, b, **attrs)
        return np.ascontiguousarray(np.moveaxis(out, 1, -1)) if out_act else out
    return run


# ---- VJPs: the three ops are each other's adjoints ----------------------------------------------------

def _conv_vjp(b, g, x, w, out, **a):
    return (b.conv_grad_input(g, w, input_shape=x.shape, **a),
            b.conv_grad_weight(x, g, weight_shape=w.shape, **a))


def _grad_input_vjp(b, g, d, w, out, input_shape, **a):
    return b.conv(g, w, **a), b.conv_grad_weight(g, d, weight_shape=w.shape, **a)


def _grad_weight_vjp(b, g, x, d, out, weight_shape, **a):
    return b.conv_grad_input(d, g, input_shape=x.shape, **a), b.conv(x, g, **a)


def _macs_per_output(w_shape) -> int:
    """The multiply-adds of one output element: the weight's elements per output channel."""
    return math.prod(w_shape[1:])


def _work(name: str):
    """The FLOPs of one conv op (the `work` trait): two per multiply-add of the forward convolution it
    is, or is the data or weight gradient of (every gradient does the forward's multiply-adds)."""
    if name == "conv_grad_weight":
        return lambda op: 2 * op.inputs[1].type.numel * _macs_per_output(op.attrs["weight_shape"])
    if name == "conv_grad_input":
        return lambda op: 2 * op.inputs[0].type.numel * _macs_per_output(op.inputs[1].shape)
    return lambda op: 2 * op.out.type.numel * _macs_per_output(op.inputs[1].shape)


def _op(name, infer, ref, activations, vjp, extra, doc):
    """A convolution op; activations: whether each operand, then the result, is an activation [N, C, *S]
    (the `activations` trait; the reference moves those to and from channels-last)."""
    return OpDef(name, "library", 2, infer, _in_layout(ref, activations[:2], activations[2]), {**ATTRS, **extra}, vjp,
                 compute_f32=True, library="conv", doc=doc, activations=activations, work=_work(name))


register(_op("conv", _conv_infer, _conv_ref, (True, False, True), _conv_vjp, {},
             "N-d cross-correlation of x [N, C_in, *S] with w [C_out, C_in/groups, *K] (PyTorch's convNd)"))
register(_op("conv_grad_input", _grad_input_infer, _grad_input_ref, (True, False, True), _grad_input_vjp,
             {"input_shape": Attr("ints")}, "the data gradient of conv (a transposed convolution)"))
register(_op("conv_grad_weight", _grad_weight_infer, _grad_weight_ref, (True, True, False), _grad_weight_vjp,
             {"weight_shape": Attr("ints")}, "the weight gradient of conv"))

