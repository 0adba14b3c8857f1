"""What a trace depends on besides its input signature, checked before each replay, and the words that
say what changed when a check fails.

A compiled function's cache key is its arguments' kinds, shapes, dtypes and constant values
(ARCHITECTURE.md "Graph inputs"). Running the Python body once also bakes in Python state it read; each such read
becomes a Guard of that trace:
- whether a captured tensor's `.grad` was set, where the body read it before writing it (a step that
  begins with `zero_grad()` never reads the old one: that is part of the program, not of the key);
- a module's `training` flag, where something read it (Dropout does; a Linear does not);
- a choice an optimizer made in Python (weight_decay != 0, nesterov, amsgrad: Optimizer.option);
- plain immutable Python values the function names: globals and closure variables (numbers, strings,
  None, flame dtypes, enum members, tuples of those), its own and those of the user's functions it
  names in turn (a helper reading a global learning rate);
- the same of the user's hooks and autograd.Functions the body ran (a hook scaling by a global);
- plain values reached from those (and from `self` of a compiled method) by constant attributes and
  subscripts: a config's field, a dict's or a list's entry (`cfg["w"]`, `args.beta`, `self.beta`, `w[0]`),
  and those the methods so reached read (`trainer.loss(x)` reading `self.beta`), and of a module's own
  methods the body ran, through the configs, dicts and lists the module holds (`self.cfg["k"]`);
- plain values the body read from a module's own attributes (`self.eps`, `self.scale`: nn.Module
  records them while a body is traced), and, by identity, what the modules it ran are made of (Parts):
  the submodules it reached (a layer replaced, appended or deleted), the parameters, buffers and tensor
  attributes it read (`self.scale = new_tensor`, load_state_dict(assign=True)), functions held in a
  module's attributes (`self.act = F.gelu`) and a forward set on the instance;
- by identity, the state tensors an optimizer's step read (Held: `opt.state[p]['exp_avg'] = new`);
- the default floating dtype, where the body read it (flame.set_default_dtype: a factory without a
  dtype, a Python float beside an integer tensor).
- the items of a list (a dict, its items() or values(), a tuple of objects) so reached that the body
  iterates (Items: `for t in bank`, `for k, w in self.weights.items()`): as many, plain values equal,
  objects the same.
Values reached by computed keys or through calls, and NumPy arrays, are not guarded.
A captured tensor's shape and dtype are checked by the compiled function's bindings.
"""

from __future__ import annotations

import dis
import enum
import functools
import inspect
import operator
import os
import struct
import sysconfig
import types
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flame.frontend.context import current_trace
from flame.frontend.tensor import Tensor
from flame.ir.dtypes import DType

MISSING = object()
_PLAIN = (bool, int, float, complex, str, bytes, type(None), np.generic, enum.Enum, DType)


def value_key(a: Any) -> Hashable:
    """A Python value as a cache key: its type and, for numbers, its bit pattern, so 0.0 and -0.0,
    1 and 1.0 differ and a NaN matches itself (== would say otherwise)."""
    if isinstance(a, (tuple, list, frozenset)):
        return type(a).__name__, tuple(value_key(x) for x in a)
    if isinstance(a, float):
        return "float", struct.pack("<d", a)
    if isinstance(a, complex):
        return "complex", struct.pack("<dd", a.real, a.imag)
    if isinstance(a, np.generic):
        return type(a).__name__, a.tobytes()
    return type(a).__name__, a


def show(a: Any) -> str:
    """A value as a message prints it: shapes as lists, everything else as repr."""
    return "<unset>" if a is MISSING else repr(a)


def show_kind(a: Any) -> str:
    """An object a guard compares by identity, as a message prints it: by its type (a tuple of them
    item by item), `ReLU` -> `GELU`, without the whole repr of a model."""
    if isinstance(a, tuple):
        return "(" + ", ".join(show_kind(x) for x in a) + ")"
    return show(a) if is_plain(a) or a is MISSING else f"a {type(a).__name__}"


