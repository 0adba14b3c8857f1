"""nn.RNN / LSTM / GRU and the cells against torch from the same f64 weights: layers, directions,
batch_first, proj_size, initial states, unbatched inputs; outputs, final states and gradients, eager
and compiled."""

from __future__ import annotations

import pytest

from tests.nn_parity.common import check, rng

IN, HID, T, N = 3, 4, 3, 2


def _x(batch_first, unbatched=False):
    r = rng(1)
    if unbatched:
        return r.standard_normal((T, IN))
    return r.standard_normal((N, T, IN) if batch_first else (T, N, IN))


def _h0(layers, dirs, width, unbatched=False, seed=2):
    shape = (layers * dirs, width) if unbatched else (layers * dirs, N, width)
    return rng(seed).standard_normal(shape)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("kind", ["RNN", "GRU", "LSTM", "RNN_relu"])
@pytest.mark.parametrize(
    "layers,bidir,batch_first,with_state",
    [(1, False, False, False), (2, True, True, True), (3, False, False, True), (1, True, True, False)],
)
def test_recurrent(kind, layers, bidir, batch_first, with_state, compiled):
    extra = dict(nonlinearity="relu") if kind == "RNN_relu" else {}
    name = kind.split("_")[0]

    def build(lib):
        return getattr(lib.nn, name)(
            IN, HID, num_layers=layers, bidirectional=bidir, batch_first=batch_first, dropout=0.0, **extra
        )

    x = _x(batch_first)
    d = 2 if bidir else 1
    if not with_state:
        check(build, lambda m, x: m(x), [x], compiled)
    elif name == "LSTM":
        check(build, lambda m, x, h, c: m(x, (h, c)), [x, _h0(layers, d, HID), _h0(layers, d, HID, seed=3)], compiled)
    else:
        check(build, lambda m, x, h: m(x, h), [x, _h0(layers, d, HID)], compiled)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("layers,bidir,with_state", [(1, False, True), (2, True, False), (2, True, True)])
