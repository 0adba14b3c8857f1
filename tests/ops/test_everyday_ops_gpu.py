"""The everyday ops on the CUDA executor against torch (CPU): a representative subset of
test_everyday_ops.py (the new kernels: sort, scans, floor division; index writes, einsum, pad) eagerly and
compiled, and what .cpu() / .cuda() do on a GPU run."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import flame
import flame.nn.functional as F
from flame.errors import FlameError
from tests.ops.test_everyday_ops import _write, check, randn

pytestmark = pytest.mark.gpu
MODES = ("eager", "compiled")


@pytest.mark.parametrize("mode", MODES)
def test_sort_topk_scans_on_gpu(mode):
    x = randn(6, 300)
    check(lambda t: t.sort(1), lambda t: t.sort(1), x, mode=mode)
    check(lambda t: t.topk(5, dim=0, largest=False), lambda t: t.topk(5, dim=0, largest=False), x, mode=mode)
    check(lambda t: t.cumsum(1), lambda t: t.cumsum(1), x, mode=mode, rtol=1e-4, atol=1e-4)
    z = randn(4, 7)
    z[1, 2] = z[2, 0] = z[2, 5] = 0.0
    check(lambda t: t.cumprod(1), lambda t: t.cumprod(1), z, mode=mode)
    nans = np.array([[1.0, np.nan, -2.0, np.inf, 0.5, 0.5]], np.float32)
    check(lambda t: t.sort(1, descending=True), lambda t: t.sort(1, descending=True), nans, wrt=[], mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_divmod_writes_einsum_pad_on_gpu(mode):
    a = np.array([7.0, -7.0, 7.0, -7.0, 0.5, -0.5, 5.25], np.float32)
    b = np.array([2.0, 2.0, -2.0, -2.0, 3.0, 3.0, -1.5], np.float32)
    check(lambda x, y: (x // y, x % y), lambda x, y: (x // y, x % y), a, b, wrt=[], mode=mode)
    check(lambda x, y: (x // y, x % y), lambda x, y: (x // y, x % y), np.array([7, -7, 9]), np.array([2, 2, -4]),
          mode=mode)
    fn, tfn = _write(lambda lib, t: lib.tensor([3, 0]))
    check(fn, tfn, randn(4, 5), randn(2, 5), mode=mode)
    fn, tfn = _write(lambda lib, t: t > 0)
    check(fn, tfn, randn(4, 5), mode=mode)
    check(lambda p, q: flame.einsum("bij,bjk->bik", p, q), lambda p, q: torch.einsum("bij,bjk->bik", p, q),
          randn(2, 3, 4), randn(2, 4, 5), mode=mode, rtol=1e-4, atol=1e-4)
    check(lambda t: F.pad(t, (2, 1), mode="reflect"), lambda t: TF.pad(t, (2, 1), mode="reflect"), randn(2, 3, 4),
          mode=mode)


def test_uint8_on_gpu():
    img = np.array([[0, 128, 255], [1, 2, 3]], np.uint8)
    x = flame.tensor(img)
    assert x.dtype == flame.uint8 and (x + 1).tolist() == (torch.tensor(img) + 1).tolist()
    assert x.float().mean().item() == pytest.approx(img.mean())
    assert x.sort(1).values.tolist() == np.sort(img, 1).tolist()


def test_cpu_and_cuda_moves_on_gpu():
    x = flame.ones(3)
    assert x.device == flame.device("cuda", 0) and x.is_cuda
    assert x.cuda() is x and x.to("cuda") is x
    host = x.cpu()
    assert host.device == flame.device("cpu") and host.tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(FlameError, match="met the cuda executor"):
        host + 1
    back = host.cuda()
    assert back.is_cuda and (back + 1).tolist() == [2.0, 2.0, 2.0]
