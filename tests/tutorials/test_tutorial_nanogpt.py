"""nanoGPT (model.py and train.py), ported by swapping `torch` for `flame`: a GPT of LayerNorm with an
optional bias, CausalSelfAttention splitting `c_attn(x)` into q, k, v and calling
`F.scaled_dot_product_attention(..., is_causal=True)`, an MLP with GELU, blocks in an `nn.ModuleDict` /
`nn.ModuleList`, weight tying `self.transformer.wte.weight = self.lm_head.weight`, `_init_weights`
through `self.apply` and the scaled init of every `c_proj.weight` found by `named_parameters()`,
`forward(idx, targets)` with `F.cross_entropy(..., ignore_index=-1)` (and `x[:, [-1], :]` without
targets), `configure_optimizers` building decay / no-decay groups by `p.dim() >= 2` for AdamW (asking
`inspect.signature(torch.optim.AdamW)` for `fused`), and train.py's loop: `get_lr`'s warmup and cosine
decay written into every `param_group['lr']`, gradient accumulation with `loss / gradient_accumulation_steps`
under a `nullcontext()` or an autocast context, `torch.cuda.amp.GradScaler(enabled=False)` wrapping
backward / unscale_ / step / update, `clip_grad_norm_`, `optimizer.zero_grad(set_to_none=True)` and
`loss.item() * gradient_accumulation_steps` for the log. `generate`'s top-k masking
`logits[logits < v[:, [-1]]] = -float('Inf')` is checked on its logits (its multinomial draw is random).

flame starts from torch's weights and must give the same losses, gradient norms, learning rates and
parameters, eagerly, with the micro-step and the update compiled, and with the model under
`flame.compile(model)` as train.py's `torch.compile(model)` (backward and the optimizer stay eager around
it: the backward recomputes the compiled forward), in f64; under bf16 autocast the losses agree to
bf16's precision."""

from __future__ import annotations

import inspect
import math
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import pytest
import torch

import flame
from tests.training_idioms.common import assert_same_params, numpy_of

pytestmark = pytest.mark.filterwarnings("ignore:.*torch.cuda.amp.GradScaler:FutureWarning")  # train.py spells it so


@dataclass
class GPTConfig:
    block_size: int = 8
    vocab_size: int = 24
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 16
    dropout: float = 0.0
    bias: bool = True


def _gpt(lib, config):  # noqa: C901 (model.py as written)
    """nanoGPT's model.py over `lib`."""
    nn, F = lib.nn, lib.nn.functional
    torch = lib  # noqa: F811 (model.py spells it torch.nn.init / torch.arange)

    class LayerNorm(nn.Module):
        """LayerNorm but with an optional bias. PyTorch doesn't support simply bias=False"""

        def __init__(self, ndim, bias):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(ndim))
            self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

        def forward(self, input):
            return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)

    class CausalSelfAttention(nn.Module):
        def __init__(self, config):
            super().__init__()
            assert config.n_embd % config.n_head == 0
            self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
            self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
            self.attn_dropout = nn.Dropout(config.dropout)
            self.resid_dropout = nn.Dropout(config.dropout)
            self.n_head = config.n_head
            self.n_embd = config.n_embd
            self.dropout = config.dropout
            self.flash = hasattr(torch.nn.functional, "scaled_dot_product_attention")
            assert self.flash

        def forward(self, x):
            B, T, C = x.size()  # batch size, sequence length, embedding dimensionality (n_embd)
            q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
            k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
            q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
            v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
            y = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0, is_causal=True
            )
            y = y.transpose(1, 2).contiguous().view(B, T, C)  # re-assemble all head outputs side by side
            y = self.resid_dropout(self.c_proj(y))
            return y

    class MLP(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
            self.gelu = nn.GELU()
            self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
            self.dropout = nn.Dropout(config.dropout)

        def forward(self, x):
            x = self.c_fc(x)
            x = self.gelu(x)
            x = self.c_proj(x)
            x = self.dropout(x)
            return x

    class Block(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
            self.attn = CausalSelfAttention(config)
            self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
            self.mlp = MLP(config)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            x = x + self.mlp(self.ln_2(x))
            return x

    class GPT(nn.Module):
        def __init__(self, config):
            super().__init__()
            assert config.vocab_size is not None
            assert config.block_size is not None
            self.config = config
            self.transformer = nn.ModuleDict(
                dict(
                    wte=nn.Embedding(config.vocab_size, config.n_embd),
                    wpe=nn.Embedding(config.block_size, config.n_embd),
                    drop=nn.Dropout(config.dropout),
                    h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                    ln_f=LayerNorm(config.n_embd, bias=config.bias),
                )
            )
            self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
            self.transformer.wte.weight = self.lm_head.weight  # https://paperswithcode.com/method/weight-tying
            self.apply(self._init_weights)
            for pn, p in self.named_parameters():
                if pn.endswith("c_proj.weight"):
                    torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

        def get_num_params(self, non_embedding=True):
            n_params = sum(p.numel() for p in self.parameters())
            if non_embedding:
                n_params -= self.transformer.wpe.weight.numel()
            return n_params

        def _init_weights(self, module):
            if isinstance(module, nn.Linear):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    torch.nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

        def forward(self, idx, targets=None):
            device = idx.device
            b, t = idx.size()
            assert t <= self.config.block_size, f"Cannot forward sequence of length {t}"
            pos = torch.arange(0, t, dtype=torch.long, device=device)  # shape (t)
            tok_emb = self.transformer.wte(idx)  # token embeddings of shape (b, t, n_embd)
            pos_emb = self.transformer.wpe(pos)  # position embeddings of shape (t, n_embd)
            x = self.transformer.drop(tok_emb + pos_emb)
            for block in self.transformer.h:
                x = block(x)
            x = self.transformer.ln_f(x)
            if targets is not None:
                logits = self.lm_head(x)
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
            else:
                logits = self.lm_head(x[:, [-1], :])  # note: using list [-1] to preserve the time dim
                loss = None
            return logits, loss

        def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
            param_dict = {pn: p for pn, p in self.named_parameters()}
            param_dict = {pn: p for pn, p in param_dict.items() if p.requires_grad}
            decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
            nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
            optim_groups = [
                {"params": decay_params, "weight_decay": weight_decay},
                {"params": nodecay_params, "weight_decay": 0.0},
            ]
            fused_available = "fused" in inspect.signature(torch.optim.AdamW).parameters
            use_fused = fused_available and device_type == "cuda"
            extra_args = dict(fused=True) if use_fused else dict()
            optimizer = torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas, **extra_args)
            return optimizer

    return GPT(config)


LEARNING_RATE, MIN_LR, WARMUP_ITERS, LR_DECAY_ITERS, MAX_ITERS = 6e-3, 6e-4, 2, 5, 6
GRAD_ACCUM, BATCH, GRAD_CLIP = 2, 3, 1.0


def get_lr(it):
    """train.py's learning rate decay scheduler (cosine with warmup)."""
    if it < WARMUP_ITERS:
        return LEARNING_RATE * (it + 1) / (WARMUP_ITERS + 1)
    if it > LR_DECAY_ITERS:
        return MIN_LR
    decay_ratio = (it - WARMUP_ITERS) / (LR_DECAY_ITERS - WARMUP_ITERS)
    assert 0 <= decay_ratio <= 1
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))  # coeff ranges 0..1
    return MIN_LR + coeff * (LEARNING_RATE - MIN_LR)