@dataclass(frozen=True)
class Guard:
    """`what` read `read()` == `value` (compared by value_key) when traced; `failed()` says what changed."""

    what: str
    read: Callable[[], Any]
    value: Any
    show: Callable[[Any], str] = show
    expected: Hashable = field(init=False, repr=False, compare=False)  # value_key(value), made once

    def __post_init__(self) -> None:
        object.__setattr__(self, "expected", value_key(self.value))

    def failed(self) -> str:
        now = self.read()
        if now is self.value or value_key(now) == self.expected:  # `is`: the common, fast case
            return ""
        return f"{self.what}: {self.show(self.value)} -> {self.show(now)}"

    def key(self) -> str:
        """What the guard reads and expects, as text alike in every process (guards_key)."""
        return f"{self.what} == {value_key(self.value)!r}"


def key_text(a: Any) -> str:
    """A guarded value as guards_key writes it: a plain value by value_key; any other object, compared by
    identity, by its type alone (its address differs from process to process)."""
    if isinstance(a, tuple) and not is_plain(a):
        return "(" + ", ".join(key_text(x) for x in a) + ")"
    if is_plain(a):
        return repr(value_key(a))
    return f"<{type(a).__module__}.{type(a).__qualname__}>"


def guard(what: str, read: Callable[[], Any], show_value: Callable[[Any], str] = show) -> Guard:
    """A guard that the value `read()` returns now stays the same."""
    return Guard(what, read, read(), show_value)


class Expected(str):
    """A guard's reason for a re-trace that ordinary training code makes on purpose (the first
    micro-batch of gradient accumulation finds .grad set; a model switched to eval()): compile.py
    says it at info level, once per function, instead of warning."""


@dataclass(frozen=True)
class GradsUnset:
    """Each tensor's .grad, None when the body first read it, is still None (one check for all of a
    model's parameters: a replay checks it at every call)."""

    tensors: tuple
    names: tuple[str, ...]

    def failed(self) -> str:
        for t, name in zip(self.tensors, self.names):
            if t._grad is not None:
                return Expected(f"{name}.grad: None -> set")
        return ""

    def key(self) -> str:
        return f"grad unset: {', '.join(self.names)}"


@dataclass(frozen=True)
class Modes:
    """Each module's training flag is still what the body read."""

    modules: tuple
    modes: tuple[bool, ...]
    names: tuple[str, ...]

    def failed(self) -> str:
        for m, mode, name in zip(self.modules, self.modes, self.names):
            if m.training is not mode:
                return Expected(f"{name}: training: {mode} -> {m.training}")
        return ""

    def key(self) -> str:
        return "training: " + ", ".join(f"{name}={mode}" for name, mode in zip(self.names, self.modes))


@dataclass(frozen=True)
class Parts:
    """What the modules a body ran were made of is still the same objects: per entry (mapping, key,
    value), mapping.get(key) is value (a child `self.fc`, a function `self.act`, None where no forward
    was set on the instance), or with key None the tuple of mapping's values equals value (a container's
    children in order, compared by identity). One check for all of a model's modules."""

    entries: tuple
    names: tuple[str, ...]

    def failed(self) -> str:
        for i, (mapping, key, value) in enumerate(self.entries):
            if key is None:
                now = tuple(mapping.values())
                if now != value:  # a tuple compares its items by identity first: modules have no __eq__
                    return f"{self.names[i]}: {show_kind(value)} -> {show_kind(now)}"
            elif (now := mapping.get(key)) is not value:
                new = f"another {type(now).__name__}" if type(now) is type(value) else show_kind(now)
                return f"{self.names[i]}: {show_kind(value)} -> {new}"
        return ""

    def key(self) -> str:
        return "parts: " + "; ".join(f"{name} == {key_text(value)}"
                                     for name, (_, _, value) in zip(self.names, self.entries))


@dataclass(frozen=True)
class Held:
    """The tensors `read()` gives (those an optimizer's state dicts hold) are still the objects the body
    used: `opt.state[p]['exp_avg'] = new_tensor` or a new state dict re-traces instead of replaying the
    update of the tensors the trace bound."""

    what: str
    read: Callable[[], tuple]
    values: tuple
    namer: Any

    def failed(self) -> str:
        now = self.read()
        if len(now) == len(self.values) and all(map(operator.is_, now, self.values)):
            return ""
        for old, new in zip(self.values, now):
            if old is not new:
                return f"{self.what}: {self.namer.tensor(old, role_of(old))} -> {show_kind(new)}"
        return f"{self.what}: {len(self.values)} tensors -> {len(now)}"

    def key(self) -> str:
        return f"held: {self.what}: {len(self.values)} tensors"


