"""A small key-value store over TCP (standard-library sockets), the rendezvous of a process group:
rank 0 (or flame's launcher) serves it on MASTER_ADDR:port, every rank connects as a client. It
carries the NCCL unique id, barriers, the reference executor's collectives between processes
(store_comm.py) and the abort message of a failing rank. The same code serves ranks on several hosts.

Wire format, both ways: a request is `command (1 byte) | key length (u32) | key | value length (u64)
| value`; a reply is `status (1 byte) | length (u64) | payload`. Commands: SET, GET (waits until the
key exists, value: the timeout in ms as u64), ADD (value: an i64 delta; the key holds a decimal
counter; replies the new count), WAIT (waits until the counter `key` reaches the i64 in value[:8];
value[8:]: the timeout), DELETE and ABORT (value: a message; every wait, now and later, then fails
with it, and GET of ABORT_KEY returns it)."""

from __future__ import annotations

import socket
import socketserver
import struct
import threading
import time

from flame.runtime.communicator import DistributedError

SET, GET, ADD, WAIT, DELETE, ABORT = range(6)
OK, TIMEOUT, ABORTED = range(3)
ABORT_KEY = "flame/abort"
FOREVER = (1 << 63) - 1  # a timeout in ms meaning "no timeout"
_REQ = struct.Struct("<BI")
_LEN = struct.Struct("<Q")
_REPLY = struct.Struct("<BQ")


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise ConnectionError("connection closed")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


class _State:
    def __init__(self):
        self.data: dict[str, bytes] = {}
        self.cond = threading.Condition()
        self.aborted: str | None = None

    def wait_for(self, key: str, ready, timeout_ms: int) -> tuple[int, bytes]:
        """Block until ready() (under the lock), an abort, or the timeout."""
        deadline = None if timeout_ms >= FOREVER else time.monotonic() + timeout_ms / 1000
        with self.cond:
            while True:
                if ready():  # what is there already is returned even after an abort
                    return OK, self.data.get(key, b"")
                if self.aborted is not None:
                    return ABORTED, self.aborted.encode()
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return TIMEOUT, b""
                self.cond.wait(left)

    def handle(self, cmd: int, key: str, value: bytes) -> tuple[int, bytes]:
        if cmd == SET:
            with self.cond:
                self.data[key] = value
                self.cond.notify_all()
            return OK, b""
        if cmd == GET:
            (ms,) = _LEN.unpack(value)
            return self.wait_for(key, lambda: key in self.data, ms)
        if cmd == ADD:
            with self.cond:
                n = int(self.data.get(key, b"0")) + struct.unpack("<q", value)[0]
                self.data[key] = str(n).encode()
                self.cond.notify_all()
            return OK, struct.pack("<q", n)
        if cmd == WAIT:
            (want,), (ms,) = struct.unpack("<q", value[:8]), _LEN.unpack(value[8:])
            return self.wait_for(key, lambda: int(self.data.get(key, b"0")) >= want, ms)
        if cmd == DELETE:
            with self.cond:
                self.data.pop(key, None)
            return OK, b""
        if cmd == ABORT:
            with self.cond:
                if self.aborted is None:
                    self.aborted = value.decode(errors="replace")
                    self.data[ABORT_KEY] = value
                self.cond.notify_all()
            return OK, b""
        return ABORTED, f"unknown store command {cmd}".encode()


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        sock, state = self.request, self.server.state
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                cmd, klen = _REQ.unpack(_recv_exact(sock, _REQ.size))
                key = _recv_exact(sock, klen).decode()
                (vlen,) = _LEN.unpack(_recv_exact(sock, _LEN.size))
                status, payload = state.handle(cmd, key, _recv_exact(sock, vlen))
                sock.sendall(_REPLY.pack(status, len(payload)) + payload)
        except (ConnectionError, OSError):
            return


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class StoreServer:
    """Serves the store on (host, port) from a daemon thread; port 0 picks a free port (`.port`)."""

    def __init__(self, host: str = "0.0.0.0", port: int = 0):
        try:
            self._server = _Server((host, port), _Handler)
        except OSError as e:
            raise DistributedError(f"cannot serve the process group's store on {host}:{port}: {e} (set "
                                   f"MASTER_PORT, or FLAME_STORE_PORT, to a free port)") from None
        self._server.state = _State()
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="flame-store", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class StoreClient:
    """One connection to the store. Calls are serialised (one request at a time per client); waits
    raise DistributedError on timeout, on an abort posted by any rank, or when the store goes away."""

    def __init__(self, host: str, port: int, timeout: float = 300.0, connect_timeout: float | None = None):
        self.host, self.port, self.timeout = host, port, float(timeout)
        self._lock = threading.Lock()
        deadline = time.monotonic() + (self.timeout if connect_timeout is None else connect_timeout)
        while True:
            try:
                self._sock = socket.create_connection((host, port), timeout=5.0)
                break
            except OSError as e:
                if time.monotonic() >= deadline:
                    raise DistributedError(f"cannot reach the process group's store at {host}:{port}: {e} "
                                           f"(is rank 0 running, and MASTER_ADDR/MASTER_PORT the same on "
                                           f"every rank?)") from None
                time.sleep(0.05)
        self._sock.settimeout(None)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _call(self, cmd: int, key: str, value: bytes = b"", what: str = "", timeout: float | None = None) -> bytes:
        k = key.encode()
        with self._lock:
            try:
                self._sock.sendall(_REQ.pack(cmd, len(k)) + k + _LEN.pack(len(value)) + value)
                status, n = _REPLY.unpack(_recv_exact(self._sock, _REPLY.size))
                payload = _recv_exact(self._sock, n)
            except (ConnectionError, OSError) as e:
                raise DistributedError(f"lost the connection to the process group's store at "
                                       f"{self.host}:{self.port} ({e}): rank 0 or the launcher has exited") from None
        if status == ABORTED:
            raise DistributedError(f"the process group was aborted: {payload.decode(errors='replace')}")
        if status == TIMEOUT:
            t = self.timeout if timeout is None else timeout
            raise DistributedError(f"timed out after {t:g} s waiting for {what or repr(key)} (a rank "
                                   f"has stopped or is far behind; FLAME_DIST_TIMEOUT sets the limit)")
        return payload

    def _ms(self, timeout: float | None) -> bytes:
        t = self.timeout if timeout is None else timeout
        return _LEN.pack(FOREVER if t == float("inf") else int(t * 1000))

    def set(self, key: str, value: bytes) -> None:
        self._call(SET, key, bytes(value))

    def get(self, key: str, timeout: float | None = None, what: str = "") -> bytes:
        """The value of key, waiting until some rank sets it."""
        return self._call(GET, key, self._ms(timeout), what, timeout)

    def add(self, key: str, delta: int = 1) -> int:
        return struct.unpack("<q", self._call(ADD, key, struct.pack("<q", delta)))[0]

    def wait(self, key: str, count: int, timeout: float | None = None, what: str = "") -> None:
        """Wait until the counter `key` (see add) reaches count."""
        self._call(WAIT, key, struct.pack("<q", count) + self._ms(timeout), what, timeout)

    def delete(self, key: str) -> None:
        self._call(DELETE, key)

    def abort(self, message: str) -> None:
        """Make every wait of every rank fail with `message` (the first abort's message wins)."""
        self._call(ABORT, "", message.encode())

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass
