"""Op facts are traits on the op's declaration (flame/ir/ops/), never lists of op names in another
place (ARCHITECTURE.md "Rules"). Read from the source with ast: outside flame/ir/ops/ and the CUDA
snippets (flame/codegen/snippets.py), no module tests an op by its name against a literal
(`op.name == "full"`, `op.name in ("reshape", "squeeze")`) and none keeps a collection of op names
(`COSTLY = {"exp", "log"}`, `{"reduce_sum": True}`). Tables that give each op its own rule
(`{"permute": lower_permute}`: per-op code of a layer, as the snippets are) and calls that build an op
by name (`b.emit("full", ...)`) are no name tests. Where a pattern matcher means one op itself (the
attention rewrite's matmul, the slab rules' slice), it compares with the name its declaration exports
(`op.name == MATMUL.name`, `from flame.ir.ops.linalg import MATMUL`): no literal."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import flame.ir.ops  # noqa: F401  (registers every op)
from flame.ir.registry import REGISTRY

FLAME = Path(__file__).resolve().parents[2] / "flame"
EXEMPT = ("ir/ops/", "codegen/snippets.py")

# Name tests that remain, per module (the count); each is to become a trait, and none may be added.
KNOWN: dict[str, int] = {}


def _is_name(node: ast.AST) -> bool:
    """node is a string literal that names an op."""
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in REGISTRY


def _names_in(node: ast.AST) -> bool:
    """A literal op name, or a tuple / list / set literal (or frozenset(...) of one) holding only such."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("frozenset", "set", "tuple"):
        return len(node.args) == 1 and _names_in(node.args[0])
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return bool(node.elts) and all(_is_name(e) for e in node.elts)
    return _is_name(node)


def _name_tests(path: Path) -> list[str]:
    """Each place in `path` that tests an op's name against literals or keeps a collection of op names."""
    found = []
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(s, ast.Attribute) and s.attr == "name" for s in sides) and any(map(_names_in, sides)):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    for node in tree.body:  # module-level collections of op names
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if value is None:
            continue
        if isinstance(value, ast.Dict) and value.keys and all(map(_names_in, value.keys)):
            if all(isinstance(v, ast.Constant) for v in value.values):  # a fact per op, not a rule per op
                found.append(f"{node.lineno}: {ast.unparse(node)[:80]}")
        elif _names_in(value) and not _is_name(value):
            found.append(f"{node.lineno}: {ast.unparse(node)[:80]}")
    return found


def _scan() -> dict[str, list[str]]:
    out = {}
    for path in sorted(FLAME.rglob("*.py")):
        rel = str(path.relative_to(FLAME))
        if not rel.startswith(EXEMPT):
            tests = _name_tests(path)
            if tests:
                out[rel] = tests
    return out


def test_no_new_op_name_tests():
    found = _scan()
    grown = {f: tests for f, tests in found.items() if len(tests) > KNOWN.get(f, 0)}
    assert not grown, "test an op's trait, not its name (add the trait to the OpDef): " + repr(grown)


def test_known_name_tests_are_still_there():
    """A module that lost name tests lowers its count in KNOWN (or leaves it)."""
    counts = Counter({f: len(t) for f, t in _scan().items()})
    stale = {f: (n, counts[f]) for f, n in KNOWN.items() if counts[f] != n}
    assert not stale, f"KNOWN counts (listed, found) to update: {stale}"


def test_the_facts_that_were_name_lists_are_traits():
    """The view ops that relabel bytes, the constants, the costly ops and the index reduction are
    traits of their declarations."""
    relabel = {n for n, d in REGISTRY.items() if d.view is not None and d.view.relabel}
    assert relabel == {"reshape", "squeeze", "unsqueeze"}
    assert {n for n, d in REGISTRY.items() if d.constant} == {"full", "arange"}
    assert {n for n, d in REGISTRY.items() if d.reduction is not None and d.reduction.index} == {"argmax"}
    assert {n for n, d in REGISTRY.items() if d.cost == "transcendental"} >= {"exp", "log", "tanh", "erf"}
    assert {n for n, d in REGISTRY.items() if d.cost == "division"} >= {"div", "sqrt", "rsqrt"}


def test_what_counts_as_a_name_test(tmp_path):
    """Literals and collections of them are name tests; a declaration's exported name, a trait and a
    table of per-op rules are not."""
    src = tmp_path / "m.py"
    src.write_text(
        "from flame.ir.ops.linalg import MATMUL\n"
        "RULES = {'permute': print}\n"
        "PAIRS = frozenset({'add', 'mul'})\n"
        "def f(op):\n"
        "    return op.name == MATMUL.name or get(op.name).commutative or op.name in ('relu', 'gelu')\n"
    )
    assert [t.split(":")[0] for t in _name_tests(src)] == ["5", "3"]


def test_the_facts_that_were_name_lists_are_traits_too():
    """CSE's commutative ops, the bool forms of + * max min, the conversions, the sign-only and the
    accumulating ops, the GEMM epilogue roles, pad's own value, the convolutions' activation operands
    and the axis order of permute are traits of their declarations."""

    def having(trait):
        return {n: getattr(d, trait) for n, d in REGISTRY.items() if getattr(d, trait)}

    assert set(having("commutative")) == {"add", "mul", "eq", "ne", "logical_and", "logical_or"}
    assert having("on_bool") == {
        "add": "logical_or",
        "mul": "logical_and",
        "maximum": "logical_or",
        "minimum": "logical_and",
    }
    assert set(having("conversion")) == {"cast", "neg", "abs"}
    assert set(having("sign_only")) == {"mul", "add", "sub", "neg", "cast"}
    assert set(having("accumulates")) == {"matmul", "matmul_bias", "reduce_sum", "reduce_mean"}
    assert set(having("gemm_bias")) == {"matmul_bias"}
    assert having("epilogue") == {"add": "bias", "relu": "relu", "gelu": "gelu"}
    assert set(having("pads")) == {"pad"}
    assert having("activations") == {
        "conv": (True, False, True),
        "conv_grad_input": (True, False, True),
        "conv_grad_weight": (True, True, False),
    }
    assert {n for n, d in REGISTRY.items() if d.view is not None and d.view.perm is not None} == {"permute"}
