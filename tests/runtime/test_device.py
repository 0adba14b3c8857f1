"""Choosing the device: the no-GPU notice is a silenceable warning (and a log record), not a print;
`.to(device)` on modules accepts PyTorch's device names."""

import logging
import warnings

import pytest

import flame
import flame.nn as nn
from flame.runtime import device


@pytest.fixture
def undecided(monkeypatch):
    """A process that has not chosen its device yet, without a GPU."""
    monkeypatch.setattr(device, "_chosen", [])
    monkeypatch.setattr(device, "cuda_available", lambda: False)
    monkeypatch.delenv("FLAME_DEVICE", raising=False)
    device.executor.cache_clear()


def test_no_gpu_notice_is_a_warning_and_a_log_record(undecided, caplog, capsys):
    with caplog.at_level(logging.INFO, logger="flame"), pytest.warns(flame.DeviceWarning, match="no usable GPU"):
        assert device.get_device() == "reference"
    assert any("no usable GPU" in r.getMessage() for r in caplog.records)
    assert capsys.readouterr().err == ""  # no bare print


def test_no_gpu_notice_can_be_silenced(undecided, recwarn):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=flame.DeviceWarning)
        assert device.get_device() == "reference"
    assert not [w for w in recwarn if issubclass(w.category, flame.DeviceWarning)]


def test_explicit_device_gives_no_notice(undecided, monkeypatch, recwarn):
    monkeypatch.setenv("FLAME_DEVICE", "reference")
    assert device.get_device() == "reference"
    assert not [w for w in recwarn if issubclass(w.category, flame.DeviceWarning)]


@pytest.mark.parametrize("name, want", [("cpu", "reference"), ("reference", "reference"), ("cuda", "cuda"),
                                        ("cuda:0", "cuda"), ("f32", None), ("gpu", None)])
def test_device_names(name, want):
    assert device.device_name(name) == want


def test_module_to_accepts_devices_and_dtypes():
    torch = pytest.importorskip("torch")
    m = nn.Linear(3, 2)
    w = m.weight
    assert m.to("cpu") is m and m.weight.dtype == flame.f32  # the device flame runs on here: nothing moves
    assert m.to(torch.device("cpu")) is m
    assert m.to("cpu", flame.f64) is m and m.weight.dtype == flame.f64 and m.weight is w
    m.to(device="cpu", dtype="f32")
    assert m.weight.dtype == flame.f32
    m.to(flame.zeros(1, dtype=flame.f64))  # to(tensor): its dtype
    assert m.bias.dtype == flame.f64
    with pytest.raises(flame.FlameError, match=r"cannot move to 'cuda'.*flame.set_device\('cuda'\)"):
        m.to("cuda")
    with pytest.raises(flame.DTypeError, match="unknown dtype 'float99'"):
        m.to("float99")


def test_runs_without_the_cuda_extra(tmp_path):
    """A CPU-only install (no `[cuda]` extra: no CuPy, nvmath, cuDNN, NVIDIA wheels) imports flame,
    notices there is no GPU, and trains on the reference executor."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = (
        "import sys\n"
        "for m in ('cupy', 'cupyx', 'nvmath', 'cudnn', 'nvidia'):\n"
        "    sys.modules[m] = None  # import fails, as when the package is not installed\n"
        "import runpy, warnings\n"
        "import flame\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        f"    runpy.run_path({os.path.join(root, 'tests', 'cli', 'tiny_step.py')!r}, run_name='__main__')\n"
        "assert flame.get_device() == 'reference'\n"
        "assert any(issubclass(x.category, flame.DeviceWarning) for x in w)\n"
    )
    env = dict(os.environ, PYTHONPATH=root)
    env.pop("FLAME_DEVICE", None)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("loss ")