def is_plain(v: Any) -> bool:
    """An immutable value a trace can bake in as a constant (tuples of such values too)."""
    if isinstance(v, (tuple, frozenset)):
        return all(is_plain(x) for x in v)
    return isinstance(v, _PLAIN)


@functools.lru_cache(maxsize=1024)
def _names(code: types.CodeType) -> tuple[frozenset, frozenset]:
    """(globals read, closure variables read) by code and the code nested in it, less what it assigns
    (a `global n; n += 1` is the function's output, not an input of its trace)."""
    loads, derefs, stores = set(), set(), set()
    for ins in dis.get_instructions(code):
        if ins.opname == "LOAD_GLOBAL":
            loads.add(ins.argval)
        elif ins.opname in ("LOAD_DEREF", "LOAD_CLASSDEREF"):
            derefs.add(ins.argval)
        elif ins.opname in ("STORE_GLOBAL", "DELETE_GLOBAL", "STORE_DEREF", "DELETE_DEREF"):
            stores.add(ins.argval)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            more_loads, more_derefs = _names(c)
            loads |= more_loads
            derefs |= more_derefs
    return frozenset(loads - stores), frozenset(derefs - stores)


_SUBSCRIPTS = ("BINARY_SUBSCR", "STORE_SUBSCR")
_ITER = "iter"  # the last step of a chain the code iterates over (directly, or a dict's view): its items are read


def _view_iterated(ins: list, j: int) -> str:
    """The dict view (items, values or keys) ins[j] fetches when the code calls it without arguments and
    iterates over the result (`for k, w in cfg.items()`), else ''."""
    if ins[j].argval not in ("items", "values", "keys"):
        return ""
    k = j + 1
    while k < len(ins) and ins[k].opname in ("PRECALL", "CALL", "CALL_METHOD", "CACHE") and not ins[k].arg:
        k += 1
    return ins[j].argval if k > j + 1 and k < len(ins) and ins[k].opname == "GET_ITER" else ""


@functools.lru_cache(maxsize=1024)
def _chains(code: types.CodeType) -> frozenset:
    """The values code reads through a closure variable, a global or its first argument (`self`) by
    constant attributes and subscripts (`cfg["w"]`, `args.beta`, `w[0]`, `self.beta`, `t.loss` before a
    call): (kind, name, path) with kind "deref", "global" or "self" and path ((".", attribute) or
    ("[]", key), ...); less those code stores into (`cfg["w"] = ...`: the function's output)."""
    reads, stores = set(), set()
    ins = list(dis.get_instructions(code))
    first = code.co_varnames[0] if code.co_argcount else None
    for i, root in enumerate(ins):
        if root.opname == "LOAD_GLOBAL":
            kind = "global"
        elif root.opname in ("LOAD_DEREF", "LOAD_CLASSDEREF"):
            kind = "deref"
        elif root.opname == "LOAD_FAST" and root.argval == first:
            kind = "self"
        else:
            continue
        path, j = (), i + 1
        while j < len(ins):
            op = ins[j]
            if op.opname in ("LOAD_ATTR", "LOAD_METHOD"):
                view = _view_iterated(ins, j)
                if view:  # `for k, w in cfg.items()`: the dict's entries are read
                    reads.add((kind, root.argval, path + ((_ITER, view),)))
                path += ((".", op.argval),)
                j += 1
                if op.opname == "LOAD_METHOD":
                    break
            elif op.opname == "LOAD_CONST" and j + 1 < len(ins) and ins[j + 1].opname in _SUBSCRIPTS:
                path += (("[]", op.argval),)
                if ins[j + 1].opname == "STORE_SUBSCR":
                    stores.add((kind, root.argval, path))
                    break
                j += 2
            else:
                if op.opname == "STORE_ATTR":
                    stores.add((kind, root.argval, path + ((".", op.argval),)))
                break
        reads.update((kind, root.argval, path[:k]) for k in range(1, len(path) + 1))  # `st["o"]` of `st["o"].step`
        if j < len(ins) and ins[j].opname == "GET_ITER":  # `for t in bank`, `sum(w for w in cfg["ws"])`
            reads.add((kind, root.argval, path + ((_ITER, ""),)))
    for c in code.co_consts:  # comprehensions, lambdas: their globals and the cells they share
        if isinstance(c, types.CodeType):
            reads |= {r for r in _chains(c) if r[0] != "self"}
    return frozenset(reads - stores)


