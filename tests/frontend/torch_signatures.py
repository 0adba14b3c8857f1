"""flame's public callables next to torch's of the same name, and where their signatures differ.

torch's signatures come from `inspect.signature` for its Python functions and classes, and from the type
stubs torch ships for its builtins (`torch/_C/_VariableFunctions.pyi` for `torch.*`, `torch/_C/__init__.pyi`
for `Tensor` methods, `torch/_C/_nn.pyi` and `torch/nn/functional.pyi` for `F.*`), which list every Python
overload with the names its argument parser takes. Used by tests/frontend/test_signatures.py; run this file
(`PYTHONPATH=. python3 tests/frontend/torch_signatures.py`) for the full report, parameters flame lacks and
different defaults included.
"""

from __future__ import annotations

import ast
import functools
import inspect
import os
import re
from dataclasses import dataclass, field

import torch

# torch parameters whose absence in flame is by design: no `out=` tensors, storage layout and pinned memory
# are the executor's, and size_average / reduce are torch's deprecated spellings of `reduction`.
IGNORED_MISSING = frozenset({"out", "layout", "pin_memory", "memory_format", "names", "size_average", "reduce"})


@dataclass(frozen=True)
class Sig:
    """One Python signature reduced to what a caller sees: the positional names in order, and the rest."""

    positional: tuple[str, ...]
    keyword: frozenset[str] = frozenset()
    varargs: bool = False
    varkw: bool = False
    defaults: dict = field(default_factory=dict, hash=False, compare=False)

    @property
    def names(self) -> set[str]:
        """Every parameter name, positional or keyword-only."""
        return set(self.positional) | set(self.keyword)


@dataclass(frozen=True)
class Finding:
    """A difference between a flame callable and torch's: `kind` is one of KINDS."""

    where: str
    name: str
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"{self.where}.{self.name}: {self.kind}: {self.detail}"


# order: a positional parameter with another name than torch's at the same place (a silent wrong answer
# when called positionally); varargs: flame's *args takes what torch names positionally; swallowed: a torch
# parameter flame lacks while its **kwargs would take it; missing: a torch parameter flame lacks (a
# TypeError when passed); extra: flame positional parameters after all of torch's; default: a different
# default for the same parameter.
KINDS = ("order", "varargs", "swallowed", "missing", "extra", "default")


