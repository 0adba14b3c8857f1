"""passes/_min_cut.sink_side: the sink side of the minimum cut closest to the sink, the very set
networkx.minimum_cut returns (the remat pass's choice must not depend on the algorithm)."""

import random

import networkx as nx
import pytest

from flame.passes._min_cut import sink_side


def _networkx(edges, s, t):
    net = nx.DiGraph()
    net.add_nodes_from((s, t))
    for u, v, c in edges:
        net.add_edge(u, v, **({} if c is None else {"capacity": c}))
    return nx.minimum_cut(net, s, t)[1][1]


def _random_network(rng: random.Random) -> list[tuple]:
    n = rng.randint(2, 14)
    caps = {}
    for _ in range(rng.randint(1, 40)):
        u, v = rng.randrange(n), rng.randrange(n)
        if u != v:
            caps[(u, v)] = None if rng.random() < 0.25 else rng.choice([0, 1, 1, 2, 3, 5, 8, 100])
    for _ in range(rng.randint(1, 4)):
        caps[("s", rng.randrange(n))] = None if rng.random() < 0.5 else rng.randint(0, 9)
        caps[(rng.randrange(n), "t")] = None if rng.random() < 0.5 else rng.randint(0, 9)
    return [(u, v, c) for (u, v), c in caps.items()]


def test_matches_networkx_on_random_networks():
    rng = random.Random(0)
    compared = 0
    for _ in range(800):
        edges = _random_network(rng)
        try:
            expected = _networkx(edges, "s", "t")
        except nx.NetworkXUnbounded:
            with pytest.raises(ValueError):
                sink_side(edges, "s", "t")
            continue
        assert sink_side(edges, "s", "t") == expected, edges
        compared += 1
    assert compared > 500


def test_ties_take_the_cut_closest_to_the_sink():
    # s -> a -> b -> t, every edge of capacity 1: three minimum cuts; the last edge is the one cut
    edges = [("s", "a", 1), ("a", "b", 1), ("b", "t", 1)]
    assert sink_side(edges, "s", "t") == {"t"}


def test_unlimited_edges_are_never_cut():
    edges = [("s", "a", None), ("a", "b", 5), ("a", "c", 2), ("c", "b", None), ("b", "t", None)]
    assert sink_side(edges, "s", "t") == {"b", "c", "t"}  # a -> b and a -> c are cut (7)
    with pytest.raises(ValueError):
        sink_side([("s", "a", None), ("a", "t", None)], "s", "t")