def _chain_reader(root: Callable[[], Any], path: tuple) -> Callable[[], Any]:
    def read():
        v = root()
        try:
            for how, k in path:
                v = getattr(v, k) if how == "." else v[k]
        except Exception:  # a missing key or attribute is a value of its own: the trace saw another
            return MISSING
        return v

    return read


def _text(path: tuple) -> str:
    return "".join(f".{k}" if how == "." else f"[{k!r}]" for how, k in path)


def _function(fn: Callable) -> types.FunctionType | None:
    while isinstance(fn, functools.partial):
        fn = fn.func
    fn = inspect.unwrap(fn) if callable(fn) else fn
    fn = getattr(fn, "__func__", fn)  # a bound method
    return fn if isinstance(fn, types.FunctionType) else None


def _cell_reader(cell) -> Callable[[], Any]:
    def read():
        try:
            return cell.cell_contents
        except ValueError:  # not assigned (yet)
            return MISSING

    return read


def python_value_guards(fn: Callable) -> list[Guard]:
    """Guards on the plain Python values fn names: its closure variables and its module's globals, and
    those of the functions of the user's it names in turn (a helper reading a global learning rate);
    a functools.partial's function, and its keyword arguments."""
    f = _function(fn)
    if f is None:
        return []
    out = [Guard(f"keyword arguments of functools.partial {p.func!r}", functools.partial(_sorted_items, p.keywords),
                 _sorted_items(p.keywords)) for p in _partials(fn) if is_plain(tuple(p.keywords.values()))]
    return out + function_guards([f], top=f, self_of={f: getattr(fn, "__self__", None)})


def _partials(fn: Any) -> Iterator[functools.partial]:
    while isinstance(fn, functools.partial):
        yield fn
        fn = fn.func


def _sorted_items(d: dict) -> tuple:
    return tuple(sorted(d.items(), key=repr))


def _default_guards(f: types.FunctionType, by: str) -> list[Guard]:
    """Guards on f's default arguments (`def step(x, scale=2.0)`, keyword-only ones too), which a call
    that leaves them out reads: `step.__defaults__ = (3.0,)` re-traces. Defaults that are not plain
    values (a tensor, a list) are not guarded."""
    out = []
    if f.__defaults__ and is_plain(f.__defaults__):
        out.append(Guard(f"default arguments{by}", functools.partial(getattr, f, "__defaults__"), f.__defaults__))
    kw = f.__kwdefaults__
    if kw and is_plain(tuple(kw.values())):
        out.append(Guard(f"keyword-only default arguments{by}",
                         lambda: _sorted_items(f.__kwdefaults__ or {}), _sorted_items(kw)))
    return out


