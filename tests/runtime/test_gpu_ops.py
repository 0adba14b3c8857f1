"""Every op x dtype through the CUDA executor against the reference (run_graph), at per-dtype
tolerances, on random inputs with odd sizes, broadcasting, zero-size dims and permuted inputs; and
one elementwise op on a tensor of more than 2^31 elements."""

from __future__ import annotations

import numpy as np
import pytest

from flame.passes.pipeline import legalize
from flame.plan.build import to_plan
from flame.runtime.reference import run_graph
from tests.runtime.cases import all_cases, one_op_graph, permuted_inputs

CASES = all_cases(seed=1)
# "fp8 sums": an FP8 GEMM's result, whatever its dtype: Hopper's FP8 tensor cores keep about 13 significant
# bits in their sums (up to 9.2e-5 relative per element measured on an H100 at k = 64)
TOL = {"f64": 1e-9, "f32": 2e-5, "f16": 2e-3, "bf16": 1.6e-2, "fp8 sums": 2.0**-12}


def assert_matches(got: np.ndarray, want: np.ndarray, what: str = "", tol_of: str | None = None) -> None:
    """Floats: |got - want| <= tol * |want| + tol * max |want| (per-dtype tol, or that of dtype tol_of);
    others exact."""
    assert got.shape == want.shape and got.dtype == want.dtype, \
        f"{what}: {got.dtype}{got.shape} vs {want.dtype}{want.shape}"
    name = {np.dtype(np.float64): "f64", np.dtype(np.float32): "f32", np.dtype(np.float16): "f16"}.get(
        want.dtype, "bf16" if want.dtype.name == "bfloat16" else None)
    if name is None:
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    tol = max(TOL[name], TOL[tol_of]) if tol_of else TOL[name]
    scale = np.abs(w[np.isfinite(w)]).max(initial=1.0)
    np.testing.assert_allclose(g, w, rtol=tol, atol=tol * scale, equal_nan=True, err_msg=what)


def _run(graph, inputs):
    """Plan as compile_graph does for the CUDA executor (what cuDNN cannot run is decomposed) and run."""
    from flame.runtime.backend import capabilities
    from flame.runtime.cuda import CudaExecutor

    ex, target = CudaExecutor(), capabilities("cuda")
    plan = to_plan(legalize(graph, target.attention_unsupported, conv_unsupported=target.conv_unsupported),
                   target=target)
    outs = ex.compile(plan)([ex.asarray(x) for x in inputs])
    return [ex.to_numpy(o, plan.buffers[b].dtype) for o, b in zip(outs, plan.outputs)]


def _tol_of(name: str, inputs) -> str | None:
    """The attention statistics are f32 from f16/bf16 q and k: cuDNN computes them to the inputs'
    precision (about 2e-3 relative on an H100), so they are held to the inputs' tolerance; an FP8 GEMM's
    result to its sums' ("fp8 sums")."""
    if name == "fp8_matmul":
        return "fp8 sums"
    if name != "scaled_dot_product_attention_stats":
        return None
    return {np.dtype(np.float16): "f16", np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}.get(
        np.asarray(inputs[0]).dtype, "bf16")


@pytest.fixture(autouse=True)
def _fp8_gemm(monkeypatch):
    """The FP8 GEMM cases run cuBLASLt's FP8 GEMM (its switch, FLAME_FP8_GEMM, on for these tests)."""
    from flame.runtime import matmul

    monkeypatch.setattr(matmul, "fp8_gemm", True)


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_op_matches_reference(case):
    cid, name, _, inputs, attrs = case
    g = one_op_graph(name, inputs, attrs)
    (got,) = _run(g, inputs)
    (want,) = run_graph(g, inputs)
    assert_matches(got, want, cid, _tol_of(name, inputs))


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES[::3], ids=[c[0] for c in CASES[::3]])
def test_op_on_permuted_inputs(case):
    cid, name, _, inputs, attrs = case
    g = one_op_graph(name, inputs, attrs, permuted=True)
    xs = permuted_inputs(inputs)
    (got,) = _run(g, xs)
    (want,) = run_graph(g, xs)
    assert_matches(got, want, cid, _tol_of(name, inputs))


@pytest.mark.gpu
def test_elementwise_over_2_pow_31_elements():
    import cupy

    from flame.ir import Builder, Graph, TensorType, dtype_of, verify
    from flame.runtime.cuda import CudaExecutor

    n = 2**31 + 7
    g = Graph("big")
    x = g.add_input(TensorType((n,), dtype_of("bool")))
    g.outputs = [Builder(g).logical_not(x)]
    verify(g)
    a = cupy.zeros(n, dtype=cupy.bool_)
    a[::3] = True
    a[-4:] = cupy.asarray([True, False, False, True])
    (out,) = CudaExecutor().compile(to_plan(g))([a])
    assert out.shape == (n,)
    assert int(cupy.count_nonzero(out)) == n - int(cupy.count_nonzero(a))
    assert int(cupy.count_nonzero(out & a)) == 0  # every element written, each the negation
    assert out[-4:].get().tolist() == [False, True, True, False]
    del a, out
    cupy.get_default_memory_pool().free_all_blocks()


@pytest.mark.gpu
def test_f32_division_of_zeros_and_special_values_bit_for_bit():
    """f32 division of zeros, denormals, infinities and NaN: signed zeros, NaN for 0/0 and 0/NaN, and
    every other quotient as IEEE division rounds it, as NumPy."""
    tiny = np.float32(1e-45)  # the smallest denormal: 1 / tiny overflows, 0 / tiny is 0
    specials = np.array([0.0, -0.0, 1.0, -3.5, 1e-38, tiny, -tiny, np.inf, -np.inf, np.nan, 3e38, 7.0],
                        dtype=np.float32)
    x, y = (a.ravel().copy() for a in np.meshgrid(specials, specials, indexing="ij"))
    g = one_op_graph("div", [x, y], {})
    (got,) = _run(g, [x, y])
    with np.errstate(all="ignore"):
        want = x / y
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))  # signs of zeros too
