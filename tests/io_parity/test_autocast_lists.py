"""flame.autocast picks each op's dtype as PyTorch's CUDA autocast does, op by op.

The specification is torch's documentation page "Automatic Mixed Precision package - torch.amp",
section "Autocast Op Reference": its three CUDA lists (the sections named below); an op on none of them
runs in its inputs' dtype (type promotion between several). A few ops torch lists only in its source
(aten/src/ATen/autocast_mode.h: einsum, scaled_dot_product_attention, rms_norm, logsumexp, huber_loss,
the upsample kernels behind interpolate) or runs through a listed op (square is pow) say so in `note`.
Every row is checked three ways:
- against torch itself: its real CUDA autocast dispatch, run on fake CUDA tensors (the CPU build
  carries the CUDA autocast kernels; FakeTensorMode runs them without a GPU) or, where fake tensors
  cannot run the op, the AutocastCUDA registration of its ATen op;
- flame's result dtype under flame.autocast("cuda", dtype=bf16 / f16), eagerly and in @flame.compile;
- flame's values against torch's op on the inputs cast the way the list says (computed in f32 or f64,
  rounded to the result dtype), to the result dtype's precision; and for differentiable ops, the
  gradient of every floating input: its dtype is the input's (torch's rule) and its values torch's."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import flame

LOWER = "CUDA Ops that can autocast to float16"  # run in the autocast dtype
F32 = "CUDA Ops that can autocast to float32"
PROMOTE = "CUDA Ops that promote to the widest input type"
NONE = "on none of the lists"  # the inputs' dtype


@dataclass(frozen=True)
class Op:
    """One row: fn(lib, *inputs) for lib = flame or torch; specs: (kind, shape) per input, kind L
    (autocast dtype, normal), P (autocast dtype, in [0.5, 2]), U (autocast dtype, in (-0.9, 0.9)), F / FP
    (f32, normal / in [0.5, 2]), D (f64), S (f32 of +-1), S01 (f32 of 0 / 1), B (bool), I<n> (int64 in
    [0, n)); want: the result dtype where the section alone does not say it; fake: torch's fake CUDA
    tensors can run it; grad: check the gradients; coarse: torch composes it of ops some of which run
    in the autocast dtype, so its values are compared to that dtype's precision."""

    name: str
    section: str
    specs: tuple
    fn: object
    grad: bool = False
    want: str = ""
    fake: bool = True
    note: str = ""
    coarse: bool = False


def Fn(lib):  # noqa: N802
    return lib.nn.functional


M, W, V = (4, 6), (6, 5), (6,)


def _unary(name, section, kind="L", grad=False, note=""):
    return Op(name, section, ((kind, M),), lambda lib, x: getattr(x, name)(), grad, note=note)


def _activation(name):
    return Op(name, NONE, (("L", M),), lambda lib, x: getattr(Fn(lib), name)(x), grad=name == "mish")


