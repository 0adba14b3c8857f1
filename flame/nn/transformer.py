"""nn.MultiheadAttention, the Transformer encoder and decoder layers and stacks, and nn.Transformer,
with PyTorch's names, parameter names (a PyTorch state_dict loads as it is), arguments and masks.
MultiheadAttention runs F.multi_head_attention_forward (flame.frontend.mha) on its parameters, as torch's:
attention is the one fused op (F.scaled_dot_product_attention: cuDNN on the GPU) unless the caller asks
for the attention weights or attention dropout is active, which need the probabilities written out."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any

from flame.errors import ArgumentRangeError, AssertedArgumentError, AssertedShapeError, ShapeError
from flame.frontend import functional as F
from flame.frontend.autocast import cpu_lists, is_autocast_enabled
from flame.frontend.context import current_trace, is_grad_enabled, user_location, user_stacklevel
from flame.frontend.creation import Generator, full, ones, zeros
from flame.frontend.default_dtype import float_dtype
from flame.frontend.mha import canonical_mask, multi_head_attention_forward
from flame.frontend.tensor import Tensor
from flame.ir.dtypes import boolean
from flame.nn import functional as nn_functional
from flame.nn import init
from flame.nn.layers import GELU, Dropout, LayerNorm, Linear, ReLU
from flame.nn.module import Module, ModuleList
from flame.nn.parameter import Parameter

__all__ = ["MultiheadAttention", "Transformer", "TransformerDecoder", "TransformerDecoderLayer", "TransformerEncoder",
           "TransformerEncoderLayer"]


class NonDynamicallyQuantizableLinear(Linear):
    """MultiheadAttention's out_proj: a Linear under torch's class name (print(model) reads as torch's)."""


class MultiheadAttention(Module):
    """Multi-head attention as torch.nn.MultiheadAttention: in_proj_weight [3E, E] and in_proj_bias
    [3E] (query, key and value projections stacked), out_proj a Linear(E, E). Inputs are [L, N, E]
    (batch_first=False, PyTorch's default), [N, L, E] (batch_first=True) or unbatched [L, E].
    forward returns (output, weights): weights [N, L, S] averaged over heads (average_attn_weights),
    [N, H, L, S] otherwise, or None with need_weights=False, which lets attention run fused.
    key_padding_mask [N, S] and attn_mask [L, S] or [N * H, L, S]: True (bool) marks keys a query may
    not attend to; float masks are added to the scores. Keys and values of other widths (kdim, vdim:
    cross-attention to a text encoder's states) take separate q_proj_weight [E, E], k_proj_weight [E,
    kdim] and v_proj_weight [E, vdim] instead of in_proj_weight, as PyTorch's; add_bias_kv appends a
    learned key and value (bias_k, bias_v [1, 1, E]) to the sequence, add_zero_attn a zero one (after
    the projections), the masks extended to let every query attend to them. is_causal is torch's hint
    that attn_mask is the causal mask (without attn_mask, torch's RuntimeError): with need_weights=False
    and no key_padding_mask, attn_mask is dropped and the top-left causal mask over every key (the
    appended ones too) applies, as torch's."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False, device: Any = None, dtype: Any = None,
                 generator: Generator | None = None):
        super().__init__()
        if embed_dim % num_heads:
            raise AssertedArgumentError(f"MultiheadAttention: embed_dim {embed_dim} must be divisible by num_heads "
                                        f"{num_heads}")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"MultiheadAttention: dropout must be in [0, 1], got {dropout}")
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.dropout, self.batch_first, self.generator = dropout, batch_first, generator
        dt = float_dtype(dtype)
        self.kdim, self.vdim = kdim or embed_dim, vdim or embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(zeros(3 * embed_dim, embed_dim, dtype=dt))
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(name, None)
        else:
            self.register_parameter("in_proj_weight", None)
            self.q_proj_weight = Parameter(zeros(embed_dim, embed_dim, dtype=dt))
            self.k_proj_weight = Parameter(zeros(embed_dim, self.kdim, dtype=dt))
            self.v_proj_weight = Parameter(zeros(embed_dim, self.vdim, dtype=dt))
        self.register_parameter("in_proj_bias", Parameter(zeros(3 * embed_dim, dtype=dt)) if bias else None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias, dtype=dt, generator=generator)
        for name in ("bias_k", "bias_v"):
            self.register_parameter(name, Parameter(zeros(1, 1, embed_dim, dtype=dt)) if add_bias_kv else None)
        self.add_zero_attn = add_zero_attn
        self._reset_parameters(generator)

    def _reset_parameters(self, generator: Generator | None = None) -> None:
        """PyTorch's: xavier_uniform_ the projection weights, zero biases (out_proj's weight as a
        Linear's), xavier_normal_ bias_k and bias_v (torch's code calls it with no argument)."""
        for w in (self.in_proj_weight, self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
            if w is not None:
                init.xavier_uniform_(w, generator=generator)
        for bias in (self.in_proj_bias, self.out_proj.bias):
            if bias is not None:
                init.zeros_(bias)
        for bias in (self.bias_k, self.bias_v):
            if bias is not None:
                init.xavier_normal_(bias, generator=generator)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None,
                need_weights: bool = True, attn_mask: Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False):
        for x, width, what in ((query, self.embed_dim, "query"), (key, self.kdim, "key"), (value, self.vdim, "value")):
            if x.ndim and x.shape[-1] != width:
                raise AssertedShapeError(f"MultiheadAttention: {what} has {x.shape[-1]} features, the module "
                                         f"{dict(query='embed_dim', key='kdim', value='vdim')[what]} {width}"
                                         f"\n  at {user_location()}")
        if self.batch_first and query.ndim == 3:
            query, key, value = (x.transpose(0, 1) for x in (query, key, value))
        # out_proj's parameters, not the module: its hooks do not run, as torch's
        out, weights = multi_head_attention_forward(
            query, key, value, self.embed_dim, self.num_heads, self.in_proj_weight, self.in_proj_bias, self.bias_k,
            self.bias_v, self.add_zero_attn, self.dropout, self.out_proj.weight, self.out_proj.bias, self.training,
            key_padding_mask, need_weights, attn_mask, not self._qkv_same_embed_dim, self.q_proj_weight,
            self.k_proj_weight, self.v_proj_weight, average_attn_weights=average_attn_weights, is_causal=is_causal,
            generator=self.generator)
        if self.batch_first and query.ndim == 3:
            out = out.transpose(0, 1)
        return out, weights

    def merge_masks(self, attn_mask: Tensor | None, key_padding_mask: Tensor | None,
                    query: Tensor) -> tuple[Tensor | None, int | None]:
        """torch's: (merged mask, mask type): key_padding_mask [N, S] alone is type 1; with attn_mask ([L, L]
        or [N * H, L, L]) the masks expanded to [N, H, L, L] and added (bool: or), type 2; neither, (None,
        None). query is [N, L, E]."""
        merged, kind = None, None
        if key_padding_mask is not None:
            merged, kind = key_padding_mask, 1
        if attn_mask is not None:
            n, length, _ = query.shape
            if attn_mask.ndim == 3:
                merged = attn_mask.view(n, -1, length, length)
            else:
                merged = attn_mask.view(1, 1, length, length).expand(n, self.num_heads, -1, -1)
            if key_padding_mask is not None:
                merged = merged + key_padding_mask.view(n, 1, 1, length).expand(-1, self.num_heads, -1, -1)
            kind = 2
        return merged, kind


_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"relu": F.relu, "gelu": F.gelu}


def _activation(activation: str | Callable[[Tensor], Tensor], who: str) -> Callable[[Tensor], Tensor]:
    """A layer's activation argument: "relu", "gelu" or a callable, as PyTorch's layers take it."""
    if not isinstance(activation, str):
        return activation
    if activation not in _ACTIVATIONS:
        raise ArgumentRangeError(f"{who}: activation should be relu/gelu, not {activation!r}")
    return _ACTIVATIONS[activation]


class TransformerEncoderLayer(Module):
    """torch.nn.TransformerEncoderLayer: self-attention and a feed-forward block (linear1, activation,
    dropout, linear2), each with a residual and a LayerNorm, after (norm_first=False, PyTorch's
    default) or before (norm_first=True) the block. activation: "relu", "gelu" or a callable."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Callable[[Tensor], Tensor] = "relu", layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True, device: Any = None,
                 dtype: Any = None, generator: Generator | None = None):
        super().__init__()
        activation = _activation(activation, "TransformerEncoderLayer")
        self.self_attn = MultiheadAttention(d_model, nhead, dropout, bias, batch_first=batch_first, dtype=dtype,
                                            generator=generator)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype, generator=generator)
        self.dropout = Dropout(dropout, generator=generator)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype, generator=generator)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, layer_norm_eps, bias=bias, dtype=dtype)
        self.norm2 = LayerNorm(d_model, layer_norm_eps, bias=bias, dtype=dtype)
        self.dropout1, self.dropout2 = Dropout(dropout, generator=generator), Dropout(dropout, generator=generator)
        self.activation = activation
        # torch's tag of the activation (1 relu, 2 gelu, 0 another), read by code that inspects the layer
        self.activation_relu_or_gelu = 1 if activation in (F.relu, nn_functional.relu) or isinstance(activation, ReLU) \
            else 2 if activation in (F.gelu, nn_functional.gelu) or isinstance(activation, GELU) else 0

    def forward(self, src: Tensor, src_mask: Tensor | None = None, src_key_padding_mask: Tensor | None = None,
                is_causal: bool = False) -> Tensor:
        src_key_padding_mask = canonical_mask(src_key_padding_mask, "src_key_padding_mask", src_mask, "src_mask",
                                              src.dtype)
        src_mask = canonical_mask(src_mask, "src_mask", None, "", src.dtype)
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff_block(x))

    def _sa_block(self, x: Tensor, attn_mask, key_padding_mask, is_causal: bool) -> Tensor:
        out = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False,
                             is_causal=is_causal)[0]
        return self.dropout1(out)

    def _ff_block(self, x: Tensor) -> Tensor:
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerEncoder(Module):
    """num_layers copies of encoder_layer (torch.nn.TransformerEncoder: layers.0, layers.1, ...), then
    norm if given. Its masks are made additive of src's dtype (torch's F._canonical_mask, with its warning
    for masks of mismatched types), and is_causal=None asks whether mask is the causal one (torch's
    _detect_is_causal_mask), as the encoder layer and the decoder's tgt_is_causal=None do too.
    use_nested_tensor is torch's: enable_nested_tensor, unless the layer cannot take torch's inference
    fast path (with torch's warning naming why). Where torch takes that path (see _fast_path_padding),
    its nested tensors leave zeros at the padded positions, before norm; flame zeroes the same positions
    (a graph op, so compiled steps agree) and computes the others as always."""

    def __init__(self, encoder_layer: TransformerEncoderLayer, num_layers: int, norm: Module | None = None,
                 enable_nested_tensor: bool = True, mask_check: bool = True):
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor, self.mask_check = enable_nested_tensor, mask_check
        why_not = _why_not_nested(encoder_layer)
        if enable_nested_tensor and why_not:
            warnings.warn(
                f"enable_nested_tensor is True, but self.use_nested_tensor is False because {why_not}",
                UserWarning,
                stacklevel=user_stacklevel(),
            )
        self.use_nested_tensor = enable_nested_tensor and not why_not

    def forward(self, src: Tensor, mask: Tensor | None = None, src_key_padding_mask: Tensor | None = None,
                is_causal: bool | None = None) -> Tensor:
        src_key_padding_mask = canonical_mask(src_key_padding_mask, "src_key_padding_mask", mask, "mask", src.dtype)
        mask = canonical_mask(mask, "mask", None, "", src.dtype)
        zeroed = self._fast_path_padding(src, mask, src_key_padding_mask)
        is_causal = _detect_is_causal_mask(mask, is_causal, _seq_len(src, self.layers[0].self_attn.batch_first))
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=is_causal)
        if zeroed is not None:
            x = x.masked_fill(zeroed, 0.0)
        return self.norm(x) if self.norm is not None else x

    def _fast_path_padding(self, src: Tensor, mask: Tensor | None, key_padding: Tensor | None) -> Tensor | None:
        """The [N, S, 1] positions torch's TransformerEncoder.forward returns as zeros (before norm), or
        None where it takes no fast path: it takes it with use_nested_tensor, the first layer in eval mode,
        a batched src, a key padding mask and no mask, outside CUDA autocast (torch.is_autocast_enabled()
        asks about CUDA only), and with gradients off or none of src and the first layer's parameters
        requiring one (inside @flame.compile, the gradient mode is then a guard of the call). The padded
        positions are those where the (additive) mask is not 0, as torch's logical_not of it; with
        mask_check, only if every row's padding is at its end (else torch keeps the dense computation): a
        tensor test, so a compiled step reads no value."""
        first = self.layers[0]
        if (
            not self.use_nested_tensor
            or first.training
            or src.ndim != 3
            or key_padding is None
            or mask is not None
            or (is_autocast_enabled() and not cpu_lists())
        ):
            return None
        attn = first.self_attn
        watched = (
            src,
            attn.in_proj_weight,
            attn.in_proj_bias,
            attn.out_proj.weight,
            attn.out_proj.bias,
            first.norm1.weight,
            first.norm1.bias,
            first.norm2.weight,
            first.norm2.bias,
            first.linear1.weight,
            first.linear1.bias,
            first.linear2.weight,
            first.linear2.bias,
        )
        if any(t is not None and t.requires_grad for t in watched):
            trace = current_trace.get()
            if trace is not None:  # a replay with gradients switched re-traces, as the choice differs
                trace.guard(is_grad_enabled, "whether gradients are on (TransformerEncoder's inference fast path)")
            if is_grad_enabled():
                return None
        padded = key_padding != 0
        if self.mask_check:  # torch._nested_tensor_from_mask_left_aligned: no valid key after a padded one
            padded = padded & ~(padded[:, :-1] & ~padded[:, 1:]).any()
        return padded.unsqueeze(-1)


