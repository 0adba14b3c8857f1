"""nn.RNN / nn.LSTM / nn.GRU (the full layers) under autocast give torch's result dtypes and values.

torch's CUDA autocast runs the whole recurrent kernel in the low dtype: cuDNN's _cudnn_rnn casts the input,
the states and the weights, and without cuDNN the fused cells (_thnn_fused_lstm_cell, _thnn_fused_gru_cell,
on the CUDA lower-precision list) run on the linears' low-precision gates, so the output and h_n / c_n come
out low; checked on fake CUDA tensors (torch._VF.rnn_tanh / lstm) and, for the GRU (whose fused cell the
fake tensors cannot run), by the cell's AutocastCUDA registration. torch's CPU autocast runs an LSTM without
projections over a padded input through oneDNN's mkldnn_rnn_layer (on the CPU lower-precision list): all of
it in the low dtype; an RNN, a GRU, a projected or a packed LSTM run torch's composite cells, whose linears
alone cast (GRU: its f32 state makes the result f32). The CPU cases use torch's CPU autocast as the oracle."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import flame
from flame.nn.utils.rnn import pack_padded_sequence as flame_pack
from tests.io_parity.test_autocast_lists import LOWS, MODES, TOL, _name

LAYERS = ["RNN", "LSTM", "GRU"]
T, N, H_IN, H = 3, 4, 5, 6


def _pair(layer: str, batch_first: bool, **kw):
    torch.manual_seed(0)
    theirs = getattr(torch.nn, layer)(H_IN, H, num_layers=2, bidirectional=True, batch_first=batch_first, **kw)
    mine = getattr(flame.nn, layer)(H_IN, H, num_layers=2, bidirectional=True, batch_first=batch_first, **kw)
    mine.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    r = np.random.default_rng(7)
    x = r.standard_normal((N, T, H_IN) if batch_first else (T, N, H_IN)).astype(np.float32)
    hx = [r.standard_normal((4, N, H)).astype(np.float32) for _ in range(2 if layer == "LSTM" else 1)]
    return theirs, mine, x, hx


def _flat(result) -> list:
    out, h = result
    return [out, *(h if isinstance(h, tuple) else (h,))]


def _run_flame(mine, x, hx, device: str, low: str, mode: str) -> list:
    def step(x, *hx):
        with flame.autocast(device, dtype=getattr(flame, low)):
            return mine(x, None if not hx else (tuple(hx) if len(hx) == 2 else hx[0]))

    return _flat((step if mode == "eager" else flame.compile(step))(flame.tensor(x), *[flame.tensor(h) for h in hx]))


def _hx_arg(hx: list, lib):
    ts = [lib.tensor(h) for h in hx]
    return tuple(ts) if len(ts) == 2 else ts[0]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("given_hx", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("layer", LAYERS)
def test_recurrent_layers_follow_torchs_cpu_autocast(layer, batch_first, given_hx, mode):
    theirs, mine, x, hx = _pair(layer, batch_first)
    hx = hx if given_hx else []
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        want = _flat(theirs(torch.tensor(x), _hx_arg(hx, torch) if hx else None))
    outs = _run_flame(mine, x, hx, "cpu", "bfloat16", mode)
    assert [_name(o.dtype) for o in outs] == [str(w.dtype).split(".")[-1] for w in want]
    for o, w in zip(outs, want):  # torch's CPU kernels round their steps to bf16 their own way
        np.testing.assert_allclose(o.double().numpy(), w.double().numpy(), rtol=2 * TOL["bfloat16"],
                                   atol=2 * TOL["bfloat16"])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("layer", ["LSTM", "GRU"])
def test_packed_and_projected_recurrent_layers_follow_torchs_cpu_autocast(layer, mode):
    """torch's packed LSTM and its projected one run the composite cells: only the linears cast."""
    kw = {"proj_size": 3} if layer == "LSTM" else {}
    for extra, packed in ((kw, False), ({}, True)):
        if not extra and not packed:
            continue
        torch.manual_seed(0)
        theirs = getattr(torch.nn, layer)(H_IN, H, num_layers=2, **extra)
        mine = getattr(flame.nn, layer)(H_IN, H, num_layers=2, **extra)
        mine.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
        x = np.random.default_rng(7).standard_normal((T, N, H_IN)).astype(np.float32)
        lengths = [3, 2, 2, 1]
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            tx = torch.tensor(x)
            want = _flat(theirs(torch.nn.utils.rnn.pack_padded_sequence(tx, lengths) if packed else tx))

        def step(x, mine=mine, packed=packed, lengths=lengths):
            with flame.autocast("cpu", dtype=flame.bf16):
                return _flat(mine(flame_pack(x, lengths) if packed else x))

        outs = (step if mode == "eager" else flame.compile(step))(flame.tensor(x))
        if packed:
            want[0], outs[0] = want[0].data, outs[0].data
        assert [_name(o.dtype) for o in outs] == [str(w.dtype).split(".")[-1] for w in want], (extra, packed)
        for o, w in zip(outs, want):
            np.testing.assert_allclose(o.double().numpy(), w.double().numpy(), rtol=2 * TOL["bfloat16"],
                                       atol=2 * TOL["bfloat16"])


