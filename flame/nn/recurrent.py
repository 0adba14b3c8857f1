"""nn.RNN, nn.LSTM and nn.GRU with PyTorch's parameter names (weight_ih_l0, weight_hh_l0_reverse, ...,
so a PyTorch state_dict loads as it is), gate orders (LSTM: i, f, g, o; GRU: r, z, n), arguments and
return values. The recurrence is unrolled over time while tracing: each layer and direction
projects every time step's input with one matmul, then runs the hidden-state update step by step,
so a compiled function over sequences of length T holds T steps per layer (its graph grows with T).
A PackedSequence input (flame.nn.utils.rnn) runs over its padded batch, each sequence's state held once
its steps are done, and gives a PackedSequence out, as torch's."""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any

from flame.errors import ArgumentTypeError, InputDTypeError, ShapeError
from flame.frontend import functional as F
from flame.frontend.autocast import cast_inputs, is_autocast_enabled
from flame.frontend.context import user_location, user_stacklevel
from flame.frontend.creation import Generator, zeros
from flame.frontend.default_dtype import float_dtype
from flame.frontend.ops import cat, stack, where
from flame.frontend.tensor import Tensor
from flame.nn import init
from flame.nn.module import Module
from flame.nn.parameter import Parameter
from flame.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

__all__ = ["GRU", "LSTM", "RNN", "GRUCell", "LSTMCell", "RNNBase", "RNNCell", "RNNCellBase"]


# ---- one step of each recurrence (x_proj = x @ W_ih^T + b_ih), shared by the layers and the cells ----

def _rnn_step(x_proj: Tensor, h: Tensor, w_hh: Tensor, b_hh: Tensor | None, nonlinearity: str) -> Tensor:
    pre = x_proj + F.linear(h, w_hh, b_hh)
    return pre.tanh() if nonlinearity == "tanh" else pre.relu()


def _lstm_step(x_proj: Tensor, h: Tensor, c: Tensor, w_hh: Tensor, b_hh: Tensor | None,
               w_hr: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The gates i, f, g, o in that order: c' = f * c + i * g, h' = o * tanh(c') (times w_hr^T: a
    projection to proj_size)."""
    i, f, g, o = (x_proj + F.linear(h, w_hh, b_hh)).chunk(4, -1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    h = o.sigmoid() * c.tanh()
    return (h if w_hr is None else F.linear(h, w_hr)), c


def _gru_step(x_proj: Tensor, h: Tensor, w_hh: Tensor, b_hh: Tensor | None) -> Tensor:
    """The gates r, z, n in that order: n = tanh(x_n + r * h_n), h' = (1 - z) * n + z * h."""
    xr, xz, xn = x_proj.chunk(3, -1)
    hr, hz, hn = F.linear(h, w_hh, b_hh).chunk(3, -1)
    r, z = (xr + hr).sigmoid(), (xz + hz).sigmoid()
    return (1 - z) * (xn + r * hn).tanh() + z * h


def _hold(running: Tensor, new, old):
    """new where the sequence is still running ([N, 1] bools), old after its end (LSTM: both of (h, c))."""
    if isinstance(new, tuple):
        return tuple(where(running, a, b) for a, b in zip(new, old))
    return where(running, new, old)


_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}  # rows of weight_ih per hidden unit, by torch's mode