OPS = [
    # ---- CUDA Ops that can autocast to float16 ----
    Op("matmul", LOWER, (("F", M), ("F", W)), lambda lib, a, b: a @ b, grad=True),
    Op("matmul_low_and_f32", LOWER, (("L", M), ("F", W)), lambda lib, a, b: lib.matmul(a, b), grad=True),
    Op("matmul_vector", LOWER, (("F", M), ("F", V)), lambda lib, a, b: lib.matmul(a, b)),
    Op("mm", LOWER, (("F", M), ("F", W)), lambda lib, a, b: lib.mm(a, b)),
    Op("bmm", LOWER, (("F", (2, *M)), ("F", (2, *W))), lambda lib, a, b: lib.bmm(a, b)),
    Op("addmm", LOWER, (("F", (4, 5)), ("F", M), ("F", W)), lambda lib, c, a, b: lib.addmm(c, a, b)),
    Op("addmv", LOWER, (("F", (4,)), ("F", M), ("F", V)), lambda lib, c, a, b: lib.addmv(c, a, b), grad=True),
    Op("baddbmm", LOWER, (("F", (2, 4, 5)), ("F", (2, *M)), ("F", (2, *W))), lambda lib, c, a, b: lib.baddbmm(c, a, b)),
    Op("einsum", LOWER, (("F", M), ("F", W)), lambda lib, a, b: lib.einsum("ij,jk->ik", a, b), note="source list"),
    Op("linear", LOWER, (("F", M), ("F", (5, 6)), ("F", (5,))), lambda lib, a, w, b: Fn(lib).linear(a, w, b), True),
    Op("linear_low_input", LOWER, (("L", M), ("F", (5, 6))), lambda lib, a, w: Fn(lib).linear(a, w)),
    Op("conv1d", LOWER, (("F", (2, 3, 7)), ("F", (4, 3, 3))), lambda lib, x, w: Fn(lib).conv1d(x, w)),
    Op(
        "conv2d",
        LOWER,
        (("F", (2, 3, 6, 6)), ("F", (4, 3, 3, 3)), ("F", (4,))),
        lambda lib, x, w, b: Fn(lib).conv2d(x, w, b, padding=1),
        grad=True,
    ),
    Op("conv3d", LOWER, (("F", (1, 2, 4, 4, 4)), ("F", (3, 2, 3, 3, 3))), lambda lib, x, w: Fn(lib).conv3d(x, w)),
    Op(
        "conv_transpose1d",
        LOWER,
        (("F", (2, 3, 7)), ("F", (3, 4, 3))),
        lambda lib, x, w: Fn(lib).conv_transpose1d(x, w),
    ),
    Op(
        "conv_transpose2d",
        LOWER,
        (("F", (2, 3, 5, 5)), ("F", (3, 4, 3, 3))),
        lambda lib, x, w: Fn(lib).conv_transpose2d(x, w),
    ),
    Op(
        "conv_transpose3d",
        LOWER,
        (("F", (1, 2, 3, 3, 3)), ("F", (2, 3, 2, 2, 2))),
        lambda lib, x, w: Fn(lib).conv_transpose3d(x, w),
    ),
    Op("prelu", LOWER, (("F", M), ("F", (1,))), lambda lib, x, w: Fn(lib).prelu(x, w)),
    Op(
        "scaled_dot_product_attention",
        LOWER,
        (("F", (1, 2, 4, 8)),) * 3,
        lambda lib, q, k, v: Fn(lib).scaled_dot_product_attention(q, k, v),
        grad=True,
        note="source list",
    ),
    # ---- CUDA Ops that can autocast to float32 ----
    _unary("exp", F32, grad=True),
    _unary("expm1", F32),
    _unary("log", F32, "P", grad=True),
    _unary("log10", F32, "P"),
    _unary("log2", F32, "P"),
    _unary("log1p", F32, "P"),
    _unary("reciprocal", F32, "P"),
    _unary("rsqrt", F32, "P"),
    _unary("cosh", F32),
    _unary("sinh", F32),
    _unary("tan", F32, "U"),
    _unary("erfinv", F32, "U", grad=True),
    _unary("asin", F32, "U", grad=True),
    _unary("acos", F32, "U"),
    _unary("square", F32, note="torch's square is pow(x, 2): pow is on the list"),
    Op("rsqrt_of_f32", F32, (("FP", M),), lambda lib, x: x.rsqrt()),
    Op("pow", F32, (("L", M),), lambda lib, x: x**2, grad=True),
    Op("pow_tensor", F32, (("P", M), ("L", M)), lambda lib, x, y: lib.pow(x, y)),
    Op("rpow", F32, (("L", M),), lambda lib, x: 2.0**x),
    Op("rtruediv", F32, (("P", M),), lambda lib, x: 2.0 / x, grad=True),
    Op("softplus", F32, (("L", M),), lambda lib, x: Fn(lib).softplus(x)),
    Op("layer_norm", F32, (("L", M), ("F", V), ("F", V)), lambda lib, x, w, b: Fn(lib).layer_norm(x, V, w, b), True),
    Op("rms_norm", F32, (("L", M), ("F", V)), lambda lib, x, w: Fn(lib).rms_norm(x, V, w), note="source list"),
    Op("group_norm", F32, (("L", (2, 4, 3, 3)),), lambda lib, x: Fn(lib).group_norm(x, 2)),
    Op("norm", F32, (("L", M),), lambda lib, x: x.norm()),
    Op("norm_p1", F32, (("L", M),), lambda lib, x: x.norm(p=1)),
    Op("vector_norm", F32, (("L", M),), lambda lib, x: lib.linalg.vector_norm(x, dim=-1)),
    Op("vector_norm_inf", F32, (("L", M),), lambda lib, x: lib.linalg.vector_norm(x, float("inf"))),
    Op("cosine_similarity", F32, (("L", M), ("L", M)), lambda lib, x, y: Fn(lib).cosine_similarity(x, y)),
    Op("normalize", F32, (("L", M),), lambda lib, x: Fn(lib).normalize(x, dim=-1)),
    Op(
        "pairwise_distance",
        F32,
        (("L", M), ("L", M)),
        lambda lib, x, y: Fn(lib).pairwise_distance(x, y),
        note="torch's pairwise_distance is a norm: norm is on the list",
    ),
    Op("cdist", F32, (("L", M), ("L", (3, 6))), lambda lib, x, y: lib.cdist(x, y)),
    Op("logsumexp", F32, (("L", M),), lambda lib, x: x.logsumexp(-1), note="source list"),
    Op("softmax", F32, (("L", M),), lambda lib, x: x.softmax(-1), grad=True),
    Op("log_softmax", F32, (("L", M),), lambda lib, x: Fn(lib).log_softmax(x, -1)),
    Op("softmin", F32, (("L", M),), lambda lib, x: Fn(lib).softmin(x, -1)),
    Op("sum", F32, (("L", M),), lambda lib, x: x.sum(), grad=True),
    Op("sum_dim", F32, (("L", M),), lambda lib, x: lib.sum(x, -1)),
    Op("prod", F32, (("P", M),), lambda lib, x: x.prod(-1)),
    Op("cumsum", F32, (("L", M),), lambda lib, x: x.cumsum(-1)),
    Op("cumprod", F32, (("P", M),), lambda lib, x: x.cumprod(-1)),
    Op("mse_loss", F32, (("L", M), ("L", M)), lambda lib, x, y: Fn(lib).mse_loss(x, y), grad=True),
    Op("l1_loss", F32, (("L", M), ("L", M)), lambda lib, x, y: Fn(lib).l1_loss(x, y)),
    Op("smooth_l1_loss", F32, (("L", M), ("L", M)), lambda lib, x, y: Fn(lib).smooth_l1_loss(x, y)),
    Op("huber_loss", F32, (("L", M), ("L", M)), lambda lib, x, y: Fn(lib).huber_loss(x, y), note="source list"),
    Op(
        "kl_div",
        F32,
        (("L", M), ("L", M)),
        lambda lib, x, y: Fn(lib).kl_div(x, y, reduction="batchmean", log_target=True),
    ),
    Op(
        "binary_cross_entropy_with_logits",
        F32,
        (("L", M), ("U", M)),
        lambda lib, x, y: Fn(lib).binary_cross_entropy_with_logits(x, y.abs()),
    ),
    Op("cross_entropy", F32, (("L", M), ("I6", (4,))), lambda lib, x, t: Fn(lib).cross_entropy(x, t), grad=True),
    Op("nll_loss", F32, (("L", M), ("I6", (4,))), lambda lib, x, t: Fn(lib).nll_loss(x, t)),
    Op("poisson_nll_loss", F32, (("L", M), ("P", M)), lambda lib, x, y: Fn(lib).poisson_nll_loss(x, y)),
    Op(
        "cosine_embedding_loss",
        F32,
        (("L", M), ("L", M), ("S", (4,))),
        lambda lib, x, y, t: Fn(lib).cosine_embedding_loss(x, y, t),
    ),
    Op("hinge_embedding_loss", F32, (("L", M), ("S", M)), lambda lib, x, t: Fn(lib).hinge_embedding_loss(x, t)),
    Op(
        "margin_ranking_loss",
        F32,
        (("L", (4,)), ("L", (4,)), ("S", (4,))),
        lambda lib, x, y, t: Fn(lib).margin_ranking_loss(x, y, t),
    ),
    Op("soft_margin_loss", F32, (("L", M), ("S", M)), lambda lib, x, t: Fn(lib).soft_margin_loss(x, t)),
    Op("multi_margin_loss", F32, (("L", M), ("I6", (4,))), lambda lib, x, t: Fn(lib).multi_margin_loss(x, t)),
    Op(
        "triplet_margin_loss",
        F32,
        (("L", M), ("L", M), ("L", M)),
        lambda lib, a, p, n: Fn(lib).triplet_margin_loss(a, p, n),
    ),
    Op(
        "interpolate_nearest",
        F32,
        (("L", (1, 2, 3, 3)),),
        lambda lib, x: Fn(lib).interpolate(x, scale_factor=2, mode="nearest"),
        note="source list: upsample_nearest2d",
    ),
    Op(
        "interpolate_bilinear",
        F32,
        (("L", (1, 2, 3, 3)),),
        lambda lib, x: Fn(lib).interpolate(x, scale_factor=2, mode="bilinear"),
        note="source list: upsample_bilinear2d",
    ),
    Op(
        "interpolate_linear_of_f32",
        F32,
        (("F", (1, 2, 4)),),
        lambda lib, x: Fn(lib).interpolate(x, scale_factor=2, mode="linear"),
        note="source list: upsample_linear1d",
    ),
    # ---- CUDA Ops that promote to the widest input type ----
    Op("addcmul", PROMOTE, (("L", M), ("L", M), ("F", M)), lambda lib, a, b, c: lib.addcmul(a, b, c), grad=True),
    Op("addcmul_all_low", PROMOTE, (("L", M), ("L", M), ("L", M)), lambda lib, a, b, c: lib.addcmul(a, b, c)),
    Op("addcdiv", PROMOTE, (("L", M), ("L", M), ("FP", M)), lambda lib, a, b, c: lib.addcdiv(a, b, c)),
    Op("dot", PROMOTE, (("L", V), ("F", V)), lambda lib, a, b: lib.dot(a, b), grad=True),
    Op("vdot", PROMOTE, (("L", V), ("F", V)), lambda lib, a, b: lib.vdot(a, b)),
    Op("vdot_all_low", PROMOTE, (("L", V), ("L", V)), lambda lib, a, b: lib.vdot(a, b)),
    Op("tensordot", PROMOTE, (("L", M), ("F", W)), lambda lib, a, b: lib.tensordot(a, b, 1)),
    Op("atan2", PROMOTE, (("L", M), ("F", M)), lambda lib, a, b: lib.atan2(a, b), grad=True),
    Op("atan2_all_low", PROMOTE, (("L", M), ("L", M)), lambda lib, a, b: a.atan2(b)),
    Op("cross", PROMOTE, (("L", (4, 3)), ("F", (4, 3))), lambda lib, a, b: lib.cross(a, b, dim=-1)),
    Op(
        "bilinear",
        PROMOTE,
        (("L", (4, 3)), ("L", (4, 2)), ("F", (5, 3, 2))),
        lambda lib, a, b, w: Fn(lib).bilinear(a, b, w),
    ),
    Op("scatter_add", PROMOTE, (("L", M), ("I4", M), ("F", M)), lambda lib, s, i, v: s.scatter_add(0, i, v)),
    Op("index_put", PROMOTE, (("L", M), ("I4", (3,)), ("F", (3, 6))), lambda lib, s, i, v: s.index_put((i,), v)),
    Op(
        "grid_sample",
        PROMOTE,
        (("L", (1, 2, 4, 4)), ("FP", (1, 3, 3, 2))),
        lambda lib, x, g: Fn(lib).grid_sample(x, g - 1.25, align_corners=False),
        fake=False,
    ),
    # ---- on none of the lists: the inputs' dtype ----
    *[
        _unary(n, NONE, k, grad=n in ("mean", "relu"))
        for n, k in [
            ("mean", "L"),
            ("relu", "L"),
            ("sigmoid", "L"),
            ("tanh", "L"),
            ("sqrt", "P"),
            ("abs", "L"),
            ("sin", "L"),
            ("cos", "L"),
            ("erf", "L"),
            ("erfc", "L"),
            ("atan", "L"),
            ("asinh", "L"),
            ("atanh", "U"),
            ("lgamma", "P"),
            ("digamma", "P"),
            ("exp2", "L"),
            ("neg", "L"),
            ("floor", "L"),
            ("round", "L"),
            ("sign", "L"),
            ("logit", "U"),
            ("frac", "L"),
            ("trunc", "L"),
            ("sinc", "L"),
            ("deg2rad", "L"),
            ("nan_to_num", "L"),
        ]
    ],
    Op("mean_dim", NONE, (("L", M),), lambda lib, x: x.mean(-1), grad=True),
    Op("max", NONE, (("L", M),), lambda lib, x: x.max()),
    Op("max_dim", NONE, (("L", M),), lambda lib, x: x.max(-1)[0]),
    Op("min", NONE, (("L", M),), lambda lib, x: x.min()),
    Op("amax", NONE, (("L", M),), lambda lib, x: x.amax(-1)),
    Op("amin", NONE, (("L", M),), lambda lib, x: x.amin(-1)),
    Op("aminmax", NONE, (("L", M),), lambda lib, x: lib.aminmax(x)[0]),
    Op("var", NONE, (("L", M),), lambda lib, x: x.var(-1), grad=True),
    Op("std", NONE, (("L", M),), lambda lib, x: x.std(-1)),
    Op("var_mean", NONE, (("L", M),), lambda lib, x: lib.var_mean(x, -1)[0]),
    Op("std_mean", NONE, (("L", M),), lambda lib, x: lib.std_mean(x, -1)[0]),
    Op("median", NONE, (("L", M),), lambda lib, x: x.median()),
    Op("kthvalue", NONE, (("L", M),), lambda lib, x: x.kthvalue(2)[0]),
    Op("nanmean", NONE, (("L", M),), lambda lib, x: lib.nanmean(x)),
    Op("nansum", NONE, (("L", M),), lambda lib, x: lib.nansum(x)),
    Op("trace", NONE, (("L", (4, 4)),), lambda lib, x: lib.trace(x)),
    Op("topk", NONE, (("L", M),), lambda lib, x: x.topk(2)[0]),
    Op("sort", NONE, (("L", M),), lambda lib, x: x.sort(-1)[0]),
    Op("diff", NONE, (("L", M),), lambda lib, x: lib.diff(x)),
    Op("gelu", NONE, (("L", M),), lambda lib, x: Fn(lib).gelu(x), grad=True),
    *[_activation(n) for n in ("silu", "mish", "elu", "celu", "selu", "leaky_relu", "hardtanh", "hardswish")],
    *[_activation(n) for n in ("hardsigmoid", "logsigmoid", "softsign", "relu6", "glu")],
    Op("threshold", NONE, (("L", M),), lambda lib, x: Fn(lib).threshold(x, 0.1, 0.0)),
    Op("add", NONE, (("L", M), ("L", M)), lambda lib, x, y: x + y, grad=True),
    Op("add_f32", NONE, (("L", M), ("F", M)), lambda lib, x, y: x + y, grad=True),
    Op("sub", NONE, (("L", M), ("L", M)), lambda lib, x, y: x - y),
    Op("mul", NONE, (("L", M), ("L", M)), lambda lib, x, y: x * y, grad=True),
    Op("mul_f32", NONE, (("L", M), ("F", M)), lambda lib, x, y: x * y),
    Op("div", NONE, (("L", M), ("P", M)), lambda lib, x, y: x / y),
    Op("div_scalar", NONE, (("L", M),), lambda lib, x: x / 3.0),
    Op("rsub", NONE, (("L", M),), lambda lib, x: 1.0 - x),
    Op("maximum", NONE, (("L", M), ("L", M)), lambda lib, x, y: lib.maximum(x, y)),
    Op("fmax", NONE, (("L", M), ("L", M)), lambda lib, x, y: lib.fmax(x, y)),
    Op("clamp", NONE, (("L", M),), lambda lib, x: x.clamp(-0.5, 0.5)),
    Op("where", NONE, (("B", M), ("L", M), ("L", M)), lambda lib, c, x, y: lib.where(c, x, y)),
    Op("masked_fill", NONE, (("L", M), ("B", M)), lambda lib, x, m: x.masked_fill(m, 0.0)),
    Op("lerp", NONE, (("L", M), ("L", M)), lambda lib, x, y: lib.lerp(x, y, 0.3)),
    Op("hypot", NONE, (("L", M), ("L", M)), lambda lib, x, y: lib.hypot(x, y)),
    Op("logaddexp", NONE, (("L", M), ("L", M)), lambda lib, x, y: lib.logaddexp(x, y)),
    Op("logaddexp2", NONE, (("L", M), ("L", M)), lambda lib, x, y: lib.logaddexp2(x, y)),
    Op("xlogy", NONE, (("P", M), ("P", M)), lambda lib, x, y: lib.xlogy(x, y)),
    Op("copysign", NONE, (("L", M), ("L", M)), lambda lib, x, y: lib.copysign(x, y)),
    Op("outer", NONE, (("L", (4,)), ("L", (5,))), lambda lib, x, y: lib.outer(x, y)),
    Op("kron", NONE, (("L", (2, 2)), ("L", (2, 3))), lambda lib, x, y: lib.kron(x, y)),
    Op("cat", NONE, (("L", M), ("F", M)), lambda lib, x, y: lib.cat([x, y])),
    Op("stack", NONE, (("L", M), ("L", M)), lambda lib, x, y: lib.stack([x, y])),
    Op("dropout_eval", NONE, (("L", M),), lambda lib, x: Fn(lib).dropout(x, 0.5, training=False)),
    Op("embedding", NONE, (("I4", (3,)), ("L", (4, 6))), lambda lib, i, w: Fn(lib).embedding(i, w)),
    Op("embedding_bag", NONE, (("I4", (2, 3)), ("L", (4, 6))), lambda lib, i, w: Fn(lib).embedding_bag(i, w)),
    Op(
        "batch_norm",
        NONE,
        (("L", (4, 3, 2)), ("F", (3,)), ("FP", (3,))),
        lambda lib, x, m, v: Fn(lib).batch_norm(x, m, v),
        want="low",
    ),
    Op("instance_norm", NONE, (("L", (2, 3, 4)),), lambda lib, x: Fn(lib).instance_norm(x)),
    Op("max_pool2d", NONE, (("L", (1, 2, 4, 4)),), lambda lib, x: Fn(lib).max_pool2d(x, 2)),
    Op("avg_pool2d", NONE, (("L", (1, 2, 4, 4)),), lambda lib, x: Fn(lib).avg_pool2d(x, 2)),
    Op("avg_pool1d", NONE, (("L", (1, 2, 4)),), lambda lib, x: Fn(lib).avg_pool1d(x, 2)),
    Op("adaptive_avg_pool2d", NONE, (("L", (1, 2, 4, 4)),), lambda lib, x: Fn(lib).adaptive_avg_pool2d(x, 1)),
    Op(
        "interpolate_area",
        NONE,
        (("L", (1, 2, 4, 4)),),
        lambda lib, x: Fn(lib).interpolate(x, size=(2, 2), mode="area"),
        note="adaptive_avg_pool2d",
    ),
    Op(
        "affine_grid",
        NONE,
        (("F", (1, 2, 3)),),
        lambda lib, t: Fn(lib).affine_grid(t, (1, 1, 3, 3), align_corners=False),
    ),
    Op("pad", NONE, (("L", M),), lambda lib, x: Fn(lib).pad(x, (1, 1))),
    Op("pixel_shuffle", NONE, (("L", (1, 4, 2, 2)),), lambda lib, x: Fn(lib).pixel_shuffle(x, 2)),
    Op("unfold", NONE, (("L", (1, 2, 4, 4)),), lambda lib, x: Fn(lib).unfold(x, 2), fake=False),
    Op(
        "multilabel_soft_margin_loss",
        F32,
        (("L", M), ("S01", M)),
        lambda lib, x, t: Fn(lib).multilabel_soft_margin_loss(x, t),
        note="torch's is made of logsigmoid and sum",
        coarse=True,
    ),
    Op(
        "trapezoid",
        F32,
        (("L", M),),
        lambda lib, x: lib.trapezoid(x),
        note="torch's is made of add and sum",
        coarse=True,
    ),
    # ---- f64 is never cast; an explicit dtype= is not cast ----
    Op("exp_of_f64", F32, (("D", M),), lambda lib, x: x.exp()),
    Op("matmul_of_f64", LOWER, (("D", M), ("D", W)), lambda lib, a, b: a @ b),
    Op("mean_of_f64", NONE, (("D", M),), lambda lib, x: x.mean()),
    Op("sum_dtype_f16", F32, (("L", M),), lambda lib, x: x.sum(dtype=lib.float16), want="float16"),
    Op("sum_dtype_bf16", F32, (("L", M),), lambda lib, x: x.sum(dtype=lib.bfloat16), want="bfloat16"),
    Op("cumsum_dtype_f16", F32, (("L", M),), lambda lib, x: x.cumsum(0, dtype=lib.float16), want="float16"),
    Op("softmax_dtype_f16", F32, (("L", M),), lambda lib, x: Fn(lib).softmax(x, -1, dtype=lib.float16), want="float16"),
    Op("mean_dtype_f32", NONE, (("L", M),), lambda lib, x: x.mean(dtype=lib.float32), want="float32"),
]
LOWS = ["bfloat16", "float16"]
MODES = ["eager", "compiled"]
IDS = [o.name for o in OPS]
# ATen ops the fake CUDA tensors cannot run: their AutocastCUDA registration says whether torch's CUDA
# autocast touches them (a kernel registered) or lets them run in their inputs' dtype (none)
REGISTERED = {
    "aten::grid_sampler": PROMOTE,
    "aten::im2col": NONE,
    "aten::col2im": NONE,
    "aten::lstm_cell": LOWER,
    "aten::gru_cell": LOWER,
    "aten::rnn_tanh_cell": LOWER,
    "aten::mean.dim": NONE,
    "aten::sum": F32,
    "aten::square": NONE,
    "aten::pow.Tensor_Scalar": F32,
    "aten::var.correction": NONE,
}