def _torch_cuda_dtypes(layer: str, low: str) -> list[str]:
    """The result dtypes of torch's CUDA autocast dispatch of the layer's kernel, on fake CUDA tensors."""
    theirs = getattr(torch.nn, layer)(H_IN, H, num_layers=2, bidirectional=True)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        ws = [torch.empty(w.shape, device="cuda") for w in theirs._flat_weights]
        x, h = torch.empty(T, N, H_IN, device="cuda"), torch.zeros(4, N, H, device="cuda")
    before = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
    torch.set_autocast_enabled("cuda", True)
    torch.set_autocast_dtype("cuda", getattr(torch, low))
    try:
        with mode:
            hx = (h, h) if layer == "LSTM" else h
            kernel = torch._VF.lstm if layer == "LSTM" else torch._VF.rnn_tanh
            return [str(t.dtype).split(".")[-1] for t in kernel(x, hx, ws, True, 2, 0.0, False, True, False)]
    finally:
        torch.set_autocast_enabled("cuda", before[0])
        torch.set_autocast_dtype("cuda", before[1])


@pytest.mark.parametrize("low", LOWS)
@pytest.mark.parametrize("layer", LAYERS)
def test_torchs_cuda_autocast_runs_the_recurrent_kernels_in_the_low_dtype(layer, low):
    if layer == "GRU":
        assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::_thnn_fused_gru_cell", "AutocastCUDA")
        return
    assert set(_torch_cuda_dtypes(layer, low)) == {low}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("low", LOWS)
@pytest.mark.parametrize("given_hx", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("layer", LAYERS)
def test_recurrent_layers_run_in_the_low_dtype_under_cuda_autocast(layer, batch_first, given_hx, low, mode):
    theirs, mine, x, hx = _pair(layer, batch_first)
    hx = hx if given_hx else []
    outs = _run_flame(mine, x, hx, "cuda", low, mode)
    assert [_name(o.dtype) for o in outs] == [low] * len(outs)
    tl = getattr(torch, low)  # torch's layer on the input, states and weights rounded to low, computed in f32
    theirs.load_state_dict({k: v.to(tl).float() for k, v in theirs.state_dict().items()})
    with torch.no_grad():
        want = _flat(theirs(torch.tensor(x).to(tl).float(),
                            tuple(torch.tensor(h).to(tl).float() for h in hx) if len(hx) == 2 else
                            torch.tensor(hx[0]).to(tl).float() if hx else None))
    for o, w in zip(outs, want):
        np.testing.assert_allclose(o.double().numpy(), w.to(tl).double().numpy(), rtol=4 * TOL[low],
                                   atol=4 * TOL[low])
