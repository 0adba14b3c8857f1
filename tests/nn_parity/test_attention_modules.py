"""nn.MultiheadAttention, the Transformer layers and F.scaled_dot_product_attention against torch from
the same f64 weights: masks of every documented form, weights, kdim/vdim, bias_kv, zero_attn,
batch_first and unbatched inputs; outputs and gradients, eager and compiled."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.nn_parity.common import Fixed, check, compare, rng, twin

E, H, L, S, N = 6, 2, 3, 5, 2


def _mha(**kw):
    return lambda lib: lib.nn.MultiheadAttention(E, H, **kw)


def _qkv(batch_first, unbatched=False, kdim=E, vdim=E, seed=0):
    r = rng(seed)
    if unbatched:
        return r.standard_normal((L, E)), r.standard_normal((S, kdim)), r.standard_normal((S, vdim))
    shape = (lambda t: (N, t)) if batch_first else (lambda t: (t, N))
    return (
        r.standard_normal((*shape(L), E)),
        r.standard_normal((*shape(S), kdim)),
        r.standard_normal((*shape(S), vdim)),
    )


def _kpm(kind, n=N):
    m = np.zeros((n, S), bool)
    m[:, -1] = True
    m[0, 1] = True
    if kind == "bool":
        return m
    return np.where(m, -1e9, 0.0) + rng(3).standard_normal((n, S)) * 0.5


def _attn_mask(kind, dims, n=N):
    r = rng(4)
    shape = (L, S) if dims == 2 else (n * H, L, S)
    m = r.random(shape) < 0.3
    m[..., 0] = False  # every query keeps one key
    if kind == "bool":
        return m
    return np.where(m, -np.inf, 0.0) + r.standard_normal(shape)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("need_weights,average", [(True, True), (True, False), (False, True)])
def test_mha_plain(batch_first, need_weights, average, compiled):
    q, k, v = _qkv(batch_first)
    check(
        _mha(batch_first=batch_first),
        lambda m, q, k, v: m(q, k, v, need_weights=need_weights, average_attn_weights=average),
        [q, k, v],
        compiled,
    )


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize(
    "kpm,am",
    [
        (kpm, am)
        for kpm in (None, "bool", "float")
        for am in (None, ("bool", 2), ("float", 2), ("bool", 3), ("float", 3))
        if kpm is None or am is None or kpm == am[0]
    ],
)  # mixed: below
@pytest.mark.parametrize("need_weights", [True, False])
def test_mha_masks(kpm, am, need_weights, compiled):
    q, k, v = _qkv(True)
    masks = [None if kpm is None else _kpm(kpm), None if am is None else _attn_mask(*am)]
    check(
        _mha(batch_first=True),
        lambda m, q, k, v, kp, a: m(q, k, v, key_padding_mask=kp, attn_mask=a, need_weights=need_weights),
        [q, k, v, *masks],
        compiled,
    )


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("need_weights", [True, False])
def test_mha_unbatched(need_weights, compiled):
    q, k, v = _qkv(False, unbatched=True)
    kp = _kpm("bool", 1)[0]
    am = _attn_mask("float", 3, 1)  # [H, L, S] for unbatched input
    check(
        _mha(),
        lambda m, q, k, v, kp, a: m(q, k, v, key_padding_mask=kp, attn_mask=a, need_weights=need_weights),
        [q, k, v, kp, am],
        compiled,
    )


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize(
    "opts",
    [
        dict(kdim=4, vdim=3),
        dict(bias=False),
        dict(add_bias_kv=True),
        dict(add_zero_attn=True),
        dict(add_bias_kv=True, add_zero_attn=True, kdim=4, vdim=5),
        dict(bias=False, add_bias_kv=True),
    ],
)
@pytest.mark.parametrize("need_weights", [True, False])
def test_mha_options(opts, need_weights, compiled):
    q, k, v = _qkv(False, kdim=opts.get("kdim", E), vdim=opts.get("vdim", E))
    kp, am = _kpm("bool"), _attn_mask("bool", 2)
    check(
        _mha(**opts),
        lambda m, q, k, v, kp, a: m(q, k, v, key_padding_mask=kp, attn_mask=a, need_weights=need_weights),
        [q, k, v, kp, am],
        compiled,
    )


@pytest.mark.parametrize("compiled", [False, True])
def test_mha_causal_hint(compiled):
    """is_causal with the causal attn_mask (torch takes is_causal as a hint about the mask)."""
    q, k, v = _qkv(True)
    mask = np.triu(np.ones((L, S), bool), 1)
    check(
        _mha(batch_first=True),
        lambda m, q, k, v, a: m(q, k, v, attn_mask=a, need_weights=False, is_causal=True),
        [q, k, v, mask],
        compiled,
    )


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("opts", [{}, dict(add_bias_kv=True, add_zero_attn=True)])
@pytest.mark.parametrize("mask", ["causal", "float"])
def test_mha_causal_hint_stands_for_the_mask(opts, mask, compiled):
    """With need_weights=False and no key_padding_mask torch drops attn_mask under is_causal and masks
    causally (top-left) over every key, the appended bias_kv and zero keys included."""
    q, k, v = _qkv(True)
    am = np.triu(np.ones((L, S), bool), 1) if mask == "causal" else rng(6).standard_normal((L, S))
    check(
        _mha(batch_first=True, **opts),
        lambda m, q, k, v, a: m(q, k, v, attn_mask=a, need_weights=False, is_causal=True),
        [q, k, v, Fixed(am)],
        compiled,
    )


def test_mha_mixed_mask_kinds_match_torch():
    """A bool key_padding_mask with a float attn_mask: torch accepts it (deprecated, with a warning) and adds them."""
    q, k, v = _qkv(True)
    kp, am = _kpm("bool"), _attn_mask("float", 2)
    theirs, mine = twin(_mha(batch_first=True))
    with pytest.warns(UserWarning):
        compare(
            theirs,
            mine,
            lambda m, q, k, v, kp, a: m(q, k, v, key_padding_mask=kp, attn_mask=a),
            [q, k, v, kp, am],
            False,
        )


_BAD_MHA_INPUTS = {  # name: (module options, query, key, value shapes, call options as (shape, dtype) masks)
    "key 2-D, query 3-D": ({}, (L, N, E), (S, E), (S, E), {}),
    "query 4-D": ({}, (L, N, 1, E), (L, N, 1, E), (L, N, 1, E), {}),
    "query width": ({}, (L, N, E + 1), (S, N, E + 1), (S, N, E + 1), {}),
    "key width (kdim)": (dict(kdim=4, vdim=5), (L, N, E), (S, N, 3), (S, N, 5), {}),
    "key and value lengths": ({}, (L, N, E), (S, N, E), (S + 1, N, E), {}),
    "key and value lengths (kdim)": (dict(kdim=4, vdim=5), (L, N, E), (S, N, 4), (S + 1, N, 5), {}),
    "unbatched 2-D key_padding_mask": ({}, (L, E), (S, E), (S, E), dict(key_padding_mask=((1, S), bool))),
    "batched 1-D key_padding_mask": ({}, (L, N, E), (S, N, E), (S, N, E), dict(key_padding_mask=((S,), bool))),
    "4-D attn_mask": ({}, (L, N, E), (S, N, E), (S, N, E), dict(attn_mask=((N, H, L, S), bool))),
    "unbatched 3-D attn_mask": ({}, (L, E), (S, E), (S, E), dict(attn_mask=((2 * H, L, S), bool))),
    "integer attn_mask": ({}, (L, N, E), (S, N, E), (S, N, E), dict(attn_mask=((L, S), np.int64))),
    "integer key_padding_mask": ({}, (L, N, E), (S, N, E), (S, N, E), dict(key_padding_mask=((N, S), np.int64))),
}


@pytest.mark.parametrize("name", list(_BAD_MHA_INPUTS))
def test_mha_bad_inputs_raise_assertion_errors(name):
    """torch refuses these inputs with `assert`: flame's errors are AssertionErrors too, naming the input
    (an unbatched [1, S] key_padding_mask is not read as [S])."""
    opts, *shapes, masks = _BAD_MHA_INPUTS[name]
    for lib in (torch, flame):
        m = lib.nn.MultiheadAttention(E, H, **opts).double()
        args = [lib.tensor(np.zeros(s)) for s in shapes]
        kw = {k: lib.tensor(np.zeros(s, dt)) for k, (s, dt) in masks.items()}
        with pytest.raises(AssertionError):
            m(*args, **kw)


def test_mha_indivisible_heads_and_batch_mismatch():
    for lib in (torch, flame):
        with pytest.raises(AssertionError, match="divisible"):
            lib.nn.MultiheadAttention(5, 2)
    with pytest.raises(RuntimeError, match="query holds a batch of 2, key and value of 3"):
        flame.nn.MultiheadAttention(E, H)(flame.zeros(L, 2, E), flame.zeros(S, 3, E), flame.zeros(S, 3, E))


def _sdpa_case(name):
    r = rng(5)
    q = r.standard_normal((2, 2, L, 4))
    k = r.standard_normal((2, 2, S, 4))
    v = r.standard_normal((2, 2, S, 3))
    kw = {}
    if name == "bool_LS":
        m = r.random((L, S)) < 0.6
        m[:, 0] = True
        return [q, k, v, m], kw
    if name == "bool_N11S":
        m = r.random((2, 1, 1, S)) < 0.6
        m[..., 0] = True
        return [q, k, v, m], kw
    if name == "float_1HLS":
        return [q, k, v, r.standard_normal((1, 2, L, S))], kw
    if name == "float_S":
        return [q, k, v, r.standard_normal((S,))], kw
    if name == "causal_L<S":
        return [q, k, v, None], dict(is_causal=True)
    if name == "causal_L>S":
        q = r.standard_normal((2, 2, S + 2, 4))
        k, v = k[:, :, :L], v[:, :, :L]
        return [q, k, v, None], dict(is_causal=True)
    if name == "scale":
        return [q, k, v, None], dict(scale=0.3)
    if name == "gqa":
        q = r.standard_normal((2, 4, L, 4))
        return [q, k, v, None], dict(enable_gqa=True)
    if name == "3d":
        return [q[0], k[0], v[0], None], {}
    raise AssertionError(name)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize(
    "name", ["bool_LS", "bool_N11S", "float_1HLS", "float_S", "causal_L<S", "causal_L>S", "scale", "gqa", "3d"]
)
def test_sdpa(name, compiled):
    arrays, kw = _sdpa_case(name)

    def build(lib):
        return lib.nn.Identity()

    def call(m, q, k, v, mask):
        F = (flame if isinstance(q, flame.Tensor) else torch).nn.functional
        return F.scaled_dot_product_attention(q, k, v, mask, **kw)

    check(build, call, arrays, compiled)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize(
    "shapes,kw",
    [
        (((2, 2, L, 4), (1, 2, S, 4), (1, 2, S, 3)), {}),
        (((2, 1, L, 4), (2, 2, S, 4), (2, 2, S, 3)), dict(is_causal=True)),
        (((L, 4), (2, 2, S, 4), (2, 2, S, 3)), {}),
        (((2, 2, L, 4), (S, 4), (S, 3)), dict(scale=0.4)),
        (((1, 4, L, 4), (2, 2, S, 4), (2, 2, S, 3)), dict(enable_gqa=True)),
    ],
)
def test_sdpa_broadcasts_leading_dims(shapes, kw, compiled):
    """query, key and value of different leading (batch, head) dimensions broadcast, as torch's."""
    r = rng(8)

    def call(m, q, k, v):
        F = (flame if isinstance(q, flame.Tensor) else torch).nn.functional
        return F.scaled_dot_product_attention(q, k, v, **kw)

    check(lambda lib: lib.nn.Identity(), call, [r.standard_normal(s) for s in shapes], compiled)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("shape", [(L, S), (2, 1, L, S)])
