"""The process group: one process per GPU, started by `torchrun` or flame's launcher
(`python3 -m flame.distributed.run`), which set RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT. `init_process_group` joins the ranks through the TCP store (store.py), makes the
communicator every collective goes through (NCCL on CUDA; the store exchange on the reference
executor) and installs it in flame.runtime.communicator.

Where the store listens: flame's launcher serves it itself on MASTER_PORT (and says so with
FLAME_AGENT_STORE=1); otherwise rank 0 serves it on MASTER_PORT, except under torchrun, whose own
store already holds MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True): then on MASTER_PORT + 1.
FLAME_STORE_PORT overrides both. The store listens on MASTER_ADDR's address only (FLAME_STORE_BIND
names another, e.g. 0.0.0.0 behind NAT, where MASTER_ADDR is not an address of rank 0's host) and
admits only processes that know the job's secret, FLAME_DIST_SECRET (auth.py): flame's launcher
sets it; under torchrun set it yourself, or rank 0 warns that the store admits anyone who reaches it.

Failure: a rank that dies of an uncaught exception posts an abort with its error to the store.
Every wait in the store then fails with that message (the reference executor's collectives), and on
CUDA a watchdog thread (watchdog.py), which also notices the store disappearing or no longer
answering and a rank whose heartbeat stops, aborts the NCCL communicator and ends the process with
the message: no rank hangs in a collective whose peer is gone or stopped. Every wait is bounded by
the timeout (FLAME_DIST_TIMEOUT): a rank that does not post in time (stopped, far behind) makes the
ranks waiting for it fail with an error naming themselves, what they waited for and from which rank;
a store whose process is stopped makes its clients fail once a reply is a second overdue (store.py)."""

from __future__ import annotations

import atexit
import datetime
import operator
import os
import sys
from dataclasses import dataclass

from flame.distributed import env, watchdog
from flame.distributed.auth import SECRET_VAR, job_secret
from flame.distributed.store import DistributedError, StoreClient, StoreServer, StoreTimeout
from flame.distributed.store_comm import StoreCommunicator, StoreExchange
from flame.runtime import communicator as _comm
from flame.runtime.device import get_device

BACKENDS = ("nccl", "gloo", "store")  # gloo: the store exchange, as "store"
DEFAULT_TIMEOUT = 300.0


@dataclass
class _Group:
    rank: int
    world_size: int
    local_rank: int
    backend: str
    store: StoreClient | None
    server: StoreServer | None
    comm: object
    generation: int
    secret: bytes | None = None
    closing: bool = False
    watched: bool = False


_group: list[_Group] = []
_generation = [0]


def store_port(master_port: int) -> int:
    """The port the store listens on (module docstring)."""
    if "FLAME_STORE_PORT" in os.environ:
        return env.port("FLAME_STORE_PORT")
    if os.environ.get("FLAME_AGENT_STORE") != "1" and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        if master_port == 65535:
            raise DistributedError(
                "init_process_group: MASTER_PORT=65535 leaves no port for flame's store beside "
                "torchrun's (MASTER_PORT + 1): set FLAME_STORE_PORT"
            )
        return master_port + 1
    return master_port


def _timeout_seconds(timeout) -> float:
    if timeout is None:
        raw = os.environ.get("FLAME_DIST_TIMEOUT")
        return DEFAULT_TIMEOUT if raw is None else env.seconds(raw, "FLAME_DIST_TIMEOUT")
    return env.seconds(timeout)


def _ranks(rank: int | None, world_size: int | None) -> tuple[int, int, int]:
    """(rank, world size, local rank) from the arguments or the environment, checked."""
    if world_size is None:
        world_size = env.env_int("WORLD_SIZE", 1, 1, what="a number of ranks")
    elif _integer(world_size) is None or world_size < 1:
        raise DistributedError(f"init_process_group: world_size={world_size!r} is not a number of ranks >= 1")
    if rank is None:
        rank = env.env_int("RANK", 0, 0, what="a rank")
        if rank >= world_size:
            raise DistributedError(
                f"init_process_group: RANK={rank} is not a rank of a world of {world_size} "
                f"(WORLD_SIZE): expected 0 to {world_size - 1}"
            )
    elif _integer(rank) is None or not 0 <= rank < world_size:
        raise DistributedError(
            f"init_process_group: rank={rank!r} is not a rank of a world of {world_size}: "
            f"expected 0 to {world_size - 1}"
        )
    return int(rank), int(world_size), env.env_int("LOCAL_RANK", int(rank), 0, what="a rank")


