"""flame.nn.utils.convert_conv2d_weight_memory_format / convert_conv3d_weight_memory_format and skip_init
against torch.nn.utils's: the same module returned, the same weight values, torch's errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn


def _net(lib):
    m = lib.nn.Sequential(lib.nn.Conv2d(2, 3, 3), lib.nn.Sequential(lib.nn.ConvTranspose2d(3, 2, 3)),
                          lib.nn.Conv3d(2, 2, 1), lib.nn.Linear(2, 2))
    return m


@pytest.mark.parametrize("which,fmt", [(2, "channels_last"), (2, "contiguous_format"), (3, "channels_last_3d")])
def test_convert_conv_weight_memory_format_keeps_values_and_returns_the_module(which, fmt):
    tm, fm = _net(torch).double(), _net(flame).double()
    fm.load_state_dict({k: flame.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    t_fn = getattr(torch.nn.utils, f"convert_conv{which}d_weight_memory_format")
    f_fn = getattr(nn.utils, f"convert_conv{which}d_weight_memory_format")
    assert t_fn(tm, getattr(torch, fmt)) is tm
    before = fm[0].weight
    assert f_fn(fm, getattr(flame, fmt)) is fm
    assert isinstance(fm[0].weight, nn.Parameter) and fm[0].weight is before  # .data replaced, as torch's
    for k, v in tm.state_dict().items():
        np.testing.assert_array_equal(fm.state_dict()[k].numpy(), v.detach().numpy())
    with pytest.raises(TypeError):
        f_fn(fm, 3)


def test_skip_init_builds_the_module_and_refuses_as_torch():
    m = nn.utils.skip_init(nn.Linear, 4, 3, bias=False)
    assert isinstance(m, nn.Linear) and m.weight.shape == (3, 4) and m.bias is None

    class NoDevice(nn.Module):
        pass

    class TorchNoDevice(torch.nn.Module):
        pass

    for lib, cls in ((torch, TorchNoDevice), (flame, NoDevice)):
        with pytest.raises(RuntimeError, match="^Module must support a 'device' arg to skip initialization$"):
            lib.nn.utils.skip_init(cls)
        with pytest.raises(RuntimeError, match="^Expected a Module; got <class 'int'>$"):
            lib.nn.utils.skip_init(int)
