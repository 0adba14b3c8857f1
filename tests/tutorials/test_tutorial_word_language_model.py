"""pytorch/examples' word_language_model (its RNN model and training loop), ported by swapping `torch`
for `flame`: nn.Embedding + nn.LSTM / nn.GRU + a decoder Linear (tied to the embedding with
`self.decoder.weight = self.encoder.weight`), `init_weights` with nn.init, `init_hidden` from
`weight.new_zeros`, `batchify` through narrow / view / t / contiguous, truncated BPTT with the hidden
state carried across batches (the example's `repackage_hidden`, or the char-RNN habit
`hidden.detach_()`), NLLLoss on log_softmax, `model.zero_grad()`, `clip_grad_norm_`, the manual SGD
update `p.data.add_(p.grad, alpha=-lr)`, the last batch shorter than bptt, an evaluation in eval()
under no_grad with `.item()`, and the learning rate divided by 4 when the validation loss does not
improve. flame starts from torch's weights (f64) and must give the same loss at every step, the same
validation losses and learning rates, and the same parameters, eagerly and with the training step
under @flame.compile (the step takes the hidden state and returns the new one; the evaluation and
the annealing are Python around it, as in the example; LSTM's (h, c) is passed unpacked, as a
compiled function takes tensors in a tuple as a constant and refuses them). Dropout is 0: its masks
are random."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.training_idioms.common import assert_same_params, numpy_of

NTOKENS, NINP, NHID, NLAYERS, BPTT, BATCH, EVAL_BATCH, EPOCHS = 20, 8, 8, 2, 5, 4, 2, 4


def _model(lib, rnn_type, tie_weights):
    nn, F = lib.nn, lib.nn.functional

    class RNNModel(nn.Module):
        """Container module with an encoder, a recurrent module, and a decoder."""

        def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
            super(RNNModel, self).__init__()  # noqa: UP008 (the example's spelling)
            self.ntoken = ntoken
            self.drop = nn.Dropout(dropout)
            self.encoder = nn.Embedding(ntoken, ninp)
            self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
            self.decoder = nn.Linear(nhid, ntoken)
            if tie_weights:
                if nhid != ninp:
                    raise ValueError("When using the tied flag, nhid must be equal to emsize")
                self.decoder.weight = self.encoder.weight
            self.init_weights()
            self.rnn_type = rnn_type
            self.nhid = nhid
            self.nlayers = nlayers

        def init_weights(self):
            initrange = 0.1
            nn.init.uniform_(self.encoder.weight, -initrange, initrange)
            nn.init.zeros_(self.decoder.bias)
            nn.init.uniform_(self.decoder.weight, -initrange, initrange)

        def forward(self, input, hidden):
            emb = self.drop(self.encoder(input))
            output, hidden = self.rnn(emb, hidden)
            output = self.drop(output)
            decoded = self.decoder(output)
            decoded = decoded.view(-1, self.ntoken)
            return F.log_softmax(decoded, dim=1), hidden

        def init_hidden(self, bsz):
            weight = next(self.parameters())
            if self.rnn_type == "LSTM":
                return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))
            else:
                return weight.new_zeros(self.nlayers, bsz, self.nhid)

    return RNNModel(rnn_type, NTOKENS, NINP, NHID, NLAYERS, dropout=0.0, tie_weights=tie_weights)


def batchify(data, bsz):
    # Work out how cleanly we can divide the dataset into bsz parts.
    nbatch = data.size(0) // bsz
    # Trim off any extra elements that wouldn't cleanly fit (remainders).
    data = data.narrow(0, 0, nbatch * bsz)
    # Evenly divide the data across the bsz batches.
    data = data.view(bsz, -1).t().contiguous()
    return data


def get_batch(source, i):
    seq_len = min(BPTT, len(source) - 1 - i)
    data = source[i : i + seq_len]
    target = source[i + 1 : i + 1 + seq_len].view(-1)
    return data, target


def _repackage_hidden(lib):
    def repackage_hidden(h):
        """Wraps hidden states in new Tensors, to detach them from their history."""
        if isinstance(h, lib.Tensor):
            return h.detach()
        else:
            return tuple(repackage_hidden(v) for v in h)

    return repackage_hidden


def _detach_in_place(h):
    """The char-RNN habit: detach the carried state in place."""
    for x in h if isinstance(h, tuple) else (h,):
        x.detach_()
    return h


def _run(lib, model, corpus, compiled, detach):
    """The example's train() / evaluate() / epoch loop; returns (train losses, val losses, lrs)."""
    criterion = lib.nn.NLLLoss()
    train_data, val_data = batchify(corpus[0], BATCH), batchify(corpus[1], EVAL_BATCH)
    repackage_hidden = _repackage_hidden(lib) if detach == "repackage" else _detach_in_place
    lr, clip = 20.0, 0.25

    def train_step(data, targets, *hidden):
        # a compiled function takes each tensor as an argument of its own: LSTM's (h, c) come unpacked
        hidden = hidden[0] if len(hidden) == 1 else hidden
        # Starting each batch, we detach the hidden state from how it was previously produced.
        hidden = repackage_hidden(hidden)
        model.zero_grad()
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        # `clip_grad_norm` helps prevent the exploding gradient problem in RNNs / LSTMs.
        lib.nn.utils.clip_grad_norm_(model.parameters(), clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        return loss, hidden

    step = flame.compile(train_step) if compiled else train_step

    def evaluate(data_source):
        model.eval()
        total_loss = 0.0
        hidden = model.init_hidden(EVAL_BATCH)
        with lib.no_grad():
            for i in range(0, data_source.size(0) - 1, BPTT):
                data, targets = get_batch(data_source, i)
                output, hidden = model(data, hidden)
                hidden = repackage_hidden(hidden)
                total_loss += len(data) * criterion(output, targets).item()
        return total_loss / (len(data_source) - 1)

    losses, val_losses, lrs = [], [], []
    best_val_loss = None
    for _epoch in range(EPOCHS):
        model.train()
        hidden = model.init_hidden(BATCH)
        for i in range(0, train_data.size(0) - 1, BPTT):
            data, targets = get_batch(train_data, i)
            loss, hidden = step(data, targets, *(hidden if isinstance(hidden, tuple) else (hidden,)))
            losses.append(loss.item())
        val_loss = evaluate(val_data)
        val_losses.append(val_loss)
        lrs.append(lr)
        if not best_val_loss or val_loss < best_val_loss:
            best_val_loss = val_loss
        else:
            # Anneal the learning rate if no improvement has been seen in the validation dataset.
            lr /= 4.0
    return losses, val_losses, lrs, step


def _corpus():
    r = np.random.default_rng(0)
    # a corpus with structure to learn (each token mostly followed by the next), 75 training tokens:
    # 18 rows of 4 columns, so the epoch's last batch holds 2 steps where the others hold 5
    seq = np.cumsum(r.integers(0, 3, 105) == 0) % NTOKENS
    return seq[:75], seq[75:]


# the epoch's short last batch unrolls the recurrent layers over fewer time steps: another program, so
# flame traces it on its own (said once, in a RecompileWarning)
@pytest.mark.filterwarnings("ignore:flame.compile. re-tracing train_step")
@pytest.mark.parametrize(
    "rnn_type,tied,detach,compiled",
    [
        ("LSTM", True, "repackage", False),
        ("LSTM", True, "repackage", True),
        ("GRU", False, "in_place", False),
        ("GRU", False, "in_place", True),
    ],
    ids=["lstm-tied-eager", "lstm-tied-compiled", "gru-detach_-eager", "gru-detach_-compiled"],
)
def test_word_language_model_trains_as_torch(rnn_type, tied, detach, compiled):
    torch.manual_seed(0)
    theirs = _model(torch, rnn_type, tied).double()
    flame.manual_seed(0)
    mine = _model(flame, rnn_type, tied).double()
    mine.load_state_dict({k: flame.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    train, val = _corpus()
    want = _run(torch, theirs, (torch.tensor(train), torch.tensor(val)), False, detach)
    got = _run(flame, mine, (flame.tensor(train), flame.tensor(val)), compiled, detach)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-9, err_msg="training losses")
    np.testing.assert_allclose(got[1], want[1], rtol=1e-9, err_msg="validation losses")
    assert got[2] == want[2]
    assert_same_params(mine, theirs, rtol=1e-8, atol=1e-11)
    assert (mine.decoder.weight is mine.encoder.weight) == tied
    if compiled:
        # the short last batch is a trace of its own (the RNN unrolled over 2 steps), and the annealed
        # learning rate (a Python float the step reads) traces both lengths again
        assert want[2] == [20.0, 20.0, 20.0, 5.0]
        assert got[3].stats().traces == 4, got[3].stats()


def test_detach_in_place_as_torch():
    """Tensor.detach_(): the tensor leaves the graph; what was computed from it before keeps its
    gradient (the loss of the batch before); a view refuses, as torch's."""
    got = {}
    for lib in (torch, flame):
        x = lib.tensor(np.array([1.0, -2.0, 3.0]), requires_grad=True)
        y = x * x
        before = (y * 3).sum()
        assert y.detach_() is y
        after = (y * x).sum()  # y is a constant now
        (before + after).backward()
        got[lib.__name__] = (numpy_of(x.grad), y.requires_grad, y.is_leaf)
        with pytest.raises(RuntimeError, match="Can't detach views in-place"):
            (x * 2)[1:].detach_()
    np.testing.assert_allclose(got["flame"][0], got["torch"][0])
    assert got["flame"][1:] == got["torch"][1:] == (False, True)


def test_a_tuple_of_tensors_as_a_compiled_argument_is_refused_naming_the_way():
    @flame.compile
    def step(x, hidden):
        return x + hidden[0] * hidden[1]

    x = flame.ones(3)
    with pytest.raises(flame.FlameError, match=r"argument 1 is a tuple holding tensors.*step\(x, \*hidden\)"):
        step(x, (x, x))
    with pytest.raises(flame.FlameError, match=r"argument 1 is a dict holding tensors"):
        step(x, {"h": x})
