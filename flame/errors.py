"""flame's exceptions. Every user-facing error names the op, what was expected vs what came, and the
user's source line when one is known."""

from __future__ import annotations


class FlameError(Exception):
    """Base class of every error flame raises on purpose."""


class ShapeError(FlameError, ValueError, RuntimeError):
    """Shapes of an op's inputs or attributes do not fit together: a RuntimeError, as PyTorch raises for
    shapes that do not multiply, broadcast, concatenate or reshape, and a ValueError, as it raises for a
    loss's input and target sizes."""


class ViewError(ShapeError):
    """.view() of a tensor whose strides allow no such view (PyTorch raises RuntimeError there; a
    ShapeError too, as any other shape that does not fit); the message says to use .reshape(...)."""


class DimError(ShapeError, IndexError):
    """A dimension index is out of range for the tensor (PyTorch raises IndexError here)."""


class IndexingError(ShapeError, IndexError):
    """A subscript does not fit the tensor subscripted (`x[5]` of a dimension of 2, more indices than
    dimensions, a float tensor as an index): PyTorch raises IndexError here."""


class IndexValueError(FlameError, IndexError, RuntimeError):
    """An index held in a tensor (a class label, a gather index) is out of bounds: an IndexError, as
    PyTorch raises for a class label, an embedding or a subscript, and a RuntimeError, as it raises for
    gather, scatter and one_hot."""


class DTypeError(FlameError, TypeError, RuntimeError):
    """An op got a dtype it does not accept: a TypeError, and a RuntimeError as PyTorch raises for a
    tensor of the wrong dtype (matmul of f16 by f32, float embedding indices, mean of an integer tensor)."""


class TraceError(FlameError, RuntimeError):
    """Something cannot be done while tracing (reading a value, data-dependent control flow)."""


class OverlapError(FlameError, RuntimeError):
    """A write whose destination shares memory with itself (an expanded view) or partly with one of
    the op's inputs (PyTorch raises a RuntimeError there); the message says to clone() first."""


class AutogradError(FlameError, RuntimeError):
    """backward() cannot run as asked (a second backward through a freed graph; PyTorch raises a
    RuntimeError there too)."""


class NonFiniteError(FlameError, RuntimeError):
    """A value asked to be finite is not (clip_grad_norm_'s error_if_nonfinite; PyTorch raises a
    RuntimeError there)."""


class LinAlgError(FlameError, RuntimeError):
    """A matrix factorisation cannot be completed: a Cholesky factorisation of a matrix that is not positive
    definite (PyTorch raises torch.linalg.LinAlgError, a RuntimeError, there)."""


class GradDTypeError(DTypeError, AutogradError):
    """requires_grad on a tensor whose dtype cannot have gradients (an integer one): a DTypeError, and a
    RuntimeError as PyTorch's."""


class AnomalyError(AutogradError):
    """Anomaly detection (flame.autograd.detect_anomaly / set_detect_anomaly) found a backward computation
    that returned NaN, or cannot watch one where it would run (PyTorch raises a RuntimeError there)."""


class GradcheckError(AutogradError):
    """flame.autograd.gradcheck found analytical gradients that differ from finite differences (PyTorch's
    torch.autograd.gradcheck.GradcheckError)."""


class VerifyError(FlameError, ValueError):
    """A graph is malformed; the message quotes the offending IR line."""


class ParseError(FlameError, ValueError):
    """IR text does not parse; the message quotes the offending line."""


class MemoryBudgetError(FlameError, ValueError):
    """flame.compile(memory_budget=...) asked for a planned peak no rematerialisation reaches; the
    message says the smallest peak that is reachable."""


class ArgumentError(FlameError, ValueError):
    """An argument, option or FLAME_* environment variable holds a value flame does not accept; the
    message names it, what it accepts and what it holds."""


class ConflictingOptionsError(ArgumentError, RuntimeError):
    """Two options given together that PyTorch refuses together (torch.optim's fused=True with
    foreach=True): a RuntimeError, as PyTorch raises."""


