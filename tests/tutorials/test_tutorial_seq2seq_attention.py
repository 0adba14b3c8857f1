"""PyTorch's "NLP From Scratch: Translation with a Sequence to Sequence Network and Attention" tutorial
(its classic one-token-at-a-time version), ported by swapping `torch` for `flame`: a GRU encoder run
token by token writing `encoder_outputs[ei] = encoder_output[0, 0]` into `torch.zeros(..., device=device)`,
an attention
decoder (Linear on `torch.cat((embedded[0], hidden[0]), 1)`, softmax, `torch.bmm`, log_softmax), NLLLoss
summed into `loss = 0; loss += ...`, teacher forcing chosen by `random.random()` (drawn once here, the
same choices in both libraries), `topv, topi = decoder_output.topk(1)` and `topi.squeeze().detach()` as
the next input, the early stop `if decoder_input.item() == EOS_token: break`, and two SGD optimizers.
flame starts from torch's weights (the tutorial's f32) and must give the same loss for every pair and
the same parameters, eagerly; with the step under @flame.compile for teacher-forced pairs. Without
teacher forcing the tutorial's loop stops on a value (`.item()`), which cannot be traced: flame raises
a TraceError naming that line."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.training_idioms.common import assert_same_params

SOS_token, EOS_token = 0, 1
VOCAB_IN, VOCAB_OUT, HIDDEN, MAX_LENGTH = 9, 8, 8, 6


def _models(lib):
    nn, F = lib.nn, lib.nn.functional
    device = lib.device("cuda" if lib.cuda.is_available() else "cpu")

    class EncoderRNN(nn.Module):
        def __init__(self, input_size, hidden_size):
            super(EncoderRNN, self).__init__()  # noqa: UP008 (the tutorial's spelling)
            self.hidden_size = hidden_size
            self.embedding = nn.Embedding(input_size, hidden_size)
            self.gru = nn.GRU(hidden_size, hidden_size)

        def forward(self, input, hidden):
            embedded = self.embedding(input).view(1, 1, -1)
            output = embedded
            output, hidden = self.gru(output, hidden)
            return output, hidden

        def initHidden(self):
            return lib.zeros(1, 1, self.hidden_size, device=device)

    class AttnDecoderRNN(nn.Module):
        def __init__(self, hidden_size, output_size, dropout_p=0.1, max_length=MAX_LENGTH):
            super(AttnDecoderRNN, self).__init__()  # noqa: UP008
            self.hidden_size = hidden_size
            self.output_size = output_size
            self.dropout_p = dropout_p
            self.max_length = max_length
            self.embedding = nn.Embedding(self.output_size, self.hidden_size)
            self.attn = nn.Linear(self.hidden_size * 2, self.max_length)
            self.attn_combine = nn.Linear(self.hidden_size * 2, self.hidden_size)
            self.dropout = nn.Dropout(self.dropout_p)
            self.gru = nn.GRU(self.hidden_size, self.hidden_size)
            self.out = nn.Linear(self.hidden_size, self.output_size)

        def forward(self, input, hidden, encoder_outputs):
            embedded = self.embedding(input).view(1, 1, -1)
            embedded = self.dropout(embedded)
            attn_weights = F.softmax(self.attn(lib.cat((embedded[0], hidden[0]), 1)), dim=1)
            attn_applied = lib.bmm(attn_weights.unsqueeze(0), encoder_outputs.unsqueeze(0))
            output = lib.cat((embedded[0], attn_applied[0]), 1)
            output = self.attn_combine(output).unsqueeze(0)
            output = F.relu(output)
            output, hidden = self.gru(output, hidden)
            output = F.log_softmax(self.out(output[0]), dim=1)
            return output, hidden, attn_weights

    # dropout 0: its masks are random
    return EncoderRNN(VOCAB_IN, HIDDEN), AttnDecoderRNN(HIDDEN, VOCAB_OUT, dropout_p=0.0)


def _trainer(lib, encoder, decoder):
    """The tutorial's train(), taking the teacher-forcing choice it draws as an argument; the compiled
    version returns the loss, the caller divides its .item()."""

    device = lib.device("cuda" if lib.cuda.is_available() else "cpu")

    def train(input_tensor, target_tensor, use_teacher_forcing, max_length=MAX_LENGTH):
        encoder_hidden = encoder.initHidden()
        encoder_optimizer.zero_grad()
        decoder_optimizer.zero_grad()
        input_length = input_tensor.size(0)
        target_length = target_tensor.size(0)
        encoder_outputs = lib.zeros(max_length, encoder.hidden_size, device=device)
        loss = 0
        for ei in range(input_length):
            encoder_output, encoder_hidden = encoder(input_tensor[ei], encoder_hidden)
            encoder_outputs[ei] = encoder_output[0, 0]
        decoder_input = lib.tensor([[SOS_token]], device=device)
        decoder_hidden = encoder_hidden
        if use_teacher_forcing:
            # Teacher forcing: Feed the target as the next input
            for di in range(target_length):
                decoder_output, decoder_hidden, decoder_attention = decoder(
                    decoder_input, decoder_hidden, encoder_outputs
                )
                loss += criterion(decoder_output, target_tensor[di])
                decoder_input = target_tensor[di]  # Teacher forcing
        else:
            # Without teacher forcing: use its own predictions as the next input
            for di in range(target_length):
                decoder_output, decoder_hidden, decoder_attention = decoder(
                    decoder_input, decoder_hidden, encoder_outputs
                )
                topv, topi = decoder_output.topk(1)
                decoder_input = topi.squeeze().detach()  # detach from history as input
                loss += criterion(decoder_output, target_tensor[di])
                if decoder_input.item() == EOS_token:
                    break
        loss.backward()
        encoder_optimizer.step()
        decoder_optimizer.step()
        return loss

    encoder_optimizer = lib.optim.SGD(encoder.parameters(), lr=0.01)
    decoder_optimizer = lib.optim.SGD(decoder.parameters(), lr=0.01)
    criterion = lib.nn.NLLLoss()
    return train


def _pairs():
    r = np.random.default_rng(0)
    pairs = []
    for _ in range(6):
        src = np.append(r.integers(2, VOCAB_IN, 3), EOS_token).reshape(-1, 1)
        tgt = np.append(r.integers(2, VOCAB_OUT, 3), EOS_token).reshape(-1, 1)
        pairs.append((src, tgt))
    return pairs


def _twins():
    torch.manual_seed(0)
    theirs = _models(torch)
    flame.manual_seed(0)
    mine = _models(flame)
    for m, t in zip(mine, theirs):
        m.load_state_dict({k: flame.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    return theirs, mine


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_seq2seq_with_attention_trains_as_torch(compiled):
    theirs, mine = _twins()
    t_train, f_train = _trainer(torch, *theirs), _trainer(flame, *mine)
    if compiled:
        f_train = flame.compile(f_train)
    teacher = [True, True, False, True, False, True] if not compiled else [True] * 6  # random.random() < 0.5
    for i, ((src, tgt), forcing) in enumerate(zip(_pairs(), teacher)):
        want = t_train(torch.tensor(src), torch.tensor(tgt), forcing).item() / len(tgt)
        got = f_train(flame.tensor(src), flame.tensor(tgt), forcing).item() / len(tgt)
        np.testing.assert_allclose(got, want, rtol=2e-6, err_msg=f"pair {i} (teacher forcing {forcing})")
    for m, t, what in zip(mine, theirs, ("encoder", "decoder")):
        assert_same_params(m, t, rtol=1e-5, atol=1e-7, what=what)
    if compiled:
        assert f_train.stats().traces == 1, f_train.stats()


def test_the_early_stop_on_a_value_is_refused_when_compiled_naming_the_line():
    _, mine = _twins()
    train = flame.compile(_trainer(flame, *mine))
    src, tgt = _pairs()[0]
    with pytest.raises(flame.TraceError, match=r"\.item\(\)[\s\S]*test_tutorial_seq2seq_attention\.py"):
        train(flame.tensor(src), flame.tensor(tgt), False)


FACTORIES = [
    ("zeros", lambda lib, **d: lib.zeros(2, 3, **d)),
    ("ones", lambda lib, **d: lib.ones((2, 3), dtype=lib.float64, **d)),
    ("empty", lambda lib, **d: lib.empty(2, **d).zero_()),
    ("full", lambda lib, **d: lib.full((2,), 1.5, dtype=lib.float, **d)),
    ("tensor", lambda lib, **d: lib.tensor([[SOS_token]], **d)),
    ("as_tensor", lambda lib, **d: lib.as_tensor(np.arange(3.0), **d)),
    ("arange", lambda lib, **d: lib.arange(0, 6, 2, **d)),
    ("linspace", lambda lib, **d: lib.linspace(0, 1, 5, **d)),
    ("eye", lambda lib, **d: lib.eye(3, **d)),
    ("zeros_like", lambda lib, **d: lib.zeros_like(lib.ones(2), **d)),
    ("ones_like", lambda lib, **d: lib.ones_like(lib.ones(2), **d)),
    ("full_like", lambda lib, **d: lib.full_like(lib.ones(2), 7.0, **d)),
    ("empty_like", lambda lib, **d: lib.empty_like(lib.ones(2), **d).zero_()),
    ("rand", lambda lib, **d: lib.rand(2, 2, **d).shape),
    ("randn", lambda lib, **d: lib.randn(2, 2, **d).shape),
    ("rand_like", lambda lib, **d: lib.rand_like(lib.ones(2), **d).shape),
    ("randn_like", lambda lib, **d: lib.randn_like(lib.ones(2), **d).shape),
    ("randint", lambda lib, **d: lib.randint(0, 5, (3,), **d).shape),
    ("new_zeros", lambda lib, **d: lib.ones(2, dtype=lib.float64).new_zeros(2, 3, **d)),
    ("new_ones", lambda lib, **d: lib.ones(2).new_ones((2,), **d)),
    ("new_full", lambda lib, **d: lib.ones(2).new_full((2,), 3.0, **d)),
    ("new_empty", lambda lib, **d: lib.ones(2).new_empty(2, **d).zero_()),
    ("new_tensor", lambda lib, **d: lib.ones(2).new_tensor([1.0, 2.0], **d)),
]


@pytest.mark.parametrize("name,make", FACTORIES, ids=[n for n, _ in FACTORIES])
def test_factories_take_torchs_device_keyword(name, make):
    """`torch.zeros(..., device=device)`, as every tutorial writes it: the process's device is taken
    (as a string or a torch.device), another raises naming the way, and what names no device is a
    TypeError."""

    want = make(torch, device="cpu")
    for device in ("cpu", torch.device("cpu"), flame.device("cpu")):
        got = make(flame, device=device)
        if isinstance(want, torch.Size):
            assert tuple(got) == tuple(want)
        else:
            np.testing.assert_array_equal(got.numpy(), want.numpy(), strict=True)  # values, shape and dtype
            assert got.device == "cpu"
    with pytest.raises(flame.FlameError, match="one executor per process"):
        make(flame, device="cuda")
    with pytest.raises(TypeError, match=f"^{name}: device must name a device"):
        make(flame, device=3.5)


def test_factories_with_a_device_inside_a_compiled_step():
    @flame.compile
    def step(x):
        h = flame.zeros(1, x.shape[0], device="cpu") + flame.ones(x.shape[0], device=torch.device("cpu"))
        return h * x + flame.tensor([2.0], device="cpu")

    np.testing.assert_array_equal(step(flame.arange(3.0)).numpy(), [[2.0, 3.0, 4.0]])
