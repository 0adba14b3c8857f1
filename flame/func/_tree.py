"""The pytrees of flame.func, as torch's: tuples, lists, dicts (and OrderedDicts) and namedtuples are nodes;
anything else (a Tensor, a number, None) is a leaf."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Spec:
    """The structure of a pytree: a node's type, its context (a dict's keys, a namedtuple's class) and
    children; a leaf is Spec(None)."""

    __slots__ = ("kind", "context", "children", "num_leaves")

    def __init__(self, kind=None, context=None, children: tuple = ()):
        self.kind, self.context, self.children = kind, context, children
        self.num_leaves = 1 if kind is None else sum(c.num_leaves for c in children)

    def is_leaf(self) -> bool:
        return self.kind is None

    def __eq__(self, other) -> bool:
        return (isinstance(other, Spec) and self.kind == other.kind and self.context == other.context
                and self.children == other.children)

    def __repr__(self) -> str:
        if self.kind is None:
            return "*"
        inner = ", ".join(map(repr, self.children))
        if self.kind is dict:
            inner = ", ".join(f"{k!r}: {c!r}" for k, c in zip(self.context, self.children))
            return "{" + inner + "}"
        if self.kind is list:
            return f"[{inner}]"
        return f"({inner}{',' if len(self.children) == 1 else ''})"


def _node(x):
    """(kind, context, children) of a node, None for a leaf."""
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return "namedtuple", type(x), tuple(x)
    if isinstance(x, (tuple, list)):
        return type(x) if type(x) in (tuple, list) else (tuple if isinstance(x, tuple) else list), None, tuple(x)
    if isinstance(x, dict):
        keys = tuple(x)
        return dict, (type(x), keys), tuple(x[k] for k in keys)
    return None


def tree_flatten(tree) -> tuple[list, Spec]:
    leaves: list = []

    def go(x) -> Spec:
        node = _node(x)
        if node is None:
            leaves.append(x)
            return Spec()
        kind, context, children = node
        return Spec(kind, context, tuple(go(c) for c in children))

    spec = go(tree)
    return leaves, spec


def tree_unflatten(leaves, spec: Spec):
    it = iter(leaves)

    def go(s: Spec):
        if s.kind is None:
            return next(it)
        children = [go(c) for c in s.children]
        if s.kind == "namedtuple":
            return s.context(*children)
        if s.kind is dict:
            cls, keys = s.context
            return cls(zip(keys, children))
        return s.kind(children)

    return go(spec)


def tree_map(fn: Callable, tree) -> Any:
    leaves, spec = tree_flatten(tree)
    return tree_unflatten([fn(x) for x in leaves], spec)


def broadcast_to_and_flatten(prefix, spec: Spec) -> list | None:
    """The leaves of `prefix` (a tree whose leaves stand for whole subtrees of `spec`), one per leaf of
    spec; None when prefix is not a prefix of spec's structure (torch's _broadcast_to_and_flatten)."""
    out: list = []

    def go(p, s: Spec) -> bool:
        node = _node(p)
        if node is None:
            out.extend([p] * s.num_leaves)
            return True
        kind, context, children = node
        if s.kind is None or kind != s.kind or len(children) != len(s.children):
            return False
        if kind is dict:
            if set(context[1]) != set(s.context[1]):
                return False
            children = tuple(p[k] for k in s.context[1])
        return all(go(c, cs) for c, cs in zip(children, s.children))

    return out if go(prefix, spec) else None
