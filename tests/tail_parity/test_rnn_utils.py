"""nn.utils.rnn against torch in f64: pad_sequence, pack_padded_sequence (sorted and not), pad_packed_sequence
(batch_first, padding_value, total_length), pack_sequence, unpad/unpack_sequence, and RNN / LSTM / GRU over a
PackedSequence (layers, directions, hx, batch_first): the packed data, batch_sizes and indices, the outputs,
the final states and the gradients of the inputs and every parameter, eager and compiled."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.nn_parity.common import compare, twin
from tests.tail_parity.common import Fixed, check_fn, rng

R = rng(4)
LENGTHS_SORTED = [5, 4, 4, 2]
LENGTHS = [3, 5, 1, 4]
X = R.standard_normal((5, 4, 3))  # [T, B, H_in]
SEQS = [R.standard_normal((n, 2)) for n in (3, 5, 1)]


def _rnn(lib):
    return lib.nn.utils.rnn


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_pad_sequence(padding_side, batch_first, compiled):
    fn = lambda L, *s: _rnn(L).pad_sequence(s, batch_first, -2.5, padding_side)
    check_fn(fn, SEQS, compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("lengths,enforce_sorted", [(LENGTHS_SORTED, True), (LENGTHS, False)])
def test_pack_and_pad(lengths, enforce_sorted, batch_first, compiled):
    """The packed data, batch_sizes, indices and the padded result (lengths in the original order) with
    gradients through both."""

    def fn(L, x):
        x = x.transpose(0, 1) if batch_first else x
        p = _rnn(L).pack_padded_sequence(x * 2.0, lengths, batch_first, enforce_sorted)
        out, lens = _rnn(L).pad_packed_sequence(p, batch_first, padding_value=0.5, total_length=6)
        return p.data, p.batch_sizes, p.sorted_indices, p.unsorted_indices, out, lens

    check_fn(fn, [X], compiled)


def test_pack_lengths_as_tensor_and_pack_sequence():
    def fn(L, x, lens):
        p = _rnn(L).pack_padded_sequence(x, lens, enforce_sorted=False)
        q = _rnn(L).pack_sequence([x[:3, 0], x[:5, 1], x[:1, 2]], enforce_sorted=False)
        back = _rnn(L).unpack_sequence(q)
        cut = _rnn(L).unpad_sequence(x.transpose(0, 1), lens, batch_first=True)  # torch's transposes in place
        return p.data, p.batch_sizes, q.data, q.batch_sizes, back, cut

    check_fn(fn, [X, Fixed(np.array(LENGTHS))], compiled=False)


@pytest.mark.parametrize(
    "name,call",
    [
        ("unsorted", lambda L, x: _rnn(L).pack_padded_sequence(x, LENGTHS)),
        ("zero_length", lambda L, x: _rnn(L).pack_padded_sequence(x, [5, 0, 0, 0])),
        (
            "short_total_length",
            lambda L, x: _rnn(L).pad_packed_sequence(_rnn(L).pack_padded_sequence(x, LENGTHS_SORTED), total_length=3),
        ),
    ],
)
def test_errors(name, call):
    with pytest.raises((RuntimeError, ValueError)):
        call(torch, torch.tensor(X))
    with pytest.raises(ValueError):
        call(flame, flame.tensor(X))


def test_traced_lengths_need_values():
    with pytest.raises(flame.TraceError, match="list of ints"):
        flame.compile(lambda x, n: _rnn(flame).pack_padded_sequence(x, n).data)(
            flame.tensor(X), flame.tensor(np.array(LENGTHS_SORTED))
        )


MODELS = {
    "rnn": lambda L: L.nn.RNN(3, 4),
    "rnn_relu_2layer_bi": lambda L: L.nn.RNN(3, 4, num_layers=2, nonlinearity="relu", bidirectional=True),
    "lstm": lambda L: L.nn.LSTM(3, 4),
    "lstm_bi_2layer": lambda L: L.nn.LSTM(3, 4, num_layers=2, bidirectional=True),
    "lstm_proj": lambda L: L.nn.LSTM(3, 4, proj_size=2, bidirectional=True),
    "gru_bi": lambda L: L.nn.GRU(3, 4, bidirectional=True),
    "gru_batch_first": lambda L: L.nn.GRU(3, 4, num_layers=2, batch_first=True),
}


def _lib(t):
    return torch if isinstance(t, torch.Tensor) else flame


def _packed_call(lengths, enforce_sorted, with_hx):
    def call(model, x, *hx):
        L = _lib(x)
        xin = x.transpose(0, 1) if model.batch_first else x
        p = _rnn(L).pack_padded_sequence(xin, lengths, model.batch_first, enforce_sorted)
        state = None
        if with_hx:  # LSTM: (h_0 [.., out_size], c_0 [.., hidden_size]); the others: h_0
            lstm = isinstance(model, L.nn.LSTM)
            state = (hx[0][..., : model.proj_size or model.hidden_size], hx[1]) if lstm else hx[0]
        out, final = model(p, state)
        padded, lens = _rnn(L).pad_packed_sequence(out, model.batch_first)
        return out.data, padded, lens, final

    return call


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("with_hx", [False, True], ids=["zeros", "hx"])
@pytest.mark.parametrize(
    "lengths,enforce_sorted", [(LENGTHS_SORTED, True), (LENGTHS, False)], ids=["sorted", "unsorted"]
)
@pytest.mark.parametrize("name", list(MODELS))
def test_recurrent_packed(name, lengths, enforce_sorted, with_hx, compiled):
    theirs, mine = twin(MODELS[name])
    layers = theirs.num_layers * (2 if theirs.bidirectional else 1)
    hx = [R.standard_normal((layers, 4, 4)), R.standard_normal((layers, 4, 4))] if with_hx else []
    compare(theirs, mine, _packed_call(lengths, enforce_sorted, with_hx), [X, *hx], compiled)
