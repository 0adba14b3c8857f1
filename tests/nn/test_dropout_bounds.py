"""Dropout's probability bounds as torch's: p = 1 zeroes everything (input * 0, so NaN where the input is
not finite, and a zero gradient), eagerly and compiled, for F.dropout, the channel dropouts and their
modules; p outside [0, 1] raises torch's ValueError, in training and eval mode alike."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import flame
import flame.nn as nn
import flame.nn.functional as F
from tests.ops.test_everyday_ops import MODES, check, randn

_HERE = "test_dropout_bounds.py"  # torch's message, then the user's line


_FNS = [("dropout", (2, 3, 4)), ("dropout1d", (2, 3, 4)), ("dropout2d", (2, 3, 4, 2)),
        ("dropout3d", (2, 3, 2, 2, 2))]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,shape", _FNS)
def test_p_one_gives_zeros_and_zero_gradients_like_torch(name, shape, mode):
    x = randn(*shape).astype(np.float64)
    x.flat[0], x.flat[1] = np.inf, np.nan
    check(lambda a: getattr(F, name)(a, 1.0, True), lambda a: getattr(TF, name)(a, 1.0, True), x, mode=mode)


@pytest.mark.parametrize("cls,shape", [(nn.Dropout, (2, 3, 4)), (nn.Dropout1d, (2, 3, 4)),
                                       (nn.Dropout2d, (2, 3, 4, 2)), (nn.Dropout3d, (2, 3, 2, 2, 2))])
def test_modules_with_p_one_give_zeros_and_train_compiled(cls, shape):
    layer = cls(1.0)
    w = flame.nn.Parameter(flame.ones(*shape))

    @flame.compile
    def step(x):
        loss = layer(x * w).sum()
        loss.backward()
        return loss

    assert step(flame.tensor(randn(*shape))).item() == 0.0
    np.testing.assert_array_equal(w.grad.numpy(), np.zeros(shape, np.float32))
    layer.eval()
    np.testing.assert_array_equal(layer(flame.ones(*shape)).numpy(), np.ones(shape, np.float32))


@pytest.mark.parametrize("p", [-0.1, 1.5])
def test_p_outside_zero_one_raises_torchs_error(p):
    message = f"dropout probability has to be between 0 and 1, but got {p}"
    for name, shape in _FNS:
        for training in (True, False):
            with pytest.raises(ValueError) as theirs:
                getattr(TF, name)(torch.ones(shape), p, training)
            with pytest.raises(ValueError, match=message.replace(".", r"\.")) as mine:
                getattr(F, name)(flame.ones(*shape), p, training)
            assert str(mine.value).startswith(f"{theirs.value}\n  at {_HERE}:")
    for cls, tcls in [(nn.Dropout, torch.nn.Dropout), (nn.Dropout1d, torch.nn.Dropout1d),
                      (nn.Dropout2d, torch.nn.Dropout2d), (nn.Dropout3d, torch.nn.Dropout3d)]:
        with pytest.raises(ValueError) as theirs:
            tcls(p)
        with pytest.raises(ValueError) as mine:
            cls(p)
        assert str(mine.value).startswith(f"{theirs.value}\n  at {_HERE}:")


def test_recurrent_and_attention_dropout_of_one_as_torchs():
    torch.manual_seed(0)
    theirs = torch.nn.GRU(3, 4, num_layers=2, dropout=1.0).double()
    mine = nn.GRU(3, 4, num_layers=2, dropout=1.0).double()
    mine.load_state_dict({k: flame.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    x = randn(5, 2, 3).astype(np.float64)
    np.testing.assert_allclose(mine(flame.tensor(x))[0].numpy(), theirs(torch.tensor(x))[0].detach().numpy(),
                               rtol=1e-10, atol=1e-12)  # the second layer sees zeros
    for bad in (1.5, -0.1, True):
        with pytest.raises(ValueError) as want:
            torch.nn.GRU(3, 4, num_layers=2, dropout=bad)
        with pytest.raises(ValueError) as got:
            nn.GRU(3, 4, num_layers=2, dropout=bad)
        assert str(got.value).split("\n  at ")[0] == str(want.value)
    theirs = torch.nn.MultiheadAttention(4, 2, dropout=1.0).double()
    mine = nn.MultiheadAttention(4, 2, dropout=1.0).double()
    mine.load_state_dict({k: flame.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    q = randn(3, 2, 4).astype(np.float64)
    np.testing.assert_allclose(mine(flame.tensor(q), flame.tensor(q), flame.tensor(q), need_weights=False)[0].numpy(),
                               theirs(torch.tensor(q), torch.tensor(q), torch.tensor(q),
                                      need_weights=False)[0].detach().numpy(), rtol=1e-10, atol=1e-12)


def _shared_axes(y: np.ndarray) -> list[int]:
    """The axes along which every mask value repeats (the values of a dropout of ones)."""
    return [ax for ax in range(y.ndim) if np.all(np.ptp(y, axis=ax) == 0)]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("module", [False, True])
def test_dropout2d_of_a_3d_input_drops_per_sample_and_channel_like_torch(module, compiled):
    """torch's dropout2d takes a 3-D input as [N, C, L] (with a warning): one mask value per (sample,
    channel), not one per channel of an unbatched [C, H, W]."""
    x = np.ones((64, 32, 5))
    for lib in (torch, flame):
        drop = lib.nn.Dropout2d(0.5) if module else (lambda t, lib=lib: lib.nn.functional.dropout2d(t, 0.5))
        fn = lambda t, drop=drop: drop(t)  # noqa: E731
        if lib is flame and compiled:
            fn = flame.compile(fn)
        with pytest.warns(UserWarning, match="dropout2d: Received a 3D input"):
            y = fn(lib.tensor(x)).numpy()
        assert _shared_axes(y) == [2]
        assert set(np.unique(y)) == {0.0, 2.0}
