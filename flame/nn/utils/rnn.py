"""Padded and packed sequences (torch.nn.utils.rnn): pad_sequence, PackedSequence, pack_padded_sequence,
pad_packed_sequence, pack_sequence, unpad_sequence, unpack_sequence. A PackedSequence holds torch's
layout (data: the time steps' rows, longest sequences first, [sum(lengths), *]; batch_sizes: how many
sequences each step holds; sorted_indices / unsorted_indices: the permutation to and from that order)
and RNN / LSTM / GRU take one and return one, as torch's. Packing needs the lengths' values (torch's
are on the CPU too): eagerly a tensor or list; inside @flame.compile a list of ints (or a tensor made
outside the step). The packed data are gathered from (and scattered back into) the padded batch with
constant indices, so packing, the recurrent layers and unpacking are differentiable and traceable."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from flame.errors import ArgumentRangeError, ShapeError, TraceError
from flame.frontend.context import user_location
from flame.frontend.creation import full
from flame.frontend.ops import cat, stack
from flame.frontend.tensor import Tensor

__all__ = [
    "PackedSequence",
    "pack_padded_sequence",
    "pack_sequence",
    "pad_packed_sequence",
    "pad_sequence",
    "unpack_sequence",
    "unpad_sequence",
]


class PackedSequence(NamedTuple):
    """data [sum(lengths), *], batch_sizes (int64, one per time step), sorted_indices and unsorted_indices
    (None when the batch was given sorted), as torch's PackedSequence."""

    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Tensor | None = None
    unsorted_indices: Tensor | None = None

    def lengths(self) -> np.ndarray:
        """Each sequence's length, in the sorted order (host integers)."""
        sizes = self.batch_sizes.numpy()
        return (sizes[None, :] > np.arange(int(sizes[0]))[:, None]).sum(1)

    def to(self, *args, **kwargs) -> PackedSequence:
        """data.to(...), the indices as they are (they stay host integers)."""
        return self._replace(data=self.data.to(*args, **kwargs))

    def double(self) -> PackedSequence:
        """The data in f64."""
        return self._replace(data=self.data.double())

    def float(self) -> PackedSequence:  # noqa: A003
        """The data in f32."""
        return self._replace(data=self.data.float())

    @property
    def is_cuda(self) -> bool:
        """Whether the data are on the GPU."""
        return self.data.is_cuda


def _host_lengths(lengths, what: str) -> np.ndarray:
    if isinstance(lengths, Tensor):
        if lengths.is_traced:
            raise TraceError(
                f"{what}: the lengths' values decide the packing, which a step being traced does not "
                f"know; pass them as a list of ints (or a tensor made outside the step)"
                f"\n  at {user_location()}"
            )
        return lengths.numpy().astype(np.int64).reshape(-1)
    return np.asarray([int(v) for v in lengths], dtype=np.int64)


def _padded_rows(lengths: np.ndarray, batch: int) -> np.ndarray:
    """Rows of the time-major padded batch [T * batch] that the packed data take, step by step."""
    return np.concatenate([t * batch + np.arange(int((lengths > t).sum())) for t in range(int(lengths.max()))])


def pad_sequence(
    sequences: Sequence[Tensor], batch_first: bool = False, padding_value: float = 0.0, padding_side: str = "right"
) -> Tensor:
    """The sequences ([L_i, *] each) padded with padding_value to the longest and stacked: [T, B, *]
    ([B, T, *] with batch_first); padding_side 'left' pads in front."""
    if padding_side not in ("left", "right"):
        raise ArgumentRangeError(f"pad_sequence: padding_side must be 'left' or 'right', got {padding_side!r}")
    sequences = list(sequences)
    if not sequences:
        raise ShapeError(f"pad_sequence: received an empty list of sequences\n  at {user_location()}")
    longest = max(s.shape[0] for s in sequences)
    rows = []
    for s in sequences:
        gap = longest - s.shape[0]
        if gap:
            pad = full((gap, *s.shape[1:]), padding_value, dtype=s.dtype)
            s = cat([s, pad]) if padding_side == "right" else cat([pad, s])
        rows.append(s)
    return stack(rows, 0 if batch_first else 1)