def test_sdpa_f32_mask_of_f64_query(shape, compiled):
    """torch takes an f32 additive mask for an f64 query (and gives the mask an f32 gradient)."""
    r = rng(9)
    arrays = [r.standard_normal((2, 2, L, 4)), r.standard_normal((2, 2, S, 4)), r.standard_normal((2, 2, S, 3)),
              r.standard_normal(shape).astype(np.float32)]

    def call(m, q, k, v, mask):
        F = (flame if isinstance(q, flame.Tensor) else torch).nn.functional
        return F.scaled_dot_product_attention(q, k, v, mask)

    check(lambda lib: lib.nn.Identity(), call, arrays, compiled, rtol=1e-6, atol=1e-7)


def _act(name):
    if name == "callable":
        return lambda lib: lambda x: lib.tanh(x) * 2
    if name == "module":
        return lambda lib: lib.nn.GELU(approximate="tanh")
    return lambda lib: name


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("act", ["relu", "gelu", "callable", "module"])
@pytest.mark.parametrize("batch_first", [False, True])
def test_encoder_layer(norm_first, act, batch_first, compiled):
    def build(lib):
        return lib.nn.TransformerEncoderLayer(
            E,
            H,
            dim_feedforward=7,
            dropout=0.0,
            activation=_act(act)(lib),
            batch_first=batch_first,
            norm_first=norm_first,
        )

    src = _qkv(batch_first)[0]
    kp = _kpm("bool")[:, :L]
    causal = np.triu(np.full((L, L), -np.inf), 1)
    check(build, lambda m, x, kp, c: m(x, src_mask=c, src_key_padding_mask=kp), [src, kp, causal], compiled)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("with_norm", [False, True])