def _dtype(kind: str, low: str) -> str:
    if kind in ("L", "P", "U"):
        return low
    return {"D": "float64", "B": "bool"}.get(kind, "int64" if kind[0] == "I" else "float32")


def _expected(op: Op, low: str) -> str:
    """The result dtype the row's section gives (f64 never cast; `want` where the section cannot say)."""
    if op.want:
        return low if op.want == "low" else op.want
    floats = {_dtype(k, low) for k, _ in op.specs if _dtype(k, low).startswith("float")}
    if "float64" in floats:
        return "float64"
    if op.section == LOWER:
        return low
    if op.section == F32:
        return "float32"
    return "float32" if "float32" in floats else low  # the widest input


def _draw(r: np.random.Generator, kind: str, shape: tuple) -> np.ndarray:
    if kind in ("P", "FP"):
        return r.uniform(0.5, 2.0, shape)
    if kind == "U":
        return r.uniform(-0.9, 0.9, shape)
    if kind == "S":
        return np.where(r.standard_normal(shape) > 0, 1.0, -1.0)
    if kind == "S01":
        return (r.standard_normal(shape) > 0) * 1.0
    if kind == "B":
        return r.standard_normal(shape) > 0
    return r.standard_normal(shape)


def _arrays(op: Op, low: str) -> list[np.ndarray]:
    """The inputs' values rounded to their dtypes under `low`, as f64 numbers (ints and bools as they
    are), so that flame and torch read the same numbers."""
    r, out = np.random.default_rng(0), []
    for kind, shape in op.specs:
        if kind[0] == "I":
            out.append(r.integers(0, int(kind[1:]), shape))
            continue
        a = _draw(r, kind, shape)
        dt = _dtype(kind, low)
        out.append(torch.tensor(a).to(getattr(torch, dt)).double().numpy() if dt.startswith("float") else a)
    return out


