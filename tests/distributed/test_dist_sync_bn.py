"""nn.SyncBatchNorm: on two ranks (two processes, flame's launcher, the reference executor exchanging
through the TCP store) whose parts of one batch differ in size, the output, the input's gradient, the
weight and bias gradients summed over the ranks and the running statistics are those of torch's
BatchNorm on the whole batch (sync_bn_worker.py), eager and compiled; in one process it is BatchNorm;
convert_sync_batchnorm swaps every BatchNorm for one sharing its parameters and buffers, as torch's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn
from flame.errors import FlameError, ShapeError
from tests.distributed.launch import ok, run


@pytest.mark.parametrize(
    "args",
    [["--eager"], [], ["--rank-2d", "--cumulative"], ["--eager", "--rank-2d"]],
    ids=["eager", "compiled", "compiled-2d-cumulative", "eager-2d"],
)
def test_two_ranks_match_batch_norm_on_the_whole_batch(args):
    out = ok(run("sync_bn_worker.py", *args, nproc=2, timeout=180))
    assert "rank 0: ok" in out and "rank 1: ok" in out


def test_one_process_is_batch_norm():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 3, 4)).astype(np.float32)
    sync, plain = nn.SyncBatchNorm(3, momentum=0.2), nn.BatchNorm1d(3, momentum=0.2)
    np.testing.assert_array_equal(sync(flame.tensor(x)).numpy(), plain(flame.tensor(x)).numpy())
    np.testing.assert_array_equal(sync.running_mean.numpy(), plain.running_mean.numpy())
    np.testing.assert_allclose(sync.running_var.numpy(), plain.running_var.numpy(), rtol=1e-6)
    want = torch.nn.BatchNorm1d(3, momentum=0.2)(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(sync(flame.tensor(x)).numpy(), want, rtol=1e-4, atol=1e-5)


def test_convert_sync_batchnorm_shares_parameters_and_buffers_as_torchs():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4, momentum=None), nn.ReLU(),
                          nn.Sequential(nn.BatchNorm1d(4, affine=False)))
    model[1].eval()
    bn, inner = model[1], model[3][0]
    out = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    assert out is model
    assert type(out[1]) is nn.SyncBatchNorm and type(out[3][0]) is nn.SyncBatchNorm
    assert out[1].weight is bn.weight and out[1].bias is bn.bias and out[1].running_var is bn.running_var
    assert out[1].momentum is None and not out[1].training and out[3][0].running_mean is inner.running_mean
    assert out[3][0].weight is None and not out[3][0].affine
    assert [n for n, _ in out.named_parameters()] == ["0.weight", "0.bias", "1.weight", "1.bias"]
    lone = nn.BatchNorm3d(2)
    assert type(nn.SyncBatchNorm.convert_sync_batchnorm(lone)) is nn.SyncBatchNorm


def test_errors_as_torchs():
    with pytest.raises(FlameError, match="subgroups"):
        nn.SyncBatchNorm(3, process_group=object())
    with pytest.raises(ShapeError):
        nn.SyncBatchNorm(3)(flame.ones(3))