def from_inspect(sig: inspect.Signature, drop_first: bool = False, defaults_as_text: bool = False) -> Sig:
    """The Sig of an inspect.Signature (drop_first drops `self`)."""
    params = list(sig.parameters.values())[1 if drop_first else 0:]
    pos = tuple(p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
    kw = frozenset(p.name for p in params if p.kind == p.KEYWORD_ONLY)
    defaults = {p.name: p.default for p in params if p.default is not p.empty}
    return Sig(pos, kw, any(p.kind == p.VAR_POSITIONAL for p in params),
               any(p.kind == p.VAR_KEYWORD for p in params), defaults)


def _from_ast(args: ast.arguments, drop_first: bool) -> Sig:
    pos = [a.arg for a in args.posonlyargs + args.args]
    if drop_first:
        pos = pos[1:]
    defaults = {}
    all_pos = args.posonlyargs + args.args
    for a, d in zip(all_pos[len(all_pos) - len(args.defaults):], args.defaults):
        defaults[a.arg] = _literal(d)
    for a, d in zip(args.kwonlyargs, args.kw_defaults):
        if d is not None:
            defaults[a.arg] = _literal(d)
    return Sig(tuple(pos), frozenset(a.arg for a in args.kwonlyargs), args.vararg is not None,
               args.kwarg is not None, defaults)


class _Unknown:
    """A stub default that is not a literal (`...`, a name)."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _literal(node: ast.expr):
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return _Unknown(ast.unparse(node))
    return _Unknown("...") if value is Ellipsis else value


@functools.cache
def _stubs(relpath: str, cls: str | None = None) -> dict[str, list[ast.arguments]]:
    path = os.path.join(os.path.dirname(torch.__file__), relpath)
    if not os.path.exists(path):
        return {}
    with open(path) as fh:
        body = ast.parse(fh.read()).body
    if cls is not None:
        body = next((n.body for n in body if isinstance(n, ast.ClassDef) and n.name == cls), [])
    out: dict[str, list[ast.arguments]] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef):
            out.setdefault(node.name, []).append(node.args)
    return out


def _python_signature(obj) -> inspect.Signature | None:
    if isinstance(obj, type(len)) or type(obj).__name__ in ("method_descriptor", "builtin_function_or_method",
                                                                 "getset_descriptor", "wrapper_descriptor"):
        return None
    try:
        return inspect.signature(obj)
    except (TypeError, ValueError):
        return None


def torch_function(name: str, obj, stub_files: tuple[str, ...]) -> list[Sig]:
    """torch's overloads of a function: its Python signature, or those its stubs list (checked by its parser)."""
    sig = _python_signature(obj)
    if sig is not None:
        return [from_inspect(sig)]
    for rel in stub_files:
        stubs = _stubs(rel)
        found = stubs.get(name) or stubs.get(f"linalg_{name}") or stubs.get(f"fft_{name}")  # torch.linalg's names
        if found:
            return _ask_parser(obj, [_from_ast(a, False) for a in found])
    return _ask_parser(obj, _from_doc(obj))


def _from_doc(obj) -> list[Sig]:
    """The signature a builtin's docstring opens with (`linalg.vector_norm(x, ord=2, ...) -> Tensor`)."""
    first = (getattr(obj, "__doc__", None) or "").strip().split("\n", 1)[0]
    found = re.match(r"[\w.]+\((.*)\)\s*(->.*)?$", first)
    try:
        args = ast.parse(f"def f({found.group(1)}): pass").body[0].args if found else None
    except SyntaxError:
        return []
    return [_from_ast(args, False)] if args else []


def torch_method(name: str) -> list[Sig]:
    """torch.Tensor's overloads of a method, `self` left out."""
    obj = inspect.getattr_static(torch.Tensor, name, None)
    if isinstance(obj, (staticmethod, classmethod)):
        return []
    sig = _python_signature(getattr(torch.Tensor, name))
    if sig is not None:
        return [from_inspect(sig, drop_first=True)]
    found = _stubs("_C/__init__.pyi", "TensorBase").get(name, [])
    return _ask_parser(getattr(torch.zeros(2), name), [_from_ast(a, True) for a in found])


class _Junk:
    """An argument no torch parser accepts, so that its error message says what it takes."""


def _parser_message(fn, *args, **kwargs) -> str:
    try:
        fn(*args, **kwargs)
    except TypeError as e:
        return str(e)
    except Exception:  # noqa: BLE001 - any other refusal says nothing about the signature
        return ""
    return ""


def _ask_parser(fn, stubs: list[Sig]) -> list[Sig]:
    """torch's argument parser is the truth where its hand-written stubs are not: its error messages list
    the overloads it takes (or how many positional arguments, and the first one's name)."""
    junk = [_Junk() for _ in range(9)]
    msg = _parser_message(fn, *junk, zz_junk=1) or _parser_message(fn, *junk)
    if "but expected" in msg:
        listed = [_from_parser(g) for g in re.findall(r"^ \* \((.*)\)$", msg, re.M)]
        return listed or [_from_parser(msg.split("but expected (", 1)[1].rsplit(")", 1)[0])]
    most = re.search(r"takes (?:from \d+ to )?(\d+) positional|takes no arguments", msg)
    if most and stubs:
        n = int(most.group(1) or 0)
        stubs = [Sig(t.positional[:n], t.keyword | set(t.positional[n:]), t.varargs, t.varkw, t.defaults)
                 for t in stubs]
    first = re.search(r"argument '(\w+)' \(position 1\)", _parser_message(fn, _Junk()))
    if first and len(stubs) == 1 and stubs[0].positional and stubs[0].positional[0] != first.group(1):
        t = stubs[0]
        stubs = [Sig((first.group(1), *t.positional[1:]), t.keyword, t.varargs, t.varkw, t.defaults)]
    return stubs


def _from_parser(text: str) -> Sig:
    """The Sig of one overload as torch's parser prints it: `Tensor input, int dim, *, bool keepdim = False`."""
    pos, kw, defaults, kw_only, types = [], set(), {}, False, []
    for item in (s.strip() for s in text.split(", ") if s.strip()):
        if item == "*":
            kw_only = True
            continue
        decl, _, default = item.partition(" = ")
        name = decl.split()[-1]
        (kw.add(name) if kw_only else pos.append(name))
        types.append(decl)
        if default:
            try:
                defaults[name] = ast.literal_eval(default)
            except (ValueError, SyntaxError):
                defaults[name] = _Unknown(default)
    varargs = len(pos) == 1 and types[0].startswith(("tuple of ints", "tuple of SymInts"))
    return Sig(tuple(pos), frozenset(kw), varargs, False, defaults)


def torch_class(cls) -> list[Sig]:
    """The signature of a torch class's constructor, `self` left out."""
    sig = _python_signature(cls.__init__)
    return [from_inspect(sig, drop_first=True)] if sig is not None else []


def flame_signature(obj, drop_first: bool = False) -> Sig | None:
    """flame's signature of a function, method (drop_first) or constructor."""
    try:
        return from_inspect(inspect.signature(obj), drop_first)
    except (TypeError, ValueError):
        return None


def _mismatches(f: Sig, t: Sig) -> int:
    n = min(len(f.positional), len(t.positional))
    return sum(f.positional[i] != t.positional[i] for i in range(n))


def compare(where: str, name: str, f: Sig, overloads: list[Sig]) -> list[Finding]:
    """The differences between flame's signature and torch's overloads (the closest overload decides order)."""
    out = []
    best = min(overloads, key=lambda t: _mismatches(f, t))
    if _mismatches(f, best):
        theirs = " | ".join(f"({', '.join(t.positional)}{', *' if t.varargs else ''})" for t in overloads)
        out.append(Finding(where, name, "order", f"flame ({', '.join(f.positional)}) vs torch {theirs}"))
    # flame's *args where torch has one sequence parameter (`reshape(*shape)` for `reshape(shape)`) takes both
    if f.varargs and not any(t.varargs for t in overloads) and len(best.positional) > len(f.positional) + 1:
        out.append(Finding(where, name, "varargs",
                           f"flame *args takes torch's {best.positional[len(f.positional):]}"))
    missing = set().union(*(t.names for t in overloads)) - f.names - IGNORED_MISSING
    if missing:
        out.append(Finding(where, name, "swallowed" if f.varkw else "missing", ", ".join(sorted(missing))))
    longest = max(len(t.positional) for t in overloads)
    if len(f.positional) > longest and not any(t.varargs for t in overloads):
        out.append(Finding(where, name, "extra", ", ".join(f.positional[longest:])))
    for p, d in f.defaults.items():
        theirs = [t.defaults[p] for t in overloads if p in t.defaults and not isinstance(t.defaults[p], _Unknown)]
        if theirs and all(not _same_default(d, x) for x in theirs):
            out.append(Finding(where, name, "default", f"{p}: flame {d!r}, torch {theirs[0]!r}"))
    return out


def _same_default(a, b) -> bool:
    try:
        return type(a) is type(b) and a == b or (isinstance(a, (int, float)) and not isinstance(a, bool)
                                                 and isinstance(b, (int, float)) and a == b)
    except Exception:
        return False


def _public(mod) -> list[str]:
    names = set(getattr(mod, "__all__", [])) | {n for n in dir(mod) if not n.startswith("_")}
    return sorted(n for n in names if not inspect.ismodule(getattr(mod, n, None)))


def _defined_in_flame(obj) -> bool:
    mod = getattr(obj, "__module__", None) or ""
    return mod == "flame" or mod.startswith("flame.")


def namespace_pairs(fmod, tmod, where: str, stub_files: tuple[str, ...]):
    """(where, name, flame Sig, torch overloads) for flame's public callables of a module that torch's has."""
    for name in _public(fmod):
        fobj, tobj = getattr(fmod, name), getattr(tmod, name, None)
        if tobj is None or not callable(fobj) or not _defined_in_flame(fobj):
            continue
        if inspect.isclass(fobj):
            if not inspect.isclass(tobj):
                continue
            fsig, tsigs = flame_signature(fobj.__init__, drop_first=True), torch_class(tobj)
        else:
            fsig, tsigs = flame_signature(fobj), torch_function(name, tobj, stub_files)
        if fsig is not None and tsigs:
            yield where, name, fsig, tsigs


def tensor_pairs():
    """(where, name, flame Sig, torch overloads) for flame.Tensor's methods that torch.Tensor has."""
    import flame

    for name in dir(flame.Tensor):
        if name.startswith("_") or not hasattr(torch.Tensor, name):
            continue
        static = inspect.getattr_static(flame.Tensor, name)
        if isinstance(static, (property, staticmethod, classmethod)) or not callable(static):
            continue
        fsig, tsigs = flame_signature(getattr(flame.Tensor, name), drop_first=True), torch_method(name)
        if fsig is not None and tsigs:
            yield "Tensor", name, fsig, tsigs


_VF = ("_C/_VariableFunctions.pyi",)
_NN = ("nn/functional.pyi", "_C/_nn.pyi", "_C/_VariableFunctions.pyi")


def namespaces():
    """(label, flame module, torch module, stub files) for every namespace flame mirrors."""
    import importlib

    import flame

    pairs = [("flame", "torch", _VF), ("flame.nn.functional", "torch.nn.functional", _NN),
             ("flame.nn", "torch.nn", ()), ("flame.nn.init", "torch.nn.init", ()),
             ("flame.nn.utils", "torch.nn.utils", ()),
             ("flame.nn.utils.prune", "torch.nn.utils.prune", ()), ("flame.optim", "torch.optim", ()),
             ("flame.optim.lr_scheduler", "torch.optim.lr_scheduler", ()),
             ("flame.optim.swa_utils", "torch.optim.swa_utils", ()), ("flame.func", "torch.func", ()),
             ("flame.nn.utils.stateless", "torch.nn.utils.stateless", ()),
             ("flame.utils.data", "torch.utils.data", ()), ("flame.autograd", "torch.autograd", ()),
             ("flame.autograd.functional", "torch.autograd.functional", ()),
             ("flame.autograd.forward_ad", "torch.autograd.forward_ad", ()),
             ("flame.cuda", "torch.cuda", ()), ("flame.linalg", "torch.linalg", ("_C/_linalg.pyi",)),
             ("flame.fft", "torch.fft", ("_C/_fft.pyi",)), ("flame.amp", "torch.amp", ())]
    del flame
    for fname, tname, stubs in pairs:
        try:
            fmod = importlib.import_module(fname)
        except ImportError:
            continue
        yield fname, fmod, importlib.import_module(tname), stubs


def all_findings() -> list[Finding]:
    """Every difference over every namespace."""
    out = []
    for label, fmod, tmod, stubs in namespaces():
        for where, name, fsig, tsigs in namespace_pairs(fmod, tmod, label, stubs):
            out += compare(where, name, fsig, tsigs)
    for where, name, fsig, tsigs in tensor_pairs():
        out += compare(where, name, fsig, tsigs)
    return out


if __name__ == "__main__":
    import sys

    kinds = sys.argv[1:] or KINDS
    for finding in all_findings():
        if finding.kind in kinds:
            print(finding)
