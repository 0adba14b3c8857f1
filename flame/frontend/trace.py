"""A Trace records a Python function into a Graph. Concrete tensors the function touches (parameters
reached through closures, optimizer state, RNG seed/offset) are lifted to graph inputs with a role
(ARCHITECTURE.md "Graph inputs"); in-place updates rebind them and become aliased outputs (ARCHITECTURE.md "Pure IR").

A trace never changes a concrete tensor's `.grad`: what the body assigns (zero_grad(), backward())
goes to the trace's own view of it (`grad_view`), handed to the tensor after each call. The trace
also records what it read that the cache key does not hold (a `.grad` before the body wrote it, a
module's training flag): flame.frontend.guards turns those reads into checks before each replay."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from flame._identity import ByIdentity
from flame.errors import AutogradError, TraceError
from flame.frontend.context import current_trace, no_grad, user_location
from flame.frontend.counted_writes import refused, saved_modified_error
from flame.frontend.data_writes import traced_live_reads
from flame.frontend.dispatch import freed_graph_error, fresh
from flame.frontend.hooks import (
    accumulate_and_notify,
    hand_over_traced_hooks,
    hooks_state,
    is_hooked,
    own_hooks,
    run_grad_reducers,
    traced_unit,
    unit_of,
)
from flame.frontend.saved import reads, saves
from flame.frontend.tensor import Tensor
from flame.frontend.views import stale
from flame.ir import registry
from flame.ir.builder import Builder
from flame.ir.dtypes import DType
from flame.ir.graph import Graph, Value
from flame.ir.ops.elementwise import STOP_GRADIENT, STRAIGHT_THROUGH
from flame.ir.types import TensorType
from flame.passes.autodiff import autodiff


@dataclass
class Binding:
    """Where a graph input's array comes from at each call: a call argument, a captured tensor, or a
    getter of a Python hyperparameter (a learning rate changed by a scheduler)."""

    kind: str  # "arg" | "tensor" | "grad" (the tensor's .grad at call time) | "arg_grad" (the argument's) | "getter"
    arg: int = -1
    tensor: object = None
    getter: Callable[[], float] | None = None
    dtype: DType | None = None
    cached: tuple | None = None  # "getter": (value, device array, executor) of the last call: no re-upload
    requires_grad: bool = False  # "tensor": its requires_grad when traced (freezing one re-traces)

    def scalar_array(self, executor):
        """A "getter" binding's value as a 0-d device array, uploaded again only when the value changed."""
        value = self.getter()
        if isinstance(value, Tensor):  # a rate held as a tensor, filled in place since (torch's schedulers): its value
            value = value.item()
        cached = self.cached
        if cached is None or cached[0] != value or cached[2] is not executor:
            cached = self.cached = (value, executor.asarray(np.asarray(value, dtype=self.dtype.np_dtype)), executor)
        return cached[1]


