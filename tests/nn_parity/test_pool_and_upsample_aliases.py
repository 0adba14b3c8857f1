"""torch's other names of poolings and interpolate: max_pool{1,2,3}d_with_indices and
adaptive_max_pool{1,2,3}d_with_indices (values and indices), upsample, upsample_nearest and
upsample_bilinear (which warn as deprecated); against torch in f64, values and gradients, eager and
compiled."""

import warnings

import numpy as np
import pytest
import torch

import flame
from tests.nn_parity.common import check_weighted

X = {d: np.random.default_rng(d).standard_normal((2, 3, *(5, 6, 4)[:d])) for d in (1, 2, 3)}


def _quiet(fn):
    def call(L, x):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(L, x)
    return call


CASES = {
    **{f"max_pool{d}d_with_indices": (lambda L, x, d=d: getattr(L.nn.functional, f"max_pool{d}d_with_indices")(
        x, 2, stride=1, padding=1, ceil_mode=True)[0], d) for d in (1, 2, 3)},
    **{f"adaptive_max_pool{d}d_with_indices": (lambda L, x, d=d: getattr(
        L.nn.functional, f"adaptive_max_pool{d}d_with_indices")(x, 3)[0], d) for d in (1, 2, 3)},
    "upsample": (_quiet(lambda L, x: L.nn.functional.upsample(x, scale_factor=1.5, mode="bilinear")), 2),
    "upsample_nearest": (_quiet(lambda L, x: L.nn.functional.upsample_nearest(x, size=(7, 9))), 2),
    "upsample_bilinear": (_quiet(lambda L, x: L.nn.functional.upsample_bilinear(x, scale_factor=2)), 2),
}


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("name", list(CASES))
def test_matches_torch(name, compiled):
    fn, d = CASES[name]
    check_weighted(fn, X[d], compiled)


@pytest.mark.parametrize("d", [1, 2, 3])
def test_the_indices_match_torch(d):
    for name in (f"max_pool{d}d_with_indices", f"adaptive_max_pool{d}d_with_indices"):
        args = (2,) if name.startswith("max") else ((2, 3, 2)[:d],)
        theirs = getattr(torch.nn.functional, name)(torch.tensor(X[d]), *args)
        mine = getattr(flame.nn.functional, name)(flame.tensor(X[d]), *args)
        assert len(mine) == 2
        np.testing.assert_array_equal(mine[1].numpy(), theirs[1].numpy())


@pytest.mark.parametrize("name", ["upsample", "upsample_nearest", "upsample_bilinear"])
def test_the_deprecated_names_warn_at_the_users_line(name):
    with pytest.warns(UserWarning, match=f"`nn.functional.{name}` is deprecated") as record:
        getattr(flame.nn.functional, name)(flame.tensor(X[2]), scale_factor=2)
    assert any(w.filename == __file__ for w in record if "deprecated" in str(w.message))
