"""PyTorch's "Language Modeling with nn.Transformer" tutorial, ported by swapping `torch` for `flame`:
nn.Embedding scaled by sqrt(d_model), a PositionalEncoding module whose table is a registered buffer
(built with arange / exp / sin / cos and strided slice writes `pe[:, 0, 0::2] = ...`), a sequence-first
nn.TransformerEncoder, the causal mask from the tutorial's `generate_square_subsequent_mask` (triu of
ones * -inf) cut to `src_mask[:seq_len, :seq_len]` for the short last batch, and
`nn.Transformer.generate_square_subsequent_mask` when the model is called without one,
`init_weights` through `.data.uniform_` / `.data.zero_()`, CrossEntropyLoss on `output.view(-1,
ntokens)`, SGD(lr=5.0) with StepLR(1.0, gamma=0.95), clip_grad_norm_ 0.5, model.train() / model.eval()
and an evaluation under torch.no_grad(). flame starts from torch's weights (f64) and must give the same
loss at every step, the same validation losses and learning rates and the same parameters, eagerly
and with the training step under @flame.compile (the evaluation stays Python around it, as in the
tutorial). Dropout is 0: its masks are random."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import flame
from tests.training_idioms.common import assert_same_params

NTOKENS, EMSIZE, NHEAD, D_HID, NLAYERS, BPTT, BATCH, EVAL_BATCH, EPOCHS = 16, 8, 2, 16, 2, 6, 3, 2, 2


def _model(lib):
    nn = lib.nn
    TransformerEncoder, TransformerEncoderLayer = nn.TransformerEncoder, nn.TransformerEncoderLayer

    class PositionalEncoding(nn.Module):
        def __init__(self, d_model: int, dropout: float = 0.1, max_len: int = 5000):
            super().__init__()
            self.dropout = nn.Dropout(p=dropout)
            position = lib.arange(max_len).unsqueeze(1)
            div_term = lib.exp(lib.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
            pe = lib.zeros(max_len, 1, d_model)
            pe[:, 0, 0::2] = lib.sin(position * div_term)
            pe[:, 0, 1::2] = lib.cos(position * div_term)
            self.register_buffer("pe", pe)

        def forward(self, x):
            """x: Tensor, shape [seq_len, batch_size, embedding_dim]"""
            x = x + self.pe[: x.size(0)]
            return self.dropout(x)

    class TransformerModel(nn.Module):
        def __init__(self, ntoken: int, d_model: int, nhead: int, d_hid: int, nlayers: int, dropout: float = 0.5):
            super().__init__()
            self.model_type = "Transformer"
            self.pos_encoder = PositionalEncoding(d_model, dropout, max_len=64)
            encoder_layers = TransformerEncoderLayer(d_model, nhead, d_hid, dropout)
            self.transformer_encoder = TransformerEncoder(encoder_layers, nlayers)
            self.embedding = nn.Embedding(ntoken, d_model)
            self.d_model = d_model
            self.linear = nn.Linear(d_model, ntoken)
            self.init_weights()

        def init_weights(self) -> None:
            initrange = 0.1
            self.embedding.weight.data.uniform_(-initrange, initrange)
            self.linear.bias.data.zero_()
            self.linear.weight.data.uniform_(-initrange, initrange)

        def forward(self, src, src_mask=None):
            src = self.embedding(src) * math.sqrt(self.d_model)
            src = self.pos_encoder(src)
            if src_mask is None:
                src_mask = nn.Transformer.generate_square_subsequent_mask(len(src)).to(src.dtype)
            output = self.transformer_encoder(src, src_mask)
            output = self.linear(output)
            return output

    return TransformerModel(NTOKENS, EMSIZE, NHEAD, D_HID, NLAYERS, dropout=0.0)


def batchify(data, bsz):
    seq_len = data.size(0) // bsz
    data = data[: seq_len * bsz]
    data = data.view(bsz, seq_len).t().contiguous()
    return data


def get_batch(source, i):
    seq_len = min(BPTT, len(source) - 1 - i)
    data = source[i : i + seq_len]
    target = source[i + 1 : i + 1 + seq_len].reshape(-1)
    return data, target


def _run(lib, model, corpus, compiled):
    """The tutorial's train() / evaluate() / epoch loop: (train losses, val losses, lrs, the step)."""
    nn = lib.nn

    def generate_square_subsequent_mask(sz: int):
        """Generates an upper-triangular matrix of -inf, with zeros on diag."""
        return lib.triu(lib.ones(sz, sz, dtype=lib.float64) * float("-inf"), diagonal=1)

    train_data, val_data = batchify(corpus[0], BATCH), batchify(corpus[1], EVAL_BATCH)
    criterion = nn.CrossEntropyLoss()
    lr = 5.0  # learning rate
    optimizer = lib.optim.SGD(model.parameters(), lr=lr)
    scheduler = lib.optim.lr_scheduler.StepLR(optimizer, 1.0, gamma=0.95)

    def train_step(data, targets, src_mask):
        output = model(data, src_mask)
        loss = criterion(output.view(-1, NTOKENS), targets)
        optimizer.zero_grad()
        loss.backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()
        return loss

    step = flame.compile(train_step) if compiled else train_step
    losses = []

    def train(model):
        model.train()  # turn on train mode
        src_mask = generate_square_subsequent_mask(BPTT)
        for _batch, i in enumerate(range(0, train_data.size(0) - 1, BPTT)):
            data, targets = get_batch(train_data, i)
            seq_len = data.size(0)
            if seq_len != BPTT:  # only on last batch
                src_mask = src_mask[:seq_len, :seq_len]
            losses.append(step(data, targets, src_mask).item())

    def evaluate(model, eval_data):
        model.eval()  # turn on evaluation mode
        total_loss = 0.0
        with lib.no_grad():
            for i in range(0, eval_data.size(0) - 1, BPTT):
                data, targets = get_batch(eval_data, i)
                seq_len = data.size(0)
                output = model(data)  # the mask from nn.Transformer.generate_square_subsequent_mask
                output_flat = output.view(-1, NTOKENS)
                total_loss += seq_len * criterion(output_flat, targets).item()
        return total_loss / (len(eval_data) - 1)

    val_losses, lrs = [], []
    for _epoch in range(1, EPOCHS + 1):
        train(model)
        val_losses.append(evaluate(model, val_data))
        lrs.append(scheduler.get_last_lr()[0])
        scheduler.step()
    return losses, val_losses, lrs, step


