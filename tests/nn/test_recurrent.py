"""nn.RNN, nn.LSTM and nn.GRU against PyTorch's on the CPU, from the same weights (PyTorch's state_dict
loaded as it is): outputs, final states, and the gradients of the input, the initial state and every
parameter, eagerly and compiled; layers, directions, batch_first, unbatched inputs; the errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn
from flame.errors import ShapeError
from tests.nn.test_transformer_modules import MODES, _compare, _rand


def _pair(cls: str, *args, **kw):
    torch.manual_seed(len(cls) + len(kw))
    theirs = getattr(torch.nn, cls)(*args, **kw)
    mine = getattr(nn, cls)(*args, **kw)
    assert list(mine.state_dict()) == list(theirs.state_dict())
    mine.load_state_dict({k: flame.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    return mine, theirs


def _flat(out):
    """(output, h_n) or (output, (h_n, c_n)) as a flat tuple."""
    y, h = out
    return (y, *h) if isinstance(h, tuple) else (y, h)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("cls", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize("layers,bidirectional,batch_first", [(1, False, False), (2, True, True)])
def test_against_pytorch(cls, layers, bidirectional, batch_first, mode):
    mine, theirs = _pair(cls, 5, 6, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first)
    x = _rand(3, 4, 5) if batch_first else _rand(4, 3, 5)
    _compare(mine, theirs, [x], lambda m, x: _flat(m(x)), lambda m, x: _flat(m(x)), mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("cls", ["RNN", "LSTM", "GRU"])
def test_initial_state_and_unbatched(cls, mode):
    mine, theirs = _pair(cls, 4, 5, num_layers=2)
    x, h0, c0 = _rand(6, 4), _rand(2, 5, key=1), _rand(2, 5, key=2)
    if cls == "LSTM":
        _compare(mine, theirs, [x, h0, c0], lambda m, x, h, c: _flat(m(x, (h, c))),
                 lambda m, x, h, c: _flat(m(x, (h, c))), mode)
    else:
        _compare(mine, theirs, [x, h0], lambda m, x, h: _flat(m(x, h)), lambda m, x, h: _flat(m(x, h)), mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bias,batch_first", [(True, False), (False, True)])
def test_lstm_with_projections(bias, batch_first, mode):
    """proj_size: h projected by weight_hr (PyTorch's names and order), layers and directions, with an
    initial state of the projected width for h and the hidden width for c."""
    mine, theirs = _pair("LSTM", 5, 7, num_layers=2, bidirectional=True, proj_size=3, bias=bias,
                         batch_first=batch_first)
    x = _rand(2, 4, 5) if batch_first else _rand(4, 2, 5)
    _compare(mine, theirs, [x], lambda m, x: _flat(m(x)), lambda m, x: _flat(m(x)), mode)
    h0, c0 = _rand(4, 2, 3, key=1), _rand(4, 2, 7, key=2)
    for m in (mine, theirs):
        for p in m.parameters():
            p.grad = None
    _compare(mine, theirs, [x, h0, c0], lambda m, x, h, c: _flat(m(x, (h, c))),
             lambda m, x, h, c: _flat(m(x, (h, c))), mode)


@pytest.mark.parametrize("mode", MODES)
def test_relu_rnn_without_bias(mode):
    mine, theirs = _pair("RNN", 3, 4, nonlinearity="relu", bias=False)
    _compare(mine, theirs, [_rand(5, 2, 3)], lambda m, x: _flat(m(x)), lambda m, x: _flat(m(x)), mode)


def test_errors():
    with pytest.raises(ShapeError, match="(?s)LSTM: input must be \\[T, N, 4\\].*test_recurrent.py"):
        nn.LSTM(4, 3)(flame.ones(2, 3, 5))
    with pytest.raises(ShapeError, match="GRU: hx must be \\[1, 2, 3\\], got \\[2, 2, 3\\]"):
        nn.GRU(4, 3)(flame.ones(5, 2, 4), flame.zeros(2, 2, 3))
    with pytest.raises(ShapeError, match="hx must be a tuple"):
        nn.LSTM(4, 3)(flame.ones(5, 2, 4), flame.zeros(1, 2, 3))
    with pytest.raises(ValueError, match="GRU: proj_size is only supported for LSTM"):
        nn.GRU(4, 3, proj_size=2)
    with pytest.raises(ValueError, match="proj_size must be in \\[0, hidden_size = 3\\)"):
        nn.LSTM(4, 3, proj_size=3)
    with pytest.raises(ValueError, match="nonlinearity"):
        nn.RNN(4, 3, nonlinearity="gelu")


def test_initialisation_bound_and_repr():
    lstm = nn.LSTM(8, 16, num_layers=2, dropout=0.1, generator=flame.Generator(0))
    bound = 1 / np.sqrt(16)
    assert all(np.abs(p.numpy()).max() <= bound for p in lstm.parameters())
    assert repr(lstm) == "LSTM(8, 16, num_layers=2, dropout=0.1)"


def test_a_compiled_lstm_language_model_learns():
    """Embedding -> 2-layer LSTM (dropout between layers) -> Linear, trained compiled with AdamW on a
    repeating sequence: one trace, the loss falls."""
    gen = flame.Generator(0)
    emb, lstm = nn.Embedding(8, 16, generator=gen), nn.LSTM(16, 16, num_layers=2, dropout=0.1, batch_first=True,
                                                            generator=gen)
    head = nn.Linear(16, 8, generator=gen)
    params = [*emb.parameters(), *lstm.parameters(), *head.parameters()]
    opt = flame.optim.AdamW(params, lr=1e-2)
    seq = np.tile(np.arange(8), 2)[None, :].repeat(4, 0)
    x, y = flame.tensor(seq[:, :-1]), flame.tensor(seq[:, 1:])

    @flame.compile
    def step(x, y):
        out, _ = lstm(emb(x))
        loss = nn.functional.cross_entropy(head(out).reshape(-1, 8), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    losses = [step(x, y).item() for _ in range(30)]
    assert losses[-1] < 0.3 * losses[0] and step.stats().traces == 1


def test_an_lstm_step_plans_and_compiles_for_the_gpu(cuda_target):
    """Planned for the CUDA target (its fusion, its GEMMs), a GRU-and-LSTM step gives the eager values
    on the reference executor and every kernel compiles with NVRTC for sm_90."""
    from flame.codegen.nvrtc import compile_cubin

    gru, lstm = nn.GRU(8, 16, generator=flame.Generator(0)), nn.LSTM(16, 16, bidirectional=True,
                                                                   generator=flame.Generator(1))
    x = flame.tensor(_rand(5, 2, 8))

    def body(x):
        out, (h, c) = lstm(gru(x)[0])
        loss = (out * out).mean() + (c * h).sum()
        loss.backward()
        return loss

    want = body(x).item()
    grads = [p.grad.numpy() for p in lstm.parameters()]
    for p in [*gru.parameters(), *lstm.parameters()]:
        p.grad = None
    step = flame.compile(body)
    np.testing.assert_allclose(step(x).item(), want, rtol=1e-5)
    for p, g in zip(lstm.parameters(), grads):
        np.testing.assert_allclose(p.grad.numpy(), g, rtol=1e-4, atol=1e-6)
    for source in {k.source for k in step._last.plan.kernels()}:
        assert compile_cubin(source, "sm_90")[:4] == b"\x7fELF"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("cls", ["RNNCell", "LSTMCell", "GRUCell"])
def test_cells(cls, mode):
    mine, theirs = _pair(cls, 4, 6)
    x, h, c = _rand(3, 4), _rand(3, 6, key=1), _rand(3, 6, key=2)
    if cls == "LSTMCell":
        _compare(mine, theirs, [x, h, c], lambda m, x, h, c: m(x, (h, c)), lambda m, x, h, c: m(x, (h, c)), mode)
        _compare(mine, theirs, [x[0]], lambda m, x: m(x), lambda m, x: m(x), mode)
    else:
        _compare(mine, theirs, [x, h], lambda m, x, h: (m(x, h),), lambda m, x, h: (m(x, h),), mode)
        _compare(mine, theirs, [x[0]], lambda m, x: (m(x),), lambda m, x: (m(x),), mode)
