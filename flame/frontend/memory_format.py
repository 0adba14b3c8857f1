"""torch.memory_format's values (flame.channels_last, ...). flame chooses the layout of what it computes
itself (the channels_last pass puts convolutions' activations channels-last on the GPU), so a
memory_format argument is checked and changes no values and no storage: `x.to(memory_format=...)`,
`x.contiguous(memory_format=...)`, `model.to(memory_format=...)` and the `*_like` functions take it
as torch's do."""

from __future__ import annotations

from flame.errors import ArgumentError, ArgumentTypeError


class memory_format:  # noqa: N801 (torch's name)
    """A tensor layout's name, as torch's (its values are flame.contiguous_format, preserve_format,
    channels_last and channels_last_3d)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"flame.{self.name}"

    def __reduce__(self):
        return self.name  # pickles as the module attribute of that name, one object per format


contiguous_format = memory_format("contiguous_format")
preserve_format = memory_format("preserve_format")
channels_last = memory_format("channels_last")
channels_last_3d = memory_format("channels_last_3d")


def check(fn: str, value) -> None:
    """TypeError (flame's ArgumentTypeError) unless value is None or a memory_format."""
    if value is not None and not isinstance(value, memory_format):
        raise ArgumentTypeError(f"{fn}: memory_format must be a flame.memory_format (flame.channels_last, "
                                f"flame.contiguous_format, ...), got {type(value).__name__} {value!r}")


def refuse_preserve(fn: str, value) -> None:
    """check(fn, value), and torch's refusal of preserve_format where a layout must be named (contiguous)."""
    check(fn, value)
    if value is preserve_format:
        raise ArgumentError(f"{fn}: preserve memory format is unsupported by the contiguous operator (as torch's)")


def is_channels_last(shape: tuple[int, ...], strides: tuple[int, ...], value: memory_format) -> bool:
    """Whether strides are those of the channels-last layout `value` names (channels_last: 4-D,
    channels_last_3d: 5-D; N, *spatial, C innermost) for shape; dims of size 1 take any stride."""
    rank = 4 if value is channels_last else 5
    if len(shape) != rank:
        return False
    step = 1
    for dim in (1, *range(rank - 1, 1, -1), 0):  # C, then the spatial dims innermost first, then N
        if shape[dim] != 1 and strides[dim] != step:
            return False
        step *= shape[dim]
    return True
