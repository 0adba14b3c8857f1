"""nn.MultiheadAttention, nn.TransformerEncoderLayer and nn.TransformerEncoder against PyTorch's on the
CPU, from the same weights (PyTorch's state_dict loaded as it is): outputs, attention weights, and the
gradients of the inputs and of every parameter, eagerly and compiled; every mask kind; the errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn
from flame.errors import ShapeError

MODES = ("eager", "compiled")
E, H = 16, 4


def _rand(*shape, key=0):
    return np.random.default_rng(abs(hash((shape, key))) % 2**32).standard_normal(shape).astype(np.float32)


def _pair(mine, theirs):
    mine.load_state_dict({k: flame.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    return mine, theirs


def _compare(mine, theirs, inputs: list, call, tcall, mode: str, rtol=2e-5, atol=2e-5):
    """call(module, *tensors) -> output tuple in both libraries; the loss sum(out * ct) back-propagated;
    outputs, input gradients and parameter gradients compared."""
    ts = [torch.tensor(a, requires_grad=a.dtype == np.float32) for a in inputs]
    touts = [o for o in tcall(theirs, *ts) if o is not None]
    cts = [_rand(*o.shape, key=9 + i) for i, o in enumerate(touts)]
    sum((o * torch.tensor(c)).sum() for o, c in zip(touts, cts)).backward()
    xs = [flame.tensor(a, requires_grad=a.dtype == np.float32) for a in inputs]

    def body(*xs):
        outs = [o for o in call(mine, *xs) if o is not None]
        sum((o * flame.tensor(c)).sum() for o, c in zip(outs, cts)).backward()
        return tuple(outs)

    outs = body(*xs) if mode == "eager" else flame.compile(body)(*xs)
    assert len(outs) == len(touts)
    for o, t in zip(outs, touts):
        np.testing.assert_allclose(o.numpy(), t.detach().numpy(), rtol=rtol, atol=atol)
    for x, t in zip(xs, ts):
        if t.grad is not None:
            np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=rtol, atol=atol)
    grads = dict(theirs.named_parameters())
    for name, p in mine.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), grads[name].grad.numpy(), rtol=rtol, atol=atol, err_msg=name)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("need_weights", [True, False])
def test_multihead_attention_self(mode, batch_first, need_weights):
    torch.manual_seed(0)
    mine, theirs = _pair(nn.MultiheadAttention(E, H, batch_first=batch_first),
                         torch.nn.MultiheadAttention(E, H, batch_first=batch_first))
    x = _rand(*((3, 5, E) if batch_first else (5, 3, E)))
    _compare(mine, theirs, [x], lambda m, x: m(x, x, x, need_weights=need_weights),
             lambda m, x: m(x, x, x, need_weights=need_weights), mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask")  # PyTorch's, for bool with float
def test_multihead_attention_cross_with_masks(mode):
    torch.manual_seed(1)
    mine, theirs = _pair(nn.MultiheadAttention(E, H, batch_first=True),
                         torch.nn.MultiheadAttention(E, H, batch_first=True))
    q, kv = _rand(2, 4, E), _rand(2, 7, E, key=1)
    pad = np.zeros((2, 7), bool)
    pad[0, 5:] = pad[1, 6:] = True
    bool_mask = np.triu(np.ones((4, 7), bool), 3)
    float_mask = _rand(2 * H, 4, 7, key=2)
    for mask in (bool_mask, float_mask):
        _compare(mine, theirs, [q, kv, mask, pad],
                 lambda m, q, kv, a, p: m(q, kv, kv, key_padding_mask=p, attn_mask=a, average_attn_weights=False),
                 lambda m, q, kv, a, p: m(q, kv, kv, key_padding_mask=p, attn_mask=a, average_attn_weights=False),
                 mode)
        for p in list(mine.parameters()) + list(theirs.parameters()):
            p.grad = None


@pytest.mark.parametrize("mode", MODES)
def test_multihead_attention_causal_and_unbatched(mode):
    torch.manual_seed(2)
    mine, theirs = _pair(nn.MultiheadAttention(E, H), torch.nn.MultiheadAttention(E, H))
    x = _rand(6, E)
    causal = np.triu(np.ones((6, 6), bool), 1)
    # the is_causal hint goes with the mask it describes, as PyTorch's (the hint alone: its RuntimeError)
    _compare(mine, theirs, [x], lambda m, x: m(x, x, x, need_weights=False, attn_mask=flame.tensor(causal),
                                               is_causal=True),
             lambda m, x: m(x, x, x, need_weights=False, attn_mask=torch.tensor(causal), is_causal=True), mode)
    for m, lib in ((mine, flame), (theirs, torch)):
        with pytest.raises(RuntimeError, match="Need attn_mask if specifying the is_causal hint"):
            m(lib.tensor(x), lib.tensor(x), lib.tensor(x), need_weights=False, is_causal=True)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("bias_kv,zero_attn", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask")
def test_multihead_attention_kdim_vdim_bias_kv_zero_attn(mode, need_weights, bias_kv, zero_attn):
    """Cross-attention to keys and values of other widths (separate q/k/v projection weights, PyTorch's
    names, its state_dict loaded as it is), a learned and a zero key appended, with a padding mask and
    an attention mask (both extended over the appended keys) or none."""
    torch.manual_seed(3)
    kw = dict(kdim=6, vdim=10, add_bias_kv=bias_kv, add_zero_attn=zero_attn, batch_first=True)
    mine, theirs = _pair(nn.MultiheadAttention(E, H, **kw), torch.nn.MultiheadAttention(E, H, **kw))
    assert {n for n, _ in mine.named_parameters()} == {n for n, _ in theirs.named_parameters()}
    q, k, v = _rand(2, 4, E), _rand(2, 5, 6, key=1), _rand(2, 5, 10, key=2)
    pad = np.zeros((2, 5), bool)
    pad[1, 3:] = True
    mask = np.triu(np.ones((4, 5), bool), 2)
    _compare(mine, theirs, [q, k, v], lambda m, q, k, v: m(q, k, v, need_weights=need_weights),
             lambda m, q, k, v: m(q, k, v, need_weights=need_weights), mode)
    for p in list(mine.parameters()) + list(theirs.parameters()):
        p.grad = None
    _compare(mine, theirs, [q, k, v, pad, mask],
             lambda m, q, k, v, p, a: m(q, k, v, key_padding_mask=p, attn_mask=a, need_weights=need_weights),
             lambda m, q, k, v, p, a: m(q, k, v, key_padding_mask=p, attn_mask=a, need_weights=need_weights), mode)


def test_multihead_attention_errors():
    with pytest.raises(ValueError, match="divisible"):
        nn.MultiheadAttention(10, 3)
    cross = nn.MultiheadAttention(8, 2, kdim=4, vdim=6, batch_first=True)
    with pytest.raises(ShapeError, match="key has 8 features, the module kdim 4"):
        cross(flame.randn(2, 3, 8), flame.randn(2, 5, 8), flame.randn(2, 5, 6))
    m = nn.MultiheadAttention(8, 2, batch_first=True)
    x = flame.randn(2, 3, 8)
    with pytest.raises(ShapeError, match="(?s)attn_mask \\[3, 4\\].*test_transformer_modules"):
        m(x, x, x, attn_mask=flame.zeros(3, 4))
    with pytest.raises(ShapeError, match="key_padding_mask \\[3, 3\\] must be \\[N, S\\]"):
        m(x, x, x, key_padding_mask=flame.zeros(3, 3, dtype=flame.bool))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("norm_first,activation,batch_first", [(False, "relu", False), (True, "gelu", True)])
def test_encoder_layer(mode, norm_first, activation, batch_first):
    torch.manual_seed(3)
    kw = dict(dim_feedforward=32, norm_first=norm_first, activation=activation, batch_first=batch_first)
    mine, theirs = _pair(nn.TransformerEncoderLayer(E, H, **kw), torch.nn.TransformerEncoderLayer(E, H, **kw))
    mine.eval(), theirs.eval()  # dropout off: the same function in both
    x = _rand(*((2, 5, E) if batch_first else (5, 2, E)))
    pad = np.zeros((2, 5), bool)
    pad[1, 3:] = True
    _compare(mine, theirs, [x, pad], lambda m, x, p: (m(x, src_key_padding_mask=p),),
             lambda m, x, p: (m(x, src_key_padding_mask=p),), mode)


@pytest.mark.parametrize("mode", MODES)
def test_encoder_stack(mode):
    torch.manual_seed(4)
    layer = dict(dim_feedforward=24, batch_first=True, norm_first=True)
    mine = nn.TransformerEncoder(nn.TransformerEncoderLayer(E, H, **layer), 2, norm=nn.LayerNorm(E))
    theirs = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(E, H, **layer), 2,
                                         norm=torch.nn.LayerNorm(E), enable_nested_tensor=False)
    assert sorted(mine.state_dict()) == sorted(theirs.state_dict())
    _pair(mine, theirs)
    mine.eval(), theirs.eval()
    x = _rand(2, 6, E)
    causal = np.triu(np.ones((6, 6), bool), 1)
    _compare(mine, theirs, [x, causal], lambda m, x, c: (m(x, mask=c, is_causal=True),),
             lambda m, x, c: (m(x, mask=c, is_causal=True),), mode)


def test_encoder_layers_are_independent_copies():
    stack = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, dim_feedforward=16), 3)
    ws = [layer.linear1.weight for layer in stack.layers]
    assert len({id(w) for w in ws}) == 3 and all(np.array_equal(ws[0].numpy(), w.numpy()) for w in ws)


def test_encoder_trains_compiled_with_dropout():
    """Training mode: attention dropout takes the unfused path (the weights are written out); a
    compiled step with AdamW lowers the loss."""
    model = nn.TransformerEncoder(nn.TransformerEncoderLayer(E, H, dim_feedforward=32, dropout=0.1,
                                                             batch_first=True, generator=flame.Generator(0)), 2)
    head = nn.Linear(E, 1, generator=flame.Generator(1))
    params = list(model.parameters()) + list(head.parameters())
    opt = flame.optim.AdamW(params, lr=3e-3)
    x, y = flame.tensor(_rand(4, 6, E)), flame.tensor(_rand(4, 6, 1, key=1))

    @flame.compile
    def step(x, y):
        loss = ((head(model(x)) - y) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    losses = [step(x, y).item() for _ in range(30)]
    assert np.isfinite(losses).all() and np.mean(losses[-5:]) < 0.8 * np.mean(losses[:5])
    assert step.stats().traces == 1



@pytest.mark.parametrize("masked", [False, True])
def test_encoder_layer_attention_is_one_fused_call_on_the_gpu(cuda_target, masked):
    """Planned for the CUDA target, a bf16 encoder layer's self-attention is one attention library call
    forward and one backward (cuDNN takes f16/bf16), with or without a key padding mask, and every
    kernel around it compiles for sm_90."""
    from flame.codegen.nvrtc import compile_cubin
    from flame.plan.steps import AttentionCall

    layer = nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, batch_first=True, dtype=flame.bfloat16,
                                       generator=flame.Generator(0))  # heads of 16 (cuDNN: multiples of 8)
    layer.eval()
    x = flame.tensor(_rand(2, 8, 64), flame.bfloat16, requires_grad=True)
    pad = flame.tensor(np.arange(8)[None, :] >= np.array([[8], [5]]))

    @flame.compile
    def step(x, pad):
        out = layer(x, src_key_padding_mask=pad if masked else None)
        loss = (out.float() ** 2).mean()
        loss.backward()
        return loss

    step(x, pad)
    plan = step._last.plan
    calls = [s for s in plan.steps if isinstance(s, AttentionCall)]
    assert len(calls) == 2, [type(s).__name__ for s in plan.steps]
    for source in {k.source for k in plan.kernels()}:
        assert compile_cubin(source, "sm_90")[:4] == b"\x7fELF"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("norm_first,batch_first", [(False, False), (True, True)])
def test_decoder_layer(mode, norm_first, batch_first):
    torch.manual_seed(5)
    kw = dict(dim_feedforward=24, norm_first=norm_first, batch_first=batch_first, activation="gelu")
    mine, theirs = _pair(nn.TransformerDecoderLayer(E, H, **kw), torch.nn.TransformerDecoderLayer(E, H, **kw))
    mine.eval(), theirs.eval()
    shape = (lambda n, t: (n, t, E)) if batch_first else (lambda n, t: (t, n, E))
    tgt, mem = _rand(*shape(2, 5)), _rand(*shape(2, 7), key=1)
    causal = np.triu(np.ones((5, 5), bool), 1)
    pad = np.zeros((2, 7), bool)
    pad[0, 4:] = True
    _compare(mine, theirs, [tgt, mem, causal, pad],
             lambda m, t, s, c, p: (m(t, s, tgt_mask=c, memory_key_padding_mask=p, tgt_is_causal=True),),
             lambda m, t, s, c, p: (m(t, s, tgt_mask=c, memory_key_padding_mask=p, tgt_is_causal=True),), mode)


@pytest.mark.parametrize("mode", MODES)
def test_transformer(mode):
    torch.manual_seed(6)
    kw = dict(d_model=E, nhead=H, num_encoder_layers=2, num_decoder_layers=1, dim_feedforward=20, batch_first=True)
    mine, theirs = nn.Transformer(**kw), torch.nn.Transformer(**kw)
    assert sorted(mine.state_dict()) == sorted(theirs.state_dict())
    _pair(mine, theirs)
    mine.eval(), theirs.eval()
    src, tgt = _rand(2, 6, E), _rand(2, 4, E, key=1)
    mask = nn.Transformer.generate_square_subsequent_mask(4)
    np.testing.assert_array_equal(mask.numpy(), torch.nn.Transformer.generate_square_subsequent_mask(4).numpy())
    _compare(mine, theirs, [src, tgt, mask.numpy()], lambda m, s, t, c: (m(s, t, tgt_mask=c),),
             lambda m, s, t, c: (m(s, t, tgt_mask=c),), mode, rtol=5e-5, atol=5e-5)


def test_transformer_initialises_and_checks_like_pytorch():
    model = nn.Transformer(d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=8,
                           generator=flame.Generator(0))
    w = model.encoder.layers[0].linear1.weight.numpy()
    assert np.abs(w).max() <= np.sqrt(6 / (16 + 8)) + 1e-6  # xavier_uniform_ bound of an [8, 16] weight
    with pytest.raises(ShapeError, match="src and tgt batch sizes differ"):
        model(flame.ones(5, 2, 16), flame.ones(5, 3, 16))
