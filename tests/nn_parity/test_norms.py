"""LayerNorm, RMSNorm, GroupNorm and InstanceNorm against torch from the same f64 weights: affine
options, tuple shapes, eps=None, running statistics; outputs and gradients, eager and compiled."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.nn_parity.common import check, compare, numpy_of, rng, twin

X = rng(0).standard_normal((3, 4, 5, 2)) * 2 + 1

CASES = [
    ("LayerNorm", (2,), {}),
    ("LayerNorm", ((5, 2),), dict(eps=1e-3)),
    ("LayerNorm", ([4, 5, 2],), dict(elementwise_affine=False)),
    ("LayerNorm", (2,), dict(bias=False)),
    ("RMSNorm", (2,), {}),
    ("RMSNorm", ((5, 2),), dict(eps=0.1)),
    ("RMSNorm", (2,), dict(elementwise_affine=False)),
    ("GroupNorm", (2, 4), {}),
    ("GroupNorm", (4, 4), dict(affine=False, eps=1e-3)),
    ("GroupNorm", (1, 4), {}),
    ("InstanceNorm2d", (4,), {}),
    ("InstanceNorm2d", (4,), dict(affine=True)),
]


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}{i}" for i, c in enumerate(CASES)])
def test_norm(case, compiled):
    name, args, kw = case

    def build(lib):
        m = getattr(lib.nn, name)(*args, **kw)
        if getattr(m, "weight", None) is not None:  # not the ones / zeros they start at
            with lib.no_grad():
                m.weight.mul_(1.5).add_(0.25)
                if getattr(m, "bias", None) is not None:
                    m.bias.add_(0.5)
        return m

    check(build, lambda m, x: m(x), [X], compiled)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("d", [1, 2, 3])
def test_instance_norm_unbatched(d, compiled):
    x = rng(1).standard_normal((3, *(4, 5, 2)[:d]))
    check(lambda lib: getattr(lib.nn, f"InstanceNorm{d}d")(3, affine=True), lambda m, x: m(x), [x], compiled)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("momentum", [0.1, 0.5, None])
def test_instance_norm_running_stats(momentum, compiled):
    theirs, mine = twin(lambda lib: lib.nn.InstanceNorm1d(4, momentum=momentum, affine=True, track_running_stats=True))
    for i in range(3):
        x = rng(i).standard_normal((2, 4, 6)) * (i + 1) + i
        compare(theirs, mine, lambda m, x: m(x), [x], compiled)
    for m in (theirs, mine):
        m.eval()
    compare(theirs, mine, lambda m, x: m(x), [rng(9).standard_normal((2, 4, 6))], compiled)
    for k in ("running_mean", "running_var", "num_batches_tracked"):
        np.testing.assert_allclose(numpy_of(mine.state_dict()[k]), numpy_of(theirs.state_dict()[k]), rtol=1e-12)


def test_rms_norm_eps_none_f32():
    """eps=None is the input dtype's machine epsilon: visible in f32 on inputs near zero."""
    x = (rng(2).standard_normal((3, 4)) * 1e-4).astype(np.float32)
    t = torch.nn.RMSNorm(4)(torch.tensor(x)).detach().numpy()
    f = flame.nn.RMSNorm(4)(flame.tensor(x)).numpy()
    np.testing.assert_allclose(f, t, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("shape, build", [
    ((2, 3, 1), lambda lib: lib.nn.InstanceNorm1d(3, affine=True)),
    ((3, 1), lambda lib: lib.nn.InstanceNorm1d(3)),
    ((2, 3, 1, 1), lambda lib: lib.nn.InstanceNorm2d(3, track_running_stats=True)),
    ((2, 3, 1, 1, 1), lambda lib: lib.nn.InstanceNorm3d(3)),
])
def test_instance_norm_refuses_one_position(shape, build, compiled):
    # one position per channel normalises every value to 0 (only the bias would come out): torch raises
    x = np.ones(shape, dtype=np.float32)
    with pytest.raises(ValueError, match="Expected more than 1 spatial element when training"):
        build(torch)(torch.tensor(x))
    m = build(flame)
    call = flame.compile(lambda t: m(t)) if compiled else m
    with pytest.raises(ValueError, match="(?i)expected more than 1 spatial element when training"):
        call(flame.tensor(x))
    with pytest.raises(ValueError, match="(?i)expected more than 1 spatial element when training"):
        flame.nn.functional.instance_norm(flame.tensor(np.ones((2, 3, 1))))
    m.eval()  # evaluation with running statistics normalises by them, one position or many
    if getattr(m, "track_running_stats", False):
        theirs = build(torch).eval()
        np.testing.assert_allclose(numpy_of(call(flame.tensor(x))), numpy_of(theirs(torch.tensor(x))))
