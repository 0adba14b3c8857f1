"""torch's conjugation, negation-bit, complex-dtype, device-index and inference-tensor queries for
flame's tensors. flame has no complex dtypes, so every tensor is real, and for a real tensor torch's
conj, conj_physical, resolve_conj, resolve_neg and real return the tensor itself (the same object: a
write into the result is a write into the input), is_conj, is_neg and is_complex are False, and imag
raises torch's error. Every flame tensor is dense, strided and plain, so is_sparse, is_sparse_csr,
is_quantized, is_meta and is_nested are False, and to_dense() is the tensor itself (checks such as an
optimizer's `if grad.is_sparse: raise` port as they are)."""

from __future__ import annotations

from flame.errors import ArgumentTypeError, DTypeError
from flame.frontend.context import is_inference_mode_enabled, user_location
from flame.frontend.tensor import Tensor

__all__ = ["conj", "conj_physical", "conj_physical_", "is_complex", "is_conj", "is_inference",
           "is_inference_mode_enabled", "is_neg", "imag", "real", "resolve_conj", "resolve_neg"]


def _check(op: str, input) -> Tensor:  # noqa: A002
    """input, which torch's argument parser requires to be a Tensor (its TypeError otherwise)."""
    if not isinstance(input, Tensor):
        raise ArgumentTypeError(f"{op}(): argument 'input' (position 1) must be Tensor, not "
                                f"{type(input).__name__}\n  at {user_location()}")
    return input


def is_complex(input) -> bool:  # noqa: A002
    """Whether input's dtype is complex: never, in flame (torch.is_complex)."""
    return _check("is_complex", input).dtype.is_complex


def is_conj(input) -> bool:  # noqa: A002
    """Whether input's conjugate bit is set (torch.is_conj): only a complex tensor's can be."""
    _check("is_conj", input)
    return False


def is_neg(input) -> bool:  # noqa: A002
    """Whether input's negative bit is set (torch.is_neg): only a conjugated complex view's can be."""
    _check("is_neg", input)
    return False


def conj(input) -> Tensor:  # noqa: A002
    """input's complex conjugate (torch.conj): a real tensor is its own, so input itself."""
    return _check("conj", input)


def conj_physical(input) -> Tensor:  # noqa: A002
    """input's complex conjugate, materialized (torch.conj_physical): input itself for a real tensor,
    as torch's, so a write into the result reaches input."""
    return _check("conj_physical", input)


def conj_physical_(input) -> Tensor:  # noqa: A002
    """input conjugated in place (torch.conj_physical_): nothing to do on a real tensor."""
    return _check("conj_physical_", input)


def resolve_conj(input) -> Tensor:  # noqa: A002
    """input with its conjugate bit materialized (torch.resolve_conj): input itself, whose bit is unset."""
    return _check("resolve_conj", input)


def resolve_neg(input) -> Tensor:  # noqa: A002
    """input with its negative bit materialized (torch.resolve_neg): input itself, whose bit is unset."""
    return _check("resolve_neg", input)


def real(input) -> Tensor:  # noqa: A002
    """input's real part (torch.real, Tensor.real): a real tensor is its own, so input itself."""
    return _check("real", input)


def imag(input) -> Tensor:  # noqa: A002
    """input's imaginary part (torch.imag, Tensor.imag): torch's error, as a real tensor has none."""
    _check("imag", input)
    raise DTypeError(f"imag is not implemented for tensors with non-complex dtypes.\n  at {user_location()}")


def is_inference(input) -> bool:  # noqa: A002
    """Whether input was made inside inference_mode() (a view: whether its base was), as
    torch.is_inference. flame records the fact only: it keeps no autograd state for such tensors
    anyway, and does not refuse their later use in autograd as torch does."""
    return _check("is_inference", input)._inference


class TensorRealQueries:
    """Tensor's methods of the functions above, and get_device."""

    __slots__ = ()

    def is_complex(self) -> bool:
        return is_complex(self)

    def is_conj(self) -> bool:
        return is_conj(self)

    def is_neg(self) -> bool:
        return is_neg(self)

    def conj(self):
        return conj(self)

    def conj_physical(self):
        return conj_physical(self)

    def conj_physical_(self):
        return conj_physical_(self)

    def resolve_conj(self):
        return resolve_conj(self)

    def resolve_neg(self):
        return resolve_neg(self)

    def is_inference(self) -> bool:
        return is_inference(self)

    @property
    def real(self):
        return real(self)

    @property
    def imag(self):
        return imag(self)

    # every flame tensor is dense, strided and plain
    is_sparse = is_sparse_csr = is_quantized = is_meta = is_nested = property(lambda self: False)

    def to_dense(self, dtype=None, *, masked_grad=None):
        """self (a dense tensor already), or self.to(dtype), as torch's for a strided tensor."""
        return self if dtype is None else self.to(dtype)

    def get_device(self) -> int:
        """The index of the GPU holding the tensor, or -1 on the CPU, as torch's: a tensor of the
        reference executor lives on the CPU (-1), one of the CUDA executor on cuda:N (N), and a traced
        tensor on the device of the executor that will run it."""
        dev = self.device
        return -1 if dev.type == "cpu" else dev.index or 0
