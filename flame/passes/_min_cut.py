"""A minimum s-t cut of a network with whole-number capacities: the remat pass's (passes/remat.py)
choice of what to keep for the backward. Dinic's maximum flow (breadth-first levels, then blocking
flows along them) on flat edge arrays, then the canonical cut: the nodes that can still reach the
sink in the residual network. That set is the same for every maximum flow, and it is the sink side
networkx.minimum_cut returns (its preflow leaves it as a maximum flow would), so the cut does not
depend on the algorithm; flat arrays cost a fraction of a graph of dicts for the joint graph of a
deep model (thousands of nodes)."""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable

Edge = tuple[Hashable, Hashable, int | None]  # (from, to, capacity); None: no limit (never cut)


def sink_side(edges: Iterable[Edge], source: Hashable, sink: Hashable) -> set[Hashable]:
    """The nodes that can reach `sink` in the residual network of a maximum flow from `source` (the
    sink side of the minimum cut closest to the sink; the sink included). Capacities are whole
    numbers of at least 0; an edge given twice has the last capacity given. ValueError when a path of
    unlimited edges joins source to sink (no finite cut exists)."""
    caps: dict[tuple[Hashable, Hashable], int | None] = {}
    for u, v, c in edges:
        caps[(u, v)] = c
    index: dict[Hashable, int] = {source: 0, sink: 1}
    for u, v in caps:
        index.setdefault(u, len(index))
        index.setdefault(v, len(index))
    unlimited = sum(c for c in caps.values() if c is not None) + 1  # more than any flow can reach
    n = len(index)
    head: list[list[int]] = [[] for _ in range(n)]  # node -> its edges' positions (forward and reverse)
    to: list[int] = []
    cap: list[int] = []  # residual capacity; edge e ^ 1 is e's reverse
    for (u, v), c in caps.items():
        a, b = index[u], index[v]
        head[a].append(len(to))
        to.append(b)
        cap.append(unlimited if c is None else c)
        head[b].append(len(to))
        to.append(a)
        cap.append(0)
    flow = 0
    while True:
        level = _levels(head, to, cap, n)
        if level[1] < 0:
            break
        nxt = [0] * n
        while True:
            pushed = _augment(head, to, cap, level, nxt, unlimited)
            if not pushed:
                break
            flow += pushed
    if flow >= unlimited:
        raise ValueError("a path of unlimited capacity joins the source to the sink")
    reaches = [False] * n  # can reach the sink through edges with residual capacity
    reaches[1] = True
    into: list[list[int]] = [[] for _ in range(n)]  # node -> the nodes with a residual edge to it
    for a in range(n):
        for e in head[a]:
            if cap[e] > 0:
                into[to[e]].append(a)
    todo = deque([1])
    while todo:
        b = todo.popleft()
        for a in into[b]:
            if not reaches[a]:
                reaches[a] = True
                todo.append(a)
    return {node for node, i in index.items() if reaches[i]}


def _levels(head: list[list[int]], to: list[int], cap: list[int], n: int) -> list[int]:
    """Each node's distance from the source (node 0) through residual edges; -1: unreachable."""
    level = [-1] * n
    level[0] = 0
    todo = deque([0])
    while todo:
        a = todo.popleft()
        for e in head[a]:
            b = to[e]
            if cap[e] > 0 and level[b] < 0:
                level[b] = level[a] + 1
                todo.append(b)
    return level


def _augment(head: list[list[int]], to: list[int], cap: list[int], level: list[int], nxt: list[int],
             unlimited: int) -> int:
    """Push flow along one path from the source (0) to the sink (1) whose every edge climbs one
    level (an iterative depth-first walk; `nxt`: each node's next edge to try, kept across walks so
    dead ends are not walked twice). Returns the flow pushed, 0 when no such path is left."""
    path: list[int] = []  # the edges walked from the source
    a = 0
    while True:
        if a == 1:
            pushed = min([cap[e] for e in path], default=unlimited)
            for e in path:
                cap[e] -= pushed
                cap[e ^ 1] += pushed
            return pushed
        edges = head[a]
        i = nxt[a]
        while i < len(edges):
            e = edges[i]
            if cap[e] > 0 and level[to[e]] == level[a] + 1:
                break
            i += 1
        nxt[a] = i
        if i < len(edges):
            path.append(edges[i])
            a = to[edges[i]]
            continue
        if not path:  # the source has no way forward left
            return 0
        level[a] = -1  # a dead end: never entered again in this phase
        e = path.pop()
        a = to[e ^ 1]
        nxt[a] += 1
