"""Max pooling at ties, as torch's: each window's gradient goes to one element, the one torch's `indices`
name (the first maximum in the window's row-major scan; the last NaN; where every element is -inf, the
window's first element inside the input, never the padding). max_poolNd(return_indices=True) gives
torch's indices. adaptive_max_poolNd sends its gradient to the same element as torch's. Values and
gradients against torch in f64, eagerly and inside @flame.compile; the CUDA step's kernels compile."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import flame
import flame.nn.functional as F
from tests.ops.test_everyday_ops import MODES, check, check_gpu_step


def _ties(shape, seed=0):
    """Values of {0, 1, 2}: most windows hold several equal maxima."""
    return np.random.default_rng(seed).integers(0, 3, shape).astype(np.float64)


def _with_nans(shape):
    x = _ties(shape, 1)
    x.reshape(-1)[[1, 2, 7]] = np.nan
    return x


POOLS = {  # name: (d, input, kwargs)
    "1d all equal, overlapping": (1, np.ones((2, 3, 9)), {"kernel_size": 3, "stride": 1}),
    "1d padded, dilated": (1, _ties((2, 3, 11)), {"kernel_size": 3, "stride": 2, "padding": 1, "dilation": 2}),
    "2d all equal, overlapping": (2, np.ones((1, 2, 5, 5)), {"kernel_size": 3, "stride": 1}),
    "2d ties, stride 2": (2, _ties((2, 2, 6, 6)), {"kernel_size": 2}),
    "2d ties, padded": (2, _ties((2, 2, 7, 6)), {"kernel_size": 3, "stride": 2, "padding": 1}),
    "2d ties, ceil_mode": (2, _ties((1, 2, 7, 7)), {"kernel_size": 3, "stride": 2, "ceil_mode": True}),
    "2d all -inf, padded": (2, np.full((1, 1, 4, 5), -np.inf), {"kernel_size": 3, "stride": 1, "padding": 1}),
    "2d NaNs": (2, _with_nans((1, 1, 5, 5)), {"kernel_size": 3, "stride": 1}),
    "3d ties, padded": (3, _ties((1, 2, 4, 5, 4)), {"kernel_size": (2, 3, 2), "stride": 1, "padding": (1, 1, 0)}),
    "3d all equal": (3, np.ones((1, 1, 4, 4, 4)), {"kernel_size": 2, "stride": 1}),
}


def _pool(lib_f, d, kw, indices=False):
    return lambda x: getattr(lib_f, f"max_pool{d}d")(x, return_indices=indices, **kw)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", POOLS)
def test_max_pool_gradient_goes_to_the_element_torch_indices_name(name, mode):
    d, x, kw = POOLS[name]
    check(_pool(F, d, kw), _pool(TF, d, kw), x, mode=mode, rtol=1e-12, atol=0)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", POOLS)
def test_max_pool_return_indices_are_torch_s(name, mode):
    d, x, kw = POOLS[name]
    check(_pool(F, d, kw, True), _pool(TF, d, kw, True), x, mode=mode, rtol=1e-12, atol=0)


def test_max_pool_module_and_unbatched_input_return_torch_s_indices():
    x = _ties((2, 6, 6))
    got_v, got_i = flame.nn.MaxPool2d(3, 1, 1, return_indices=True)(flame.tensor(x))
    want_v, want_i = torch.nn.MaxPool2d(3, 1, 1, return_indices=True)(torch.tensor(x))
    np.testing.assert_array_equal(got_v.numpy(), want_v.numpy())
    np.testing.assert_array_equal(got_i.numpy(), want_i.numpy())
    assert got_i.dtype == flame.int64


ADAPTIVE = {  # name: (d, input, output_size)
    "1d uneven windows": (1, _ties((2, 3, 10)), 4),
    "1d global": (1, np.ones((2, 3, 7)), 1),
    "2d tiles": (2, _ties((2, 2, 6, 4)), (3, 2)),
    "2d global, all equal": (2, np.ones((1, 2, 5, 5)), 1),
    "2d uneven windows": (2, _ties((2, 2, 7, 5)), (3, 4)),
    "2d one axis kept": (2, _ties((1, 2, 5, 4)), (2, None)),
    "2d NaNs": (2, _with_nans((1, 1, 4, 4)), 1),
    "3d uneven windows": (3, _ties((1, 2, 5, 4, 6)), (2, 3, 4)),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ADAPTIVE)
def test_adaptive_max_pool_gradient_goes_to_torch_s_element(name, mode):
    d, x, out = ADAPTIVE[name]
    fn = f"adaptive_max_pool{d}d"
    check(lambda t: getattr(F, fn)(t, out), lambda t: getattr(TF, fn)(t, out), x, mode=mode, rtol=1e-12, atol=0)


@pytest.mark.parametrize("mode", MODES)
def test_pooled_averages_that_tie_send_the_gradient_to_the_first(mode):
    """Equal columns written into a tensor, averaged over overlapping windows and max-pooled to one: the
    averages tie exactly, and the gradient reaches the written value through the first of them only."""
    rng = np.random.default_rng(5)
    x, v = rng.standard_normal((2, 3, 4)), rng.standard_normal(1)

    def program(lib_f, index):
        def fn(x, v):
            y = x.index_copy(2, index, v.expand(2, 3, 4))
            return lib_f.adaptive_max_pool1d(lib_f.adaptive_avg_pool1d(y, 3), 1)

        return fn

    index = np.array([0, 3, 1, 2])
    x[..., 1] = x[..., 0]  # columns 0..3 hold v: windows [0, 2), [1, 3), [2, 4) average to v
    check(program(F, flame.tensor(index)), program(TF, torch.tensor(index)), x, v, mode=mode, rtol=1e-12, atol=1e-14)


def _gpu_step_body(x, w):
    def body(x):
        h = x * w
        y, i = F.max_pool2d(h, 3, stride=1, padding=1, return_indices=True)
        z = F.adaptive_max_pool2d(F.max_pool2d(h, 2, stride=1), (2, 3))
        loss = (y * (i % 5).to(y.dtype)).sum() + (z * z).sum()
        loss.backward()
        return loss

    return body


def test_the_cuda_step_of_max_pooling_at_ties_plans_and_compiles(cuda_target):
    x = flame.tensor(_ties((2, 3, 6, 7)).astype(np.float32))
    w = flame.ones(1, 3, 1, 1, requires_grad=True)
    check_gpu_step(_gpu_step_body(x, w), w, x)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["2d ties, padded", "2d all -inf, padded", "3d ties, padded", "1d padded, dilated"])
def test_max_pool_ties_on_the_gpu_are_torch_s(name, mode):
    d, x, kw = POOLS[name]
    x = x.astype(np.float32)
    check(_pool(F, d, kw, True), _pool(TF, d, kw, True), x, mode=mode, rtol=0, atol=0)
    check(_pool(F, d, kw), _pool(TF, d, kw), x, mode=mode, rtol=0, atol=0)


# uneven adaptive windows overlap: an element in two windows sums two gradients, in f32 on the GPU in its
# own order (the ties still go where torch sends them, or the error would be whole gradients)
UNEVEN_RTOL = 1e-6


@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["2d tiles", "2d uneven windows", "2d global, all equal"])
def test_adaptive_max_pool_ties_on_the_gpu_are_torch_s(name, mode):
    d, x, out = ADAPTIVE[name]
    fn = f"adaptive_max_pool{d}d"
    check(
        lambda t: getattr(F, fn)(t, out),
        lambda t: getattr(TF, fn)(t, out),
        x.astype(np.float32),
        mode=mode,
        rtol=UNEVEN_RTOL if name == "2d uneven windows" else 0,
        atol=0,
    )
