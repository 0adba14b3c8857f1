"""flame._lists: the per-call list walks in C that the executors and the frontend's replay use."""

import gc
import weakref

import numpy as np

from flame._lists import alive_same, all_same, gather


def test_gather_and_all_same():
    xs = ["a", "b", "c"]
    assert gather([2, 0])(xs) == ("c", "a") and gather([1])(xs) == ("b",) and gather([])(xs) == ()
    assert all_same(xs, list(xs)) and not all_same(xs, ["a", "b", "d"])


def test_alive_same_is_identity_through_weak_references():
    a, b = np.zeros(3), np.ones(3)
    refs = [weakref.ref(a), weakref.ref(b)]
    assert alive_same(refs, [a, b])
    assert not alive_same(refs, [a, b.copy()])  # equal contents are not the same array
    del b
    gc.collect()
    c = np.ones(3)
    assert not alive_same(refs, [a, c])  # a dead reference matches nothing
    assert not alive_same([lambda: None], [a])
