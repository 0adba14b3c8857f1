"""Reading the process group's settings from the environment (torchrun's RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT and flame's FLAME_DIST_TIMEOUT, FLAME_STORE_PORT): a value that
is missing, not a number or out of range is a DistributedError naming the variable and its value."""

from __future__ import annotations

import datetime
import math
import os

from flame.runtime.communicator import DistributedError

_START = (
    "start the ranks with torchrun or `python3 -m flame.distributed.run`, or set RANK, WORLD_SIZE, "
    "MASTER_ADDR and MASTER_PORT"
)


def env_int(name: str, default: int | None, low: int, high: int | None = None, what: str = "an integer") -> int:
    """Integer variable `name` in [low, high] (default when unset; required when default is None)."""
    raw = os.environ.get(name)
    if raw is None:
        if default is None:
            raise DistributedError(f"environment variable {name} is not set ({_START})")
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise DistributedError(f"{name}={raw!r} is not {what}") from None
    if value < low or (high is not None and value > high):
        bounds = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise DistributedError(f"{name}={raw!r} is out of range: {what} {bounds}")
    return value


def port(name: str, low: int = 1) -> int:
    """A TCP port from variable `name` (required)."""
    return env_int(name, None, low, 65535, "a TCP port number")


def seconds(timeout, name: str = "timeout") -> float:
    """A timeout as positive, finite seconds from a number, a timedelta or the text of a variable."""
    raw = timeout
    if isinstance(timeout, datetime.timedelta):
        timeout = timeout.total_seconds()
    try:
        value = float(timeout.strip() if isinstance(timeout, str) else timeout)
    except (TypeError, ValueError):
        raise DistributedError(f"{name}={raw!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise DistributedError(f"{name}={raw!r} must be a positive, finite number of seconds")
    return value


def master_addr() -> str:
    """MASTER_ADDR (default 127.0.0.1)."""
    host = os.environ.get("MASTER_ADDR", "127.0.0.1").strip()
    if not host:
        raise DistributedError(f"MASTER_ADDR is set but empty ({_START})")
    return host
