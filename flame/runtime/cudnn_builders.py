"""A compile's cuDNN graphs built side by side in builder processes (runtime/builders.py).

Building a cuDNN graph for the first time in a process is mostly cuDNN compiling the kernels of its
runtime-compiled engines: about a second for each of a GPT's attention graphs, 3.7 s for a U-Net's
124 convolution graphs, one after another. Threads do not help (cuDNN serializes them); processes do.
While a compile runs (`session`), the CUDA backend hands the graphs its ops and steps will need
(`prefetch`: requests for those not made in this process, not in the cache of built graphs and not
already handed over; the first hand-over needs two or more, so that a lone graph, an eager op's, is
not delayed by a worker's start) to up to FLAME_CUDNN_BUILDERS worker processes; each builds its graph and sends back
the serialized form, which runtime/cudnn_cache.graph reads back (milliseconds) and stores when the
compile asks for that graph. The compiler hands the traced graph's ops over when it starts, so the
workers start while the passes run, and hands over again before legalizing, before planning and after
planning (the calls' strided layouts give other specs).

A worker builds exactly what this process would: the same spec, determinism and TF32 settings, the
same GPU (the current device's ordinal), with the cache of built graphs off (this process stores what
it takes). A graph the worker cannot serialize, or one that does not arrive (a worker died, or
WAIT_LIMIT seconds passed), is built here (the second with a RuntimeWarning). The workers leave when
the compile's session ends. Each holds a CUDA context (some hundreds of MB of device memory) while it
lives.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from flame._env import env_int
from flame.runtime import cudnn_cache
from flame.runtime.builders import Pool

log = logging.getLogger("flame")

ENV = "FLAME_CUDNN_BUILDERS"
WAIT_LIMIT = 300.0  # seconds graph() waits for one handed-over graph (its queue included)


def builders() -> int:
    """How many builder processes a compile may start: FLAME_CUDNN_BUILDERS (0: build every graph in
    this process), by default half the CPUs, at most 8."""
    return env_int(ENV, min(8, max(1, (os.cpu_count() or 2) // 2)), minimum=0)


@dataclass(frozen=True)
class Request:
    """One cuDNN graph to build: `kind` "conv", "attention forward" or "attention backward", its spec
    (cudnn_conv.ConvSpec / cudnn_attention.AttentionSpec), the determinism setting and, for
    convolutions, whether f32 may take TF32 (cudnn_conv.allow_tf32)."""

    kind: str
    spec: object
    deterministic: bool
    tf32: bool = False

    @property
    def family(self) -> tuple:
        """Graphs likely to share cuDNN's compiled kernels: one kind and direction, one dtype."""
        return (self.kind, getattr(self.spec, "kind", ""), self.spec.dtype)

    @property
    def key(self) -> str:
        """The key text runtime/cudnn_cache.graph knows the graph by."""
        from flame.runtime import cudnn_attention, cudnn_conv

        if self.kind == "conv":
            return cudnn_conv.graph_key(self.spec, self.deterministic, self.tf32)
        return cudnn_attention.graph_key(self.kind.split()[1], self.spec, self.deterministic)


@contextlib.contextmanager
def _tf32(allow: bool) -> Iterator[None]:
    from flame.runtime import cudnn_conv

    before, cudnn_conv.allow_tf32 = cudnn_conv.allow_tf32, allow
    try:
        yield
    finally:
        cudnn_conv.allow_tf32 = before


def worker_init() -> tuple[str, tuple]:
    """A builder process's first job: init_worker on the current GPU."""
    import cupy

    return "flame.runtime.cudnn_builders:init_worker", (cupy.cuda.Device().id,)


def init_worker(device: int) -> None:
    """A builder process's start: the GPU of the compiling process, cuDNN's frontend and a handle."""
    import cupy

    from flame.runtime.cudnn_graph import cudnn_module, handle

    cupy.cuda.Device(device).use()
    cudnn_module("cuDNN")
    handle()