class RNNBase(Module):
    """The base of RNN, LSTM and GRU, as torch.nn.RNNBase (an `isinstance(m, nn.RNNBase)` check holds
    for each), with torch's signature: mode ("LSTM", "GRU", "RNN_TANH" or "RNN_RELU") names the recurrence
    whose parameters it holds; RNN, LSTM and GRU run them."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device: Any = None, dtype: Any = None, generator: Generator | None = None):
        super().__init__()
        if mode not in _GATES:
            raise ValueError(f"Unrecognized RNN mode: {mode}")
        self.mode, self.gates = mode, _GATES[mode]
        for what, size in (("input_size", input_size), ("hidden_size", hidden_size)):
            if not isinstance(size, int):
                raise ArgumentTypeError(f"{type(self).__name__}: {what} should be of type int, got: "
                                        f"{type(size).__name__}")
        for what, size in (("input_size", input_size), ("hidden_size", hidden_size), ("num_layers", num_layers)):
            if size < 1:
                raise ValueError(f"{type(self).__name__}: {what} must be greater than zero, got {size}")
        if proj_size and self.gates != 4:
            raise ValueError(f"{type(self).__name__}: proj_size is only supported for LSTM")
        if not 0 <= proj_size < hidden_size:
            raise ValueError(f"{type(self).__name__}: proj_size must be in [0, hidden_size = {hidden_size}), got "
                             f"{proj_size}")
        if isinstance(dropout, bool) or not isinstance(dropout, numbers.Number) or not 0 <= dropout <= 1:
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an element "
                             "being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero dropout "
                          f"expects num_layers greater than 1, but got dropout={dropout} and num_layers={num_layers}",
                          UserWarning, stacklevel=user_stacklevel())
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, dropout
        self.bidirectional, self.generator, self.proj_size = bidirectional, generator, proj_size
        dt = float_dtype(dtype)
        rows, out = self.gates * hidden_size, self.out_size
        for layer in range(num_layers):
            width = input_size if layer == 0 else out * self.directions
            for suffix in self._suffixes(layer):  # PyTorch's order: ih, hh, biases, hr
                setattr(self, f"weight_ih_{suffix}", Parameter(zeros(rows, width, dtype=dt)))
                setattr(self, f"weight_hh_{suffix}", Parameter(zeros(rows, out, dtype=dt)))
                if bias:
                    setattr(self, f"bias_ih_{suffix}", Parameter(zeros(rows, dtype=dt)))
                    setattr(self, f"bias_hh_{suffix}", Parameter(zeros(rows, dtype=dt)))
                if proj_size:
                    setattr(self, f"weight_hr_{suffix}", Parameter(zeros(proj_size, hidden_size, dtype=dt)))
        self.reset_parameters(generator)

    @property
    def out_size(self) -> int:
        """The width of the hidden state h (and of the output per direction): proj_size, else hidden_size."""
        return self.proj_size or self.hidden_size

    @property
    def directions(self) -> int:
        return 2 if self.bidirectional else 1

    def _suffixes(self, layer: int) -> list[str]:
        return [f"l{layer}"] + ([f"l{layer}_reverse"] if self.bidirectional else [])

    def flatten_parameters(self) -> None:
        """Nothing to do: flame keeps no fused weight buffer (torch's packs its weights for cuDNN here)."""

    @property
    def all_weights(self) -> list:
        """Each layer and direction's parameters in torch's order: weight_ih, weight_hh, bias_ih, bias_hh,
        weight_hr (those it has)."""
        kinds = ["weight_ih", "weight_hh"] + (["bias_ih", "bias_hh"] if self.bias else []) + \
            (["weight_hr"] if self.proj_size else [])
        return [[getattr(self, f"{k}_{s}") for k in kinds]
                for layer in range(self.num_layers) for s in self._suffixes(layer)]

    def reset_parameters(self, generator: Generator | None = None) -> None:
        """Every weight and bias from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as PyTorch."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            init.uniform_(p, -bound, bound, generator)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"  # then torch's order: proj_size first
        for name, default in (("proj_size", 0), ("num_layers", 1), ("bias", True), ("batch_first", False),
                              ("dropout", 0.0), ("bidirectional", False)):
            if getattr(self, name) != default:
                s += f", {name}={getattr(self, name)}"
        return s

    def _cell(self, x_proj: Tensor, state, w_hh: Tensor, b_hh: Tensor | None, w_hr: Tensor | None):
        """One step: x_proj = x @ w_ih^T + b_ih for this step; state -> (output h, new state)."""
        raise NotImplementedError

    def _initial(self, hx, n: int, like: Tensor):
        """Per (layer, direction): the initial state, from hx [L * D, N, H] or zeros (one hidden
        state; LSTM's is a pair)."""
        if hx is None:
            return [zeros(n, self.hidden_size, dtype=like.dtype)] * (self.num_layers * self.directions)
        self._check_hx(hx, n, "hx", self.hidden_size)
        return list(hx.unbind(0))

    def _final(self, states: list):
        return stack(states, 0)

    def forward(self, input, hx=None):  # noqa: A002
        """(output, h_n) ((output, (h_n, c_n)) for LSTM), as torch's; input [T, N, H_in] ([N, T, H_in] with
        batch_first, [T, H_in] unbatched) or a PackedSequence (then the output is one too, and each
        sequence's state stops at its length)."""
        if self.mode == "LSTM" and isinstance(hx, list):
            hx = tuple(hx)  # torch's LSTM reads hx[0] and hx[1]: a list (h_0, c_0) is taken as the tuple
        if isinstance(input, PackedSequence):
            return self._forward_packed(input, hx)
        name = type(self).__name__
        unbatched = input.ndim == 2
        if input.ndim not in (2, 3) or input.shape[-1] != self.input_size:
            raise ShapeError(f"{name}: input must be [T, N, {self.input_size}] ([N, T, {self.input_size}] with "
                             f"batch_first, or unbatched [T, {self.input_size}]), got {list(input.shape)}"
                             f"\n  at {user_location()}")
        self._check_dtype(input)
        x = input.unsqueeze(1) if unbatched else (input.transpose(0, 1) if self.batch_first else input)
        if unbatched and hx is not None:
            hx = tuple(h.unsqueeze(1) for h in hx) if isinstance(hx, tuple) else hx.unsqueeze(1)
        out, final = self._run(x, hx, None)
        out = out.squeeze(1) if unbatched else (out.transpose(0, 1) if self.batch_first else out)
        if unbatched:
            final = tuple(f.squeeze(1) for f in final) if isinstance(final, tuple) else final.squeeze(1)
        return out, final

    def _check_dtype(self, x: Tensor) -> None:
        """The input in the weights' dtype (outside autocast), as torch's ValueError asks."""
        weight = self.weight_ih_l0
        if x.dtype != weight.dtype and not is_autocast_enabled():
            raise InputDTypeError(f"{type(self).__name__} input dtype ({x.dtype}) does not match weight dtype "
                                  f"({weight.dtype}). Convert input: input.to('{weight.dtype}'), or convert model: "
                                  f"model.to('{x.dtype}')\n  at {user_location()}")

    def _forward_packed(self, packed: PackedSequence, hx):
        """The layers over the padded batch (in the packed, longest-first order), each sequence's state held
        once its steps are done; hx and the final state in the batch's original order, as torch's."""
        self._check_dtype(packed.data)
        x, _ = pad_packed_sequence(packed._replace(unsorted_indices=None))
        if x.shape[-1] != self.input_size:
            raise ShapeError(f"{type(self).__name__}: the packed input's rows must be [{self.input_size}], got "
                             f"{list(packed.data.shape[1:])}\n  at {user_location()}")
        order, back = packed.sorted_indices, packed.unsorted_indices
        if hx is not None and order is not None:
            hx = tuple(h.index_select(1, order) for h in hx) if isinstance(hx, tuple) else hx.index_select(1, order)
        lengths = Tensor(packed.lengths()).unsqueeze(1)  # [N, 1]
        out, final = self._run(x, hx, lengths)
        if back is not None:
            final = tuple(f.index_select(1, back) for f in final) if isinstance(final, tuple) else \
                final.index_select(1, back)
        rows = pack_padded_sequence(out, packed.lengths()).data
        return packed._replace(data=rows), final

    def _run(self, x: Tensor, hx, lengths: Tensor | None):
        """The layers over time-major x [T, N, H_in]; with lengths [N, 1], a sequence's state stops changing
        after its last step (its later outputs are left as they come: the caller drops them)."""
        length, n = x.shape[0], x.shape[1]
        if length == 0:
            raise ShapeError(f"{type(self).__name__}: Expected sequence length to be larger than 0 in RNN"
                             f"\n  at {user_location()}")
        # autocast: torch runs the whole recurrent kernel in the low dtype (input, states, weights) under its
        # CUDA autocast (cuDNN's _cudnn_rnn, the fused cells), and under its CPU autocast where oneDNN's
        # mkldnn_rnn_layer (on the CPU lower-precision list) runs it: an LSTM without projections over a padded
        # input. Otherwise (CPU: RNN, GRU, a projected or packed LSTM) only the linears cast
        kernel = "lower" if self.mode == "LSTM" and not self.proj_size and lengths is None else "keep"
        if hx is not None:
            parts = hx if isinstance(hx, tuple) else (hx,)
            x, *parts = cast_inputs("lower", (x, *parts), cpu=kernel)
            hx = tuple(parts) if isinstance(hx, tuple) else parts[0]
        else:
            (x,) = cast_inputs("lower", (x,), cpu=kernel)
        states = self._initial(hx, n, x)
        finals = []
        for layer in range(self.num_layers):
            outs = []
            for d, suffix in enumerate(self._suffixes(layer)):
                names = ("weight_ih", "weight_hh") + (("bias_ih", "bias_hh") if self.bias else ()) + \
                    (("weight_hr",) if self.proj_size else ())
                weights = dict(zip(names, cast_inputs("lower", tuple(getattr(self, f"{k}_{suffix}") for k in names),
                                                      cpu=kernel)))
                w_ih, w_hh, w_hr = weights["weight_ih"], weights["weight_hh"], weights.get("weight_hr")
                b_ih, b_hh = weights.get("bias_ih"), weights.get("bias_hh")
                proj = F.linear(x, w_ih, b_ih)  # every step's input projection in one matmul: [T, N, G * H]
                state = states[layer * self.directions + d]
                steps = range(length - 1, -1, -1) if d else range(length)
                hs: list = [None] * length
                for t in steps:
                    hs[t], new = self._cell(proj[t], state, w_hh, b_hh, w_hr)
                    state = new if lengths is None else _hold(lengths > t, new, state)
                finals.append(state)
                outs.append(stack(hs, 0))
            x = outs[0] if len(outs) == 1 else cat(outs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True, generator=self.generator)
        return x, self._final(finals)

    def _check_hx(self, h: Tensor, n: int, what: str, width: int) -> None:
        want = (self.num_layers * self.directions, n, width)
        if tuple(h.shape) != want:
            raise ShapeError(f"{type(self).__name__}: {what} must be {list(want)}, got {list(h.shape)}"
                             f"\n  at {user_location()}")


class RNN(RNNBase):
    """Elman RNN: h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh) (nonlinearity="relu": relu)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device: Any = None, dtype: Any = None, generator: Generator | None = None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNN: unknown nonlinearity {nonlinearity!r} (tanh or relu)")
        super().__init__(f"RNN_{nonlinearity.upper()}", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, 0, device, dtype, generator)
        self.nonlinearity = nonlinearity

    def _cell(self, x_proj, h, w_hh, b_hh, w_hr):
        h = _rnn_step(x_proj, h, w_hh, b_hh, self.nonlinearity)
        return h, h


class LSTM(RNNBase):
    """c' = f * c + i * g, h' = o * tanh(c'), the gates i, f, g, o (in that order in the weights) from
    x W_ih^T + b_ih + h W_hh^T + b_hh. forward returns (output, (h_n, c_n)). proj_size > 0: h' is
    projected to proj_size by weight_hr_l{k} [proj_size, hidden_size] (h_0 and the output are that wide;
    c_0 stays hidden_size), as PyTorch's."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device: Any = None, dtype: Any = None, generator: Generator | None = None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, device, dtype, generator)

    def _initial(self, hx, n: int, like: Tensor):
        k = self.num_layers * self.directions
        if hx is None:
            return [(zeros(n, self.out_size, dtype=like.dtype), zeros(n, self.hidden_size, dtype=like.dtype))] * k
        if not isinstance(hx, tuple) or len(hx) != 2:
            raise ShapeError(f"LSTM: hx must be a tuple (h_0, c_0)\n  at {user_location()}")
        self._check_hx(hx[0], n, "h_0", self.out_size)
        self._check_hx(hx[1], n, "c_0", self.hidden_size)
        return list(zip(hx[0].unbind(0), hx[1].unbind(0)))

    def _cell(self, x_proj, state, w_hh, b_hh, w_hr):
        h, c = _lstm_step(x_proj, *state, w_hh, b_hh, w_hr)
        return h, (h, c)

    def _final(self, states):
        return stack([h for h, _ in states], 0), stack([c for _, c in states], 0)


class GRU(RNNBase):
    """r = sigmoid(.), z = sigmoid(.), n = tanh(x W_in^T + b_in + r * (h W_hn^T + b_hn)),
    h' = (1 - z) * n + z * h; the gates r, z, n in that order in the weights."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device: Any = None, dtype: Any = None, generator: Generator | None = None):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, device, dtype, generator)

    def _cell(self, x_proj, h, w_hh, b_hh, w_hr):
        h = _gru_step(x_proj, h, w_hh, b_hh)
        return h, h


class RNNCellBase(Module):
    """One step of a recurrence, the base of torch.nn.RNNCell / LSTMCell / GRUCell as torch.nn.RNNCellBase:
    weight_ih, weight_hh, bias_ih, bias_hh; input [N, input_size] or unbatched [input_size]. num_chunks:
    the gates, rows of weight_ih per hidden unit (RNNCell 1, LSTMCell 4, GRUCell 3), torch's signature."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool, num_chunks: int, device: Any = None,
                 dtype: Any = None, generator: Generator | None = None):
        super().__init__()
        self.input_size, self.hidden_size, self.bias, self.gates = input_size, hidden_size, bias, num_chunks
        dt = float_dtype(dtype)
        self.weight_ih = Parameter(zeros(self.gates * hidden_size, input_size, dtype=dt))
        self.weight_hh = Parameter(zeros(self.gates * hidden_size, hidden_size, dtype=dt))
        self.register_parameter("bias_ih", Parameter(zeros(self.gates * hidden_size, dtype=dt)) if bias else None)
        self.register_parameter("bias_hh", Parameter(zeros(self.gates * hidden_size, dtype=dt)) if bias else None)
        self.reset_parameters(generator)

    def reset_parameters(self, generator: Generator | None = None) -> None:
        """Every weight and bias drawn again from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as torch's."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            init.uniform_(p, -bound, bound, generator)

    def _prepare(self, input: Tensor, hx, parts: int):  # noqa: A002
        name = type(self).__name__
        if input.ndim not in (1, 2) or input.shape[-1] != self.input_size:
            raise ShapeError(f"{name}: input must be [N, {self.input_size}] or [{self.input_size}], got "
                             f"{list(input.shape)}\n  at {user_location()}")
        unbatched = input.ndim == 1
        x = input.unsqueeze(0) if unbatched else input
        n = x.shape[0]
        if hx is None:
            z = zeros(n, self.hidden_size, dtype=x.dtype)
            states = [z] * parts
        else:
            if parts == 2 and not isinstance(hx, (tuple, list)):
                raise ArgumentTypeError(f"{name}: hx must be a tuple (h, c) of tensors, not {type(hx).__name__}"
                                        f"\n  at {user_location()}")
            states = list(hx) if isinstance(hx, tuple) else [hx]
            if len(states) != parts:
                raise ShapeError(f"{name}: hx must be {'a tuple (h, c)' if parts == 2 else 'one tensor'}"
                                 f"\n  at {user_location()}")
            states = [h.unsqueeze(0) if unbatched else h for h in states]
            for h in states:
                if tuple(h.shape) != (n, self.hidden_size):
                    raise ShapeError(f"{name}: hidden state must be [{n}, {self.hidden_size}], got {list(h.shape)}"
                                     f"\n  at {user_location()}")
        # autocast: lstm_cell, gru_cell and rnn_*_cell are on PyTorch's CUDA lower-precision list: the input,
        # the states and the weights (F.linear casts those) run in the autocast dtype. Its CPU lists hold
        # none of them: only the linears (on the CPU lower-precision list) cast, the states stay as they are
        x, *states = cast_inputs("lower", (x, *states), cpu="keep")
        return F.linear(x, self.weight_ih, self.bias_ih), states, unbatched

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False")
        return s + (f", nonlinearity={self.nonlinearity}" if getattr(self, "nonlinearity", "tanh") != "tanh" else "")


class RNNCell(RNNCellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device: Any = None, dtype: Any = None, generator: Generator | None = None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNNCell: unknown nonlinearity {nonlinearity!r} (tanh or relu)")
        super().__init__(input_size, hidden_size, bias, 1, device, dtype, generator)
        self.nonlinearity = nonlinearity

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:  # noqa: A002
        x_proj, (h,), unbatched = self._prepare(input, hx, 1)
        h = _rnn_step(x_proj, h, self.weight_hh, self.bias_hh, self.nonlinearity)
        return h.squeeze(0) if unbatched else h


class LSTMCell(RNNCellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device: Any = None, dtype: Any = None,
                 generator: Generator | None = None):
        super().__init__(input_size, hidden_size, bias, 4, device, dtype, generator)

    def forward(self, input: Tensor, hx: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:  # noqa: A002
        x_proj, (h, c), unbatched = self._prepare(input, hx, 2)
        h, c = _lstm_step(x_proj, h, c, self.weight_hh, self.bias_hh)
        return (h.squeeze(0), c.squeeze(0)) if unbatched else (h, c)


class GRUCell(RNNCellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device: Any = None, dtype: Any = None,
                 generator: Generator | None = None):
        super().__init__(input_size, hidden_size, bias, 3, device, dtype, generator)

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:  # noqa: A002
        x_proj, (h,), unbatched = self._prepare(input, hx, 1)
        h = _gru_step(x_proj, h, self.weight_hh, self.bias_hh)
        return h.squeeze(0) if unbatched else h
