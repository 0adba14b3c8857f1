"""torch.memory_format's values (flame.channels_last, ...). flame chooses the layout of what it computes
itself (the channels_last pass puts convolutions' activations channels-last on the GPU), so a
memory_format argument is checked and changes no values and no storage: `x.to(memory_format=...)`,
`x.contiguous(memory_format=...)`, `model.to(memory_format=...)` and the `*_like` functions take it
as torch's do."""

from __future__ import annotations

from flame.errors import ArgumentTypeError


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
