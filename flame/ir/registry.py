"""The op registry: each op is declared ONCE with its attributes, shape/dtype rule, NumPy reference,
VJP rule and compiler category (STYLE.md "One op, one place"). CUDA text lives in codegen/snippets.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flame.errors import DTypeError, VerifyError
from flame.ir.dtypes import DType, dtype_of
from flame.ir.graph import Graph, Op, SubGraph, Value
from flame.ir.types import TensorType

# library: one call into a vendor library (cuDNN attention) on the GPU, never a generated kernel
CATEGORIES = ("elementwise", "reduction", "movement", "matmul", "library", "opaque")
AUTOCAST = ("", "lower", "f32", "promote", "widest", "keep")  # OpDef.autocast (frontend/autocast.py)
# OpDef.cost, an elementwise op's work per element: "" a few instructions; "division" IEEE division or
# square root (many instructions); "transcendental" a call of the math library (expf, logf, tanhf, ...)
COSTS = ("", "division", "transcendental")
REQUIRED = object()


@dataclass(frozen=True)
class Attr:
    """An attribute's kind and default. Kinds: int, float, number, bool, str, ints, pairs, dtype, graph
    (a flame.ir.graph.SubGraph, or a Graph made into one)."""

    kind: str
    default: Any = REQUIRED
    choices: tuple = ()


def _as_ints(v: Any) -> tuple[int, ...]:
    if isinstance(v, (int,)) and not isinstance(v, bool):
        return (int(v),)
    return tuple(int(x) for x in v)


_COERCE: dict[str, Callable[[Any], Any]] = {
    "int": int,
    "float": float,
    "number": lambda v: v if isinstance(v, bool) else (v if isinstance(v, int) else float(v)),
    "bool": bool,
    "str": str,
    "ints": _as_ints,
    "pairs": lambda v: tuple(tuple(int(a) for a in p) for p in v),
    "dtype": dtype_of,
    "graph": lambda v: v if isinstance(v, SubGraph) else SubGraph(v) if isinstance(v, Graph) else _not_graph(v),
}


def _not_graph(v: Any):
    raise TypeError(f"{v!r} is not a graph")


@dataclass(frozen=True)
class View:
    """Trait of a movement op that computes nothing: out[c] = in[index_map(op)(c)].
    index_map(op): the IndexMap from the output's coordinates to the input's, or None where the op
    is not affine (a reshape that merges dims). relabel: on contiguous buffers the output is the
    input's bytes under another shape (no copy needed; the plan makes it an alias). perm: for a view
    that only reorders axes (permute), op -> the order: output axis k is input axis perm(op)[k].
    strided(array, out, **attrs): the op as PyTorch's view, sharing the input's storage: a NumPy or
    CuPy view of a NumPy or CuPy array (out: the output's shape), which may be a copy only where PyTorch's
    reshape copies too; None where PyTorch copies (flip). Eager views are made so (frontend/views.py).
    layout(shape, strides, out, **attrs): PyTorch's layout of the result from its input's (shape and
    strides, in elements): (how many elements past the input's first its first lies, its strides), by
    PyTorch's rule for the op, which fixes the strides of dims of size 1 and of tensors with no element
    that the elements alone leave open (frontend/views.py reads a view's stride() and storage_offset() so)."""

    index_map: Callable[[Op], Any]  # an IndexMap (flame.ir.indexmap, which reads this registry) or None
    relabel: bool = False
    perm: Callable[[Op], tuple[int, ...]] | None = None  # a view that only reorders axes (permute): its order
    strided: Callable[..., Any] | None = None
    layout: Callable[..., tuple[int, list[int]]] | None = None


@dataclass(frozen=True)
class Reduce:
    """Trait of a reduction: identity is the accumulator's start ("zero", "lowest" or "highest");
    index: the result is the position of the winner (argmax), not a combined value, so the op is
    not a monoid the row kernels fold (it keeps its own kernel); regroups: the reduction over several
    dims is the reduction of its reduction over some of them, whatever the grouping (max, min: each
    picks one of the elements; a sum's rounding depends on the grouping), so it may run in stages."""

    identity: str
    index: bool = False
    regroups: bool = False


@dataclass(frozen=True)
class OpDef:
    """Everything the compiler knows about an op except its CUDA text.

    infer(types, **attrs) -> TensorType raises ShapeError / DTypeError with a readable message.
    ref(*arrays, **attrs) -> np.ndarray is the NumPy reference (the oracle and the CPU executor).
    vjp(b, g, *inputs, out, *residuals, **attrs) -> one gradient Value (or None) per input, built
        with Builder b.
    residuals(b, *inputs, out, **attrs) -> the Values the vjp also reads that the forward computes best
        (attention's log-sum-exp): autodiff emits them right after the op, as forward ops, and hands
        them to the vjp after `out`. None for most ops.
    nondiff: why the op has no gradient (integer outputs, piecewise-constant ops...), or "".
    compute_f32: the reference upcasts f16/bf16 inputs to f32, as the CUDA kernels do.
    Traits every layer reads (instead of lists of op names):
    view: a movement op that relabels or reindexes without computing, with its index map;
    reduction: how a reduction starts (and whether it yields an index);
    positional: an elementwise op whose element depends on its position (arange, random draws,
        triu/tril), so uniform inputs do not give a uniform result;
    library: the library call that computes the op (also its fusion kind), e.g. "matmul";
    autocast: what `flame.autocast` does to the op's floating-point inputs (PyTorch's CUDA op lists,
        frontend/autocast.py): "lower" casts them to the autocast dtype (matmul, attention), "f32"
        casts f16/bf16 ones to f32 (exp, log, pow, sum, cumsum), "promote" casts them to the widest as
        torch's promote list does (its ops are composites: scatter_add, index_put), "" leaves them as they
        are (none of the lists: the op runs on its inputs as outside a region), "keep" too (the FP8 ops,
        whose operands have fixed roles: a bf16 tensor and its f32 scale); "widest" casts them to the widest
        of them (flame's straight_through, pairing a value with a gradient form that autocast may have
        given another dtype);
    autocast_cpu: the same for a region following PyTorch's CPU op lists (device_type "cpu"), None where it
        is `autocast` (the CPU lists keep exp, log, pow, sum and cumsum off the float32 list: "");
    random: draws random numbers (counter-based, so recomputing repeats the bits; the remat pass
        recomputes it only when a memory budget forces it);
    selects: an op whose result's elements are elements of input 0, picked by the other inputs
        (gather, index_select), so an elementwise op on input 0 commutes with it;
    constant: the result is a function of the attributes alone, read from no input (full, arange): it is
        folded, and cloned into every kernel that reads it, computed there from the element's index;
    cost: an elementwise op's work per element (COSTS): what is worth computing once per broadcast
        element, or keeping in registers rather than computing twice;
    commutative: a op b == b op a bit for bit (IEEE + and *; not maximum / minimum, whose NaN or
        signed zero may come from either operand): CSE orders the operands;
    scalar_opmath: with an f16/bf16 tensor and a Python number, PyTorch computes the op in f32 with the
        number in f32 and rounds once (mul, div, floor_divide); other ops take the number rounded to
        the tensor's dtype (frontend/opmath.py);
    on_bool: the op it is on two bool operands (add -> logical_or, mul -> logical_and), as in torch;
    conversion: a cheap unary op a kernel applies to what it loads or stores (cast, neg, abs), rather
        than work worth a buffer of its own;
    sign_only: results differ at most in the sign of a zero when an input does (mul, add, sub, neg, cast);
    accumulates: the result is a sum that starts at +0.0 (matmul, reduce_sum, reduce_mean), so the sign
        of a zero it adds cannot reach it;
    epilogue: the part of a GEMM's epilogue the op is when it follows a matmul ("bias", "relu",
        "gelu"; the Target says which epilogues the backend fuses);
    gemm_bias: a GEMM whose third input is a bias [n] added to the product in the accumulator's
        precision before the result's one rounding (matmul_bias: PyTorch's addmm and linear), so its
        library call always runs the bias epilogue;
    pads: a movement op that writes a value of its own (its `value` attribute) around its input's
        elements (pad), so a uniform input does not give a uniform result;
    pieces: op -> the pieces of a movement op whose result is, region by region of its coordinates,
        one input read through an affine map or its fill value (concat, pad: flame.ir.indexmap.Piece),
        so an elementwise kernel computes it as a select between index maps;
    activations: per operand and then the result, whether it is an activation [N, C, *spatial] that a
        channels-last layout reorders (the convolutions; the others are weights);
    user: an op the user defined with flame.cuda.kernel / flame.cuda.elementwise (its
        `flame.ir.ops.user.UserCode`: the user's CUDA text, which codegen renders in place of a snippet
        or a lowering);
    call_result: one result of a call of the user's autograd Function (flame.autograd.Function,
        flame.custom_vjp): the result is the op's last input (the user's forward, traced inline before it,
        so it fuses with its neighbours), and simplification removes the op. The ops of one call share
        its `call` attribute and are told apart by `index`; their inputs but the last are the same.
        autodiff calls their VJP once per call, at its first op, with {index: cotangent or None} in place
        of one cotangent;
    work: op -> its floating-point work (FLOPs) where `flops` cannot tell it from the category (a
        convolution's multiply-adds), which is what recomputing it costs (passes/activation_budget.py);
    row_kernels: the composites a row kernel is named after when it holds this op and its reductions
        are exactly these, in order, named by their stems (the reduction's name without `reduce_`):
        ((("max", "sum"), "softmax"),) on div. Its kernels read `reduce_softmax_rows_...`; a kernel
        no op names is named after its reductions (`reduce_sum_sum_rows_...`);
    saves: (op, needs) -> (the positions of the inputs, whether the result) torch's autograd node of the op
        saves for its backward, the gradients of the inputs at `needs` (True/False each) asked for, where it
        differs from what the vjp reads (erfinv's node saves its input, its vjp reads the result); None:
        what the vjp reads. A write torch counts into a saved tensor raises at backward
        (frontend/counted_writes.py)."""

    name: str
    category: str
    arity: int  # -1: variadic (one or more)
    infer: Callable[..., TensorType]
    ref: Callable[..., Any]
    attrs: dict[str, Attr] = field(default_factory=dict)
    vjp: Callable[..., tuple] | None = None
    nondiff: str = ""
    residuals: Callable[..., tuple] | None = None
    compute_f32: bool = False
    doc: str = ""
    view: View | None = None
    reduction: Reduce | None = None
    positional: bool = False
    library: str = ""
    autocast: str = ""
    autocast_cpu: str | None = None
    random: bool = False
    selects: bool = False
    constant: bool = False
    cost: str = ""
    commutative: bool = False
    scalar_opmath: bool = False
    on_bool: str = ""
    conversion: bool = False
    sign_only: bool = False
    accumulates: bool = False
    epilogue: str = ""
    gemm_bias: bool = False
    pads: bool = False
    pieces: Callable[[Op], Any] | None = None  # -> tuple of flame.ir.indexmap.Piece (which reads this registry)
    activations: tuple[bool, ...] = ()
    user: Any = None
    call_result: bool = False
    work: Callable[[Op], int] | None = None
    row_kernels: tuple[tuple[tuple[str, ...], str], ...] = ()
    saves: Callable[[Op, tuple], tuple[frozenset, bool]] | None = None

    def normalize_attrs(self, given: dict[str, Any]) -> dict[str, Any]:
        """Fill defaults, coerce kinds, reject unknown or missing attributes."""
        unknown = set(given) - set(self.attrs)
        if unknown:
            raise VerifyError(f"{self.name}: unknown attribute(s) {sorted(unknown)}; "
                              f"expected {sorted(self.attrs) or 'none'}")
        out: dict[str, Any] = {}
        for key, spec in self.attrs.items():
            if key in given:
                raw = given[key]
            elif spec.default is REQUIRED:
                raise VerifyError(f"{self.name}: missing attribute {key!r}")
            else:
                raw = spec.default
            try:
                val = raw if raw is None else _COERCE[spec.kind](raw)
            except (TypeError, ValueError, DTypeError) as e:
                raise VerifyError(f"{self.name}: attribute {key}={raw!r} is not a valid {spec.kind}"
                                  f" ({e})") from None
            if spec.choices and val not in spec.choices:
                raise VerifyError(f"{self.name}: attribute {key}={val!r} must be one of "
                                  f"{list(spec.choices)}")
            out[key] = val
        return out


REGISTRY: dict[str, OpDef] = {}


def register(opdef: OpDef) -> OpDef:
    if opdef.name in REGISTRY:
        raise ValueError(f"op {opdef.name!r} declared twice")
    if opdef.category not in CATEGORIES:
        raise ValueError(f"op {opdef.name!r}: unknown category {opdef.category!r}")
    for policy in (opdef.autocast, opdef.autocast_cpu):
        if policy is not None and policy not in AUTOCAST:
            raise ValueError(f"op {opdef.name!r}: unknown autocast policy {policy!r}")
    if opdef.cost not in COSTS:
        raise ValueError(f"op {opdef.name!r}: unknown cost {opdef.cost!r}")
    if opdef.vjp is None and not opdef.nondiff:
        raise ValueError(f"op {opdef.name!r} needs a vjp or a nondiff reason")
    REGISTRY[opdef.name] = opdef
    return opdef


def get(name: str) -> OpDef:
    try:
        return REGISTRY[name]
    except KeyError:
        raise VerifyError(f"unknown op {name!r}") from None


def is_relabel(op: Op) -> bool:
    """op is a view whose output is its input's bytes under another shape (reshape, squeeze, unsqueeze:
    the `view` trait's `relabel`)."""
    view = get(op.name).view
    return view is not None and view.relabel


def axis_order(op: Op | None) -> tuple[int, ...] | None:
    """The order of a view that only reorders axes (the `view` trait's `perm`: permute): output axis k
    is input axis order[k]; None for any other op."""
    view = None if op is None else get(op.name).view
    return None if view is None or view.perm is None else tuple(view.perm(op))


def is_matmul(op: Op) -> bool:
    """op is a GEMM (category "matmul": a cuBLASLt call)."""
    return get(op.name).category == "matmul"


def reads_transposed(op: Op) -> bool:
    """op is a GEMM that may read an operand through a transpose of its producer's input (ta / tb), so a
    permute read only by such GEMMs needs no kernel: every GEMM but the FP8 one, whose operand layouts
    cuBLASLt fixes (fp8_matmul: four inputs, the two scales after the operands)."""
    return is_matmul(op) and (get(op.name).arity == 2 or get(op.name).gemm_bias)


def gemm_bias(op: Op) -> Value | None:
    """The bias [n] a GEMM adds before its one rounding (the `gemm_bias` trait: its third input), or None."""
    return op.inputs[2] if get(op.name).gemm_bias else None


def is_commutative(op: Op) -> bool:
    """a op b == b op a bit for bit (the `commutative` trait)."""
    return get(op.name).commutative


def is_sign_only(op: Op) -> bool:
    """A zero's sign in an input changes at most a zero's sign in the result (the `sign_only` trait)."""
    return get(op.name).sign_only


def regroups(op: Op) -> bool:
    """op is a reduction that may run in stages, each reducing some of its dims (the `Reduce` trait's
    `regroups`: max, min)."""
    red = get(op.name).reduction
    return red is not None and red.regroups


def accumulates(op: Op) -> bool:
    """op's result is a sum that starts at +0.0 (the `accumulates` trait: matmul, reduce_sum, reduce_mean)."""
    return get(op.name).accumulates


def epilogue_role(op: Op) -> str:
    """The part of a GEMM's epilogue op is after a matmul ("bias", "relu", "gelu"), or ""."""
    return get(op.name).epilogue


def is_constant(op: Op) -> bool:
    """op's result is a function of its attributes alone (the `constant` trait: full, arange)."""
    return get(op.name).constant


def is_fill(op: Op | None) -> bool:
    """op is a constant whose every element holds the one value of its attributes (full)."""
    return op is not None and get(op.name).constant and not get(op.name).positional


def is_costly(op: Op, transcendental: bool = False) -> bool:
    """op's work per element is many instructions (the `cost` trait); with transcendental, only a call
    of the math library counts (a division or square root does not)."""
    cost = get(op.name).cost
    return cost == "transcendental" if transcendental else cost != ""


def flops(op: Op) -> int:
    """A rough count of op's work (what recomputing it costs): the op's `work` trait where it has one
    (convolutions), 2 m n k for a matmul, 4 L S E per head for attention, the elements read for a
    reduction, else one per element written."""
    opdef = get(op.name)
    category = opdef.category
    if opdef.work is not None:
        return int(opdef.work(op))
    if category == "matmul":
        return 2 * op.out.type.numel * op.inputs[0].shape[-1]
    if opdef.library == "attention":
        q, k = op.inputs[0], op.inputs[1]
        return 4 * q.type.numel * k.shape[-2]
    if category == "reduction":
        return op.inputs[0].type.numel
    return op.out.type.numel


def check_dtype(op: str, t: TensorType, kinds: tuple[str, ...], what: str = "input") -> DType:
    """Raise DTypeError unless t's dtype kind is one of kinds ('float', 'int', 'bool')."""
    if t.dtype.kind not in kinds:
        raise DTypeError(f"{op}: {what} {t} has dtype {t.dtype}, expected a {'/'.join(kinds)} dtype")
    return t.dtype
