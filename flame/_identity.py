"""A map keyed by the identity of live objects, for keys that cannot be dict keys themselves (a Tensor's
== is elementwise, so it has no hash): an entry leaves when its object is collected, and a new object
that reuses a collected one's id() never sees the old entry."""

from __future__ import annotations

import weakref
from typing import Any


class ByIdentity:
    """obj -> value by `obj is key`, holding obj weakly (its entry goes when it is collected)."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref, Any]] = {}

    def __setitem__(self, obj: Any, value: Any) -> None:
        key, entries = id(obj), self._entries
        entries[key] = (weakref.ref(obj, lambda _, k=key: entries.pop(k, None)), value)

    def get(self, obj: Any, default: Any = None) -> Any:
        got = self._entries.get(id(obj))
        return got[1] if got is not None and got[0]() is obj else default

    def __contains__(self, obj: Any) -> bool:
        got = self._entries.get(id(obj))
        return got is not None and got[0]() is obj
