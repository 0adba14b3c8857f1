"""The NCCL communicator (runtime/communicator.py's protocol) through CuPy's binding
`cupy.cuda.nccl` and the NCCL runtime of the `nvidia-nccl-cu12` wheel. One communicator per process
and GPU; rank 0 makes the unique id and flame.distributed hands it to the others through its TCP
store. Every call takes CuPy device pointers and the stream to issue on, so a call made while a
stream is captured is recorded into the CUDA graph (seen on H200s with NCCL 2.28).

flame never changes NCCL's own settings: whatever the caller's environment says (NCCL_NVLS_ENABLE=0,
NCCL_SOCKET_IFNAME, NCCL_DEBUG, ...) is what NCCL reads when the communicator is made.

NCCL itself cannot tell that two ranks' calls differ (an all-reduce of 4 elements on one rank and 1
on another returns garbage, or hangs): `check`, which run_collective calls before every NCCL call,
has the ranks agree on each distinct collective signature once, through the process group's store
(communicator.SignatureCheck), so a mismatch raises on every rank before NCCL sees it."""

from __future__ import annotations

from collections.abc import Callable

from flame.errors import FlameError
from flame.runtime.communicator import SignatureCheck, address


def _nccl():
    from cupy.cuda import nccl

    if not getattr(nccl, "available", True) or not hasattr(nccl, "NcclCommunicator"):
        raise FlameError(
            "NCCL is not available to CuPy: install the NCCL runtime (pip install -e '.[distributed]', "
            "or nvidia-nccl-cu12 / -cu13 for the CUDA version of your CuPy)"
        )
    return nccl


def unique_id() -> bytes:
    """A fresh NCCL unique id (rank 0 makes it), as bytes for the store."""
    return bytes(x & 0xFF for x in _nccl().get_unique_id())


def _as_id(raw: bytes) -> tuple[int, ...]:
    return tuple(b - 256 if b > 127 else b for b in raw)  # CuPy takes the id as signed chars


_DTYPES = {
    "float32": "NCCL_FLOAT32",
    "float16": "NCCL_FLOAT16",
    "bfloat16": "NCCL_BFLOAT16",
    "float64": "NCCL_FLOAT64",
    "int32": "NCCL_INT32",
    "int64": "NCCL_INT64",
    "uint8": "NCCL_UINT8",
    "int8": "NCCL_INT8",
}
_OPS = {"sum": "NCCL_SUM", "avg": "NCCL_AVG", "max": "NCCL_MAX", "min": "NCCL_MIN", "product": "NCCL_PROD"}


class NcclCommunicator:
    """rank `rank` of `world_size` on the current CuPy device, joined through the id made by rank 0.
    exchange(what, mine) -> every rank's bytes: the host-side exchange (the process group's store)
    the signature check goes through."""

    def __init__(self, world_size: int, rank: int, uid: bytes, exchange: Callable[[str, bytes], list[bytes]]):
        nccl = _nccl()
        self.rank, self.world_size = rank, world_size
        self._nccl = nccl
        self._signatures = SignatureCheck(rank, exchange)
        self._comm = nccl.NcclCommunicator(world_size, _as_id(uid), rank)

    def check(self, signature: str, loc: str | None) -> None:
        """Raise CollectiveMismatchError on every rank unless all issue this collective (module docstring)."""
        self._signatures(signature, loc)

    def _type(self, a) -> int:
        name = _DTYPES.get(a.dtype.name)
        if name is None:
            raise FlameError(f"NCCL has no type for {a.dtype}")
        return getattr(self._nccl, name)

    def _op(self, op: str) -> int:
        return getattr(self._nccl, _OPS[op])

    @staticmethod
    def _ptr(stream) -> int:
        import cupy

        return (stream or cupy.cuda.get_current_stream()).ptr

    def all_reduce(self, buf, op: str, stream) -> None:
        p = address(buf)
        self._comm.allReduce(p, p, buf.size, self._type(buf), self._op(op), self._ptr(stream))

    def broadcast(self, buf, root: int, stream) -> None:
        p = address(buf)
        self._comm.broadcast(p, p, buf.size, self._type(buf), root, self._ptr(stream))

    def all_gather(self, buf, stream) -> None:
        part = buf.size // self.world_size
        send = address(buf) + self.rank * part * buf.itemsize  # in place: this rank's part of buf
        self._comm.allGather(send, address(buf), part, self._type(buf), self._ptr(stream))

    def reduce_scatter(self, send, recv, op: str, stream) -> None:
        self._comm.reduceScatter(
            address(send), address(recv), recv.size, self._type(recv), self._op(op), self._ptr(stream)
        )

    def barrier(self) -> None:
        """An all-reduce of one element, waited for on the host."""
        import cupy

        one = cupy.zeros(1, cupy.float32)
        self.all_reduce(one, "sum", cupy.cuda.get_current_stream())
        cupy.cuda.get_current_stream().synchronize()

    def abort(self) -> None:
        """Abort every outstanding NCCL operation of this communicator (a peer failed)."""
        self._comm.abort()

    def destroy(self) -> None:
        self._comm.destroy()
