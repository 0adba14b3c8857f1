"""Who may talk to the process group's store: the job's secret and the handshake that proves it.

The secret is FLAME_DIST_SECRET, the same on every rank: flame's launcher makes a random one per job
(or passes on the caller's) in each rank's environment; under torchrun the user sets it before
starting torchrun. Without it the store accepts any client that reaches its port (the store then
says so on rank 0: see SECURITY.md).

The handshake, at the start of every connection, before any command:
  store -> client: HELLO | mode (0: open, 1: secret) [| nonce_s (32 random bytes)]
  client -> store: nonce_c (32 random bytes) | HMAC-SHA256(secret, "client" | nonce_s | nonce_c)
  store -> client: 1 | HMAC-SHA256(secret, "store" | nonce_s | nonce_c), or 0 and the store hangs up
Both sides check with hmac.compare_digest, so a client proves it knows the secret without sending
it, and the store proves the same to the client (a process that took the port first cannot pose as
the job's store). A store with a secret reads nothing but the 64 bytes of the answer from a client
that has not proved itself, within a bounded time."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import socket

from flame.runtime.communicator import DistributedError

SECRET_VAR = "FLAME_DIST_SECRET"
HELLO = b"flame.distributed store 1\n"
_NONCE = 32
_MAC = hashlib.sha256().digest_size


def job_secret() -> bytes | None:
    """The job's secret from FLAME_DIST_SECRET (None when unset)."""
    raw = os.environ.get(SECRET_VAR)
    if raw is None:
        return None
    if not raw:
        raise DistributedError(
            f"{SECRET_VAR} is set but empty: set it to the same random value for every rank "
            f"(`export {SECRET_VAR}=$(python3 -c 'import secrets; print(secrets.token_hex(32))')`), "
            f"or unset it"
        )
    return raw.encode()


def new_secret() -> str:
    """A fresh random secret for one job."""
    return secrets.token_hex(32)


def _mac(secret: bytes, who: bytes, nonce_s: bytes, nonce_c: bytes) -> bytes:
    return hmac.new(secret, who + nonce_s + nonce_c, hashlib.sha256).digest()


def _read(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(n - got)
        if not chunk:
            raise ConnectionError("connection closed")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def accept(sock: socket.socket, secret: bytes | None) -> bool:
    """The store's side of the handshake: True when the client may send commands."""
    if secret is None:
        sock.sendall(HELLO + b"\x00")
        return True
    nonce_s = secrets.token_bytes(_NONCE)
    sock.sendall(HELLO + b"\x01" + nonce_s)
    answer = _read(sock, _NONCE + _MAC)
    nonce_c, mac = answer[:_NONCE], answer[_NONCE:]
    if not hmac.compare_digest(mac, _mac(secret, b"client", nonce_s, nonce_c)):
        sock.sendall(b"\x00")
        return False
    sock.sendall(b"\x01" + _mac(secret, b"store", nonce_s, nonce_c))
    return True


def connect(sock: socket.socket, secret: bytes | None, where: str) -> None:
    """The client's side of the handshake; raises DistributedError (where: "host:port") unless both
    sides agree (socket errors and timeouts propagate to the caller)."""
    hello = _read(sock, len(HELLO) + 1)
    if hello[:-1] != HELLO:
        raise DistributedError(
            f"{where} is not a flame process group's store (another program listens on that "
            f"port: check MASTER_PORT and FLAME_STORE_PORT)"
        )
    if hello[-1] == 0:
        if secret is not None:
            raise DistributedError(
                f"the store at {where} does not authenticate its clients but this process has "
                f"{SECRET_VAR}: refusing to use it (is it another job's store?)"
            )
        return
    if secret is None:
        raise DistributedError(
            f"the store at {where} requires the job's secret: set {SECRET_VAR} to the value the other ranks have"
        )
    nonce_s, nonce_c = _read(sock, _NONCE), secrets.token_bytes(_NONCE)
    sock.sendall(nonce_c + _mac(secret, b"client", nonce_s, nonce_c))
    try:
        verdict = _read(sock, 1)
    except ConnectionError:
        verdict = b"\x00"
    if verdict != b"\x01":
        raise DistributedError(f"the store at {where} refused this process: its {SECRET_VAR} is not the job's")
    if not hmac.compare_digest(_read(sock, _MAC), _mac(secret, b"store", nonce_s, nonce_c)):
        raise DistributedError(
            f"the process at {where} did not prove that it knows the job's {SECRET_VAR}: it is not the job's store"
        )
