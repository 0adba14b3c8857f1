"""The verifier rejects malformed graphs, and the parser malformed text, with a message that quotes the
offending IR line (STYLE.md "Errors speak the user's language")."""

from __future__ import annotations

import pytest

from flame.errors import ParseError, VerifyError
from flame.ir import Builder, Graph, Op, TensorType, f32, i64, parse, print_graph, verify

F3 = TensorType((3,), f32)


def _graph() -> tuple[Graph, Builder]:
    g = Graph("g")
    g.add_input(F3)
    return g, Builder(g)


def _append(g: Graph, name: str, inputs, attrs: dict, out: TensorType, loc: str | None = None) -> Op:
    op = Op(name, tuple(inputs), attrs, out, loc)
    g.ops.append(op)
    g.outputs = [op.out]
    return op


def _rejects(g: Graph, *fragments: str, shape_rules: bool = True) -> str:
    with pytest.raises(VerifyError) as info:
        verify(g, shape_rules=shape_rules)
    msg = str(info.value)
    for f in fragments:
        assert f in msg, f"{f!r} not in {msg!r}"
    return msg


def test_a_valid_graph_passes() -> None:
    g, b = _graph()
    g.outputs = [b.relu(b.add(g.inputs[0], g.inputs[0]))]
    assert verify(g) is g


def test_use_before_definition() -> None:
    g, _ = _graph()
    later = Op("exp", (g.inputs[0],), {}, F3)
    _append(g, "relu", [later.out], {}, F3)
    g.ops.append(later)
    _rejects(g, "use of a value before its definition", "%1 = relu %? : f32[3]")


def test_value_defined_twice() -> None:
    g, _ = _graph()
    op = _append(g, "exp", [g.inputs[0]], {}, F3)
    g.ops.append(op)
    _rejects(g, "defined twice", "= exp %0 : f32[3]")


def test_wrong_result_type() -> None:
    g, _ = _graph()
    _append(g, "relu", [g.inputs[0]], {}, TensorType((4,), f32))
    _rejects(g, "result type should be f32[3], not f32[4]", "%1 = relu %0 : f32[4]")


def test_wrong_result_dtype() -> None:
    g, _ = _graph()
    _append(g, "lt", [g.inputs[0], g.inputs[0]], {}, F3)
    _rejects(g, "should be bool[3]", "%1 = lt %0, %0 : f32[3]")


def test_unknown_op() -> None:
    g, _ = _graph()
    _append(g, "frobnicate", [g.inputs[0]], {}, F3)
    _rejects(g, "unknown op 'frobnicate'", "%1 = frobnicate %0 : f32[3]")


@pytest.mark.parametrize(
    "attrs, why",
    [
        ({"keepdim": False}, "missing attribute 'axes'"),
        ({"axes": (0,), "keepdim": False, "bogus": 1}, "unknown attribute(s) ['bogus']"),
        ({"axes": (5,), "keepdim": False}, "axis 5 is out of range"),
        ({"axes": ("x",), "keepdim": False}, "is not a valid ints"),
        ({"axes": [0], "keepdim": False}, "not in normal form"),
    ],
)
def test_bad_attributes(attrs: dict, why: str) -> None:
    g, _ = _graph()
    _append(g, "reduce_sum", [g.inputs[0]], attrs, TensorType((), f32))
    _rejects(g, why, "%1 = reduce_sum %0 {", ": f32[]")


def test_attribute_outside_its_choices() -> None:
    g, _ = _graph()
    _append(g, "gelu", [g.inputs[0]], {"approximate": "erf"}, F3)
    _rejects(g, "must be one of ['none', 'tanh']", '%1 = gelu %0 {approximate="erf"} : f32[3]')


@pytest.mark.parametrize("name, n", [("add", 1), ("relu", 2), ("where", 2)])
def test_wrong_arity(name: str, n: int) -> None:
    g, _ = _graph()
    _append(g, name, [g.inputs[0]] * n, {}, F3)
    _rejects(g, f"{name} takes", f"got {n}", f"%1 = {name} " + ", ".join(["%0"] * n))


