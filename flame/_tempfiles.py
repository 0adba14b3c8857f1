"""Temporary files named after the process writing them, so a cleaner can tell a dead writer's
leftovers (a save or compile killed midway) from another process's write still in flight."""

from __future__ import annotations

import os
import time

STALE_SECONDS = 24 * 3600  # this old, a temp file is a dead writer's even if its pid was reused


def pid_alive(pid: int) -> bool:
    """Whether a process with this id runs on this host (one we may not signal counts as running)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return pid > 0
    return True


def temp_prefix(prefix: str) -> str:
    """The mkstemp prefix for this process: PREFIX + PID + '.'."""
    return f"{prefix}{os.getpid()}."


def remove_dead_temps(folder: str | os.PathLike, prefix: str, suffix: str) -> int:
    """Delete files PREFIX<pid>.*SUFFIX in folder whose writer is gone (or that are older than
    STALE_SECONDS, or carry no pid); a live writer's file stays. Returns how many were removed."""
    try:
        names = [n for n in os.listdir(folder) if n.startswith(prefix) and n.endswith(suffix)]
    except OSError:
        return 0
    removed = 0
    for name in names:
        full = os.path.join(folder, name)
        pid = name[len(prefix):].split(".", 1)[0]
        try:
            if pid.isdigit() and pid_alive(int(pid)) and time.time() - os.stat(full).st_mtime < STALE_SECONDS:
                continue
            os.unlink(full)
            removed += 1
        except OSError:
            pass  # gone already, or not ours to remove
    return removed