def _corpus():
    r = np.random.default_rng(1)
    seq = np.cumsum(r.integers(0, 3, 95) == 0) % NTOKENS
    return seq[:63], seq[63:]  # 21 rows of 3 columns: batches of 6, 6, 6 and 2 steps


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")  # torch's note on batch_first=False
@pytest.mark.filterwarnings("error::flame.errors.RecompileWarning")  # the short last batch: dynamic, no warning
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_transformer_language_model_trains_as_torch(compiled):
    torch.manual_seed(0)
    theirs = _model(torch).double()
    flame.manual_seed(0)
    mine = _model(flame).double()
    # the table is made in f32 (then widened): sin and cos agree to f32's last place
    np.testing.assert_allclose(mine.pos_encoder.pe.numpy(), theirs.pos_encoder.pe.numpy(), rtol=0, atol=2e-7)
    assert [n for n, _ in mine.named_buffers()] == ["pos_encoder.pe"]
    mine.load_state_dict({k: flame.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    train, val = _corpus()
    want = _run(torch, theirs, (torch.tensor(train), torch.tensor(val)), False)
    got = _run(flame, mine, (flame.tensor(train), flame.tensor(val)), compiled)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-9, err_msg="training losses")
    np.testing.assert_allclose(got[1], want[1], rtol=1e-9, err_msg="validation losses")
    np.testing.assert_allclose(got[2], want[2], rtol=1e-12, err_msg="learning rates")
    assert_same_params(mine, theirs, rtol=1e-8, atol=1e-11)
    if compiled:  # the full length and the short last batch; StepLR's rate is an input, not a re-trace
        assert got[3].stats().traces == 2, got[3].stats()
