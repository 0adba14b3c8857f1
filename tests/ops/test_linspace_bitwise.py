"""flame.linspace and flame.logspace against torch's CPU values, bit for bit where torch's arithmetic
can be reproduced (linspace in every dtype; logspace in f64 and the integer dtypes), eagerly and inside
@flame.compile."""

import random

import numpy as np
import pytest

import flame

torch = pytest.importorskip("torch")

DTYPES = [("float32", "float32"), ("float64", "float64"), ("float16", "float16"), ("bfloat16", "bfloat16"),
          ("int64", "int64"), ("int32", "int32")]


def _cases(seed: int, count: int):
    rng = random.Random(seed)
    for _ in range(count):
        start = rng.choice([0.0, 1.0, -3.0, rng.uniform(-100, 100), rng.uniform(-1e5, 1e5), 1e-3])
        end = rng.choice([1.0, 10.0, rng.uniform(-100, 100), rng.uniform(-1e-3, 1e-3), 1e4])
        yield start, end, rng.choice([0, 1, 2, 3, 5, 7, 8, 9, 16, 17, 33, 50, 64, 65, 100, 257, 1000, 5000])


def _bits(t) -> np.ndarray:
    a = t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()
    return a.astype(np.float32) if a.dtype.name == "bfloat16" else a


@pytest.mark.parametrize("tname,fname", DTYPES)
def test_linspace_matches_torch_bitwise(tname, fname):
    tdt, fdt = getattr(torch, tname), getattr(flame, fname)
    for start, end, steps in _cases(0, 120):
        try:
            want = torch.linspace(start, end, steps, dtype=tdt)
        except RuntimeError:  # (a bound out of the dtype's range: torch refuses)
            continue
        got = flame.linspace(start, end, steps, dtype=fdt)
        assert got.dtype == fdt and got.shape == (steps,)
        np.testing.assert_array_equal(_bits(got), _bits(want), err_msg=f"linspace({start}, {end}, {steps}, {tname})")


@pytest.mark.parametrize("tname,fname", [("float64", "float64"), ("int64", "int64"), ("int32", "int32")])
def test_logspace_matches_torch_bitwise(tname, fname):
    tdt, fdt = getattr(torch, tname), getattr(flame, fname)
    rng = random.Random(1)
    for _ in range(150):
        start, end = rng.uniform(-3, 5), rng.uniform(-3, 5)
        steps, base = rng.choice([0, 1, 2, 5, 9, 40, 300]), rng.choice([2.0, 10.0, 2.7, 1.1])
        want = torch.logspace(start, end, steps, base=base, dtype=tdt).numpy()
        got = flame.logspace(start, end, steps, base=base, dtype=fdt).numpy()
        np.testing.assert_array_equal(got, want, err_msg=f"logspace({start}, {end}, {steps}, {base}, {tname})")


def test_logspace_float32_within_an_ulp_or_so():
    rng = random.Random(2)
    for _ in range(60):
        start, end, steps = rng.uniform(-3, 5), rng.uniform(-3, 5), rng.choice([1, 5, 40])
        want = torch.logspace(start, end, steps, dtype=torch.float32).numpy()
        got = flame.logspace(start, end, steps, dtype=flame.float32).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)


def test_edges_as_torch():
    inf = float("inf")
    np.testing.assert_array_equal(flame.linspace(0.0, inf, 5).numpy(), torch.linspace(0.0, inf, 5).numpy())
    np.testing.assert_array_equal(flame.logspace(0, 400, 3, dtype=flame.float64).numpy(),
                                  torch.logspace(0, 400, 3, dtype=torch.float64).numpy())
    np.testing.assert_array_equal(flame.logspace(0, 1.5, 4, base=-2.0, dtype=flame.float64).numpy(),
                                  torch.logspace(0, 1.5, 4, base=-2.0, dtype=torch.float64).numpy())
    with pytest.raises(flame.errors.ShapeError, match="non-negative"):
        flame.linspace(0.0, 1.0, -1)


def test_inside_compile_as_eagerly():
    @flame.compile
    def f(x):
        return x + flame.linspace(-3.0, 97.45184020660258, 64, dtype=flame.float64) \
            * flame.logspace(-1.0, 2.0, 64, dtype=flame.float64)

    x = np.linspace(0.0, 1.0, 64)
    want = torch.from_numpy(x) + torch.linspace(-3.0, 97.45184020660258, 64, dtype=torch.float64) \
        * torch.logspace(-1.0, 2.0, 64, dtype=torch.float64)
    for _ in range(2):
        np.testing.assert_array_equal(f(flame.tensor(x)).numpy(), want.numpy())


def test_bound_out_of_the_dtype_range_raises_as_torch():
    for fn in ("linspace", "logspace"):
        with pytest.raises(RuntimeError, match="without overflow"):
            getattr(torch, fn)(0.0, 1e6, 3, dtype=torch.float16)
        with pytest.raises(RuntimeError, match="without overflow"):
            getattr(flame, fn)(0.0, 1e6, 3, dtype=flame.float16)
