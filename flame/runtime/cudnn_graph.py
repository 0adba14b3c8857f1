"""What every cuDNN call of flame shares (ARCHITECTURE.md "Library steps"): importing nvidia-cudnn-frontend, one cuDNN
handle per thread, device pointers from CuPy arrays or ints, and running a built frontend graph on the
current CuPy stream. runtime/cudnn_attention.py and runtime/cudnn_conv.py build their graphs with
these; neither allocates at run time, so both replay inside a CUDA graph capture."""

from __future__ import annotations

import sys
import threading

_local = threading.local()
_importing = threading.Lock()
FRONTEND = "nvidia-cudnn-frontend==1.16.0"


def cudnn_module(what: str):
    """The `cudnn` module of nvidia-cudnn-frontend; NotImplementedError naming `what` needs it if absent.
    Imported without importing PyTorch: the frontend's `cudnn.wrapper` (its conveniences for torch
    tensors, which flame does not use: it hands cuDNN enums and device addresses) imports torch where
    it is installed, seconds of a new process's first compile. While `import cudnn` runs, `torch` is
    None in sys.modules, so that import finds no torch and the wrapper goes on without it."""
    found = sys.modules.get("cudnn")
    if found is not None:
        return found
    with _importing:
        hide = "torch" not in sys.modules
        if hide:
            sys.modules["torch"] = None  # type: ignore[assignment]  (an import of it raises ImportError)
        try:
            import cudnn
        except ImportError as e:
            raise NotImplementedError(
                f"{what} needs {FRONTEND} (pip install {FRONTEND} nvidia-cudnn-cu12): {e}") from None
        finally:
            if hide and "torch" in sys.modules and sys.modules["torch"] is None:
                del sys.modules["torch"]
    return cudnn


def handle():
    """One cuDNN handle per thread (a handle must not be shared by threads running concurrently)."""
    if getattr(_local, "handle", None) is None:
        _local.handle = cudnn_module("cuDNN").create_handle()
    return _local.handle


def device_ptr(x) -> int:
    """The device address of a CuPy array, or x itself when it already is one (an int)."""
    return int(x) if isinstance(x, int) else int(x.data.ptr)


def refusals(cudnn) -> tuple[type, ...]:
    """The exceptions by which the frontend says a graph cannot be built ("not supported" arrives as
    RuntimeError, ValueError or the frontend's own cudnnGraphNotSupportedError)."""
    return (RuntimeError, ValueError, getattr(cudnn, "cudnnGraphNotSupportedError", RuntimeError))


def execute(graph, pack: dict, workspace: int) -> None:
    """Run a built graph on the current CuPy stream: `pack` maps the graph's tensors (None keys are
    skipped) to device pointers, `workspace` is the address of its workspace (0 for none)."""
    import cupy

    cudnn = cudnn_module("cuDNN")
    h = handle()
    cudnn.set_stream(handle=h, stream=cupy.cuda.get_current_stream().ptr)
    graph.execute({t: p for t, p in pack.items() if t is not None}, workspace, handle=h)
