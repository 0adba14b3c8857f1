"""flame.from_dlpack shares memory with the producer, bfloat16 included (issue 15 point 8: a torch
bfloat16 tensor raised "Unsupported dtype in DLTensor"). Oracle: torch on the CPU."""

import ml_dtypes
import numpy as np
import pytest
import torch

import flame


@pytest.mark.parametrize("dtype,name", [(torch.bfloat16, "bf16"), (torch.float16, "f16"), (torch.float32, "f32"),
                                        (torch.int64, "i64")])
def test_from_dlpack_of_a_torch_tensor_keeps_dtype_values_and_memory(dtype, name):
    src = (torch.arange(12, dtype=torch.float32).reshape(3, 4) / 7).to(dtype)
    x = flame.from_dlpack(src)
    assert x.dtype.name == name and x.shape == (3, 4)
    want = src.float().numpy()
    np.testing.assert_array_equal(x.numpy().astype(np.float32), want)
    src[0, 0] = 5  # zero-copy: the flame tensor sees the producer's write
    assert float(x.numpy()[0, 0]) == 5.0


def test_a_bfloat16_tensor_from_dlpack_computes_like_torch():
    src = torch.linspace(-3, 3, 16, dtype=torch.float32).to(torch.bfloat16)
    x = flame.from_dlpack(src)
    got = (x * x).float().numpy()
    np.testing.assert_array_equal(got, (src * src).float().numpy())


def test_a_numpy_bfloat16_array_through_its_int16_view():
    a = np.linspace(-1, 1, 8, dtype=np.float32).astype(ml_dtypes.bfloat16)

    class Producer:  # what a JAX array offers: a dtype named bfloat16 and .view
        dtype = a.dtype

        def view(self, dtype):
            return a.view(dtype)

    x = flame.from_dlpack(Producer())
    assert x.dtype == flame.bf16
    np.testing.assert_array_equal(x.numpy(), a)


@pytest.mark.gpu
def test_a_bfloat16_device_array_is_viewed_zero_copy_on_the_gpu():
    import cupy

    a = np.linspace(-1, 1, 8, dtype=np.float32).astype(ml_dtypes.bfloat16)
    bits = cupy.asarray(a.view(np.int16))

    class Producer:  # a bf16 device array (JAX on the GPU): CuPy has no bfloat16 of its own
        dtype = a.dtype

        def view(self, dtype):
            return bits.view(dtype)

    x = flame.from_dlpack(Producer())
    assert x.dtype == flame.bf16 and x._data.data.ptr == bits.data.ptr
    np.testing.assert_array_equal(x.numpy(), a)
    np.testing.assert_array_equal((x * 2).numpy(), (a.astype(np.float32) * 2).astype(ml_dtypes.bfloat16))