def pack_padded_sequence(
    input: Tensor,
    lengths,
    batch_first: bool = False,  # noqa: A002
    enforce_sorted: bool = True,
) -> PackedSequence:
    """Pack a padded batch [T, B, *] ([B, T, *] with batch_first) of sequences of the given lengths.
    enforce_sorted=True needs the lengths in decreasing order (as torch's); False sorts them (stably)
    and records the permutation."""
    lens = _host_lengths(lengths, "pack_padded_sequence")
    batch = input.shape[0 if batch_first else 1]
    if lens.shape[0] != batch:
        raise ShapeError(
            f"pack_padded_sequence: {lens.shape[0]} lengths for a batch of {batch}\n  at {user_location()}"
        )
    if (lens <= 0).any():
        raise ArgumentRangeError(
            "pack_padded_sequence: Length of all samples has to be greater than 0, but found an element "
            f"in 'lengths' that is <= 0\n  at {user_location()}"
        )
    if lens.max() > input.shape[1 if batch_first else 0]:
        raise ShapeError(
            f"pack_padded_sequence: a length ({int(lens.max())}) exceeds the padded input's "
            f"{input.shape[1 if batch_first else 0]} steps\n  at {user_location()}"
        )
    x = input.transpose(0, 1) if batch_first else input
    if enforce_sorted:
        if (np.diff(lens) > 0).any():
            raise ArgumentRangeError(
                "pack_padded_sequence: `lengths` array must be sorted in decreasing order when "
                "`enforce_sorted` is True. You can pass `enforce_sorted=False` to pack_padded_sequence "
                "and/or pack_sequence to sidestep this requirement if you do not need ONNX "
                f"exportability.\n  at {user_location()}"
            )
        sorted_idx = unsorted_idx = None
    else:
        order = np.argsort(-lens, kind="stable")
        sorted_idx, unsorted_idx = Tensor(order), Tensor(np.argsort(order, kind="stable"))
        x, lens = x.index_select(1, sorted_idx), lens[order]
    rows = _padded_rows(lens, batch)
    data = x.reshape(x.shape[0] * batch, *x.shape[2:]).index_select(0, Tensor(rows))
    sizes = Tensor((lens[None, :] > np.arange(int(lens.max()))[:, None]).sum(1).astype(np.int64))
    return PackedSequence(data, sizes, sorted_idx, unsorted_idx)


def pad_packed_sequence(
    sequence: PackedSequence, batch_first: bool = False, padding_value: float = 0.0, total_length: int | None = None
) -> tuple[Tensor, Tensor]:
    """(padded [T, B, *] ([B, T, *] with batch_first), lengths int64 [B]) of a PackedSequence, in the
    batch's original order; total_length pads to that many steps (at least the longest)."""
    lens = sequence.lengths()
    longest, batch = int(lens.max()), lens.shape[0]
    steps = longest if total_length is None else int(total_length)
    if steps < longest:
        raise ValueError(
            f"pad_packed_sequence: Expected total_length to be at least the length of the longest "
            f"sequence ({longest}), but got total_length={total_length}\n  at {user_location()}"
        )
    data = sequence.data
    where_from = np.full(steps * batch, data.shape[0], dtype=np.int64)  # the padding row, after the data
    where_from[_padded_rows(lens, batch)] = np.arange(data.shape[0])
    pad_row = full((1, *data.shape[1:]), padding_value, dtype=data.dtype)
    x = cat([data, pad_row]).index_select(0, Tensor(where_from)).reshape(steps, batch, *data.shape[1:])
    if sequence.unsorted_indices is not None:
        x = x.index_select(1, sequence.unsorted_indices)
        lens = lens[sequence.unsorted_indices.numpy()]
    return (x.transpose(0, 1) if batch_first else x), Tensor(lens.astype(np.int64))


def pack_sequence(sequences: Sequence[Tensor], enforce_sorted: bool = True) -> PackedSequence:
    """pack_padded_sequence(pad_sequence(sequences), their lengths, enforce_sorted=enforce_sorted)."""
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpad_sequence(padded_sequences: Tensor, lengths, batch_first: bool = False) -> list[Tensor]:
    """The sequences of a padded batch, each cut to its length."""
    x = padded_sequences if batch_first else padded_sequences.transpose(0, 1)
    return [x[i, :n] for i, n in enumerate(_host_lengths(lengths, "unpad_sequence").tolist())]


def unpack_sequence(packed_sequences: PackedSequence) -> list[Tensor]:
    """The sequences of a PackedSequence, in the batch's original order."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