def _why_not_nested(layer: Module) -> str:
    """Why torch's TransformerEncoder sets use_nested_tensor False for encoder_layer, in its words ("" when
    it does not)."""
    if not isinstance(layer, TransformerEncoderLayer):
        return "encoder_layer was not TransformerEncoderLayer"
    attn = layer.self_attn
    reasons = (
        (layer.norm_first, "norm_first was True"),
        (not attn.batch_first, "self_attn.batch_first was not True(use batch_first for better inference performance)"),
        (not attn._qkv_same_embed_dim, "self_attn._qkv_same_embed_dim was not True"),
        (attn.in_proj_bias is None, "self_attn was passed bias=False"),
        (not layer.activation_relu_or_gelu, "activation_relu_or_gelu was not True"),
        (layer.norm1.eps != layer.norm2.eps, "norm1.eps was not equal to encoder_layer.norm2.eps"),
        (attn.num_heads % 2 == 1, "self_attn.num_heads is odd"),
    )
    return next((f"encoder_layer.{why}" for failed, why in reasons if failed), "")


class TransformerDecoderLayer(Module):
    """torch.nn.TransformerDecoderLayer: self-attention over the target, attention from the target to
    the encoder's memory, and the feed-forward block, each with a residual and a LayerNorm (after the
    block, or before it with norm_first=True)."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Callable[[Tensor], Tensor] = "relu", layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True, device: Any = None,
                 dtype: Any = None, generator: Generator | None = None):
        super().__init__()
        activation = _activation(activation, "TransformerDecoderLayer")
        attn = dict(bias=bias, batch_first=batch_first, dtype=dtype, generator=generator)
        self.self_attn = MultiheadAttention(d_model, nhead, dropout, **attn)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout, **attn)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype, generator=generator)
        self.dropout = Dropout(dropout, generator=generator)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype, generator=generator)
        self.norm_first = norm_first
        self.norm1, self.norm2, self.norm3 = (LayerNorm(d_model, layer_norm_eps, bias=bias, dtype=dtype)
                                              for _ in range(3))
        self.dropout1, self.dropout2, self.dropout3 = (Dropout(dropout, generator=generator) for _ in range(3))
        self.activation = activation

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None, memory_mask: Tensor | None = None,
                tgt_key_padding_mask: Tensor | None = None, memory_key_padding_mask: Tensor | None = None,
                tgt_is_causal: bool = False, memory_is_causal: bool = False) -> Tensor:
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal)
            return x + self._ff_block(self.norm3(x))
        x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
        x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal))
        return self.norm3(x + self._ff_block(x))

    def _sa_block(self, x: Tensor, attn_mask, key_padding_mask, is_causal: bool) -> Tensor:
        out = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False,
                             is_causal=is_causal)[0]
        return self.dropout1(out)

    def _mha_block(self, x: Tensor, mem: Tensor, attn_mask, key_padding_mask, is_causal: bool) -> Tensor:
        out = self.multihead_attn(x, mem, mem, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                                  need_weights=False, is_causal=is_causal)[0]
        return self.dropout2(out)

    def _ff_block(self, x: Tensor) -> Tensor:
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerDecoder(Module):
    """num_layers copies of decoder_layer (layers.0, layers.1, ...), then norm if given."""

    def __init__(self, decoder_layer: TransformerDecoderLayer, num_layers: int, norm: Module | None = None):
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(decoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None, memory_mask: Tensor | None = None,
                tgt_key_padding_mask: Tensor | None = None, memory_key_padding_mask: Tensor | None = None,
                tgt_is_causal: bool | None = None, memory_is_causal: bool = False) -> Tensor:
        tgt_is_causal = _detect_is_causal_mask(tgt_mask, tgt_is_causal,
                                               _seq_len(tgt, self.layers[0].self_attn.batch_first))
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask, tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
                      memory_is_causal=memory_is_causal)
        return self.norm(x) if self.norm is not None else x


class Transformer(Module):
    """torch.nn.Transformer: an encoder of num_encoder_layers and a decoder of num_decoder_layers,
    each ending in a LayerNorm; every parameter of two or more dims initialised by xavier_uniform_,
    as PyTorch's."""

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6, num_decoder_layers: int = 6,
                 dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Callable[[Tensor], Tensor] = "relu", custom_encoder: Module | None = None,
                 custom_decoder: Module | None = None, layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device: Any = None, dtype: Any = None,
                 generator: Generator | None = None):
        super().__init__()
        kw = dict(dim_feedforward=dim_feedforward, dropout=dropout, activation=activation,
                  layer_norm_eps=layer_norm_eps, batch_first=batch_first, norm_first=norm_first, bias=bias,
                  dtype=dtype, generator=generator)
        self.encoder = custom_encoder if custom_encoder is not None else TransformerEncoder(
            TransformerEncoderLayer(d_model, nhead, **kw), num_encoder_layers,
            LayerNorm(d_model, layer_norm_eps, bias=bias, dtype=dtype))
        self.decoder = custom_decoder if custom_decoder is not None else TransformerDecoder(
            TransformerDecoderLayer(d_model, nhead, **kw), num_decoder_layers,
            LayerNorm(d_model, layer_norm_eps, bias=bias, dtype=dtype))
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first
        self._reset_parameters(generator)

    def _reset_parameters(self, generator: Generator | None = None) -> None:
        """xavier_uniform_ every parameter of two or more dims, as torch's Transformer._reset_parameters."""
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p, generator=generator)

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, src_key_padding_mask: Tensor | None = None,
                tgt_key_padding_mask: Tensor | None = None, memory_key_padding_mask: Tensor | None = None,
                src_is_causal: bool | None = None, tgt_is_causal: bool | None = None,
                memory_is_causal: bool = False) -> Tensor:
        batch = 0 if self.batch_first else 1
        if src.ndim == 3 and tgt.ndim == 3 and src.shape[batch] != tgt.shape[batch]:
            raise ShapeError(f"Transformer: src and tgt batch sizes differ: {list(src.shape)} and {list(tgt.shape)}"
                             f"\n  at {user_location()}")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise ShapeError(f"Transformer: src and tgt need d_model = {self.d_model} features, got "
                             f"{list(src.shape)} and {list(tgt.shape)}\n  at {user_location()}")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask, memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device: Any = None, dtype: Any = None) -> Tensor:
        """[sz, sz] float mask: -inf above the diagonal (future positions), 0 elsewhere."""
        return full((sz, sz), float("-inf"), dtype=float_dtype(dtype)).triu(1)


def _seq_len(x: Tensor, batch_first: bool) -> int:
    """The sequence length of a Transformer input: [S, E], [S, N, E] or (batch_first) [N, S, E]."""
    return x.shape[0] if x.ndim == 2 else x.shape[1 if batch_first else 0]


def _detect_is_causal_mask(mask: Tensor | None, is_causal: bool | None = None, size: int | None = None) -> bool:
    """torch's: the is_causal hint when given; else (None) whether mask is the causal mask of `size`
    (generate_square_subsequent_mask's, or its bool form), which lets attention run as causal. Inside
    @flame.compile the mask's values are not known while tracing: False (the mask applies as given,
    which gives the same values)."""
    if is_causal is not None or mask is None:
        return is_causal is True
    if current_trace.get() is not None or mask._value is not None:
        return False
    sz = size if size is not None else mask.shape[-2]
    if tuple(mask.shape) != (sz, sz):
        return False
    causal = ones(sz, sz, dtype=boolean).triu(1)
    if mask.dtype != boolean:
        causal = full((sz, sz), float("-inf"), dtype=mask.dtype).triu(1)
    return bool((mask == causal).all())