def build(request: Request) -> tuple[str, object]:
    """In a builder process: ("graph", the serialized graph), ("refused", cuDNN's words) or ("build
    here", why the graph cannot be handed over)."""
    from flame.runtime import cudnn_attention, cudnn_conv

    made: dict = {}
    with cudnn_cache.capture(made), _tf32(request.tf32):
        try:
            if request.kind == "conv":
                cudnn_conv.CudnnConv(request.spec, request.deterministic)
            else:
                att = cudnn_attention.CudnnAttention(request.spec, request.deterministic)
                att.backward_workspace if request.kind.endswith("backward") else att.forward_workspace  # noqa: B018
        except NotImplementedError as e:
            if request.key not in made:  # flame's own reason, before cuDNN was asked
                return "build here", str(e)
    g = made.get(request.key)
    if g is None:
        return "build here", "the builder process made no graph under that key"
    if isinstance(g, Exception):
        return "refused", str(g)
    try:
        return "graph", bytes(g.serialize())
    except Exception as e:  # noqa: BLE001 - engines without a serialized form
        return "build here", f"no serialized form ({type(e).__name__}: {e})"


class _Session:
    """The builder processes of one compile and the keys handed to them."""

    def __init__(self, size: int):
        self.size = size
        self.pools: dict[int, Pool] = {}
        self.families: dict[tuple, int] = {}
        self.keys: list[str] = []
        self.lock = threading.Lock()

    def _pool(self, r: Request) -> Pool:
        import os as _os

        if _os.environ.get("FLAME_CUDNN_ROUTE", "family") == "any":
            index, size = 0, self.size
        else:
            index, size = self.families.setdefault(r.family, len(self.families)) % self.size, 1
        if index not in self.pools:
            self.pools[index] = Pool(size, init=worker_init(), env={"FLAME_CACHE_SIZE": "0", ENV: "0"})
        return self.pools[index]

    def hand(self, requests: Iterable[Request]) -> int:
        """Hand the requests whose graphs graph() would build here to the builders; how many."""
        from flame.runtime.cudnn_graph import cudnn_module

        cudnn = cudnn_module("cuDNN")
        count = 0
        with self.lock:
            unknown = [r for r in requests if not cudnn_cache.known(cudnn, r.key)]
            if not self.pools and len(unknown) < 2:
                return 0  # one graph: a worker's start would only delay it
            for r in unknown:
                key = r.key
                job = self._pool(r).submit("flame.runtime.cudnn_builders:build", r)
                global HANDED_OVER
                HANDED_OVER += 1
                cudnn_cache.expect(key, lambda job=job: job.result(WAIT_LIMIT))
                self.keys.append(key)
                count += 1
        return count

    def close(self) -> None:
        with self.lock:
            for pool in self.pools.values():
                pool.close()
            cudnn_cache.unexpect(self.keys)
            self.pools, self.keys = {}, []


_current: _Session | None = None
HANDED_OVER = 0


@contextlib.contextmanager
def session() -> Iterator[None]:
    """While the block runs, prefetch hands graphs to builder processes (at most builders() of them,
    started when the first graph is handed over); they leave when it ends. Nested sessions share the
    outer one; with FLAME_CUDNN_BUILDERS=0 the block builds every graph in this process."""
    global _current
    size = builders()
    if _current is not None or size == 0:
        yield
        return
    _current = _Session(size)
    try:
        yield
    finally:
        s, _current = _current, None
        s.close()


def active() -> bool:
    """Whether a session is open (prefetch hands graphs over)."""
    return _current is not None


def prefetch(requests: Iterable[Request]) -> int:
    """Hand the graphs of `requests` to the current session's builder processes (none outside a
    session); how many were handed over."""
    s = _current
    if s is None:
        return 0
    requests = list(requests)
    if not requests:
        return 0
    n = s.hand(requests)
    if n:
        log.debug("flame: %d cuDNN graph(s) handed to builder processes", n)
    return n