def function_guards(functions: list, top: Any = None, self_of: dict | None = None) -> list[Guard]:
    """Guards on the plain closure variables and globals the functions read, and on the plain values
    they reach from those (and from `self`, for a method of an object of the user's: self_of[f]) by
    constant attributes and subscripts (`cfg["w"]`, `args.beta`, `self.beta`), following the user's
    functions and methods they name (at most MAX_HELPERS); the guards of `top` are named without saying
    whose. Modules, tensors and Python modules are not followed: nn.Module guards its own attributes."""
    out, same, items, seen, self_of = [], [], [], set(functions), dict(self_of or {})
    todo = [(f, "" if f is top else f" (read by {f.__qualname__})") for f in functions]
    while todo:
        f, by = todo.pop()
        globals_read, derefs_read = _names(f.__code__)
        cells = dict(zip(f.__code__.co_freevars, f.__closure__ or ()))
        reads = [(f"closure variable {name!r}{by}", _cell_reader(cell), True)
                 for name, cell in cells.items() if name in derefs_read]
        reads += [(f"global {name!r}{by}", functools.partial(f.__globals__.get, name, MISSING), True)
                  for name in sorted(globals_read)]
        out += _default_guards(f, by)
        for kind, name, path in sorted(_chains(f.__code__), key=repr):
            owner = self_of.get(f)
            root = (_cell_reader(cells[name]) if kind == "deref" and name in cells else
                    functools.partial(f.__globals__.get, name, MISSING) if kind == "global" else
                    functools.partial(_identity, owner) if kind == "self" and owner is not None else None)
            iterated = path[-1][0] == _ITER if path else False
            view, path = (path[-1][1], path[:-1]) if iterated else ("", path)
            if root is not None and (_followed(root()) or iterated and path == () and _items(root()) is not None):
                label = {"deref": "closure variable", "global": "global", "self": "argument"}[kind]
                what = f"{label} {name!r}{_text(path)}{by}"
                if iterated:
                    items.append((f"the {view or 'items'} of {what}", _chain_reader(root, path), view))
                else:
                    reads.append((what, _chain_reader(root, path), _held(root(), path)))
        for what, read, held in reads:
            value = read()
            if is_plain(value):
                out.append(Guard(what, read, value))
                continue
            if held and value is not MISSING and not isinstance(value, types.ModuleType):
                same.append((what, read, value))
            owner = getattr(value, "__self__", None) if type(value) is types.MethodType else None
            value = getattr(value, "__func__", value) if owner is not None and _followed(owner) else value
            if users_function(value) and value not in seen and len(seen) < MAX_HELPERS:
                seen.add(value)
                if owner is not None:
                    self_of[value] = owner
                todo.append((value, f" (read by {value.__qualname__})"))
    if same:
        out.append(Same(*map(tuple, zip(*same))))
    for what, read, view in items:  # a list (or a dict's keys, values or entries) the code iterates
        value = _items(read(), view)
        if value is not None:
            out.append(Items(what, functools.partial(_items_of, read, view), value))
    return out


def module_chain_guards(f: types.FunctionType, module: Any, name: str) -> list:
    """Guards on what f, a method of the user's that a module ran (its forward, a helper), reads from
    `self` through an attribute that holds neither a module, a tensor nor a plain value (the module
    guards those itself): a config's field or a dict's or list's entry (`self.cfg["k"]`, `self.opts.k`,
    `self.ks[0]`), the holder by identity and the items of one the method iterates (`for w in self.ws`)."""
    out, same = [], []
    for kind, _, path in sorted(_chains(f.__code__), key=repr):
        if kind != "self" or not path or path[0][0] != "." or path[0][1] not in vars(module):
            continue
        if not _followed(vars(module)[path[0][1]]):
            continue
        iterated = path[-1][0] == _ITER
        view, path = (path[-1][1], path[:-1]) if iterated else ("", path)
        what, read = f"attribute {_text(path)[1:]} of {name}", _chain_reader(functools.partial(_identity, module), path)
        value = read()
        if iterated:
            if _items(value, view) is not None:
                out.append(Items(f"the {view or 'items'} of {what}", functools.partial(_items_of, read, view),
                                 _items(value, view)))
        elif is_plain(value):
            out.append(Guard(what, read, value))
        elif value is not MISSING and _held(module, path):
            same.append((what, read, value))
    if same:
        out.append(Same(*map(tuple, zip(*same))))
    return out


def _items(v: Any, view: str = "") -> tuple | None:
    """The items iterating v (or its dict view `view`: items, values, keys) goes through, for a list, a
    dict or a tuple of objects (a tuple of plain values is a guard of its own), a dict's entries as key,
    value, key, value...; None for anything else (a module, a tensor, a range)."""
    if view:
        if type(v) is not dict:
            return None
        return tuple(x for kv in v.items() for x in kv) if view == "items" else tuple(getattr(v, view)())
    if type(v) in (list, dict) or type(v) is tuple and not is_plain(v):
        return tuple(v)
    return None