def _flame_inputs(op: Op, low: str, requires_grad: bool = False) -> list:
    ts = []
    for (kind, _), a in zip(op.specs, _arrays(op, low)):
        t = flame.tensor(a).to(getattr(flame, _dtype(kind, low)))
        ts.append(t.requires_grad_() if requires_grad and t.dtype.is_float else t)
    return ts


def _name(dt) -> str:
    return {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "f64": "float64"}.get(dt.name, dt.name)


def _flame(op: Op, low: str, mode: str, inputs: list):
    """op under flame.autocast("cuda", dtype=low), eagerly or as a compiled function."""
    run = (lambda *a: op.fn(flame, *a)) if mode == "eager" else flame.compile(lambda *a: op.fn(flame, *a))
    with flame.autocast("cuda", dtype=getattr(flame, low)):
        return run(*inputs)


# ---- the table is torch's CUDA autocast ------------------------------------------------------------


def _torch_cuda_autocast_dtype(op: Op, low: str) -> str:
    """The result dtype of torch's CUDA autocast dispatch for op, on fake CUDA tensors."""
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        ts = [torch.empty(shape, dtype=getattr(torch, _dtype(k, low)), device="cuda") for k, shape in op.specs]
    before = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
    torch.set_autocast_enabled("cuda", True)
    torch.set_autocast_dtype("cuda", getattr(torch, low))
    try:
        with mode:
            return str(op.fn(torch, *ts).dtype).split(".")[-1]
    finally:
        torch.set_autocast_enabled("cuda", before[0])
        torch.set_autocast_dtype("cuda", before[1])


