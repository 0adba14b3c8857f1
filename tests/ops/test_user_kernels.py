"""User CUDA code as ops (flame.cuda.kernel, flame.cuda.elementwise): values and gradients against the
same math written with torch ops, eagerly and inside @flame.compile on the reference executor (which runs
the user's NumPy reference); the elementwise form fusing with its neighbours; the kernels of a training
step compiling with NVRTC for sm_90; the GPU against the reference; and bad definitions told clearly,
naming the user's code. Each test defines its own ops (registry names are unique per definition)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from flame.errors import ArgumentError, AutogradError, FlameError
from flame.explain import explain_plan
from tests.ops.test_everyday_ops import check, check_gpu_step, randn

MODES = ("eager", "compiled")

LEAKY_GATE = "x * (y > 0.f ? 1.f : 0.2f)"
SQUARED_RELU = """
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < out_numel;
       i += (long long)gridDim.x * blockDim.x) {
    const x_t v = x[i] > x_t(0) ? x[i] : x_t(0);
    out[i] = v * v;
  }
"""
# g * 2 relu(x): the backward as a kernel of its own
SQUARED_RELU_BACKWARD = """
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < out_numel;
       i += (long long)gridDim.x * blockDim.x) {
    out[i] = x[i] > x_t(0) ? g[i] * x_t(2) * x[i] : x_t(0);
  }
