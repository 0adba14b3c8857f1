"""flame's FLAME_* environment settings, read through one reader per kind of value. A value a reader
cannot take raises flame.ArgumentError naming the variable, what it accepts and what it holds;
unset or empty means the default."""

from __future__ import annotations

import os
from collections.abc import Mapping

from flame.errors import ArgumentError

_FLAGS = {"0": False, "1": True, "false": False, "true": True, "no": False, "yes": True, "off": False, "on": True}


def _raw(name: str) -> str:
    return os.environ.get(name, "").strip()


def env_flag(name: str, default: bool) -> bool:
    """An on/off variable: 1 / true / yes / on, or 0 / false / no / off (any case)."""
    text = _raw(name)
    if not text:
        return default
    value = _FLAGS.get(text.lower())
    if value is None:
        raise ArgumentError(f"environment variable {name}={os.environ[name]!r}: expected 1 (on) or 0 (off)")
    return value


def env_int(name: str, default: int, minimum: int | None = None) -> int:
    """An integer variable, at least `minimum` when given."""
    text = _raw(name)
    if not text:
        return default
    try:
        value = int(text, 10)
    except ValueError:
        value = None
    if value is None or (minimum is not None and value < minimum):
        what = "an integer" if minimum is None else f"an integer >= {minimum}"
        raise ArgumentError(f"environment variable {name}={os.environ[name]!r}: expected {what}")
    return value


def env_choice(name: str, choices: Mapping[str, object] | tuple[str, ...], default: object) -> object:
    """A variable holding one of `choices` (a tuple of names, or a mapping of names to what each
    means, which is returned)."""
    text = _raw(name)
    if not text:
        return default
    if text not in choices:
        raise ArgumentError(f"environment variable {name}={os.environ[name]!r}: expected one of {', '.join(choices)}")
    return choices[text] if isinstance(choices, Mapping) else text
