"""Arena placement (flame.plan.memory.place): best fit in more than one order, the smallest arena kept;
never below the most bytes live at one step, and no two blocks live at one step overlap. The memory
report counts an output written in place of an input once."""

import numpy as np

from flame.ir import dtype_of
from flame.plan.memory import _most_live, _slot_bytes, place
from flame.plan.steps import Buffer

U8 = dtype_of("u8")


def _placed(blocks):
    """(block sizes, first and last steps) -> the buffers place() gives them, and the arena size."""
    buffers = {i: Buffer(i, n, U8, (n,), "temporary") for i, (n, _, _) in enumerate(blocks)}
    return place(buffers, [((i,), lo, hi) for i, (_, lo, hi) in enumerate(blocks)])


def _overlaps(buffers, blocks) -> bool:
    for i, (n, lo, hi) in enumerate(blocks):
        for j, (m, lo2, hi2) in enumerate(blocks[:i]):
            a, b = buffers[i].offset, buffers[j].offset
            if lo <= hi2 and lo2 <= hi and a < b + m and b < a + n:
                return True
    return False


def test_a_placement_largest_first_misses_is_found_in_another_order():
    # largest first puts the two 1024-byte blocks at 0 and the 768 on top of them: 2304 bytes; placed
    # longest-lived first, the 768 goes under both and the arena is the 1792 live at step 0
    blocks = [(768, 1, 4), (1024, 0, 0), (512, 0, 1), (1024, 3, 4)]
    buffers, size = _placed(blocks)
    assert size == _most_live([(n, lo, hi, (i,)) for i, (n, lo, hi) in enumerate(blocks)]) == 1792
    assert not _overlaps(buffers, blocks)


def test_random_placements_never_overlap_nor_beat_the_bound():
    rng = np.random.default_rng(0)
    for _ in range(200):
        blocks = []
        for _ in range(int(rng.integers(1, 12))):
            lo = int(rng.integers(0, 8))
            blocks.append((int(rng.integers(1, 9)) * 256, lo, lo + int(rng.integers(0, 6))))
        buffers, size = _placed(blocks)
        bound = _most_live([(n, lo, hi, (i,)) for i, (n, lo, hi) in enumerate(blocks)])
        assert not _overlaps(buffers, blocks) and size >= bound
        assert size == max(buffers[i].offset + n for i, (n, _, _) in enumerate(blocks))


def test_the_report_counts_an_in_place_output_once():
    from tests.plan.gelu_mlp import gelu_mlp_step

    step, x = gelu_mlp_step()
    report = step.memory_report(x)
    assert report.live_bytes <= report.arena  # counted twice, a step held more than the arena
    born, dead = Buffer(1, 4096, U8, (4096,), "temporary", 0), Buffer(2, 4096, U8, (4096,), "temporary", 0)
    assert _slot_bytes([born, dead, Buffer(3, 100, U8, (100,), "temporary", 4096)]) == 4096 + 256


def _best_fit_by_scan(sized):
    """Best fit stated directly: each block into the smallest gap between the placed blocks live with
    it (walked in offset order), or on top of them."""
    placed, offsets, size = [], [], 0
    for block in sized:
        need, lo, hi, _ = block
        at, best = 0, None
        for o, e in sorted((o, e) for o, e, f, la in placed if f <= hi and lo <= la):
            if o - at >= need and (best is None or o - at < best[0]):
                best = (o - at, at)
            at = max(at, e)
        offset = best[1] if best is not None else at
        placed.append((offset, offset + need, lo, hi))
        offsets.append((offset, block))
        size = max(size, offset + need)
    return offsets, size


def test_best_fit_places_as_the_scan_does():
    import random

    from flame.plan.memory import _best_fit

    rng = random.Random(7)
    for _ in range(200):
        sized = []
        for i in range(rng.randint(0, 48)):
            lo = rng.randint(0, 40)
            need = rng.choice([256, 512, 4096, 1 << 33]) * rng.randint(1, 4)  # past 2**32 too
            sized.append((need, lo, lo + rng.randint(0, 16), (i,)))
        assert _best_fit(sized) == _best_fit_by_scan(sized)
