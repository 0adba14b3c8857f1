"""exact_memo: a repeat on the same bits returns the same result without evaluating again; any other
bits (a -0.0 for a 0.0, another scalar argument, another dtype) evaluate; a returned result is the
caller's to write into."""

import numpy as np

from flame.ir.memo import exact_memo


def _counted():
    calls = []

    @exact_memo
    def f(x, scale=1.0):
        calls.append(1)
        return np.sign(x) * x * scale + np.copysign(1.0, x)

    return f, calls


def test_repeat_on_the_same_bits_is_not_evaluated_again():
    f, calls = _counted()
    x = np.linspace(-1, 1, 1001).astype(np.float32)
    first = f(x)
    again = f(x.copy())
    assert len(calls) == 1 and np.array_equal(first, again) and again.dtype == np.float32
    again[:] = 7  # the caller's copy: the kept result is unchanged
    assert np.array_equal(f(x), first) and len(calls) == 1


def test_different_bits_or_arguments_evaluate():
    f, calls = _counted()
    x = np.zeros(64, np.float32)
    plus = f(x)
    minus = f(-x)  # -0.0 equals 0.0 but is other bits: copysign tells them apart
    assert len(calls) == 2 and plus[0] == 1.0 and minus[0] == -1.0
    f(x, scale=2.0)
    f(x.astype(np.float64))
    y = x.copy()
    y[17] = 1.0  # differs in an element the lookup key does not sample
    f(y)
    assert len(calls) == 5


def test_a_strided_view_is_compared_by_its_elements():
    f, calls = _counted()
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    view = base[:, ::2]
    assert np.array_equal(f(view), f(np.ascontiguousarray(view))) and len(calls) == 1


def test_kept_bytes_stay_within_the_budget(monkeypatch):
    import flame.ir.memo as memo

    monkeypatch.setattr(memo, "MAX_BYTES", 3 * 2 * 4096)  # three entries of a 4 KiB input and result
    f, calls = _counted()
    xs = [np.full(1024, i, np.float32) for i in range(5)]
    for x in xs:
        f(x)
    f(xs[4])
    f(xs[0])  # the oldest was dropped
    assert len(calls) == 6


def test_a_tuple_of_results_comes_back_copied():
    calls = []

    @exact_memo
    def parts(x):
        calls.append(1)
        return x.max(-1, keepdims=True), np.exp(x)

    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    first = parts(x)
    again = parts(x.copy())
    assert len(calls) == 1 and isinstance(again, tuple)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    again[1][:] = 0  # the caller's copy
    assert np.array_equal(parts(x)[1], np.exp(x))