"""
# the sum of each row: a launch of one block per row, another output shape
ROW_SUM = """
  __shared__ x_t part[128];
  const long long cols = x_shape[1];
  x_t acc = 0;
  for (long long c = threadIdx.x; c < cols; c += blockDim.x) acc += x[blockIdx.x * cols + c];
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = part[0];
"""


def _leaky_gate():
    return flame.cuda.elementwise(
        LEAKY_GATE,
        name="leaky_gate",
        reference=lambda x, y: x * np.where(y > 0, 1.0, 0.2).astype(x.dtype),
        vjp=lambda g, x, y, out: (flame.where(y > 0, g, g * 0.2), None),
    )


def _squared_relu():
    backward = flame.cuda.kernel(
        SQUARED_RELU_BACKWARD, name="squared_relu_backward", reference=lambda g, x: np.where(x > 0, 2 * g * x, 0)
    )
    return flame.cuda.kernel(
        SQUARED_RELU,
        name="squared_relu",
        reference=lambda x: np.maximum(x, 0) ** 2,
        grid=lambda x, out: (min(-(-out.numel // 128), 1024), 128),
        vjp=lambda g, x, out: (backward(g, x),),
    )


def _row_sum():
    return flame.cuda.kernel(
        ROW_SUM,
        name="row_sum",
        out=lambda x: ((x.shape[0],), x.dtype),
        grid=lambda x, out: (x.shape[0], 128),
        reference=lambda x: x.sum(axis=1),
        vjp=lambda g, x, out: (g.unsqueeze(1).expand(*x.shape),),
    )


def _torch_gate(x, y):
    return torch.where(y > 0, x, x * 0.2)


@pytest.mark.parametrize("mode", MODES)
def test_elementwise_op_matches_its_composite(mode):
    gate = _leaky_gate()
    x, y = randn(6, 7, key=1), randn(6, 7, key=2)
    check(lambda a, b: gate(a.tanh(), b) * 3, lambda a, b: _torch_gate(a.tanh(), b) * 3, x, y, wrt=[0], mode=mode)
    bias = randn(7, key=3)  # a broadcast input
    check(lambda a, b: gate(a, b), lambda a, b: _torch_gate(a, b), x, bias, wrt=[0], mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_kernel_ops_match_their_composites(mode):
    sq, rows = _squared_relu(), _row_sum()
    x = randn(5, 9, key=4)
    check(lambda a: sq(a * 2), lambda a: torch.relu(a * 2) ** 2, x, mode=mode)
    check(lambda a: rows(sq(a)), lambda a: (torch.relu(a) ** 2).sum(1), x, mode=mode)


def test_float64_gradients_match_torch():
    sq, gate = _squared_relu(), _leaky_gate()
    x, y = randn(4, 6, key=5).astype(np.float64), randn(4, 6, key=6).astype(np.float64)
    check(
        lambda a, b: sq(gate(a, b)),
        lambda a, b: torch.relu(_torch_gate(a, b)) ** 2,
        x,
        y,
        wrt=[0],
        rtol=1e-12,
        atol=1e-12,
    )


def test_elementwise_op_fuses_with_its_neighbours():
    gate = _leaky_gate()

    @flame.compile
    def f(x, y):
        return (gate(x.tanh(), y) * 2).exp()

    f(flame.tensor(randn(8, 16, key=7)), flame.tensor(randn(8, 16, key=8)))
    launches = [s for s in f._last.plan.steps if s.ops]
    assert len(launches) == 1, [s.name for s in launches]
    assert [o.name for o in launches[0].ops if o.name != "full"] == ["tanh", gate.name, "mul", "exp"]
    report = explain_plan("f", f._last.graph, f._last.plan)
    assert f"tanh + {gate.name} + " in report and "user_leaky_gate" in launches[0].name


def test_kernel_op_is_its_own_launch_in_explain():
    sq = _squared_relu()

    @flame.compile
    def f(x):
        return sq(x.tanh()).exp()

    f(flame.tensor(randn(8, 16, key=9)))
    launches = [s for s in f._last.plan.steps if s.ops]
    assert [[o.name for o in s.ops] for s in launches] == [["tanh"], [sq.name], ["exp"]]
    mine = launches[1]
    assert (mine.grid, mine.block) == (1, 128) and mine.name.startswith(f"{sq.name}_f32_8x16_")
    assert f"] {mine.name}: {sq.name}  in" in explain_plan("f", f._last.graph, f._last.plan)


def test_training_step_kernels_compile_for_sm90(cuda_target):
    sq, gate, rows = _squared_relu(), _leaky_gate(), _row_sum()
    w = flame.tensor(randn(16, 16, key=10) * 0.3, requires_grad=True)
    x, y = flame.tensor(randn(8, 16, key=11)), flame.tensor(randn(8, 16, key=12))

    def body(x, y):
        loss = rows(sq(gate(x @ w, y))).mean()
        loss.backward()
        return loss

    check_gpu_step(body, w, x, y)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_user_ops_on_the_gpu_match_the_reference(dtype):
    sq, gate, rows = _squared_relu(), _leaky_gate(), _row_sum()
    np_dtype = np.float32 if dtype == "f32" else np.float64
    xs, ys = randn(64, 300, key=13).astype(np_dtype), randn(64, 300, key=14).astype(np_dtype)

    def body(x, y):
        x.requires_grad = True
        loss = rows(sq(gate(x, y) * 1.5)).sum()
        loss.backward()
        return loss, x.grad

    def run():
        x, y = flame.tensor(xs), flame.tensor(ys)
        return [t.numpy() for t in body(x, y)], [t.numpy() for t in flame.compile(body)(flame.tensor(xs), y)]

    got = run()
    flame.set_device("reference")
    try:
        want = run()
    finally:
        flame.set_device("cuda")
    # the CUDA gate computes 0.2f in float, the reference 0.2 rounded to the dtype: f32 agrees closely
    tol = 1e-5 if dtype == "f32" else 1e-6
    for g, w in zip([*got[0], *got[1]], [*want[0], *want[1]]):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


# ---- bad definitions --------------------------------------------------------------------------------------


def test_syntax_error_names_the_users_line():
    bad = flame.cuda.kernel(
        "long long i = threadIdx.x;\nif (i < out_numel) out[i] = yy[i];\n", name="typo", reference=lambda x: x
    )
    with pytest.raises(FlameError) as e:
        bad(flame.tensor(randn(3, key=15)))
    text = str(e.value)
    assert "flame.cuda.kernel 'typo', defined at test_user_kernels.py:" in text
    assert "line 2 of its CUDA code: if (i < out_numel) out[i] = yy[i];" in text
    assert 'identifier "yy" is undefined' in text


def test_broken_expression_is_told_near_the_users_code():
    bad = flame.cuda.elementwise("x * (x > 0.f ? 1.f : 0.2f", name="unbalanced", reference=lambda x: x)
    with pytest.raises(FlameError, match=r"flame.cuda.elementwise 'unbalanced'.*brackets"):
        bad(flame.tensor(randn(3, key=16)))


def test_missing_reference_is_an_error_at_definition():
    with pytest.raises(ArgumentError, match=r"flame.cuda.kernel 'noref'.*reference= is required"):
        flame.cuda.kernel(SQUARED_RELU, name="noref", reference=None, inputs=["x"])
    with pytest.raises(ArgumentError, match=r"flame.cuda.elementwise 'noref'.*reference= is required"):
        flame.cuda.elementwise(LEAKY_GATE, name="noref", reference=None)


def test_wrong_output_count_is_an_error():
    two = flame.cuda.kernel(SQUARED_RELU, name="two_out", out=lambda x: (x, x), reference=lambda x: x)
    with pytest.raises(ArgumentError, match=r"flame.cuda.kernel 'two_out'.*out= gave 2 outputs"):
        two(flame.tensor(randn(3, key=17)))
    pair = flame.cuda.kernel(SQUARED_RELU, name="two_refs", reference=lambda x: (x, x))
    with pytest.raises(FlameError, match=r"flame.cuda.kernel 'two_refs'.*reference returned 2 values"):
        pair(flame.tensor(randn(3, key=18)))


def test_bad_grid_is_an_error():
    too_wide = flame.cuda.kernel(SQUARED_RELU, name="wide", grid=lambda x, out: (1, 2048), reference=lambda x: x)
    with pytest.raises(ArgumentError, match=r"flame.cuda.kernel 'wide'.*1 blocks of 2048 threads"):
        too_wide(flame.tensor(randn(3, key=19)))
    three = flame.cuda.kernel(SQUARED_RELU, name="dim3", grid=lambda x, out: (1, 1, 1), reference=lambda x: x)
    with pytest.raises(ArgumentError, match=r"flame.cuda.kernel 'dim3'.*\(blocks, threads\), two ints"):
        three(flame.tensor(randn(3, key=20)))


def test_bad_vjp_and_missing_vjp_are_errors():
    nograd = flame.cuda.kernel(SQUARED_RELU, name="nograd", reference=lambda x: np.maximum(x, 0) ** 2)
    x = flame.tensor(randn(4, key=21), requires_grad=True)
    with pytest.raises(AutogradError, match=r"flame.cuda.kernel 'nograd'.*has no gradient"):
        nograd(x).sum().backward()
    wrong = flame.cuda.elementwise("x * y", name="wrong_vjp", reference=lambda x, y: x * y, vjp=lambda g, x, y, out: g)
    with pytest.raises(AutogradError, match=r"flame.cuda.elementwise 'wrong_vjp'.*returned 1 gradients; expected 2"):
        wrong(x, x).sum().backward()


def test_bad_names_and_arity_are_errors():
    with pytest.raises(ArgumentError, match="C identifier"):
        flame.cuda.elementwise("x", name="has space", reference=lambda x: x)
    with pytest.raises(ArgumentError, match="input name 'out'"):
        flame.cuda.elementwise("out", name="clash", reference=lambda out: out)
    gate = _leaky_gate()
    with pytest.raises(FlameError, match=r"'leaky_gate'.*takes 2 inputs \(x, y\), got 1"):
        gate(flame.tensor(randn(3, key=22)))
    other = _leaky_gate()
    assert other.name != gate.name and other.name.startswith("user_leaky_gate_")


def test_grid_follows_a_dynamic_size():
    sq = _squared_relu()  # grid: min(ceil(numel / 128), 1024) blocks of 128

    @flame.compile
    def f(x):
        return sq(x.tanh()) * 2

    for n in (4, 6, 8, 1000):  # the second shape makes the batch dim dynamic: one plan for every size
        x = randn(n, 3, key=n)
        np.testing.assert_allclose(f(flame.tensor(x)).numpy(), np.maximum(np.tanh(x), 0) ** 2 * 2, rtol=1e-6)
        (mine,) = [s for s in f._last.plan.steps if s.ops and s.ops[0].name == sq.name]
        assert (mine.grid, mine.block) == (min(-(-n * 3 // 128), 1024), 128)
    assert f.stats().traces == 3  # 4 and 6 make the template; 8 is traced once more to check it
