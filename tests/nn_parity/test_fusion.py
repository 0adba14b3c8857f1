"""nn.utils.fusion against torch's: a convolution (plain, transposed) or Linear with an eval-mode BatchNorm
folded in computes what the pair computes, from the same f64 weights and running statistics; the fused
layer is a copy holding new Parameters; training-mode layers are refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.nn_parity.common import rng, twin

CASES = {
    "conv2d": (lambda lib: lib.nn.Sequential(lib.nn.Conv2d(3, 4, 3, bias=False), lib.nn.BatchNorm2d(4)), (2, 3, 5, 5)),
    "conv1d_bias": (lambda lib: lib.nn.Sequential(lib.nn.Conv1d(3, 4, 2), lib.nn.BatchNorm1d(4, affine=False)),
                    (2, 3, 6)),
    "conv_transpose2d": (lambda lib: lib.nn.Sequential(lib.nn.ConvTranspose2d(3, 4, 3, stride=2),
                                                       lib.nn.BatchNorm2d(4)), (2, 3, 4, 4)),
    "linear": (lambda lib: lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.BatchNorm1d(4)), (5, 3)),
    "linear_one_feature": (lambda lib: lib.nn.Sequential(lib.nn.Linear(3, 4, bias=False), lib.nn.BatchNorm1d(1)),
                           (5, 3)),
}


def _fuse(lib, seq, name):
    if name.startswith("linear"):
        return lib.nn.utils.fuse_linear_bn_eval(seq[0], seq[1])
    return lib.nn.utils.fuse_conv_bn_eval(seq[0], seq[1], transpose="transpose" in name)


@pytest.mark.parametrize("name", list(CASES))
def test_fused_layer_matches_torch(name):
    build, shape = CASES[name]
    theirs, mine = twin(build)
    r = rng(3)
    n = theirs[1].num_features
    stats = {"1.running_mean": r.standard_normal(n), "1.running_var": r.uniform(0.5, 2.0, n)}
    if theirs[1].affine:
        stats.update({"1.weight": r.standard_normal(n), "1.bias": r.standard_normal(n)})
    theirs.load_state_dict({k: torch.tensor(v) for k, v in stats.items()}, strict=False)
    mine.load_state_dict({k: flame.tensor(v) for k, v in stats.items()}, strict=False)
    theirs.eval()
    mine.eval()
    fused_t, fused_f = _fuse(torch, theirs, name), _fuse(flame, mine, name)
    x = r.standard_normal(shape)
    want = fused_t(torch.tensor(x)).detach().numpy()
    np.testing.assert_allclose(fused_f(flame.tensor(x)).numpy(), want, rtol=1e-12, atol=1e-12)
    if n > 1:  # a BatchNorm of one feature folds into a Linear but does not run after it
        np.testing.assert_allclose(mine(flame.tensor(x)).numpy(), want, rtol=1e-12, atol=1e-12)
    assert isinstance(fused_f.weight, flame.nn.Parameter) and fused_f.weight is not mine[0].weight
    assert isinstance(fused_f.bias, flame.nn.Parameter)


def test_training_layers_are_refused():
    seq = flame.nn.Sequential(flame.nn.Linear(3, 4), flame.nn.BatchNorm1d(4))
    with pytest.raises(AssertionError, match="Fusion only for eval!"):
        flame.nn.utils.fuse_linear_bn_eval(seq[0], seq[1])
    conv = flame.nn.Conv2d(3, 4, 1).eval()
    with pytest.raises(AssertionError, match="Fusion only for eval!"):
        flame.nn.utils.fuse_conv_bn_eval(conv, flame.nn.BatchNorm2d(4))
    with pytest.raises(AssertionError, match="linear.out_features == bn.num_features"):
        flame.nn.utils.fuse_linear_bn_eval(seq[0].eval(), flame.nn.BatchNorm1d(3).eval())
