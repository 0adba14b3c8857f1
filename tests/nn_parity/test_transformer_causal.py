"""The Transformer modules' causal hints against torch's, in f64: every combination of is_causal /
tgt_is_causal / src_is_causal (True, False, None: torch's _detect_is_causal_mask), the mask (none,
the causal one as float or bool, another one) and key padding masks, in training and eval mode, gives
torch's outputs and gradients (eager and compiled) or torch's RuntimeError (a causal hint without a
mask), and the warnings torch gives for masks of mismatched types, named as the module names them."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
import torch

import flame
from tests.nn_parity.common import Fixed, check, rng, twin

E, H, L, S, N = 6, 2, 3, 4, 2
_r = rng(0)
SRC, TGT = _r.standard_normal((N, S, E)), _r.standard_normal((N, L, E))
OTHER = np.where(_r.random((L, L)) < 0.4, -np.inf, 0.0)
OTHER[:, 0] = 0.0
KP_L = np.zeros((N, L), bool)
KP_L[0, -1] = True
KP_S = np.zeros((N, S), bool)
KP_S[1, -1] = True


def _mask(kind: str, n: int):
    if kind == "causal":
        return np.triu(np.full((n, n), -np.inf), 1)
    if kind == "causal_bool":
        return np.triu(np.ones((n, n), bool), 1)
    return {"none": None, "other": OTHER if n == L else None}[kind]


BUILDS = {
    "encoder_layer": lambda lib: lib.nn.TransformerEncoderLayer(E, H, 7, dropout=0.0, batch_first=True),
    "encoder": lambda lib: lib.nn.TransformerEncoder(
        lib.nn.TransformerEncoderLayer(E, H, 7, dropout=0.0, batch_first=True), 2, enable_nested_tensor=False),
    "decoder_layer": lambda lib: lib.nn.TransformerDecoderLayer(E, H, 7, dropout=0.0, batch_first=True),
    "decoder": lambda lib: lib.nn.TransformerDecoder(
        lib.nn.TransformerDecoderLayer(E, H, 7, dropout=0.0, batch_first=True), 2),
    "transformer": lambda lib: lib.nn.Transformer(E, H, 1, 1, 7, dropout=0.0, batch_first=True),
}


def _case(module: str, mask: str, hint, padded: bool):
    """(call(model, *inputs), input arrays) of one combination."""
    m = _mask(mask, L)
    if module.startswith("encoder"):
        hint_kw = {} if hint is None and module == "encoder_layer" else {"is_causal": hint}
        mask_kw = "src_mask" if module == "encoder_layer" else "mask"

        def call(mod, x, a, kp):
            return mod(x, **{mask_kw: a}, src_key_padding_mask=kp, **hint_kw)

        return call, [SRC[:, :L], Fixed(m) if m is not None else None, Fixed(KP_L) if padded else None]
    if module.startswith("decoder"):
        hint_kw = {} if hint is None and module == "decoder_layer" else {"tgt_is_causal": hint}

        def call(mod, t, s, a, kp, mkp):
            return mod(t, s, tgt_mask=a, tgt_key_padding_mask=kp, memory_key_padding_mask=mkp, **hint_kw)

        return call, [TGT, SRC, Fixed(m) if m is not None else None, *(
            [Fixed(KP_L), Fixed(KP_S)] if padded else [None, None])]
    sm = _mask(mask, S)

    def call(mod, s, t, sa, ta, skp, tkp):
        return mod(s, t, src_mask=sa, tgt_mask=ta, src_key_padding_mask=skp, tgt_key_padding_mask=tkp,
                   src_is_causal=hint, tgt_is_causal=hint)

    fixed = [Fixed(a) if a is not None else None for a in (sm, m)]
    return call, [SRC, TGT, *fixed, *([Fixed(KP_S), Fixed(KP_L)] if padded else [None, None])]


def _outcome(lib, model, call, arrays, training: bool):
    """(error type and message or None, the warnings' messages) of one call."""
    model.train(training)
    tensors = [lib.tensor(a.array) if isinstance(a, Fixed) else None if a is None else lib.tensor(a) for a in arrays]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            call(model, *tensors)
            error = None
        except RuntimeError as e:
            error = str(e).split("\n  at ")[0]
    return error, [str(w.message) for w in seen if issubclass(w.category, UserWarning)
                   and "nested" not in str(w.message) and "GPU" not in str(w.message)]


COMBOS = list(itertools.product(BUILDS, ["none", "causal", "causal_bool", "other"], [None, False, True],
                                [False, True]))


@pytest.mark.parametrize("module, mask, hint, padded", COMBOS)
def test_errors_and_warnings_as_torch(module, mask, hint, padded):
    theirs, mine = twin(BUILDS[module])
    call, arrays = _case(module, mask, hint, padded)
    for training in (True, False):
        assert _outcome(flame, mine, call, arrays, training) == _outcome(torch, theirs, call, arrays, training)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("module, mask, hint, padded", [
    c for c in COMBOS if not (c[2] and (c[1] == "none" or c[0] == "transformer" and c[1] == "other"))
])
def test_values_and_gradients_as_torch(module, mask, hint, padded, compiled):
    call, arrays = _case(module, mask, hint, padded)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        check(BUILDS[module], call, arrays, compiled)


def test_detects_the_causal_mask_eagerly():
    from torch.nn.modules.transformer import _detect_is_causal_mask as theirs

    from flame.nn.transformer import _detect_is_causal_mask

    for m in (_mask("causal", L), _mask("causal_bool", L), OTHER, _mask("causal", S)):
        for size in (None, L):
            assert _detect_is_causal_mask(flame.tensor(m), None, size) == theirs(torch.tensor(m), None, size)
    assert _detect_is_causal_mask(None, True) and not _detect_is_causal_mask(flame.tensor(OTHER), False)