def _init_method(init_method: str | None) -> tuple[str, int] | None:
    """(host, port) from "tcp://HOST:PORT"; None for "env://" (the environment's)."""
    if init_method is None or init_method == "env://":
        return None
    host, sep, port = init_method.removeprefix("tcp://").rpartition(":")
    if not init_method.startswith("tcp://") or not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise DistributedError(
            f"init_process_group: init_method={init_method!r} is not supported; expected 'env://' or 'tcp://HOST:PORT'"
        )
    return host.strip("[]"), int(port)


def _integer(x) -> int | None:
    if isinstance(x, bool):
        return None
    try:
        return operator.index(x)
    except TypeError:
        return None


def init_process_group(
    backend: str | None = None,
    init_method: str | None = None,
    timeout: datetime.timedelta | float | None = None,
    world_size: int | None = None,
    rank: int | None = None,
    store=None,
    group_name: str = "",
    pg_options=None,
    device_id=None,
) -> None:
    """Join this process to the group of `world_size` ranks (default: the environment torchrun sets),
    with torch.distributed's arguments.

    backend: "nccl" (the default; on a machine whose executor is the NumPy reference, the ranks
    exchange through the store instead, with a notice), "gloo" or "store" (always the store: slow,
    for tests and CPU scripts). On CUDA each rank uses GPU LOCAL_RANK. init_method: "env://" (the
    default: MASTER_ADDR and MASTER_PORT) or "tcp://HOST:PORT". world_size and rank: -1 (torch's
    "unset") or None read WORLD_SIZE and RANK. timeout: how long a rank waits for the others in the
    store (default 300 s, or FLAME_DIST_TIMEOUT seconds). group_name is accepted and unused; a
    store, pg_options or device_id of torch's is not supported (a DistributedError). If joining
    fails (a rank does not come within the timeout, the store cannot be reached), the error names
    what was missing and the process is left as it was before the call, so init_process_group can
    be called again."""
    if _group:
        raise DistributedError(
            "init_process_group: the process group is already initialised (destroy_process_group first)"
        )
    for name, value in (("store", store), ("pg_options", pg_options), ("device_id", device_id)):
        if value is not None:
            raise DistributedError(f"init_process_group: {name}= is not supported; pass {name}=None")
    backend = backend or "nccl"
    if backend not in BACKENDS:
        raise DistributedError(f"init_process_group: unknown backend {backend!r}; expected one of {BACKENDS}")
    address = _init_method(init_method)
    rank = None if _integer(rank) == -1 else rank
    world_size = None if _integer(world_size) == -1 else world_size
    rank, world_size, local_rank = _ranks(rank, world_size)
    seconds = _timeout_seconds(timeout)
    device = get_device()
    if device == "cuda":
        import cupy

        cupy.cuda.Device(local_rank % cupy.cuda.runtime.getDeviceCount()).use()
    gen = _generation[0] + 1  # taken only when joining succeeds: a retry uses the same keys
    if world_size == 1:
        group = _Group(0, 1, local_rank, backend, None, None, _comm.SingleProcess(), gen)
    else:
        host, port = address or (env.master_addr(), env.port("MASTER_PORT"))
        port = store_port(port)
        group = _join(backend, device, rank, world_size, local_rank, host, port, seconds, gen)
        _comm.set_communicator(group.comm)
        _install_failure_handling(group, host, port, seconds)
    _generation[0] = gen
    _group.append(group)


def _join(
    backend: str,
    device: str,
    rank: int,
    world_size: int,
    local_rank: int,
    host: str,
    port: int,
    seconds: float,
    gen: int,
) -> _Group:
    """Serve (rank 0, unless a launcher does) and reach the store, meet every rank there, make the
    communicator. On failure everything made here is closed again before the error propagates."""
    server = store = None
    secret = job_secret()
    try:
        if rank == 0 and os.environ.get("FLAME_AGENT_STORE") != "1":
            server = StoreServer(os.environ.get("FLAME_STORE_BIND") or host, port, secret)
            if secret is None:
                print(
                    f"flame.distributed: {SECRET_VAR} is not set: the process group's store on "
                    f"{server.address}:{port} admits any process that reaches it (set {SECRET_VAR} to the same "
                    f"random value for every rank, or start the ranks with python3 -m flame.distributed.run)",
                    file=sys.stderr,
                )
        store = StoreClient(host, port, seconds, rank=rank, secret=secret)
        prefix = f"pg{gen}"
        _rendezvous(store, prefix, rank, world_size)
        if backend == "nccl" and device == "cuda":
            comm = _nccl_communicator(store, rank, world_size, prefix)
        else:
            if backend == "nccl" and rank == 0:
                print(
                    "flame.distributed: the reference executor has no NCCL; the ranks exchange through the "
                    "TCP store (slow: for tests)",
                    file=sys.stderr,
                )
            comm = StoreCommunicator(store, rank, world_size, f"{prefix}/c")
    except BaseException:
        if store is not None:
            store.close()
        if server is not None:
            server.close()
        raise
    return _Group(rank, world_size, local_rank, backend, store, server, comm, gen, secret)


