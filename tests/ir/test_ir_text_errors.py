"""Malformed IR text gives ParseError / VerifyError, never a raw Python error, and invalid text is
rejected (issue 14 item 9); a fuzzer mutates printed graphs and holds the parser to that."""

from __future__ import annotations

import random

import numpy as np
import pytest

import flame
from flame.ir import Builder, Graph, TensorType, f32, parse, print_graph, verify

BASE = """\
graph g(%0: f32[2,3] data, %1: f32[2,3] param) {
  %2 = reduce_sum %0 {axes=[1], keepdim=KD} : f32[2]
  %3 = add %0, %1 : f32[2,3]
  return RET
}
"""


def _text(keepdim="false", ret="%2"):
    return BASE.replace("KD", keepdim).replace("RET", ret)


BAD = {
    "alias of a non-input": _text(ret="%3 -> %2"),
    "5000 nested [": _text().replace("axes=[1]", "axes=" + "[" * 5000),
    "unclosed [": _text().replace("axes=[1]", "axes=[1, [2"),
    "keepdim as a string": _text(keepdim='"false"'),
    "trailing junk after }": _text() + "junk\n",
    "two outputs alias one input": _text(ret="%3 -> %1, %3 -> %1"),
    "full with a negative shape": "graph g() {\n  %0 = full {shape=[-1], value=1, dtype=f32} : f32[1]\n"
    "  return %0\n}\n",
    "concat of 0-d values": "graph g(%0: f32[] data) {\n  %1 = concat %0, %0 {axis=0} : f32[2]\n  return %1\n}\n",
}


@pytest.mark.parametrize("name", BAD)
def test_malformed_text_raises_parse_or_verify_error(name):
    with pytest.raises((flame.ParseError, flame.VerifyError)):
        parse(BAD[name])


WRONG_EVEN_UNVERIFIED = {  # errors of the text itself, found with or without the verifier's shape rules
    "an attribute text read before, on an op without those attributes": _text().replace(
        "  return", "  %4 = argmax %0 {axes=[1], keepdim=false} : i64[2]\n  return"
    ),
    "an undefined value": _text().replace("add %0, %1", "add %0, %9"),
    "a value defined twice": _text().replace("%3 = add", "%2 = add"),
    "an unknown dtype": _text().replace("f32[2,3] param", "f31[2,3] param"),
    "keepdim as a string after a valid keepdim": _text().replace(
        "  return", '  %4 = reduce_sum %0 {axes=[1], keepdim="false"} : f32[2]\n  return'
    ),
}


@pytest.mark.parametrize("verify_", [True, False], ids=["verified", "unverified"])
@pytest.mark.parametrize("name", WRONG_EVEN_UNVERIFIED)
def test_text_errors_are_found_without_the_verifier(name, verify_):
    with pytest.raises(flame.ParseError, match="line "):
        parse(WRONG_EVEN_UNVERIFIED[name], verify=verify_)


def test_ops_reading_one_attribute_text_each_get_their_own_attributes():
    text = _text().replace("  return", "  %4 = reduce_max %0 {axes=[1], keepdim=false} : f32[2]\n  return")
    for g in (parse(text), parse(text, verify=False)):
        assert print_graph(g) == text
        a, b = g.ops[0].attrs, g.ops[2].attrs
        assert a == b == {"axes": (1,), "keepdim": False} and a is not b


def test_numpy_scalar_attributes_verify_and_print():
    g = Graph("g")
    x = g.add_input(TensorType((2, 3), f32))
    g.outputs = [Builder(g).emit("reduce_sum", x, axes=[np.int64(1)], keepdim=np.bool_(False))]
    verify(g)
    assert "axes=[1], keepdim=false" in print_graph(g)


def test_compiled_name_with_a_space_prints_parseable_ir():
    c = flame.compile(lambda x: x * 2, name="train step")
    text = print_graph(c.trace(flame.ones(2)))
    assert print_graph(parse(text)) == text


# ---- the fuzzer ---------------------------------------------------------------------------------


def _seed_texts() -> list[str]:
    from tests.ir.test_roundtrip import ALIASED, EVERY_ATTR_KIND

    def mlp(x, w1, w2):
        return ((x @ w1).relu() @ w2).softmax(-1).sum()

    w = [flame.randn(4, 8, requires_grad=True), flame.randn(8, 3, requires_grad=True)]
    traced = print_graph(flame.compile(mlp).trace(flame.randn(2, 4), *w))
    return [EVERY_ATTR_KIND, ALIASED, traced]


_PIECES = [
    "[",
    "]",
    ",",
    "%",
    "%1",
    "%99",
    "-",
    "->",
    "{",
    "}",
    "=",
    ":",
    "f32",
    "i64",
    "bool",
    "[2,3]",
    "true",
    "false",
    '"x"',
    "nan",
    "-1",
    "0",
    "1e999",
    "9" * 30,
    " ",
    "\n",
    "#",
    "return",
    "param",
]


def _mutate(text: str, rng: random.Random) -> str:
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(text) + 1)
        kind = rng.randrange(5)
        if kind == 0:  # delete a span
            text = text[:i] + text[i + rng.randint(1, 8) :]
        elif kind == 1:  # insert a token
            text = text[:i] + rng.choice(_PIECES) + text[i:]
        elif kind == 2:  # replace a character
            text = text[:i] + rng.choice(_PIECES) + text[i + 1 :]
        elif kind == 3:  # duplicate a line
            lines = text.splitlines(keepends=True)
            k = rng.randrange(len(lines))
            text = "".join(lines[: k + 1] + [lines[k]] + lines[k + 1 :])
        else:  # swap two lines
            lines = text.splitlines(keepends=True)
            a, b = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines[a], lines[b] = lines[b], lines[a]
            text = "".join(lines)
    return text


FUZZ_CASES = 1500  # a fixed budget per CI run (about 2 s); the seed makes a failure reproducible


def test_mutated_printed_graphs_parse_to_verified_graphs_or_raise_parse_errors():
    rng = random.Random(14)
    seeds = _seed_texts()
    for case in range(FUZZ_CASES):
        text = _mutate(rng.choice(seeds), rng)
        try:
            g = parse(text)
        except (flame.ParseError, flame.VerifyError):
            continue
        except Exception as e:  # noqa: BLE001 - the point: anything else is a bug
            pytest.fail(f"case {case}: {type(e).__name__}: {e}\n--- text ---\n{text}")
        verify(g)
        assert parse(print_graph(g)) is not None