@pytest.mark.parametrize("low", LOWS)
@pytest.mark.parametrize("op", [o for o in OPS if o.fake], ids=[o.name for o in OPS if o.fake])
def test_the_table_is_torchs_cuda_autocast(op, low):
    assert _torch_cuda_autocast_dtype(op, low) == _expected(op, low)


@pytest.mark.parametrize("aten,section", REGISTERED.items(), ids=list(REGISTERED))
def test_torch_registers_cuda_autocast_kernels_for_the_listed_ops_only(aten, section):
    assert torch._C._dispatch_has_kernel_for_dispatch_key(aten, "AutocastCUDA") == (section != NONE)


# ---- flame: dtypes and values ------------------------------------------------------------------------

TOL = {"bfloat16": 2e-2, "float16": 4e-3, "float32": 1e-4, "float64": 1e-10}


def _compute_dtype(op: Op, low: str, kind: str) -> str:
    """The dtype torch's CUDA autocast hands this input to the op: the list's cast (f64 never)."""
    dt = _dtype(kind, low)
    if not dt.startswith("float") or dt == "float64" or op.want:
        return dt
    return low if op.section == LOWER else dt


def _torch_reference(op: Op, low: str, inputs: list, result: str):
    """torch's op on the inputs cast as the list says, computed in f32 (f64 for f64 results) and
    rounded to the result dtype, as torch's CUDA kernels compute: inputs are torch leaf tensors."""
    wide = torch.float64 if result == "float64" else torch.float32
    cast = []
    for (kind, _), t in zip(op.specs, inputs):
        if t.is_floating_point():
            t = t.to(getattr(torch, _compute_dtype(op, low, kind))).to(wide)
        cast.append(t)
    out = op.fn(torch, *cast)
    return out.to(getattr(torch, result)) if out.is_floating_point() else out