def _items_of(read: Callable[[], Any], view: str) -> Any:
    items = _items(read(), view)
    return MISSING if items is None else items


@dataclass(frozen=True)
class Items:
    """The items of a list the body iterated (`for t in bank`, `sum(w * x for w in cfg["ws"])`) are still
    those it went through: as many, plain values equal, other objects the same. An item appended, removed
    or replaced between calls re-traces instead of replaying the loop over the old ones."""

    what: str
    read: Callable[[], Any]
    values: tuple

    def failed(self) -> str:
        now = self.read()
        if now is MISSING:
            return f"{self.what}: {len(self.values)} items -> none"
        if len(now) != len(self.values):
            return f"{self.what}: {len(self.values)} items -> {len(now)}"
        for i, (old, new) in enumerate(zip(self.values, now)):
            if old is not new and not (is_plain(old) and is_plain(new) and value_key(old) == value_key(new)):
                same_kind = type(new) is type(old) and not is_plain(new)
                text = f"another {type(new).__name__}" if same_kind else show_kind(new)
                return f"{self.what}: item {i}: {show_kind(old)} -> {text}"
        return ""

    def key(self) -> str:
        return f"items: {self.what} == {key_text(self.values)}"


def _identity(obj: Any) -> Any:
    return obj


def _held(obj: Any, path: tuple) -> bool:
    """Whether each step of path from obj reads what obj holds (an instance attribute, a dict's, a list's
    or a tuple's entry), not what a property or __getattr__ makes at each read (a new object every time)."""
    try:
        for how, k in path:
            if k not in getattr(obj, "__dict__", ()) if how == "." else type(obj) not in (dict, list, tuple):
                return False
            obj = getattr(obj, k) if how == "." else obj[k]
    except Exception:
        return False
    return True


@dataclass(frozen=True)
class Same:
    """Each object the function names besides plain values (a model, an optimizer, a tensor, a config,
    through a closure variable, a global, an attribute or a dict's entry) is still the same object: a new
    optimizer, another tensor bound to the name, re-traces instead of replaying the one the trace read.
    One check for all of them."""

    whats: tuple[str, ...]
    reads: tuple
    values: tuple

    def failed(self) -> str:
        for i, read in enumerate(self.reads):
            now = read()
            if now is not self.values[i]:
                old = self.values[i]
                new = f"another {type(now).__name__}" if type(now) is type(old) else show_kind(now)
                return f"{self.whats[i]}: {show_kind(old)} -> {new}"
        return ""

    def key(self) -> str:
        return "same: " + "; ".join(f"{what} is {key_text(v)}" for what, v in zip(self.whats, self.values))


def _followed(obj: Any) -> bool:
    """An object whose attributes and entries may hold a trace's hyperparameters (a dict, a config, a
    trainer, a config module of the user's: `config.LR`): not a library's Python module, a tensor, a
    module (which guards its own attributes) or MISSING."""
    if isinstance(obj, types.ModuleType):
        path = getattr(obj, "__file__", None)
        return isinstance(path, str) and not os.path.abspath(path).startswith(_LIBRARY_DIRS)
    return not (obj is MISSING or obj is None or isinstance(obj, Tensor) or _is_module(obj) or is_plain(obj))


MAX_HELPERS = 64  # the user's functions followed from a compiled function's names, at most


def users_function(v: Any) -> bool:
    """A plain Python function of the user's code: neither flame's nor a library's or the standard
    library's (whose globals are no hyperparameters)."""
    if not isinstance(v, types.FunctionType):
        return False
    path = os.path.abspath(v.__code__.co_filename)
    return not path.startswith(_LIBRARY_DIRS) and not v.__code__.co_filename.startswith("<frozen")


def read_users_function(fn: Any) -> None:
    """fn, a function of the user's the body called while traced (a hook, an autograd.Function's forward
    or backward): the plain globals and closure values it reads become guards of the trace, as those of
    a module's forward do (a hook scaling by a global that changes between steps re-traces)."""
    trace = current_trace.get()
    if trace is not None:
        f = getattr(fn, "__func__", fn)  # a bound method's function
        if users_function(f):
            trace.read_function(f)


