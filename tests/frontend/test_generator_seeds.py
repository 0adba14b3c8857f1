"""Seeds as torch's: a seed is any int in [-2**63, 2**64), kept as its unsigned 64-bit value (initial_seed
returns that value, -1 and 2**64 - 1 are one seed), outside that range torch's ValueError;
Generator.manual_seed takes ints only, torch.manual_seed anything int() takes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame


@pytest.mark.parametrize("seed", [0, 5, -1, -5, 2**63 - 1, 2**63, 2**64 - 1, -(2**63)])
@pytest.mark.parametrize("default", [False, True], ids=["Generator", "default"])
def test_initial_seed_as_torch(seed, default):
    if default:
        with torch.random.fork_rng(), flame.random.fork_rng():
            expected = torch.manual_seed(seed).initial_seed()
            assert flame.manual_seed(seed).initial_seed() == expected == flame.initial_seed()
    else:
        expected = torch.Generator().manual_seed(seed).initial_seed()
        assert flame.Generator().manual_seed(seed).initial_seed() == expected
        assert flame.Generator(seed).initial_seed() == expected


@pytest.mark.parametrize(("a", "b"), [(-1, 2**64 - 1), (-(2**63), 2**63)])
def test_seeds_equal_as_unsigned_draw_the_same(a, b):
    assert torch.Generator().manual_seed(a).initial_seed() == torch.Generator().manual_seed(b).initial_seed()
    x = flame.rand(6, generator=flame.Generator().manual_seed(a)).numpy()
    np.testing.assert_array_equal(x, flame.rand(6, generator=flame.Generator().manual_seed(b)).numpy())


@pytest.mark.parametrize("seed", [2**64, 2**64 + 3, -(2**63) - 1])
def test_seed_out_of_range_raises(seed):
    """2**64 is not seed 0 (which it silently was): torch refuses it."""
    with pytest.raises(ValueError):
        torch.Generator().manual_seed(seed)
    with pytest.raises(ValueError, match="Overflow"):
        flame.Generator().manual_seed(seed)
    with torch.random.fork_rng(), flame.random.fork_rng():
        with pytest.raises(ValueError):
            torch.manual_seed(seed)
        with pytest.raises(ValueError, match="Overflow"):
            flame.manual_seed(seed)


@pytest.mark.parametrize("seed", [1.5, True, "3"])
def test_generator_manual_seed_takes_ints_only(seed):
    with pytest.raises(RuntimeError) as expected:
        torch.Generator().manual_seed(seed)
    with pytest.raises(RuntimeError, match=str(expected.value)):
        flame.Generator().manual_seed(seed)


def test_module_manual_seed_takes_int_of_its_argument():
    with torch.random.fork_rng(), flame.random.fork_rng():
        assert flame.manual_seed(7.9).initial_seed() == torch.manual_seed(7.9).initial_seed()