def _close(mine: np.ndarray, want: np.ndarray, dtype: str, what: str) -> None:
    tol = TOL.get(dtype, 0.0)
    np.testing.assert_allclose(mine, want, rtol=tol, atol=tol, err_msg=what)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("low", LOWS)
@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_result_dtype_and_values_follow_torchs_lists(op, low, mode):
    result = _expected(op, low)
    out = _flame(op, low, mode, _flame_inputs(op, low))
    assert _name(out.dtype) == result, f"{op.name} ({op.section}) under autocast {low}, {mode}"
    want = _torch_reference(op, low, [torch.tensor(a) for a in _arrays(op, low)], result)
    mine = out.double().numpy() if out.dtype.is_float else out.numpy()
    _close(mine, want.double().numpy(), low if op.coarse else result, op.name)


GRAD_OPS = [o for o in OPS if o.grad]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("low", LOWS)
@pytest.mark.parametrize("op", GRAD_OPS, ids=[o.name for o in GRAD_OPS])
def test_gradients_have_their_inputs_dtype_and_torchs_values(op, low, mode):
    """loss = sum(y.float() * g) with y the op's result under autocast: every floating input's gradient
    has the input's dtype (torch's rule) and torch's value, computed through the list's casts."""
    result = _expected(op, low)
    arrays = _arrays(op, low)
    shape = tuple(_torch_reference(op, low, [torch.tensor(a) for a in arrays], result).shape)
    g = np.random.default_rng(5).standard_normal(shape)

    def step(*xs):
        with flame.autocast("cuda", dtype=getattr(flame, low)):
            y = op.fn(flame, *xs)
        (y.float() * flame.tensor(g).float()).sum().backward()
        return y

    inputs = _flame_inputs(op, low, requires_grad=True)
    (step if mode == "eager" else flame.compile(step))(*inputs)
    leaves = [torch.tensor(a).to(getattr(torch, _dtype(k, low))) for (k, _), a in zip(op.specs, arrays)]
    for t in leaves:
        t.requires_grad_(t.is_floating_point())
    y = _torch_reference(op, low, leaves, result)
    (y.double() * torch.tensor(g)).sum().backward()
    for i, (x, t) in enumerate(zip(inputs, leaves)):
        if not t.is_floating_point():
            continue
        assert x.grad is not None and _name(x.grad.dtype) == _name(x.dtype), f"{op.name}: input {i}'s gradient"
        # precision: the coarsest dtype the gradient passed through (the result's, the input's)
        coarse = max(TOL[result], TOL[_name(x.dtype)], TOL[_compute_dtype(op, low, op.specs[i][0])])
        np.testing.assert_allclose(
            x.grad.double().numpy(),
            t.grad.double().numpy(),
            rtol=coarse,
            atol=coarse,
            err_msg=f"{op.name}: input {i}'s gradient",
        )