_LIBRARY_DIRS = tuple({os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
                       *(os.path.abspath(p) + os.sep for p in (sysconfig.get_paths()["stdlib"],
                                                               sysconfig.get_paths()["purelib"],
                                                               sysconfig.get_paths()["platlib"]))})


def _roots(fn: Callable) -> Iterator[tuple[str, Any]]:
    """(name, object) for what fn can reach by name: `self` of a bound method, closure variables,
    globals it reads; fn itself when it is a callable object (a Module)."""
    if not isinstance(fn, (types.FunctionType, types.MethodType)) and not inspect.isbuiltin(fn):
        yield type(fn).__name__.lower(), fn
    if getattr(fn, "__self__", None) is not None:
        yield "self", fn.__self__
    f = _function(fn)
    if f is None:
        return
    for name, cell in zip(f.__code__.co_freevars, f.__closure__ or ()):
        value = _cell_reader(cell)()
        if value is not MISSING:
            yield name, value
    for name in sorted(_names(f.__code__)[0]):
        value = f.__globals__.get(name, MISSING)
        if value is not MISSING:
            yield name, value


def _is_module(obj: Any) -> bool:
    return not isinstance(obj, type) and callable(getattr(obj, "named_modules", None))


def _is_holder(obj: Any) -> bool:
    """An object of the user's (a trainer) whose attributes may hold the modules: not a module, a
    tensor, a class or a Python module."""
    return (hasattr(obj, "__dict__") and not _is_module(obj) and not isinstance(obj, (type, types.ModuleType, Tensor))
            and not callable(obj))


class Namer:
    """The names a user gave to modules and tensors a function reaches: `model.0` for a submodule,
    `model.0.weight` for a parameter, `opt.state[model.0.weight].exp_avg` for optimizer state."""

    def __init__(self, fn: Callable):
        self.fn = fn

    @functools.cached_property
    def names(self) -> dict[int, str]:
        out: dict[int, str] = {}
        roots = list(_roots(self.fn))
        roots += [(f"{name}.{attr}", v) for name, obj in roots if _is_holder(obj)  # one level into self
                  for attr, v in vars(obj).items()]
        for name, obj in roots:  # nn.Module and optim.Optimizer are known by their API (layers above)
            if _is_module(obj):
                try:
                    for path, m in obj.named_modules(prefix=name):
                        out.setdefault(id(m), path)
                    for path, t in list(obj.named_parameters(prefix=name)) + list(obj.named_buffers(prefix=name)):
                        out.setdefault(id(t), path)
                except Exception:  # names only make messages clearer: never fail a compile over them
                    continue
            elif isinstance(obj, Tensor):
                out.setdefault(id(obj), name)
        for name, obj in roots:
            if isinstance(getattr(obj, "param_groups", None), list) and isinstance(getattr(obj, "state", None), dict):
                for p, st in obj.state.items():
                    owner = out.get(id(p), f"param {p._type()}") if isinstance(p, Tensor) else "?"
                    for k, t in (st.items() if isinstance(st, dict) else ()):
                        out.setdefault(id(t), f"{name}.state[{owner}].{k}")
        return out

    def module(self, m: Any) -> str:
        name = self.names.get(id(m))
        return f"{type(m).__name__} {name!r}" if name else f"a {type(m).__name__} module"

    def tensor(self, t: Any, role: str = "tensor") -> str:
        name = self.names.get(id(t))
        return f"{role} {name!r}" if name else f"a captured {role} {t._type()}"