@dataclass
class Trace:
    graph: Graph
    builder: Builder = field(init=False)
    bindings: list[Binding] = field(default_factory=list)
    current: dict[int, tuple[object, Value]] = field(default_factory=dict)  # id(tensor) -> (tensor, value)
    inputs_of: dict[int, Value] = field(default_factory=dict)
    # value -> the ids in `current` whose input (inputs_of) or current value it is (kept by _bind)
    holders: dict[Value, set[int]] = field(default_factory=dict)
    args: list[tuple[int, object]] = field(default_factory=list)  # (argument position, traced proxy)
    # result index -> the captured tensor or argument position the body returned itself (`return w`,
    # `return x.add_(1)`), or (that, view ops) for a view of one: handed back as that very tensor, or a
    # view of it, as torch returns them (replay.returned_as_is)
    returned_as_is: dict[int, object] = field(default_factory=dict)
    # results that are another result or a view of one (replay.returned_shared)
    returned_shared: list = field(default_factory=list)
    # id(concrete tensor) -> (tensor, its .grad as the body sees it now: None, or a traced tensor)
    grad_view: dict[int, tuple] = field(default_factory=dict)
    grad_reads: dict[int, tuple] = field(default_factory=dict)  # id -> (tensor, had a .grad) read before written
    grad_writes: set[int] = field(default_factory=set)  # ids of tensors whose .grad the body assigned
    grad_inputs: dict[int, Value] = field(default_factory=dict)  # id -> the "state" input of its .grad
    grad_held: dict[int, Tensor] = field(default_factory=dict)  # id -> the traced tensor that .grad input is
    # id(argument proxy) -> (position, type of the caller's .grad or None) until the body reads or sets it
    arg_grad_unread: dict[int, tuple] = field(default_factory=dict)
    arg_grad_reads: dict[int, bool] = field(default_factory=dict)  # position -> whether the .grad it read was set
    mode_reads: dict[int, tuple] = field(default_factory=dict)  # id(module) -> (module, training) first read
    freed: set = field(default_factory=set)  # ops a backward() or autograd.grad() without retain_graph went through
    # a backward() freed some: the outputs carry no history for a backward outside (compile.py)
    backward_freed: bool = False
    python_reads: dict[str, tuple] = field(default_factory=dict)  # what -> (read, value): a Python choice made
    # (id(object), attribute) -> (object, attribute, value): a plain value read from an attribute of an
    # object whose class asks for it (nn.Module: its hyperparameters, `self.eps`, `self.scale`)
    attribute_reads: dict[tuple, tuple] = field(default_factory=dict)
    # (id(object), label) -> (object, label, mapping, key, value): what a module was made of where the body
    # ran it (a child `self.fc`, a function `self.act`, a forward set on the instance), by identity
    part_reads: dict[tuple, tuple] = field(default_factory=dict)
    # id(concrete tensor) -> (tensor, its requires_grad as the body began) for those whose flag the body set
    # (a GAN's step freezing the discriminator): bound with that value, set again after each replay
    requires_grad_writes: dict[int, tuple] = field(default_factory=dict)
    # (tensor or argument position, flag) the body left: requires_grad_set() and the arguments' it changed
    requires_grad_final: list = field(default_factory=list)
    # id(module) -> (module, its training flag as the body began) for those the body switched (model.train()
    # at the top of a step, model.eval() in an evaluation): read as that, set again after each replay
    mode_writes: dict[int, tuple] = field(default_factory=dict)
    modes_final: list = field(default_factory=list)  # (module, training) the body left: modes_set()
    # checks run when the body returns (a library's: an optimizer's options the body set after using them
    # raise), and Python state the body set that each replay sets again before it runs (group['lr'] = lr)
    after_body: list = field(default_factory=list)
    before_run: list = field(default_factory=list)
    # what -> (read, objects): the objects a Python structure held when the body used them (an optimizer's
    # state tensors), by identity
    held_reads: dict[str, tuple] = field(default_factory=dict)
    # (id of f, id of its module) -> (a method of the user's the body fetched, its module or None)
    functions_read: dict[tuple, tuple] = field(default_factory=dict)
    hooked: dict[int, object] = field(default_factory=dict)  # id -> traced tensor with hooks or retain_grad()
    # id -> a traced tensor the body made a leaf that requires grad (x.detach().requires_grad_(),
    # flame.zeros(n, requires_grad=True)): backward() fills its .grad, as it does a concrete leaf's
    made_leaves: dict[int, object] = field(default_factory=dict)
    # ids of arguments a write recorded with gradients rebound (x += y): no longer leaves, as in torch
    written_args: set = field(default_factory=set)
    writes: dict[int, int] = field(default_factory=dict)  # id(concrete tensor) -> writes into it (frontend/views.py)
    differentiated: tuple = ()  # tensors a flame.grad being traced differentiates by, whatever their requires_grad
    no_grad: set = field(default_factory=set)  # Values of ops recorded with gradients off (no_grad)
    # a value a write replaced -> (the tensor written, whether the write is one torch's version counter counts):
    # the VJPs that read it (where counted, through a `.data` tensor taken of it) read the tensor as it is
    # when the backward runs (data_writes.py)
    data_written: dict = field(default_factory=dict)
    # values a write torch's version counter counts replaced (with a gradient recorded, under no_grad, through
    # detach(); the values of a `.data` tensor written through itself: data_writes.count_write_through): a
    # backward running an op recorded before the write that saved one raises (counted_writes.py)
    counted: dict = field(default_factory=dict)  # value -> the number of ops recorded before the write
    # values `.data` made (a stop_gradient sharing its input's storage but not its version counter, unlike
    # detach()'s): a counted write into the input is none into them (counted_writes.refused), and what read
    # them reads the storage at backward (data_writes.traced_live_reads)
    data_links: set = field(default_factory=set)
    # values a view op made as a copy, where torch's makes one (a reshape of a transpose): they share no
    # storage, nor version counter, with its input (counted_writes.refused)
    view_copies: set = field(default_factory=set)
    # value -> the number of ops recorded before an in-place op on it began (indexing.stand_in): its own ops
    # come after, and read the value as torch's node reads what it clones (counted_writes.mark)
    write_begun: dict = field(default_factory=dict)
    # each flame.utils.checkpoint region's arguments, by its number (counted_writes.RegionArgs)
    checkpoint_args: dict = field(default_factory=dict)
    # op -> what torch's node saved, for the ops of a composite torch records as one node (torch_saves.py)
    torch_saves: dict = field(default_factory=dict)
    # a written storage's root tensor -> the (result, view) of each in-place op written into a view of it while
    # tracing (counted_writes.note_result): the trace keeps them, so they go with it
    view_results: ByIdentity = field(default_factory=ByIdentity)

    def __post_init__(self):
        self.builder = Builder(self.graph)

    def add_arg(self, t, index: int):
        v = self.graph.add_input(TensorType(t.shape, t.dtype), "data")
        self.bindings.append(Binding("arg", arg=index))
        out = Tensor._traced(v, self)
        out._requires_grad = t.requires_grad  # the argument's flag (a proxy is no leaf the body made)
        out._hooks = own_hooks(t)  # the caller's hooks on it run in the traced backward
        out._post_hooks = t._post_hooks  # and its post-accumulate-grad hooks after its .grad is written
        # tracked like a captured tensor: an in-place update becomes an aliased output and
        # loss.backward() gives it a .grad, both handed to the caller's tensor after each call
        self.inputs_of[id(out)] = v
        self._bind(id(out), out, v)
        self.args.append((index, out))
        g = t._grad
        self.arg_grad_unread[id(out)] = (index, None if g is None else TensorType(g.shape, g.dtype))
        return out

    def read_arg_grad(self, proxy):
        """An argument's .grad, first read while tracing (before the body set it): the caller's .grad,
        as a "state" input bound to that argument's .grad at every call (updated in place, it is an
        output aliased to it), or None; which of the two is a check before each replay (Replay.changed)."""
        index, ty = self.arg_grad_unread.pop(id(proxy))
        self.arg_grad_reads[index] = ty is not None  # its type is the argument's (Tensor.grad's setter checks)
        if ty is not None:
            v = self.graph.add_input(ty, "state")
            self.bindings.append(Binding("arg_grad", arg=index))
            self.grad_inputs[id(proxy)] = v
            proxy._grad = self.grad_held[id(proxy)] = Tensor._traced(v, self)
        return proxy._grad

    def value_of(self, t) -> Value:
        """The Value of tensor t in this trace, lifting a concrete tensor to a graph input (a view its
        base's writes left behind is derived again first: frontend/views.py; in this trace, also when
        the body has returned and the outputs are read)."""
        if t._base is not None and stale(t):
            token = current_trace.set(self) if current_trace.get() is None else None
            try:
                t = fresh(t)
            finally:
                if token is not None:
                    current_trace.reset(token)
        if t._value is not None:
            if t._trace is not self:
                raise TraceError(f"a tensor from another trace was used here\n  at {user_location()}")
            return t._value
        hit = self.current.get(id(t))
        if hit is not None:
            return hit[1]
        role = t._role or ("param" if t.requires_grad else "const")
        v = self.graph.add_input(TensorType(t.shape, t.dtype), role)
        rg = self.requires_grad_writes.get(id(t), (t, t.requires_grad))[1]  # as the call found it
        self.bindings.append(Binding("tensor", tensor=t, requires_grad=rg))
        self.inputs_of[id(t)] = v
        self._bind(id(t), t, v)
        return v

    def _bind(self, key: int, t, v: Value) -> None:
        """current[key] = (t, v), with `holders` kept up to date."""
        old = self.current.get(key)
        if old is not None and old[1] is not v and old[1] is not self.inputs_of.get(key):
            self.holders[old[1]].discard(key)
        self.current[key] = (t, v)
        self.holders.setdefault(v, set()).add(key)

    def read_grad(self, t):
        """t.grad of a concrete tensor, read while tracing. The first read before the body assigned it
        depends on the call's state: a set .grad becomes a "state" input bound to t.grad at every call,
        and whether it was set is recorded (a guard of the trace)."""
        hit = self.grad_view.get(id(t))
        if hit is not None:
            return hit[1]
        g = t._grad
        self.grad_reads[id(t)] = (t, g is not None)
        if g is not None:
            v = self.graph.add_input(TensorType(g.shape, g.dtype), "state")
            self.bindings.append(Binding("grad", tensor=t))
            self.grad_inputs[id(t)] = v
            g = self.grad_held[id(t)] = Tensor._traced(v, self)
        self.grad_view[id(t)] = (t, g)
        return g

    def write_grad(self, t, value) -> None:
        """t.grad = value for a concrete tensor while tracing: the trace's view changes, t does not
        (the compiled function hands the final view to t after each call)."""
        self.grad_view[id(t)] = (t, value)
        self.grad_writes.add(id(t))

    def read_python(self, what: str, read: Callable[[], object]):
        """read() now, recorded: a Python value the body branched on (an optimizer's weight_decay != 0),
        so the trace holds only while read() gives the same."""
        value = read()
        self.python_reads.setdefault(what, (read, value))
        return value

    def read_attribute(self, obj, name: str, value) -> None:
        """A plain value read from obj's attribute `name` while tracing: the trace holds while it stays."""
        self.attribute_reads.setdefault((id(obj), name), (obj, name, value))

    def read_part(self, obj, label: str, mapping: dict, key: str | None) -> None:
        """What obj is made of, read while tracing: mapping.get(key), or with key None the tuple of
        mapping's values (a container's children in order). The trace holds while it is the same
        objects (a layer replaced, appended or deleted is another program)."""
        if (id(obj), label) not in self.part_reads:
            value = tuple(mapping.values()) if key is None else mapping.get(key)
            self.part_reads[id(obj), label] = (obj, label, mapping, key, value)

    def write_requires_grad(self, t) -> None:
        """The body is about to set a concrete tensor's requires_grad: its flag as the call found it is
        what a replay checks (the first write keeps it), the flag the body leaves is set after each replay
        (requires_grad_set)."""
        self.requires_grad_writes.setdefault(id(t), (t, t._requires_grad))

    def requires_grad_set(self) -> list[tuple]:
        """(tensor, requires_grad) for each concrete tensor whose flag the body set, as it is now (after
        the body ran): what a replay sets again."""
        return [(t, t._requires_grad) for t, _ in self.requires_grad_writes.values()]

    def read_held(self, what: str, read: Callable[[], tuple]) -> None:
        """The objects read() gives (tensors a structure holds: an optimizer's state dicts), used while
        tracing: the trace holds while read() gives the same objects (a state tensor replaced between
        steps is another input, not the one bound)."""
        if what not in self.held_reads:
            self.held_reads[what] = (read, read())

    def read_function(self, f, module=None) -> None:
        """A function of the user's fetched while tracing (a module's forward, with that module): the
        plain globals and closure variables it reads are guards too (guards.function_guards), and what
        it reads through the module's configs (guards.module_chain_guards)."""
        self.functions_read.setdefault((id(f), id(module)), (f, module))

    def read_mode(self, module, training: bool) -> None:
        """A module's training flag was read: the trace holds for the mode the call found it in (the body
        may have switched it before reading it: write_mode)."""
        self.mode_reads.setdefault(id(module), (module, self.mode_writes.get(id(module), (module, training))[1]))

    def write_mode(self, module, training: bool) -> None:
        """The body is about to switch a module's training flag, now `training` (the first switch keeps
        the flag the call found), which each replay sets again as the body left it (modes_set)."""
        self.mode_writes.setdefault(id(module), (module, training))

    def modes_set(self) -> list[tuple]:
        """(module, training) for each module whose mode the body switched, as it is now (after the body
        ran): what a replay sets again."""
        return [(m, m.__dict__.get("_training", True)) for m, _ in self.mode_writes.values()]

    def scalar(self, getter: Callable[[], float], dtype: DType):
        """A 0-d input whose value is read from getter() at every call (no re-trace on change)."""
        v = self.graph.add_input(TensorType((), dtype), "scalar")
        self.bindings.append(Binding("getter", getter=getter, dtype=dtype))
        return Tensor._traced(v, self)

    def assign(self, t, v: Value) -> None:
        """t.copy_(...) while tracing: t's value from here on is v."""
        if t._value is not None:
            hand_over_traced_hooks(t)  # hooks registered before the write see the gradient of t as it was
            t._value = v
            if id(t) in self.current:  # an argument of the traced function
                self._bind(id(t), t, v)
            return
        self.value_of(t)
        self._bind(id(t), t, v)

    def requires_grad(self, t) -> bool:
        """Whether tensor t (traced, or concrete and used in this trace) requires grad as torch would
        say: it requires grad itself, or is computed (through ops with a gradient, with gradients on)
        from a tensor that does (or from one a flame.grad being traced differentiates by). Known while
        tracing: a trace is keyed on its arguments' and captured tensors' requires_grad."""
        differentiated = self.differentiated
        if t.requires_grad or differentiated and any(d is t for d in differentiated):
            return True
        start = t._value if t._value is not None else self.current.get(id(t), (None, None))[1]
        if start is None:
            return False
        # wanted: the input or current value of a tensor that requires grad (found through `holders`: a
        # set of all of them per question would make a step's optimizer writes quadratic in its tensors)
        wanting = {d._value if d._value is not None else self.inputs_of.get(id(d)) for d in differentiated} \
            if differentiated else set()
        wanting |= {m._value for m in self.made_leaves.values() if m.requires_grad}  # leaves the body made
        current = self.current
        seen, todo = set(), [start]
        while todo:
            v = todo.pop()
            if v in wanting or any(current[k][0].requires_grad for k in self.holders.get(v, ())):
                return True
            if v in seen or v in self.no_grad or v.producer is None or registry.get(v.producer.name).vjp is None:
                continue
            seen.add(v)
            todo.extend(v.producer.inputs)
        return False

    def mutated(self) -> list[tuple[object, int, Value]]:
        """(tensor, input index, new value) for every argument or captured tensor updated in place."""
        out = []
        for key, (t, v) in self.current.items():
            v0 = self.inputs_of[key]
            if v is not v0:
                out.append((t, self.graph.inputs.index(v0), v))
        return out

    def grad_outputs(self, g: Graph) -> list:
        """Appends to g's outputs every .grad the body leaves behind and returns, per tensor, (argument
        position or the captured tensor, output index or None for "set to None"), each the tensor's new
        .grad. A .grad input (a captured tensor's, or an argument's read before the body set it) the body
        updates in place (zero_(), backward()'s hooks.accumulate_grad) is an output aliased to that input,
        as a parameter's update is: the plan writes it into the .grad's own buffer."""
        grads = []
        for position, proxy in self.args:  # arguments: their traced proxies carry the .grad the body leaves
            new, key = proxy._grad, id(proxy)
            if key in self.arg_grad_unread or new is self.grad_held.get(key, False):
                continue  # not touched, or the .grad input (left as it was, or updated in place)
            if new is not None:
                grads.append((position, len(g.outputs)))
                g.outputs.append(self.value_of(new))
            elif self.arg_grad_reads.get(position, True):  # set to None (not only read as None)
                grads.append((position, None))
        for key, held in self.grad_held.items():  # updated in place (seen by references to it, even if replaced)
            v = self.value_of(held)
            if v is not self.grad_inputs[key]:
                g.aliases[len(g.outputs)] = g.inputs.index(self.grad_inputs[key])
                g.outputs.append(v)
        for key, (t, view) in self.grad_view.items():
            if view is None:
                if key in self.grad_writes:
                    grads.append((t, None))
                continue
            if view is not self.grad_held.get(key):  # else the .grad input, left as it was or updated in place
                grads.append((t, len(g.outputs)))
                g.outputs.append(self.value_of(view))
        return grads

    def backward(self, loss, gradient=None, retain_graph: bool | None = None, create_graph: bool = False) -> None:
        """loss.backward() inside a trace: autodiff appends the backward ops; leaves get traced .grad.
        Without retain_graph=True (its default is create_graph, as torch's) the ops it went through are
        freed, as eager backward() frees its nodes: a second backward through one raises. The gradients
        carry their history only with create_graph=True (a gradient penalty differentiates them)."""
        if retain_graph is None:
            retain_graph = create_graph
        if not self.requires_grad(loss):  # as eagerly: a loss made under no_grad, detached or of frozen weights
            raise AutogradError(
                f"backward(): element 0 of tensors does not require grad and does not have a grad_fn (no input had "
                f"requires_grad=True)\n  at {user_location()}"
            )
        seed = self.value_of(gradient) if gradient is not None else None
        if seed is None and loss.numel() != 1:
            raise AutogradError(
                f"backward(): grad can be implicitly created only for scalar outputs; a non-scalar "
                f"{list(loss.shape)} tensor needs a gradient argument\n  at {user_location()}"
            )
        leaves, leaf_values = self._grad_leaves()
        self.builder.loc = user_location()
        before = len(self.freed)
        grads = self.differentiate(self.value_of(loss), leaf_values, seed, self._grad_hooks(leaves), retain_graph)
        self.backward_freed = self.backward_freed or len(self.freed) > before
        _check_no_eager_history(leaves, grads)
        if not create_graph:  # no history: a later backward through a loss reading a .grad (p * p.grad)
            # flows to p alone, not on into the ops that computed the gradient
            grads = [None if gv is None else self.builder.emit(STOP_GRADIENT.name, gv) for gv in grads]
        with no_grad():  # a later gradient is added into the existing .grad in place (hooks.accumulate_grad)
            for t, gv in zip(leaves, grads):
                if gv is not None:
                    accumulate_and_notify(t, Tensor._traced(gv, self))
        run_grad_reducers(t for t, gv in zip(leaves, grads) if gv is not None)

    def differentiate(self, root: Value, wrt: list[Value], seed: Value | None = None, hooks=(),
                      retain: bool = False) -> list:
        """gradients() for backward() and autograd.grad(): one through an op that an earlier one without
        retain_graph freed raises torch's error; without `retain` the ops it went through whose saved values
        its backward read are freed, as the eager backward frees its nodes."""
        used, carries = self._backward_ops(root, wrt)
        again = next((op for op in self.graph.ops if op in used and op in self.freed), None)
        if again is not None:
            raise freed_graph_error(again.name, again.loc)
        start = len(self.graph.ops)
        formulas: set = set()
        grads = self.gradients(root, wrt, seed, hooks, (used, carries), formulas)
        if not retain:
            read = reads(self.graph.ops[start:])
            self.freed |= {op for op in used if saves(op, read) or op in formulas}
        return grads

    def gradients(self, root: Value, wrt: list[Value], seed: Value | None = None, hooks=(), ops=None,
                  formulas: set | None = None) -> list:
        """The gradients of root with respect to wrt, appended to the graph (passes/autodiff.py): every
        traced backward (backward(), flame.autograd.grad, flame.grad) takes them here. torch's error first
        where the backward runs an op that saved a value a counted write replaced since (counted_writes.py;
        `ops`: _backward_ops(root, wrt) where the caller has them). The VJPs of the ops that read or made a
        value a write through .data replaced read the tensor as it is now (data_writes.traced_live_reads),
        as torch's backward reads the storage. `formulas`, where given, gets the ops whose gradient torch's
        formula of a composite gave: torch's node, which a backward frees."""
        if self.counted:
            used, carries = ops or self._backward_ops(root, wrt)
            found = refused(self.graph.ops, used, self.counted, carries, self.torch_saves, self.checkpoint_args,
                            self.data_links | self.view_copies)
            if found is not None:
                raise saved_modified_error(*found)
        live, composites = traced_live_reads(self.graph, self.written_now(), self.builder, self.torch_saves,
                                             self.data_links, self.view_copies)
        if formulas is not None:
            formulas.update(composites or ())
        return autodiff(self.graph, root, wrt, seed, hooks, unpacked=live, composites=composites)

    def written_now(self) -> dict[Value, tuple[Value, bool]]:
        """data_written, each tensor as its value now."""
        return {v: (self.value_of(t), counted) for v, (t, counted) in self.data_written.items()}

    def wrt_value(self, t) -> Value:
        """The value a gradient with respect to tensor t is taken for: t's, or where a write recorded no
        gradient into t since (_written_leaf), t's as it was, which the ops that read it before add to."""
        return _written_leaf(self.value_of(t))

    def _grad_hooks(self, leaves: list) -> list:
        """The gradient hooks of a backward, traced into it (passes/autodiff.py `hooks`): one per group of
        tensors whose hooks run together (frontend/hooks.py), from the traced tensors given hooks or
        retain_grad() and the leaves with hooks. Which hooks the leaves and modules have is a guard."""
        self.guard(hooks_state, "the hooks registered on leaf tensors and modules")
        tensors = [t for t in self.hooked.values() if t._value is not None] + [t for t in leaves if is_hooked(t)]
        hooks, done = [], set()
        for t in tensors:
            if id(t) in done:
                continue
            unit = unit_of(t)
            done.update(id(u) for u in unit)
            fn = traced_unit(unit, lambda v: Tensor._traced(v, self), self.value_of)
            hooks.append((tuple(self.value_of(u) for u in unit), fn))
        return hooks

    def guard(self, read: Callable[[], object], what: str) -> None:
        """Python state the traced graph depends on (read() now); a call when read() returns something
        else re-traces (or reuses a trace made with that value): read_python without the value."""
        self.read_python(what, read)

    def _grad_leaves(self) -> tuple[list, list[Value]]:
        """(the leaves a backward fills the .grad of, the values their gradients are taken for): the
        arguments and captured tensors that require grad (not those a write recorded with gradients
        rebound) and the leaves the body made."""
        leaves = [t for key, (t, _) in self.current.items()
                  if t.requires_grad and t.dtype.is_float and key not in self.written_args]
        made = [t for t in self.made_leaves.values() if t.requires_grad and t.dtype.is_float]
        return leaves + made, [_written_leaf(self.value_of(t)) for t in leaves] + [t._value for t in made]

    def refused_by_outputs(self, outputs: list[Value], needs: tuple[int, ...]) -> tuple:
        """(index, op name, its location, freed) for each output at `needs` a backward from which (outside
        the trace, through compiled_outputs) runs an op that an autograd.grad() without retain_graph freed
        (freed: True) or that saved a value a counted write replaced (False)."""
        if not self.counted and not self.freed:
            return ()
        leaves = self._grad_leaves()[1]
        got = []
        for k in needs:
            used, carries = self._backward_ops(outputs[k], leaves)
            again = next((op for op in self.graph.ops if op in used and op in self.freed), None)
            if again is not None:
                got.append((k, again.name, again.loc, True))
                continue
            found = self.counted and refused(self.graph.ops, used, self.counted, carries, self.torch_saves,
                                             self.checkpoint_args, self.data_links | self.view_copies)
            if found:
                got.append((k, *found, False))
        return tuple(got)

    def _backward_ops(self, loss: Value, leaves: list[Value]) -> tuple[set, set]:
        """(the ops a backward from loss to leaves goes through, the values that carry a gradient from
        the leaves): the ops on a path from a leaf to the loss (not the op making a leaf, where the body
        made one: Trace.made_leaves). A value recorded with gradients off carries none: an optimizer's
        update of a parameter, computed under no_grad from the gradient of an earlier backward, is not a
        path back into that backward's graph."""
        leafset, on_path = set(leaves), set()
        carries, off = set(leafset), self.no_grad
        for op in self.graph.ops:
            if op.name != STOP_GRADIENT.name and op.out not in off and not carries.isdisjoint(op.inputs):
                carries.add(op.out)
        producer = {op.out: op for op in self.graph.ops if op.out not in leafset}
        stack = [loss]
        while stack:
            op = producer.get(stack.pop())
            if op is not None and op.out in carries and op not in on_path:
                on_path.add(op)
                stack.extend(op.inputs)
        return on_path, carries