def _rendezvous(store: StoreClient, prefix: str, rank: int, world_size: int) -> None:
    """Every rank posts that it is here; rank 0 waits for each and then says so. Posting is
    idempotent, so a rank that failed to join can simply try again."""
    store.set(f"{prefix}/joined/{rank}", b"1", what="joining the process group")
    if rank == 0:
        for r in range(1, world_size):
            store.get(f"{prefix}/joined/{r}", what=f"rank {r} to join the process group")
        store.set(f"{prefix}/ready", b"1", what="joining the process group")
        return
    try:
        store.get(f"{prefix}/ready", what="every rank to join the process group")
    except StoreTimeout as e:
        missing = [r for r in range(world_size) if not _posted(store, f"{prefix}/joined/{r}")]
        raise StoreTimeout(
            f"{e}; missing: rank{'s' if len(missing) > 1 else ''} "
            f"{', '.join(map(str, missing)) or 'none (rank 0 did not confirm)'}"
        ) from None


def _posted(store: StoreClient, key: str) -> bool:
    try:
        store.get(key, timeout=0)
        return True
    except StoreTimeout:
        return False


def _nccl_communicator(store: StoreClient, rank: int, world_size: int, prefix: str):
    from flame.runtime import nccl

    if rank == 0:
        store.set(f"{prefix}/nccl_id", nccl.unique_id(), what="posting the NCCL unique id")
    uid = store.get(f"{prefix}/nccl_id", what="the NCCL unique id from rank 0")
    return nccl.NcclCommunicator(world_size, rank, uid, StoreExchange(store, rank, world_size, f"{prefix}/sig"))


def _install_failure_handling(group: _Group, host: str, port: int, seconds: float) -> None:
    previous = sys.excepthook

    def hook(kind, value, tb):
        if _group and _group[0] is group:
            try:
                group.store.abort(f"rank {group.rank} failed: {kind.__name__}: {value}")
            except DistributedError:
                pass
        previous(kind, value, tb)

    sys.excepthook = hook
    if group.backend == "nccl" and hasattr(group.comm, "abort"):
        start_watchdog(group, host, port, seconds)


def start_watchdog(group: _Group, host: str, port: int, seconds: float) -> None:
    """Watch the group's ranks from a thread with its own connection to the store (watchdog.py)."""
    watchdog.start(group, StoreClient(host, port, seconds, secret=group.secret), seconds)  # it names the rank
    group.watched = True


def _current() -> _Group | None:
    return _group[0] if _group else None


def is_initialized() -> bool:
    return bool(_group)


def get_rank() -> int:
    """This process's rank (0 without a process group)."""
    g = _current()
    return 0 if g is None else g.rank


def get_world_size() -> int:
    """The number of ranks (1 without a process group)."""
    g = _current()
    return 1 if g is None else g.world_size


def get_local_rank() -> int:
    """This process's rank on its host (its GPU index)."""
    g = _current()
    return 0 if g is None else g.local_rank


def get_backend() -> str:
    g = _current()
    if g is None:
        raise DistributedError("get_backend: the process group is not initialised")
    return g.backend


def barrier() -> None:
    """Return when every rank has reached its barrier (a no-op in a world of one)."""
    g = _current()
    if g is None or g.store is None:
        return
    key = f"pg{g.generation}/barrier/{_next_barrier(g)}"
    g.store.add(key, 1, what="entering barrier()")
    g.store.wait(key, g.world_size, what="every rank to reach barrier()")


_barriers: dict[int, int] = {}


def _next_barrier(g: _Group) -> int:
    _barriers[g.generation] = _barriers.get(g.generation, 0) + 1
    return _barriers[g.generation]


def destroy_process_group() -> None:
    """Leave the process group: waits (up to the timeout) until every rank has left, so rank 0's
    store outlives the others' last use of it; then frees the communicator."""
    g = _current()
    if g is None:
        return
    g.closing = True
    try:
        if g.store is not None:
            if g.watched:
                watchdog.gone(g.store, g)
            key = f"pg{g.generation}/left"
            g.store.add(key, 1, what="leaving the process group")
            if g.server is not None:
                g.store.wait(key, g.world_size, what="every rank to leave the process group")
    finally:
        _group.clear()
        _comm.set_communicator(None)
        if g.store is not None:
            g.store.close()
        if g.server is not None:
            g.server.close()


@atexit.register
def _leave_at_exit() -> None:
    g = _current()
    if g is None:
        return
    try:
        destroy_process_group()
    except DistributedError:
        pass