def trace_guards(fn: Callable, trace: Any, namer: Namer, python_values: list[Guard]) -> list:
    """Every guard of one trace (objects with `failed() -> str`): fn's Python values (read before the
    body ran), the choices it made in Python, the plain values it read from modules' attributes, the
    module modes, what the modules it ran were made of and the unset .grad it read."""
    out: list = list(python_values)
    out += [Guard(what, read, value) for what, (read, value) in trace.python_reads.items()]
    out += [Guard(f"attribute {name!r} of {namer.module(obj)}", functools.partial(getattr, obj, name, MISSING), value)
            for obj, name, value in trace.attribute_reads.values()]
    known = {g.what for g in out if isinstance(g, Guard)} | {w for g in out if isinstance(g, Same) for w in g.whats}
    for g in function_guards(list({id(f): f for f, _ in trace.functions_read.values()}.values())):
        if isinstance(g, Same):
            kept = [k for k, w in enumerate(g.whats) if w not in known]
            if kept:
                out.append(Same(*(tuple(part[k] for k in kept) for part in (g.whats, g.reads, g.values))))
        elif g.what not in known:
            out.append(g)
    for f, module in trace.functions_read.values():
        if module is not None:
            out += module_chain_guards(f, module, namer.module(module))
    out += [Held(what, read, values, namer) for what, (read, values) in trace.held_reads.items()]
    if trace.part_reads:
        parts = list(trace.part_reads.values())
        out.append(Parts(tuple((mapping, key, value) for _, _, mapping, key, value in parts),
                         tuple(f"{label} of {namer.module(obj)}" for obj, label, *_ in parts)))
    if trace.mode_reads:
        ms = list(trace.mode_reads.values())
        out.append(Modes(tuple(m for m, _ in ms), tuple(bool(v) for _, v in ms), tuple(namer.module(m) for m, _ in ms)))
    unset = [t for t, had in trace.grad_reads.values() if not had]  # a set one is an input: bindings check it
    if unset:
        out.append(GradsUnset(tuple(unset), tuple(namer.tensor(t, role_of(t)) for t in unset)))
    return out


def guards_key(guards: list) -> str:
    """The guards of a trace as text that is the same in every process tracing alike (each guard's
    `key()`: what it reads and the value it expects): the persistent plan cache keys a compiled trace
    with it beside the graph (flame.compiler.compile_graph's `persist`)."""
    return "\n".join(g.key() for g in guards)


def role_of(t: Any) -> str:
    """What a captured tensor is to a trace, for messages: param, state, const or tensor."""
    return t._role or ("param" if t.requires_grad else "tensor")


@dataclass(frozen=True)
class KeywordNames:
    """The last argument of a compiled call given keyword-only arguments (or **kwargs): the values
    before it are those arguments, by these names (replay.bind_keywords; part of the cache key)."""

    names: tuple[str, ...]


def describe_arguments(fn: Callable, args: list) -> list[tuple[str, Any]]:
    """(label, what it is) per argument: ('argument 0 (x)', ('tensor', [64, 784], 'f32', False))."""
    try:
        params = [p.name for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    if args and isinstance(args[-1], KeywordNames):  # the keyword arguments by their names
        params[len(args) - 1 - len(args[-1].names):] = args[-1].names
    out = []
    for i, a in enumerate(args):
        label = f"argument {i}" + (f" ({params[i]})" if i < len(params) else "")
        if isinstance(a, Tensor):
            out.append((label, ("tensor", list(a.shape), a.dtype.name, a.requires_grad)))
        else:
            out.append((label, ("value", a)))
    return out


def argument_changes(old: list[tuple[str, Any]], new: list[tuple[str, Any]]) -> str:
    """What differs between two calls' arguments, in words ('argument 0 (x): shape [64, 784] ->
    [32, 784]'); '' if nothing does."""
    if len(old) != len(new):
        return f"number of arguments: {len(old)} -> {len(new)}"
    changes = []
    for (label, a), (_, b) in zip(old, new):
        if a[0] != b[0]:
            changes.append(f"{label}: {_kind(a)} -> {_kind(b)}")
        elif a[0] == "value":
            if value_key(a[1]) != value_key(b[1]):
                changes.append(f"{label}: value {show(a[1])} -> {show(b[1])}")
        else:
            for what, i in (("shape", 1), ("dtype", 2), ("requires_grad", 3)):
                if a[i] != b[i]:
                    changes.append(f"{label}: {what} {a[i]} -> {b[i]}")
    return "; ".join(changes)


def _kind(a: tuple) -> str:
    return "a Tensor" if a[0] == "tensor" else f"{type(a[1]).__name__} {show(a[1])}"
