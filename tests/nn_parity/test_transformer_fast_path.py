"""nn.TransformerEncoder in inference against torch's: where torch takes its sparsity fast path (eval
mode, no gradient wanted, a batch_first stack with a src_key_padding_mask and no mask), its nested tensors
leave zeros at the padded positions before the final norm; flame's outputs are torch's at every position,
eagerly and compiled, and where torch keeps the dense computation (training, gradients, a mask beside
the padding, padding not at the end of a row, layers it cannot nest) so does flame. use_nested_tensor
and the warning that says why it is False are torch's."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import flame
from tests.nn_parity.common import rng, twin

E, H = 6, 2


def _stack(with_norm: bool, mask_check: bool = True, **layer):
    def build(lib):
        kw = dict(dim_feedforward=7, dropout=0.0, batch_first=True) | layer
        norm = lib.nn.LayerNorm(E) if with_norm else None
        return lib.nn.TransformerEncoder(lib.nn.TransformerEncoderLayer(E, H, **kw), 2, norm, mask_check=mask_check)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's note on nested tensors; the reasons are tested below
        return twin(build)


def _padding(kind: str) -> np.ndarray:
    kp = np.zeros((3, 5), bool)
    kp[0, 3:] = True  # padded at the end
    kp[2, 1:] = True
    if kind == "inner":  # a valid key after a padded one: torch's mask check keeps the dense path
        kp[1, 2] = True
    if kind == "float":
        return np.where(kp, -np.inf, 0.0)
    return kp


def _outputs(theirs, mine, kp, *, compiled=False, grad=False, train=False, mask=None):
    x = rng(7).standard_normal((3, 5, E))
    theirs.train(train), mine.train(train)
    with torch.set_grad_enabled(grad), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's prototype note on nested tensors
        t = theirs(
            torch.tensor(x), mask=None if mask is None else torch.tensor(mask), src_key_padding_mask=torch.tensor(kp)
        )
    call = lambda x, kp: mine(x, mask=None if mask is None else flame.tensor(mask), src_key_padding_mask=kp)
    if compiled:
        call = flame.compile(call)
    with flame.set_grad_enabled(grad):
        f = call(flame.tensor(x), flame.tensor(kp))
    return f.detach().numpy(), t.detach().numpy()


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("kind", ["bool", "float", "inner"])
@pytest.mark.parametrize("with_norm", [False, True])
def test_inference_with_padding_as_torch(with_norm, kind, compiled):
    theirs, mine = _stack(with_norm)
    f, t = _outputs(theirs, mine, _padding(kind), compiled=compiled)
    np.testing.assert_allclose(f, t, rtol=1e-9, atol=1e-10)
    if kind != "inner" and not with_norm:
        assert not t[_padding("bool")].any()  # the case this file is about: torch's zeros


def test_mask_check_off_zeroes_every_padded_position():
    theirs, mine = _stack(True, mask_check=False)
    f, t = _outputs(theirs, mine, _padding("bool"))
    np.testing.assert_allclose(f, t, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("case", ["train", "grad", "mask", "norm_first", "odd_heads", "not_batch_first"])
def test_dense_where_torch_takes_no_fast_path(case):
    layer = {"norm_first": dict(norm_first=True), "not_batch_first": dict(batch_first=False)}.get(case, {})
    theirs, mine = _stack(False, **layer) if case != "odd_heads" else _odd_heads()
    kp = _padding("bool")
    if case == "not_batch_first":  # [N=5, S=3] padding for the [S=3, N=5, E] input
        kp = np.zeros((5, 3), bool)
        kp[1, 2] = kp[3, 1:] = True
    mask = np.triu(np.ones((5, 5), bool), 1) if case == "mask" else None
    f, t = _outputs(theirs, mine, kp, grad=case == "grad", train=case == "train", mask=mask)
    np.testing.assert_allclose(f, t, rtol=1e-9, atol=1e-10)
    assert np.abs(t).min(-1).all()  # no zeroed position


def _odd_heads():
    def build(lib):
        layer = lib.nn.TransformerEncoderLayer(E, 3, 7, dropout=0.0, batch_first=True)
        return lib.nn.TransformerEncoder(layer, 2)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return twin(build)


def test_transformer_memory_as_torch():
    """nn.Transformer's encoder is such a stack: the decoder reads the zeroed memory (its encoder norm's
    bias at the padded positions) when no memory_key_padding_mask hides them."""

    def build(lib):
        return lib.nn.Transformer(E, H, 1, 1, 7, dropout=0.0, batch_first=True)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs, mine = twin(build)
    theirs.eval(), mine.eval()
    r = rng(3)
    src, tgt, kp = r.standard_normal((3, 5, E)), r.standard_normal((3, 4, E)), _padding("bool")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = theirs(torch.tensor(src), torch.tensor(tgt), src_key_padding_mask=torch.tensor(kp)).numpy()
    with flame.no_grad():
        f = mine(flame.tensor(src), flame.tensor(tgt), src_key_padding_mask=flame.tensor(kp)).numpy()
    np.testing.assert_allclose(f, t, rtol=1e-9, atol=1e-10)


LAYERS = {
    "plain": dict(batch_first=True),
    "norm_first": dict(batch_first=True, norm_first=True),
    "seq_first": dict(),
    "no_bias": dict(batch_first=True, bias=False),
    "tanh": dict(batch_first=True, activation="tanh"),
}


@pytest.mark.parametrize("enable", [True, False])
@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_use_nested_tensor_and_its_warning_as_torch(layer, enable):
    def built(lib):
        kw = dict(LAYERS[layer])
        if kw.get("activation") == "tanh":
            kw["activation"] = lib.tanh
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            stack = lib.nn.TransformerEncoder(lib.nn.TransformerEncoderLayer(E, H, 7, **kw), 2, None, enable)
        notes = [str(w.message) for w in seen if "enable_nested_tensor" in str(w.message)]
        return stack.enable_nested_tensor, stack.use_nested_tensor, stack.mask_check, notes

    assert built(flame) == built(torch)


@pytest.mark.parametrize("modes", [(False, True, False), (True, False, True)])
def test_compiled_call_follows_the_gradient_mode_of_each_call(modes):
    """One compiled function called with gradients off and on in turn: torch zeroes the padded positions
    only when they are off (the first layer's parameters require grad)."""
    theirs, mine = _stack(False)
    theirs.eval(), mine.eval()
    x, kp = rng(7).standard_normal((3, 5, E)), _padding("bool")
    call = flame.compile(lambda x, kp: mine(x, src_key_padding_mask=kp))
    for grad in modes:
        with torch.set_grad_enabled(grad), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = theirs(torch.tensor(x), src_key_padding_mask=torch.tensor(kp)).detach().numpy()
        with flame.set_grad_enabled(grad), warnings.catch_warnings():
            warnings.simplefilter("ignore", flame.RecompileWarning)
            f = call(flame.tensor(x), flame.tensor(kp)).detach().numpy()
        np.testing.assert_allclose(f, t, rtol=1e-9, atol=1e-10, err_msg=f"grad={grad}")