# ---- the recurrent cells (torch: lstm_cell, gru_cell, rnn_tanh_cell on the lower-precision list) ----


def recurrent_cells(cell: str):
    """torch's cell (seeded), flame's with its weights, an f32 input [4, 6] and state [4, 5]."""
    torch.manual_seed(0)
    theirs = getattr(torch.nn, cell)(6, 5)
    mine = getattr(flame.nn, cell)(6, 5)
    mine.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    r = np.random.default_rng(3)
    return theirs, mine, r.standard_normal((4, 6)).astype(np.float32), r.standard_normal((4, 5)).astype(np.float32)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("low", LOWS)
@pytest.mark.parametrize("cell", ["RNNCell", "GRUCell", "LSTMCell"])
def test_recurrent_cells_run_in_the_low_dtype(cell, low, mode):
    theirs, mine, x, h = recurrent_cells(cell)
    hx = [flame.tensor(h)] * (2 if cell == "LSTMCell" else 1)

    def step(x, *hx):
        with flame.autocast("cuda", dtype=getattr(flame, low)):
            return mine(x, tuple(hx) if len(hx) == 2 else hx[0])

    out = (step if mode == "eager" else flame.compile(step))(flame.tensor(x), *hx)
    outs = out if isinstance(out, tuple) else (out,)
    assert [_name(o.dtype) for o in outs] == [low] * len(outs)
    tl = getattr(torch, low)
    ref = getattr(torch.nn, cell)(6, 5)  # torch's cell on the inputs, state and weights cast to low
    ref.load_state_dict({k: v.to(tl).float() for k, v in theirs.state_dict().items()})
    th = torch.tensor(h).to(tl).float()
    with torch.no_grad():
        want = ref(torch.tensor(x).to(tl).float(), (th, th) if cell == "LSTMCell" else th)
    for o, w in zip(outs, want if isinstance(want, tuple) else (want,)):
        _close(o.double().numpy(), w.to(tl).double().numpy(), low, cell)