class ZeroDivisorError(ArgumentError, RuntimeError):
    """An integer floor_divide, remainder, fmod or div(rounding_mode=...) by zero, a Python 0 or a zero
    held in a tensor (the reference executor checks the divisor; PyTorch's CPU raises a RuntimeError
    there). On the GPU, as in PyTorch's CUDA, the result of such a division is unspecified."""


class OverflowValueError(ArgumentError, RuntimeError):
    """A Python number that the dtype it is read in cannot hold (a clamp bound of 1e5 for a float16
    tensor, 300 for an int8 one): PyTorch's RuntimeError "value cannot be converted to type ... without
    overflow". Infinities are values of every floating dtype."""


class ArgumentRangeError(ArgumentError, RuntimeError):
    """An argument outside the range an op accepts, which PyTorch refuses with a RuntimeError
    (cross_entropy's label_smoothing above 1, a negative smooth_l1_loss beta, a huber_loss delta that is
    not positive, geometric_'s p outside (0, 1), a negative standard deviation, a probability outside
    [0, 1], random_'s from >= to); the message is PyTorch's."""


class MissingArgumentError(ArgumentError, RuntimeError):
    """An argument left out that another one needs, which PyTorch refuses with a RuntimeError
    (MultiheadAttention's is_causal hint without the attn_mask it describes); the message is PyTorch's."""


class AssertedShapeError(ShapeError, AssertionError):
    """An input shape PyTorch refuses with `assert` (nn.MultiheadAttention's ranks, widths and key /
    value agreement): an AssertionError, as torch raises, and a ShapeError, as flame's other shape checks."""


class InputDTypeError(DTypeError, ValueError):
    """An input whose dtype is not the module's weights' where PyTorch raises a ValueError for it (RNN,
    LSTM and GRU outside autocast): a ValueError, as torch raises, and a DTypeError."""


class AssertedDTypeError(DTypeError, AssertionError):
    """An input dtype PyTorch refuses with `assert` (an integer attention mask of nn.MultiheadAttention):
    an AssertionError, as torch raises, and a DTypeError."""


class AssertedArgumentError(ArgumentError, AssertionError):
    """A constructor argument PyTorch refuses with `assert` (nn.MultiheadAttention's embed_dim that
    num_heads does not divide): an AssertionError, as torch raises, and an ArgumentError (a ValueError)."""


class ArgumentTypeError(FlameError, TypeError):
    """An argument is of a type flame does not accept there (PyTorch raises TypeError); the message
    names it, what it accepts and what came."""


class CheckpointError(FlameError, KeyError, RuntimeError):
    """A state_dict / checkpoint does not match the module or optimizer it is loaded into, or a file
    cannot be read (a RuntimeError, as PyTorch's load_state_dict raises)."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class UnverifiedError(FlameError, RuntimeError):
    """A GPU path asked for while its switch is off (a path not yet verified on a GPU is off until its
    GPU tests pass; the message names the switch)."""


class DeterminismError(FlameError, RuntimeError):
    """An op with no deterministic GPU implementation in a plan made under
    flame.use_deterministic_algorithms(True) (torch raises a RuntimeError there too)."""


class UnsupportedError(FlameError, NotImplementedError):
    """A PyTorch option flame does not implement (sparse embedding gradients, an optimizer's
    differentiable=True): refused where the user asks for it, naming their line, rather than run in a
    way that would give other results than PyTorch's."""


class RecompileWarning(UserWarning):
    """A @flame.compile'd function traced again after its first trace: an argument's shape, dtype or
    value changed, or a Python value the trace baked in (a module's train/eval mode, a global or a
    closure variable, whether a .grad was set) is not what it was. Each re-trace emits one warning naming
    the function and the cause; silence it with `warnings.filterwarnings("ignore",
    category=flame.RecompileWarning)` or turn it into an error with "error"."""
