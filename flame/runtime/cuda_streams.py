"""The streams and events the CUDA executor keeps per device: the stream plans capture their CUDA graphs
on, the second streams overlapped steps run on ("comm" for collectives, "side" for optimizer
updates, "host" for offloaded activations' host copies), and the (ready, done) event pair of each
overlapped step, shared with its Wait.

CuPy is imported lazily: `import flame` works without a GPU.
"""

from __future__ import annotations

_GRAPH_STREAMS: dict[int, object] = {}  # device id -> the stream compiled plans capture their graphs on


def graph_stream():
    """The non-blocking stream every compiled plan on the current device captures its CUDA graphs on
    (a capture needs a stream other than the legacy default one): one per device rather than one per
    plan (each size of a dynamic dim is a plan). Captures only record; the graphs are launched on the
    caller's stream, so they stay ordered with the caller's other work without events."""
    import cupy

    dev = cupy.cuda.Device().id
    if dev not in _GRAPH_STREAMS:
        _GRAPH_STREAMS[dev] = cupy.cuda.Stream(non_blocking=True)
    return _GRAPH_STREAMS[dev]


_STREAMS: dict[tuple[int, str], object] = {}  # (device id, "comm" or "side") -> that stream of this process


def overlap_stream(name: str):
    """The second stream overlapped steps run on, one per device and kind (non-blocking): "comm" for
    collectives, "side" for optimizer updates (separate, so an update never queues behind a transfer),
    "host" for offloaded activations' copies to and from pinned host memory."""
    import cupy

    key = (cupy.cuda.Device().id, name)
    if key not in _STREAMS:
        _STREAMS[key] = cupy.cuda.Stream(non_blocking=True)
    return _STREAMS[key]


def _fork(stream, name: str, out: int, op) -> tuple:
    """Start an overlapped step: the `name` stream waits for everything issued on `stream` so far.
    Returns (that stream, the event its Wait waits for: record it after the step's work); under
    CUDA-graph capture the two events become the graph's fork and join edges."""
    side = overlap_stream(name)
    ready, done = _events(out, op)
    ready.record(stream)
    side.wait_event(ready)
    return side, done


_EVENTS: dict[tuple, tuple] = {}  # (device, result buffer, op) -> (ready, done) events of an overlapped step


def _events(out: int, op) -> tuple:
    """The (ready, done) events of an overlapped step (the one writing buffer `out` for `op`), shared
    with its Wait; created at the plan's first (uncaptured) run, so a capture records only edges."""
    import cupy

    key = (cupy.cuda.Device().id, out, op)
    if key not in _EVENTS:
        _EVENTS[key] = (cupy.cuda.Event(disable_timing=True), cupy.cuda.Event(disable_timing=True))
    return _EVENTS[key]