# ---- the GPU's plan -----------------------------------------------------------------------------------


@pytest.mark.parametrize("low", LOWS)
def test_a_step_of_low_precision_means_and_variances_compiles_for_the_gpu(cuda_target, low):
    """Means, variances, pools and activations that now stay in the low dtype: the CUDA target's plan
    gives the reference executor's loss and gradient, and each of its kernels compiles with NVRTC."""
    from flame.codegen.nvrtc import compile_cubin

    r = np.random.default_rng(2)
    w = flame.nn.Parameter(flame.tensor(r.standard_normal((8, 8)).astype(np.float32)))
    x = flame.tensor(r.standard_normal((4, 8)).astype(np.float32))

    def body(x):
        with flame.autocast("cuda", dtype=getattr(flame, low)):
            h = x @ w
            y = h.mean(-1, keepdim=True) + h.var(-1, keepdim=True) + Fn(flame).mish(h) + h.amax(-1, keepdim=True)
            assert _name(y.dtype) == low
            loss = (y.float() ** 2).mean()
        loss.backward()
        return loss

    want = body(x).item(), w.grad.numpy()
    w.grad = None
    step = flame.compile(body)
    got = step(x).item(), w.grad.numpy()
    tol = TOL[low] * 4
    np.testing.assert_allclose(got[0], want[0], rtol=tol)
    np.testing.assert_allclose(got[1], want[1], rtol=tol, atol=tol * np.abs(want[1]).max())
    sources = {k.source for k in step._last.plan.kernels()}
    assert sources
    for source in sources:
        assert compile_cubin(source, "sm_90")[:4] == b"\x7fELF"
