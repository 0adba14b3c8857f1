"""flame's layers run one way (ARCHITECTURE.md): a module imports only modules of its own room (the
same package under flame/, or the same top-level file) and of lower layers, never a higher layer's
and never a sibling room of its own layer (passes/ and codegen/ know nothing of each other), not even
inside a function or under TYPE_CHECKING. Read from the source with ast, so nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

FLAME = Path(__file__).resolve().parent.parent / "flame"

# The rooms of flame, lowest layer first; rooms on one line form one layer. A room is a package under
# flame/ (by its directory name) or a top-level module (by its file name); "flame" is the package face.
LAYERS = [
    ("errors", "_version", "_tempfiles", "_gc", "_lists", "_identity"),  # plain helpers every layer may use
    ("_env",),  # FLAME_* settings read with errors that name the variable
    ("ir",),
    ("target",),  # what the backend can do, as data; filled in by runtime/backend.py
    ("passes", "codegen"),
    ("plan",),
    ("runtime",),
    ("debug",),  # the observers compile_graph reports each stage to
    ("compiler",),
    ("frontend",),
    ("distributed",),
    ("checkpoint",),  # safetensors files of tensors, models and optimizers (duck-typed: state_dict, plan_load)
    ("nn",),
    ("optim", "amp", "utils", "linalg", "special", "autograd", "distributions", "random",
     "testing"),
    ("func",),  # torch.func's transforms, over autograd (a custom Function's jvp: autograd.forward_ad)
    ("cuda", "backends"),  # torch.cuda's names (torch.cuda.amp's among them: flame.amp.cuda_amp), torch.backends'
    ("flame",),  # flame/__init__.py: re-exports the layers below
    ("explain", "viz", "bench"),  # tools over a compiled plan, and the `flame bench` suite
    ("cli",),
    ("__main__",),
]
LAYER = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}

# Upward imports that stay, to be removed; none may be added. (importing module, imported module)
KNOWN_UPWARD: set[tuple[str, str]] = set()

# Rooms that never reach into another, though the order alone would let them (ARCHITECTURE.md "Rules"):
# (importing room, imported module prefix, why)
NEVER = [
    ("plan", "flame.passes", "plan/ reads the IR and its traits, never a pass's internals"),
    ("runtime", "flame.passes", "the executors run plans; the passes are done by then"),
    ("runtime", "flame.plan.", "the executors know a plan by its steps (plan/steps.py) alone"),
]
RUNTIME_READS = ("flame.plan.steps",)


def _module(path: Path) -> str:
    parts = path.relative_to(FLAME.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[str, int]]:
    """Every flame module `path` imports (top-level, in functions, under TYPE_CHECKING), with its line;
    `from flame.x import y` names flame.x.y where y is a module, else flame.x."""
    me = _module(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                is_module = (FLAME.parent / sub.replace(".", "/")).with_suffix(".py").exists() or (
                    FLAME.parent / sub.replace(".", "/")
                ).is_dir()
                found.append((sub if is_module else base, node.lineno))
    return [(m, line) for m, line in found if m == "flame" or m.startswith("flame.")]


def _room(module: str) -> str:
    parts = module.split(".")
    return "flame" if len(parts) == 1 else parts[1]


MODULES = sorted(FLAME.rglob("*.py"))


def test_every_room_has_a_layer():
    rooms = {_room(_module(p)) for p in MODULES}
    assert not rooms - set(LAYER), f"rooms of flame/ missing from LAYERS: {sorted(rooms - set(LAYER))}"


def _upward(path: Path) -> list[str]:
    me = _module(path)
    mine = LAYER[_room(me)]
    bad = []
    for target, line in _imports(path):
        room = _room(target)
        if room == _room(me) or LAYER[room] < mine or (me, target) in KNOWN_UPWARD:
            continue
        how = "a higher layer" if LAYER[room] > mine else "a sibling room of its layer"
        bad.append(f"{path.relative_to(FLAME.parent)}:{line} imports {target} ({how})")
    return bad


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(FLAME)))
def test_imports_run_down_the_layers(path):
    assert not _upward(path)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(FLAME)))
def test_rooms_that_never_meet(path):
    room = _room(_module(path))
    bad = [
        f"{path.relative_to(FLAME.parent)}:{line} imports {target}: {why}"
        for never_room, prefix, why in NEVER
        if room == never_room
        for target, line in _imports(path)
        if (target + ".").startswith(prefix) and target not in RUNTIME_READS
    ]
    assert not bad


def test_known_upward_imports_still_exist():
    """An entry of KNOWN_UPWARD that the code no longer has is struck from the list."""
    present = {(_module(p), t) for p in MODULES for t, _ in _imports(p)}
    assert not KNOWN_UPWARD - present, f"stale entries: {sorted(KNOWN_UPWARD - present)}"


def test_the_order_reads_as_the_architecture_says():
    """ir -> passes, codegen -> plan -> runtime -> compiler -> frontend -> the library."""
    order = ["ir", "passes", "plan", "runtime", "compiler", "frontend", "nn"]
    assert [LAYER[r] for r in order] == sorted(LAYER[r] for r in order)
    assert LAYER["passes"] == LAYER["codegen"] and LAYER["optim"] > LAYER["nn"]