def _check_no_eager_history(leaves: list, grads: list) -> None:
    """A backward inside a trace that reaches a tensor made outside it by eager ops with a gradient history
    (a log-probability kept in a list by eager code, then summed in the compiled step) cannot carry the
    gradient on through that history to its leaves: a TraceError naming where it was made, rather than a
    step that trains nothing."""
    for t, gv in zip(leaves, grads):
        node = t._node if t._value is None else None
        if gv is not None and node is not None:
            raise TraceError(
                f"backward() inside a compiled function reaches a {list(t.shape)} tensor made outside it, by "
                f"{node.name} at {node.loc}, whose gradient history is eager: the gradient cannot flow on through "
                f"that history to its leaves (the step would train nothing). Compute it inside the compiled "
                f"function from its inputs (pass the inputs, such as the states, as arguments), or run the "
                f"backward eagerly\n  at {user_location()}"
            )


def _written_leaf(v: Value) -> Value:
    """The value a leaf's gradient is taken for: v, or where v is the leaf written with no gradient
    recorded (under no_grad, through detach(): straight_through of what it was and the new values), the
    leaf as it was, so what read it before the write adds to its gradient too, as torch's one leaf."""
    while v.producer is not None and v.producer.name == STRAIGHT_THROUGH.name:
        v = v.producer.inputs[0]
    return v
