"""Channel dropout of every rank, against torch: dropout2d and dropout3d of a rank other than their two warn
as torch's and still drop (dropout2d along dims 0 and 1, torch's feature_dropout; dropout3d takes the input
as unbatched: one mask value per dim-0 index); dropout1d refuses another rank. The mask's shape (the dims
the result varies along) is torch's, eagerly and inside @flame.compile, for the functions and modules."""

import warnings

import numpy as np
import pytest
import torch

import flame

CASES = [(name, ndim) for name in ("dropout1d", "dropout2d", "dropout3d") for ndim in range(1, 7)]


def _varying_dims(out: np.ndarray) -> set[int]:
    """The dims along which the result is not constant (where the mask has more than one value)."""
    return {d for d in range(out.ndim) if out.shape[d] > 1 and not (out == out.take([0], axis=d)).all()}


def _run(lib, name: str, ndim: int, module: bool, compiled: bool):
    x = lib.ones(*([4] * ndim), dtype=lib.float64)
    if module:
        layer = getattr(lib.nn, name.capitalize())(0.5)
        fn = layer
    else:
        fn = lambda t: getattr(lib.nn.functional, name)(t, 0.5)  # noqa: E731
    if lib is flame and compiled:
        fn = flame.compile(fn)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            out = fn(x)
        except Exception as e:  # noqa: BLE001
            return e, [str(w.message) for w in seen]
    return out.detach().numpy() if lib is torch else out.numpy(), [str(w.message) for w in seen]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("module", [False, True], ids=["function", "module"])
@pytest.mark.parametrize("name,ndim", CASES)
def test_channel_dropout_rank_as_torch(name, ndim, module, compiled):
    torch.manual_seed(0)
    flame.manual_seed(0)
    want, want_warnings = _run(torch, name, ndim, module, False)
    got, got_warnings = _run(flame, name, ndim, module, compiled)
    if isinstance(want, Exception):
        assert isinstance(got, RuntimeError), f"torch raises {want!r}, flame gives {got!r}"
        return
    assert not isinstance(got, Exception), f"torch computes, flame raises {got!r}"
    assert got.shape == want.shape
    assert set(np.unique(got)) <= {0.0, 2.0}
    assert _varying_dims(got) == _varying_dims(want), (got.shape, _varying_dims(got), _varying_dims(want))
    assert [w.split(",")[0] for w in got_warnings] == [w.split(",")[0] for w in want_warnings]
