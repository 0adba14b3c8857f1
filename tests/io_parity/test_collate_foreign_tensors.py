"""A dataset written for torch (torchvision's transforms.ToTensor() returns torch tensors) feeds flame's
DataLoader as it feeds torch's: default_collate and default_convert take another framework's tensors
(anything with __array__ or __dlpack__) as arrays of their values, gradient history left behind, and
give flame tensors of the same dtypes and values as torch's collate gives torch tensors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from flame.utils.data import DataLoader, default_collate, default_convert


class _TorchSamples:
    """Samples as a torchvision dataset with ToTensor() returns them: an image tensor, an int label,
    a dict with a torch scalar."""

    def __len__(self):
        return 7

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.rand(1, 5, 4, generator=g), i % 3, {"w": torch.tensor(0.5 * i, dtype=torch.float64)}


def _numpy(x):
    return x.numpy() if hasattr(x, "numpy") else np.asarray(x)


@pytest.mark.parametrize("workers", [0, 2])
def test_dataloader_batches_a_torch_dataset_as_torchs(workers):
    ds = _TorchSamples()
    got = list(DataLoader(ds, batch_size=3, num_workers=workers))
    want = list(torch.utils.data.DataLoader(ds, batch_size=3))
    assert len(got) == len(want) == 3
    for (gx, gy, gd), (wx, wy, wd) in zip(got, want):
        assert isinstance(gx, flame.Tensor) and gx.dtype == flame.float32 and gy.dtype == flame.int64
        np.testing.assert_array_equal(gx.numpy(), wx.numpy())
        np.testing.assert_array_equal(gy.numpy(), wy.numpy())
        assert gd["w"].dtype == flame.float64
        np.testing.assert_array_equal(gd["w"].numpy(), wd["w"].numpy())


def test_collate_and_convert_take_foreign_tensors():
    leaf = torch.ones(2, 3, requires_grad=True)
    batch = default_collate([leaf, leaf * 2])  # gradient history left behind: a batch holds values
    np.testing.assert_array_equal(batch.numpy(), np.stack([np.ones((2, 3)), 2 * np.ones((2, 3))]))
    bf = default_collate([torch.tensor([1.5], dtype=torch.bfloat16)] * 2)
    assert bf.dtype == flame.bfloat16 and bf.numpy().astype(np.float32).tolist() == [[1.5], [1.5]]
    converted = default_convert((torch.arange(3), {"a": torch.zeros(2, dtype=torch.int32)}))
    assert isinstance(converted, list) and converted[0].dtype == flame.int64
    assert converted[1]["a"].dtype == flame.int32
    np.testing.assert_array_equal(_numpy(converted[0]), [0, 1, 2])


def test_an_operation_with_a_torch_tensor_says_how_to_convert_it():
    with pytest.raises(TypeError, match=r"unsupported operand of type torch\.Tensor .*flame\.tensor\(x\)"):
        flame.ones(2) + torch.ones(2)