def test_variadic_op_needs_an_input() -> None:
    g, _ = _graph()
    _append(g, "concat", [], {"axis": 0}, F3)
    _rejects(g, "concat needs at least one input", "%1 = concat {axis=0} : f32[3]")


def test_error_quotes_the_source_location() -> None:
    g, _ = _graph()
    _append(g, "relu", [g.inputs[0]], {}, TensorType((4,), f32), loc="train.py:14  h = x.relu()")
    _rejects(g, "%1 = relu %0 : f32[4]  # train.py:14  h = x.relu()")


def test_alias_out_of_range() -> None:
    g, b = _graph()
    g.outputs = [b.exp(g.inputs[0])]
    g.aliases = {0: 3}
    _rejects(g, "alias 0 -> 3 is out of range", "return %1 -> input 3?")


def test_alias_of_an_output_that_does_not_exist() -> None:
    g, b = _graph()
    g.outputs = [b.exp(g.inputs[0])]
    g.aliases = {2: 0}
    _rejects(g, "alias 2 -> 0 is out of range", "return %1")


def test_alias_with_a_different_type() -> None:
    g, b = _graph()
    g.outputs = [b.reduce_sum(g.inputs[0], axes=[0])]
    g.aliases = {0: 0}
    _rejects(g, "output 0 (f32[]) cannot replace input %0 (f32[3])", "return %1 -> %0")


def test_output_not_in_graph() -> None:
    g, _ = _graph()
    other = Graph("other")
    g.outputs = [other.add_input(F3)]
    _rejects(g, "output 0 is not defined", "return %?")


def test_unknown_role() -> None:
    g, _ = _graph()
    g.roles[0] = "weights"
    _rejects(g, "unknown role 'weights'")


def _use_before_definition(g: Graph, b: Builder) -> None:
    later = Op("exp", (g.inputs[0],), {}, F3)
    _append(g, "relu", [later.out], {}, F3)
    g.ops.append(later)


def _value_of_another_graph(g: Graph, b: Builder) -> None:
    g.outputs = [b.exp(Graph("other").add_input(F3))]


def _defined_twice(g: Graph, b: Builder) -> None:
    g.outputs = [b.exp(g.inputs[0])]
    g.ops.append(g.ops[-1])


def _attribute_not_ir_data(g: Graph, b: Builder) -> None:
    g.outputs = [b.reduce_sum(g.inputs[0], axes=[0])]
    g.ops[-1].attrs["axes"] = {0}


def _output_not_in_graph(g: Graph, b: Builder) -> None:
    g.outputs = [Graph("other").add_input(F3)]


def _alias_type(g: Graph, b: Builder) -> None:
    g.outputs = [b.reduce_sum(g.inputs[0], axes=[0])]
    g.aliases = {0: 0}


def _role(g: Graph, b: Builder) -> None:
    g.roles[0] = "weights"


@pytest.mark.parametrize(
    "spoil, why",
    [
        (_use_before_definition, "use of a value before its definition"),
        (_value_of_another_graph, "use of a value before its definition"),
        (_defined_twice, "defined twice"),
        (_attribute_not_ir_data, "attribute that is not IR data"),
        (_output_not_in_graph, "output 0 is not defined"),
        (_alias_type, "cannot replace input %0"),
        (_role, "unknown role"),
    ],
)
def test_a_built_graph_is_checked_for_what_the_builder_does_not_check(spoil, why: str) -> None:
    """verify(g, shape_rules=False) (a traced graph, whose Builder ran every shape rule) still rejects what
    building cannot rule out: values from elsewhere, attributes with no IR text, outputs, aliases, roles."""
    g, b = _graph()
    spoil(g, b)
    _rejects(g, why, shape_rules=False)
    _rejects(g, why)


