"""A small key-value store over TCP (standard-library sockets), the rendezvous of a process group:
rank 0 (or flame's launcher) serves it on MASTER_ADDR:port, every rank connects as a client. It
carries the NCCL unique id, barriers, the reference executor's collectives between processes
(store_comm.py) and the abort message of a failing rank. The same code serves ranks on several hosts.
The store listens on the rendezvous address only, and every connection starts with the handshake of
auth.py: with the job's secret, only a client that proves it knows the secret may send a command.

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

from flame.distributed import auth
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
        sock, server = self.request, self.server
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.settimeout(server.handshake_timeout)  # a client that never answers is dropped
            if not auth.accept(sock, server.secret):
                return
            sock.settimeout(None)  # a rank may compute for long between two calls
            while True:
                cmd, klen = _REQ.unpack(_recv_exact(sock, _REQ.size))
                key = _recv_exact(sock, klen).decode()
                (vlen,) = _LEN.unpack(_recv_exact(sock, _LEN.size))
                status, payload = server.state.handle(cmd, key, _recv_exact(sock, vlen))
                sock.sendall(_REPLY.pack(status, len(payload)) + payload)
        except (ConnectionError, OSError, UnicodeDecodeError):
            return


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class StoreServer:
    """Serves the store on (host, port) from a daemon thread: listening on host's address only (the
    rendezvous address; "0.0.0.0" for every interface), port 0 picks a free port (`.port`). With a
    secret (auth.py) only clients that prove they know it may send commands; a client gets
    `handshake_timeout` seconds to do so."""

    def __init__(self, host: str, port: int = 0, secret: bytes | None = None, handshake_timeout: float = 30.0):
        try:
            family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
            self._server = (_Server6 if family == socket.AF_INET6 else _Server)((host, port), _Handler)
        except OSError as e:
            raise DistributedError(
                f"cannot serve the process group's store on {host}:{port}: {e} (set "
                f"MASTER_PORT, or FLAME_STORE_PORT, to a free port; MASTER_ADDR, or "
                f"FLAME_STORE_BIND, to an address of this host)"
            ) from None
        self._server.state = _State()
        self._server.secret = secret
        self._server.handshake_timeout = handshake_timeout
        self.address = self._server.server_address[0]
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="flame-store", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()


class StoreTimeout(DistributedError):
    """A wait in the store ran out of time (the store answered: the awaited rank did not post)."""


_MARGIN = 1.0  # seconds a client waits for a reply beyond the store's own timeout of the same wait
_NAMES = {SET: "posting", ADD: "counting", DELETE: "deleting", ABORT: "aborting"}


class StoreClient:
    """One connection to the store. Calls are serialised (one request at a time per client). Every
    call is bounded: connecting within `connect_timeout` (default: `timeout`), a wait within its
    timeout (the store answers TIMEOUT: StoreTimeout), and any reply within the wait plus a second
    (or `timeout` for a call that does not wait): a store that accepted the connection but does not
    answer (its process stopped) raises instead of hanging. Errors name `rank` and what was waited for;
    they are DistributedError (an abort posted by any rank, a lost connection, no answer)."""

    def __init__(
        self,
        host: str,
        port: int,
        timeout: float = 300.0,
        connect_timeout: float | None = None,
        rank: int | None = None,
        secret: bytes | None = None,
    ):
        self.host, self.port, self.timeout, self.rank = host, port, float(timeout), rank
        self._lock = threading.Lock()
        self._broken: str | None = None
        deadline = time.monotonic() + (self.timeout if connect_timeout is None else connect_timeout)
        while True:
            try:
                left = max(0.1, min(5.0, deadline - time.monotonic()))
                self._sock = socket.create_connection((host, port), timeout=left)
                break
            except OSError as e:
                if time.monotonic() >= deadline:
                    raise DistributedError(
                        f"{self._who()}cannot reach the process group's store at {host}:{port}: "
                        f"{e} (is rank 0 running, and MASTER_ADDR/MASTER_PORT the same on "
                        f"every rank?)"
                    ) from None
                time.sleep(0.05)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._handshake(secret)

    def _handshake(self, secret: bytes | None) -> None:
        """auth.connect within the timeout; on any failure the connection is closed."""
        where = f"{self.host}:{self.port}"
        try:
            self._sock.settimeout(self.timeout)
            auth.connect(self._sock, secret, where)
        except TimeoutError:
            self.close()
            raise DistributedError(
                f"{self._who()}the process group's store at {where} did not answer within "
                f"{self.timeout:g} s while connecting: the process serving it (rank 0, or flame's "
                f"launcher) is stopped or unreachable"
            ) from None
        except (ConnectionError, OSError) as e:
            self.close()
            raise DistributedError(
                f"{self._who()}lost the connection to the process group's store at {where} while connecting ({e})"
            ) from None
        except DistributedError as e:
            self.close()
            raise DistributedError(f"{self._who()}{e}") from None

    def _who(self) -> str:
        return "" if self.rank is None else f"rank {self.rank}: "

    def _fail(self, why: str) -> DistributedError:
        """Drop the connection (a reply may still be on its way) and say why every later call fails."""
        self._broken = why
        self.close()
        return DistributedError(f"{self._who()}{why}")

    def _call(self, cmd: int, key: str, value: bytes = b"", what: str = "", wait: float | None = None) -> bytes:
        """Send one request and read its reply. wait: how long the store itself waits (None: the
        command does not wait)."""
        k = key.encode()
        if cmd in (GET, WAIT):
            doing = f"waiting for {what or repr(key)}"
        else:
            doing = what or f"{_NAMES.get(cmd, cmd)} {key!r}"
        limit = self.timeout if wait is None else None if wait == float("inf") else wait + _MARGIN
        with self._lock:
            if self._broken is not None:
                raise DistributedError(f"{self._who()}{doing}: the store's connection failed earlier: {self._broken}")
            try:
                self._sock.settimeout(limit)
                self._sock.sendall(_REQ.pack(cmd, len(k)) + k + _LEN.pack(len(value)) + value)
                status, n = _REPLY.unpack(_recv_exact(self._sock, _REPLY.size))
                payload = _recv_exact(self._sock, n)
            except TimeoutError:
                raise self._fail(
                    f"the process group's store at {self.host}:{self.port} did not answer within "
                    f"{limit:g} s while {doing}: the process serving it (rank 0, or flame's launcher) "
                    f"is stopped or unreachable (FLAME_DIST_TIMEOUT sets the limit)"
                ) from None
            except (ConnectionError, OSError) as e:
                raise self._fail(
                    f"lost the connection to the process group's store at {self.host}:{self.port} "
                    f"({e}) while {doing}: rank 0 or the launcher has exited"
                ) from None
        if status == ABORTED:
            raise DistributedError(f"{self._who()}the process group was aborted: {payload.decode(errors='replace')}")
        if status == TIMEOUT:
            raise StoreTimeout(
                f"{self._who()}timed out after {wait:g} s {doing} (a rank has stopped or is far "
                f"behind; FLAME_DIST_TIMEOUT sets the limit)"
            )
        return payload

    def _ms(self, timeout: float) -> bytes:
        return _LEN.pack(FOREVER if timeout == float("inf") else int(timeout * 1000))

    def set(self, key: str, value: bytes, what: str = "") -> None:
        """Store value under key (what: the operation, for errors)."""
        self._call(SET, key, bytes(value), what)

    def get(self, key: str, timeout: float | None = None, what: str = "") -> bytes:
        """The value of key, waiting (at most timeout, default the client's) until some rank sets it."""
        t = self.timeout if timeout is None else timeout
        return self._call(GET, key, self._ms(t), what, t)

    def add(self, key: str, delta: int = 1, what: str = "") -> int:
        """Add delta to the counter key; returns the new count."""
        return struct.unpack("<q", self._call(ADD, key, struct.pack("<q", delta), what))[0]

    def wait(self, key: str, count: int, timeout: float | None = None, what: str = "") -> None:
        """Wait until the counter `key` (see add) reaches count."""
        t = self.timeout if timeout is None else timeout
        self._call(WAIT, key, struct.pack("<q", count) + self._ms(t), what, t)

    def delete(self, key: str) -> None:
        """Remove key."""
        self._call(DELETE, key)

    def abort(self, message: str) -> None:
        """Make every wait of every rank fail with `message` (the first abort's message wins)."""
        self._call(ABORT, "", message.encode(), "posting an abort")

    def close(self) -> None:
        """Close the connection."""
        try:
            self._sock.close()
        except OSError:
            pass
