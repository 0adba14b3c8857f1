"""Source locations (an op's `loc`: the user's line) as data, and where the locations of a compiled
graph come from in the trace it was compiled from.

A pass copies an op's loc as it is or derives one from it: autodiff and remat mark it (BackwardLoc,
RecomputeLoc), a rewrite appends a note to its first line (passes/_rewrite.annotate_loc). So each loc
of a compiled graph is a trace op's loc text, perhaps with a note after its first line, of some kind:
`origins` and `origin` find which op's and what note, `derived` makes the same loc from another
trace's op at that position.

The persistent plan cache (flame.plan.serial, flame.plan.cache) relies on it to give a plan stored by
one program the lines of the program that loads it. Its key holds the trace's printed text, one line
per op in order, so the two traces have the same ops at the same positions; and their `layout`: which
ops share a line and of what kind each op's loc is, without the lines themselves. With both the same,
a loc derived from one trace's line is, derived alike from the other trace's op at that position, the
loc that trace's compile would have made."""

from __future__ import annotations

from itertools import groupby
from typing import NamedTuple

from flame.ir.graph import BackwardLoc, CheckpointLoc, Graph, RecomputeLoc

_KIND = {str: "", type(None): "", BackwardLoc: "b", RecomputeLoc: "r"}  # by type; CheckpointLoc's: "c" or "s"
_MAKE = {"b": BackwardLoc, "r": RecomputeLoc}


def kind(loc: str) -> str:
    """loc's kind as a code: "" plain, "b" backward, "r" recomputation, "c" checkpoint region, "s"
    checkpoint region whose policy saves the result."""
    if isinstance(loc, CheckpointLoc):
        return "s" if loc.saved else "c"
    return "r" if isinstance(loc, RecomputeLoc) else "b" if isinstance(loc, BackwardLoc) else ""


def make(code: str, text: str, region: int = 0) -> str:
    """The loc of kind `code` (see kind) with `text` (and, for a checkpoint's, `region`)."""
    if code in ("c", "s"):
        return CheckpointLoc(text, region, code == "s")
    return _MAKE[code](text) if code else text


class Layout(NamedTuple):
    """Where g's ops come from (`layout`): `text`, which ops share a source line and the kind of each
    op's loc, without the lines (each op's line numbered in order of first appearance, "n" for no loc
    and "e" for an empty one, with its kind code; a run of ops alike written once with its length);
    `lines`, the lines in that order. Two graphs of the same printed text and layout text have the
    same ops at the same positions, with locs that differ only in the lines' texts; with the same
    lines too, the same locs."""

    text: str
    lines: tuple[str | None, ...]


def layout(g: Graph) -> Layout:
    """g's Layout."""
    locs = [op.loc for op in g.ops]
    lines = tuple(dict.fromkeys(locs))  # a BackwardLoc's line is its text's
    number: dict = {loc: i for i, loc in enumerate(lines)}
    number.update((loc, "n" if loc is None else "e") for loc in (None, "") if loc in number)
    codes = map(number.__getitem__, locs)
    types = set(map(type, locs))
    if not types.issubset((str, type(None))):  # marked locs: each op's line with its kind
        by_type = types.issubset(_KIND)  # no CheckpointLoc (its kind is its policy's)
        codes = zip(codes, map(_KIND.__getitem__, map(type, locs)) if by_type else map(kind, locs))
    return Layout(" ".join(f"{_code(k)}*{len(list(run))}" for k, run in groupby(codes)), lines)


def _code(item) -> str:
    return f"{item[0]}{item[1]}" if isinstance(item, tuple) else str(item)


def origins(g: Graph) -> dict[str, int]:
    """Each loc text of g's ops (no loc: "") with the position of the first op that has it."""
    found: dict[str, int] = {}
    for i, op in enumerate(g.ops):
        found.setdefault(op.loc or "", i)
    return found


def origin(text: str, found: dict[str, int]) -> tuple[int, str]:
    """(the position of the trace op whose loc `text` is derived from, the note after the first line of
    that op's loc: what `derived` appends), the longest such loc first; (-1, text) where `text` is no
    trace op's loc. found: origins(trace)."""
    first, newline, rest = text.partition("\n")
    cut = len(first)
    while True:
        at = found.get(first[:cut] + newline + rest)
        if at is not None:
            return at, first[cut:]
        if cut == 0:
            return -1, text
        cut = max(first.rfind("  ", 0, cut), 0)  # a note starts with two spaces (annotate_loc)


def derived(base: str | None, note: str) -> str:
    """The text of the loc derived from loc `base` with `note` after its first line (annotate_loc's)."""
    first, newline, rest = (base or "").partition("\n")
    return (first + note if first else note.lstrip()) + newline + rest