# ---- the parser ---------------------------------------------------------------------------------------

GOOD = "graph g(%0: f32[3] data) {\n  %1 = relu %0 : f32[3]\n  return %1\n}\n"


def _parse_error(text: str, bad_line: str, *fragments: str, kind=ParseError) -> None:
    with pytest.raises(kind) as info:
        parse(text)
    msg = str(info.value)
    assert bad_line.strip() in msg, f"{bad_line!r} not quoted in {msg!r}"
    for f in fragments:
        assert f in msg


def test_good_text_parses() -> None:
    assert print_graph(parse(GOOD)) == GOOD


@pytest.mark.parametrize(
    "bad, fragment",
    [
        ("  %1 = relu %7 : f32[3]", "'%7' is not a defined value"),
        ("  %1 = relu %0 : f32[3", "expected `%N = op"),
        ("  %1 = relu %0 : q32[3]", "unknown dtype 'q32'"),
        ("  %1 = frobnicate %0 : f32[3]", "unknown op 'frobnicate'"),
        ("  %1 = reduce_sum %0 {axes=[0], keepdim=false, color=1} : f32[]", "unknown attribute"),
        ("  %1 = reduce_sum %0 {keepdim=false} : f32[]", "missing attribute 'axes'"),
        ('  %1 = gelu %0 {approximate="erf"} : f32[3]', "must be one of"),
        ("  %0 = relu %0 : f32[3]", "%0 is defined twice"),
    ],
)
def test_parser_errors_quote_the_line(bad: str, fragment: str) -> None:
    _parse_error(GOOD.replace("  %1 = relu %0 : f32[3]", bad), bad, fragment, "line 2")


@pytest.mark.parametrize(
    "bad, fragment",
    [
        ("  %1 = relu %0 : f32[4]", "result type should be f32[3], not f32[4]"),
        ("  %1 = add %0 : f32[3]", "add takes 2 inputs, got 1"),
        ("  %1 = reduce_sum %0 {axes=[3], keepdim=false} : f32[]", "axis 3 is out of range"),
    ],
)
def test_verifier_errors_on_parsed_text_quote_the_line(bad: str, fragment: str) -> None:
    _parse_error(GOOD.replace("  %1 = relu %0 : f32[3]", bad), bad, fragment, kind=VerifyError)


def test_bad_header_is_quoted() -> None:
    _parse_error(
        GOOD.replace("graph g(%0: f32[3] data) {", "graph g(%0 f32[3]) {"), "graph g(%0 f32[3]) {", "bad graph input"
    )


def test_bad_role_is_quoted() -> None:
    _parse_error(GOOD.replace("data", "weights"), "graph g(%0: f32[3] weights) {", "unknown input role")


def test_bad_return_is_quoted() -> None:
    _parse_error(GOOD.replace("return %1", "return %9"), "return %9", "'%9' is not a defined value")


def test_bad_alias_in_text_is_rejected() -> None:
    text = GOOD.replace("relu %0 : f32[3]", "reduce_sum %0 {axes=[0], keepdim=false} : f32[]")
    _parse_error(text.replace("return %1", "return %1 -> %0"), "return %1 -> %0", "cannot replace", kind=VerifyError)


def test_missing_return_and_empty_text() -> None:
    with pytest.raises(ParseError, match="missing `return`"):
        parse("graph g(%0: f32[3] data) {\n  %1 = relu %0 : f32[3]")
    with pytest.raises(ParseError, match="line 3: expected `%N = op"):
        parse("graph g(%0: f32[3] data) {\n  %1 = relu %0 : f32[3]\n}")
    with pytest.raises(ParseError, match="empty IR text"):
        parse("  \n ")


def test_i64_graph_parses() -> None:
    g = parse("graph k(%0: i64[2] state) {\n  %1 = neg %0 : i64[2]\n  return %1 -> %0\n}\n")
    assert g.outputs[0].type == TensorType((2,), i64) and g.aliases == {0: 0}