def _train(lib, model, data, offsets, compiled, autocast_dtype=None):
    """train.py's loop: (logged losses, gradient norms, learning rates). Compiled (flame only): the
    micro-step (forward, loss / accumulation steps, backward) and the update (unscale_, clip, step,
    update, zero_grad) each under @flame.compile; the learning rate is written between them, as in
    train.py, and read by the update at every call. "model": train.py's `model = torch.compile(model)`,
    all else eager."""
    torch = lib
    block_size = model.config.block_size
    optimizer = model.configure_optimizers(0.1, LEARNING_RATE, (0.9, 0.95), "cpu")
    if compiled == "model":
        model = flame.compile(model)
    scaler = torch.cuda.amp.GradScaler(enabled=False)  # dtype == 'float16' only
    if autocast_dtype is None:
        ctx = nullcontext()
    else:
        ctx = torch.amp.autocast(device_type="cpu", dtype=autocast_dtype)

    batches = iter(offsets)

    def get_batch():
        ix = next(batches)
        x = torch.stack([torch.from_numpy((data[i : i + block_size]).astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy((data[i + 1 : i + 1 + block_size]).astype(np.int64)) for i in ix])
        return x, y

    def micro_step(X, Y):
        with ctx:
            logits, loss = model(X, Y)
            loss = loss / GRAD_ACCUM  # scale the loss to account for gradient accumulation
        scaler.scale(loss).backward()
        return loss

    def update():
        scaler.unscale_(optimizer)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return norm

    if compiled is True:
        micro_step, update = flame.compile(micro_step), flame.compile(update)
    losses, norms, lrs = [], [], []
    X, Y = get_batch()
    for iter_num in range(MAX_ITERS):
        lr = get_lr(iter_num)
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr
        for _micro_step in range(GRAD_ACCUM):
            loss = micro_step(X, Y)
            X, Y = get_batch()
        norms.append(float(update()))
        losses.append(loss.item() * GRAD_ACCUM)
        lrs.append(optimizer.param_groups[0]["lr"])
    if compiled == "model":
        assert model.stats().traces == 1, model.stats()
    elif compiled:
        assert micro_step.stats().traces == 2 and update.stats().traces == 1, (micro_step.stats(), update.stats())
    return losses, norms, lrs


def _data():
    r = np.random.default_rng(0)
    data = (np.cumsum(r.integers(0, 4, 200)) % GPTConfig.vocab_size).astype(np.uint16)  # train.bin's dtype
    offsets = [r.integers(0, len(data) - GPTConfig.block_size - 1, BATCH) for _ in range(MAX_ITERS * GRAD_ACCUM + 1)]
    return data, offsets


def _twins(dtype=None):
    torch.manual_seed(0)
    theirs = _gpt(torch, GPTConfig())
    flame.manual_seed(0)
    mine = _gpt(flame, GPTConfig())
    if dtype == "f64":
        theirs, mine = theirs.double(), mine.double()
    mine.load_state_dict({k: flame.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    return theirs, mine


def test_gpt_ties_weights_and_groups_parameters_as_torch():
    theirs, mine = _twins()
    assert mine.transformer.wte.weight is mine.lm_head.weight
    assert list(mine.state_dict()) == list(theirs.state_dict())  # the tied weight under both names
    assert [n for n, _ in mine.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert mine.get_num_params() == theirs.get_num_params()
    groups = [m.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu") for m in (mine, theirs)]
    assert [[tuple(p.shape) for p in g["params"]] for g in groups[0].param_groups] == [
        [tuple(p.shape) for p in g["params"]] for g in groups[1].param_groups
    ]
    assert [g["weight_decay"] for g in groups[0].param_groups] == [0.1, 0.0]
    # the init draws: c_proj's std is 0.02 / sqrt(2 * n_layer)
    flame.manual_seed(1)
    w = np.concatenate(
        [
            p.numpy().ravel()
            for n, p in _gpt(flame, GPTConfig(n_embd=64)).named_parameters()
            if n.endswith("c_proj.weight")
        ]
    )
    assert 0.8 < w.std() / (0.02 / math.sqrt(4)) < 1.2


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_nanogpt_trains_as_torch(compiled):
    theirs, mine = _twins("f64")
    data, offsets = _data()
    want = _train(torch, theirs, data, offsets, False)
    got = _train(flame, mine, data, offsets, compiled)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-9, err_msg="losses")
    np.testing.assert_allclose(got[1], want[1], rtol=1e-9, err_msg="gradient norms before clipping")
    np.testing.assert_allclose(got[2], want[2], rtol=1e-12, err_msg="learning rates")
    assert want[1][0] > GRAD_CLIP or max(want[1]) > GRAD_CLIP, "the clip must bite at least once"
    assert_same_params(mine, theirs, rtol=1e-7, atol=1e-10)
    assert mine.transformer.wte.weight is mine.lm_head.weight


def test_nanogpt_trains_under_bf16_autocast_as_torch():
    theirs, mine = _twins()
    data, offsets = _data()
    want = _train(torch, theirs, data, offsets, False, torch.bfloat16)
    got = _train(flame, mine, data, offsets, False, flame.bfloat16)
    np.testing.assert_allclose(got[0], want[0], rtol=3e-2, err_msg="losses")
    np.testing.assert_allclose(got[1], want[1], rtol=1e-1, err_msg="gradient norms")
    assert all(numpy_of(p).dtype == np.float32 for p in mine.parameters())


def test_compiled_model_then_eager_backward_trains_as_torch():
    """train.py's `model = torch.compile(model)` (after configure_optimizers) with backward(), clipping
    and the optimizer eager around it: the backward recomputes the compiled forward, and the losses,
    gradient norms and parameters are torch's at every step."""
    theirs, mine = _twins("f64")
    data, offsets = _data()
    want = _train(torch, theirs, data, offsets, False)
    got = _train(flame, mine, data, offsets, "model")
    np.testing.assert_allclose(got[0], want[0], rtol=1e-9, err_msg="losses")
    np.testing.assert_allclose(got[1], want[1], rtol=1e-9, err_msg="gradient norms before clipping")
    np.testing.assert_allclose(got[2], want[2], rtol=1e-12, err_msg="learning rates")
    assert_same_params(mine, theirs, rtol=1e-7, atol=1e-10)
    assert mine.transformer.wte.weight is mine.lm_head.weight


def test_generate_top_k_masks_as_torch():
    theirs, mine = _twins("f64")
    idx = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    got_logits, _ = mine(flame.tensor(idx))
    want_logits, _ = theirs(torch.tensor(idx))
    assert tuple(got_logits.shape) == (2, 1, GPTConfig.vocab_size)
    out = []
    for lib, logits in ((flame, got_logits), (torch, want_logits)):
        with lib.no_grad():
            logits = logits[:, -1, :] / 0.8
            v, _ = lib.topk(logits, min(5, logits.size(-1)))
            logits[logits < v[:, [-1]]] = -float("Inf")
            probs = lib.nn.functional.softmax(logits, dim=-1)
        out.append(numpy_of(probs))
    np.testing.assert_allclose(out[0], out[1], rtol=1e-9, atol=1e-15)
    assert ((out[0] > 0).sum(axis=1) == 5).all()