def test_encoder_stack(is_causal, with_norm, compiled):
    def build(lib):
        layer = lib.nn.TransformerEncoderLayer(E, H, dim_feedforward=5, dropout=0.0, batch_first=True, bias=False)
        return lib.nn.TransformerEncoder(
            layer, 2, norm=lib.nn.LayerNorm(E) if with_norm else None, enable_nested_tensor=False
        )

    src = _qkv(True)[0]
    causal = np.triu(np.ones((L, L), bool), 1)
    kp = _kpm("bool")[:, :L]
    check(
        build,
        lambda m, x, c, kp: m(x, mask=c, src_key_padding_mask=kp, is_causal=is_causal),
        [src, causal, kp],
        compiled,
    )


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
def test_decoder_layer_and_stack(norm_first, batch_first, compiled):
    def build(lib):
        layer = lib.nn.TransformerDecoderLayer(
            E, H, dim_feedforward=5, dropout=0.0, batch_first=batch_first, norm_first=norm_first, activation="gelu"
        )
        return lib.nn.TransformerDecoder(layer, 2, norm=lib.nn.LayerNorm(E))

    q, k, _ = _qkv(batch_first)
    mem = k
    tgt_mask = np.triu(np.full((L, L), -np.inf), 1)
    mem_kp = _kpm("bool")
    check(
        build,
        lambda m, t, mem, tm, mkp: m(t, mem, tgt_mask=tm, memory_key_padding_mask=mkp, tgt_is_causal=True),
        [q, mem, Fixed(tgt_mask), mem_kp],
        compiled,
    )  # torch drops the mask under the causal hint


