"""Importing nvidia-cudnn-frontend through flame does not import PyTorch (its `cudnn.wrapper` would,
seconds of a new process's first compile where torch is installed), and torch still imports after."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("cudnn")

CODE = """
import sys
from flame.runtime.cudnn_graph import cudnn_module
cudnn = cudnn_module("test")
assert "torch" not in sys.modules, "importing cudnn imported torch"
assert cudnn.wrapper.torch is None
import torch
assert torch.zeros(1).shape == (1,)
print("ok")
"""


def test_cudnn_frontend_imports_without_torch():
    pytest.importorskip("torch")
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