def test_lstm_proj(layers, bidir, with_state, compiled):
    def build(lib):
        return lib.nn.LSTM(IN, HID, layers, bias=True, batch_first=True, bidirectional=bidir, proj_size=2)

    x = _x(True)
    d = 2 if bidir else 1
    if with_state:
        check(build, lambda m, x, h, c: m(x, (h, c)), [x, _h0(layers, d, 2), _h0(layers, d, HID, seed=3)], compiled)
    else:
        check(build, lambda m, x: m(x), [x], compiled)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("kind", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("with_state", [False, True])
def test_unbatched_and_no_bias(kind, with_state, compiled):
    def build(lib):
        return getattr(lib.nn, kind)(IN, HID, 2, bias=False, bidirectional=True)

    x = _x(False, unbatched=True)
    if not with_state:
        check(build, lambda m, x: m(x), [x], compiled)
    elif kind == "LSTM":
        check(build, lambda m, x, h, c: m(x, (h, c)), [x, _h0(2, 2, HID, True), _h0(2, 2, HID, True, 3)], compiled)
    else:
        check(build, lambda m, x, h: m(x, h), [x, _h0(2, 2, HID, True)], compiled)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("kind", ["RNNCell", "GRUCell", "LSTMCell", "RNNCell_relu"])
@pytest.mark.parametrize("bias,form", [(True, "batched"), (False, "batched_state"), (True, "unbatched_state")])
def test_cells(kind, bias, form, compiled):
    name = kind.split("_")[0]
    extra = dict(nonlinearity="relu") if kind.endswith("relu") else {}

    def build(lib):
        return getattr(lib.nn, name)(IN, HID, bias, **extra)

    r = rng(4)
    lead = () if form.startswith("unbatched") else (N,)
    x, h, c = r.standard_normal((*lead, IN)), r.standard_normal((*lead, HID)), r.standard_normal((*lead, HID))

    def call(m, x, h, c):
        if not form.endswith("state"):
            return m(x)
        return m(x, (h, c)) if name == "LSTMCell" else m(x, h)

    check(build, call, [x, h, c], compiled)


def test_state_dict_names_match_torch():
    import torch

    import flame

    for kind, kw in [("LSTM", dict(num_layers=2, bidirectional=True, proj_size=2)), ("GRU", dict(bias=False))]:
        t = getattr(torch.nn, kind)(IN, HID, **kw)
        f = getattr(flame.nn, kind)(IN, HID, **kw)
        assert [(k, tuple(v.shape)) for k, v in t.state_dict().items()] == [
            (k, tuple(v.shape)) for k, v in f.state_dict().items()
        ]


def _bad_recurrent_calls(lib):
    P = lib.nn.utils.rnn
    x = lib.tensor(rng(5).standard_normal((T, N, IN)))
    return {
        "hidden_size 0": lambda: lib.nn.RNN(IN, 0),
        "num_layers 0": lambda: lib.nn.GRU(IN, HID, num_layers=0),
        "lengths unsorted": lambda: P.pack_padded_sequence(x, [2, 3]),
        "length 0": lambda: P.pack_padded_sequence(x, [3, 0]),
        "padding_side": lambda: P.pad_sequence([x[0]], padding_side="middle"),
        "LSTMCell hx one tensor": lambda: lib.nn.LSTMCell(IN, HID).double()(x[0], x[0, :, :1].expand(N, HID)),
    }


@pytest.mark.parametrize("name", list(_bad_recurrent_calls(__import__("torch"))))
def test_bad_arguments_raise_torch_error_types(name):
    """flame's error is an instance of the type torch raises (RuntimeError for the packing checks,
    TypeError for an LSTMCell state that is not a pair), and says what torch says."""
    import torch

    import flame

    with pytest.raises(Exception) as theirs:
        _bad_recurrent_calls(torch)[name]()
    with pytest.raises(type(theirs.value)) as mine:
        _bad_recurrent_calls(flame)[name]()
    key = {"hidden_size 0": "hidden_size must be greater than zero", "num_layers 0": "num_layers must be greater"}
    if name in key:
        assert key[name] in str(theirs.value) and key[name] in str(mine.value)


def test_base_classes_as_torch():
    """nn.RNNBase and nn.RNNCellBase, for the isinstance checks code written for torch makes."""
    import torch

    import flame

    for lib in (torch, flame):
        for kind in ("RNN", "LSTM", "GRU"):
            assert isinstance(getattr(lib.nn, kind)(IN, HID), lib.nn.RNNBase)
            assert isinstance(getattr(lib.nn, kind + "Cell")(IN, HID), lib.nn.RNNCellBase)
            assert not isinstance(getattr(lib.nn, kind + "Cell")(IN, HID), lib.nn.RNNBase)
    for mode in ("LSTM", "GRU", "RNN_TANH"):  # torch's signatures: RNNBase(mode, ...), RNNCellBase(..., num_chunks)
        built = [lib.nn.RNNBase(mode, IN, HID, 2, False) for lib in (torch, flame)]
        assert [(k, tuple(v.shape)) for k, v in built[0].state_dict().items()] == \
            [(k, tuple(v.shape)) for k, v in built[1].state_dict().items()]
        assert built[1].mode == mode
    cells = [lib.nn.RNNCellBase(IN, HID, True, 4) for lib in (torch, flame)]
    assert [tuple(p.shape) for p in cells[0].parameters()] == [tuple(p.shape) for p in cells[1].parameters()]
    with pytest.raises(ValueError, match="Unrecognized RNN mode"):
        flame.nn.RNNBase("LSTMX", IN, HID)


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("dtype", ["float64", "int64"])
def test_input_of_another_dtype_is_a_value_error(dtype, packed):
    """An input not in the weights' dtype: torch's ValueError (outside autocast), the packed one too."""
    import numpy as np
    import torch

    import flame

    x = np.zeros((T, N, IN), dtype)
    for lib in (torch, flame):
        m = lib.nn.GRU(IN, HID)
        t = lib.tensor(x)
        with pytest.raises(ValueError, match="input dtype .* does not match weight dtype"):
            m(lib.nn.utils.rnn.pack_padded_sequence(t, [T] * N) if packed else t)


def test_dropout_with_one_layer_warns():
    import torch

    import flame

    for lib in (torch, flame):
        with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
            lib.nn.LSTM(IN, HID, dropout=0.5)


@pytest.mark.parametrize("kind", ["RNN", "LSTM", "GRU"])
def test_empty_sequence_is_refused_as_torch(kind):
    import numpy as np
    import torch

    import flame

    for lib in (torch, flame):
        with pytest.raises(RuntimeError, match="Expected sequence length to be larger than 0"):
            getattr(lib.nn, kind)(IN, HID).double()(lib.tensor(np.zeros((0, N, IN))))


@pytest.mark.parametrize(
    "kind,kw",
    [("LSTM", dict(num_layers=2, bidirectional=True, proj_size=2)), ("RNN", dict(nonlinearity="relu", num_layers=2,
     dropout=0.2, batch_first=True, bias=False)), ("RNNCell", dict(nonlinearity="relu")), ("RNNCell", dict(bias=False)),
     ("GRUCell", dict(bias=False))],
)
def test_repr_as_torch(kind, kw):
    """print(model) reads as torch's: proj_size right after the sizes, a cell's nonlinearity when not tanh."""
    import torch

    import flame

    assert repr(getattr(flame.nn, kind)(IN, HID, **kw)) == repr(getattr(torch.nn, kind)(IN, HID, **kw))