@pytest.mark.parametrize("compiled", [False, True])
def test_transformer(compiled):
    def build(lib):
        return lib.nn.Transformer(E, H, 1, 1, dim_feedforward=5, dropout=0.0, batch_first=True)

    src, tgt = _qkv(True)[1], _qkv(True)[0]
    tgt_mask = np.triu(np.full((L, L), -np.inf), 1)
    check(build, lambda m, s, t, tm: m(s, t, tgt_mask=tm), [src, tgt, Fixed(tgt_mask)], compiled)


def test_square_subsequent_mask():
    np.testing.assert_array_equal(
        flame.nn.Transformer.generate_square_subsequent_mask(4).numpy(),
        torch.nn.Transformer.generate_square_subsequent_mask(4).numpy(),
    )


@pytest.mark.parametrize("layer", ["TransformerEncoderLayer", "TransformerDecoderLayer"])
def test_unknown_activation_is_a_runtime_error(layer):
    for lib in (torch, flame):
        with pytest.raises(RuntimeError, match="activation should be relu/gelu, not"):
            getattr(lib.nn, layer)(E, H, activation="tanh")


def test_layer_and_stack_attributes_as_torch():
    def tags(lib):
        F = lib.nn.functional
        acts = ["relu", "gelu", F.relu, F.gelu, lib.nn.ReLU(), lib.nn.GELU(), lib.tanh]
        return [lib.nn.TransformerEncoderLayer(E, H, 7, activation=a).activation_relu_or_gelu for a in acts]

    assert tags(flame) == tags(torch) == [1, 2, 1, 2, 1, 2, 0]
    # use_nested_tensor, and the inference fast path it enables: tests/nn_parity/test_transformer_fast_path.py


def test_reset_parameters_takes_no_argument():
    """torch's code (and subclasses) call MultiheadAttention._reset_parameters() and
    Transformer._reset_parameters() with no argument: both draw the weights again and zero MHA's biases."""
    for lib in (torch, flame):
        m = lib.nn.MultiheadAttention(E, H, add_bias_kv=True)
        t = lib.nn.Transformer(E, H, 1, 1, 7)
        before = [p.detach().numpy().copy() for p in (m.in_proj_weight, t.encoder.layers[0].linear1.weight)]
        with lib.no_grad():
            m.in_proj_bias.fill_(1.0)
        m._reset_parameters()
        t._reset_parameters()
        after = [p.detach().numpy() for p in (m.in_proj_weight, t.encoder.layers[0].linear1.weight)]
        assert all(not np.array_equal(a, b) for a, b in zip(before, after)), lib.__name__
        assert not m.in_proj_bias.detach().numpy().any(), lib.__name__


def test_repr_as_torch():
    """out_proj prints as torch's NonDynamicallyQuantizableLinear (a Linear)."""
    for build in (lambda lib: lib.nn.MultiheadAttention(E, H), lambda lib: lib.nn.Transformer(E, H, 1, 1, 7)):
        assert repr(build(flame)) == repr(build(torch))
    assert isinstance(flame.nn.MultiheadAttention(E, H).out_proj, flame.nn.Linear)
