"""stride(), storage_offset() and is_contiguous() of views as torch's, dims of size 1 and tensors with no
element included, where the elements alone leave the layout open and each torch op keeps its own rule
(unsqueeze's new dim strides over the next dim, expand and select keep a size-1 dim's stride, an empty
slice starts at its start, a tensor with no element has contiguous strides); diagonal's of any plane
(its dim strides over both, an empty one starts at the input's first element); eagerly and inside
@flame.compile."""

import math

import numpy as np
import pytest
import torch

import flame

SHAPES = [(3, 4), (1, 4), (3, 1), (1, 1), (2, 1, 3), (4, 1, 1), (5,), (1,), (0,), (0, 4), (3, 0)]

VIEWS = {
    "select_first": lambda t: t.select(0, 0),
    "select_last_dim": lambda t: t.select(-1, 0),
    "int_index": lambda t: t[0],
    "squeeze": lambda t: t.squeeze(),
    "squeeze_0": lambda t: t.squeeze(0),
    "unsqueeze_0": lambda t: t.unsqueeze(0),
    "unsqueeze_1": lambda t: t.unsqueeze(1),
    "unsqueeze_last": lambda t: t.unsqueeze(-1),
    "none_first": lambda t: t[None],
    "none_middle": lambda t: t[:, None],
    "none_last": lambda t: t[..., None],
    "slice_to_1": lambda t: t[0:1],
    "slice_to_1_later": lambda t: t[1:2],
    "slice_last_dim_to_1": lambda t: t[..., 1:2],
    "slice_step": lambda t: t[::2],
    "slice_to_1_with_step": lambda t: t[..., 1::5],
    "empty_slice": lambda t: t[5:5],
    "empty_slice_of_dim_1": lambda t: t[:, 3:3],
    "slice_past_the_end": lambda t: t[10:],
    "slice_stop_before_start": lambda t: t[2:1],
    "narrow_first": lambda t: t.narrow(0, 0, 1),
    "narrow_last_dim": lambda t: t.narrow(-1, 1, 1),
    "t": lambda t: t.t(),
    "permute": lambda t: t.permute(*reversed(range(t.dim()))),
    "transpose_then_unsqueeze": lambda t: t.transpose(0, -1).unsqueeze(1),
    "expand_new_dim": lambda t: t.unsqueeze(0).expand(2, *t.shape),
    "expand_new_dim_of_size_1": lambda t: t.expand(1, *t.shape),
    "expand_same": lambda t: t.expand(*t.shape),
    "expand_last_dim": lambda t: t[..., :1].expand(*t.shape[:-1], 3),
    "view_flat": lambda t: t.view(-1),
    "reshape_with_new_dim": lambda t: t.reshape(1, *t.shape),
    "unsqueeze_twice": lambda t: t.unsqueeze(0).unsqueeze(-1),
    "unbind": lambda t: t.unbind(0)[0],
    "split_last": lambda t: t.split(1)[-1],
    "chunk_last": lambda t: t.chunk(2)[-1],
    "slice_then_select": lambda t: t[1:2][0],
    "movedim": lambda t: t.movedim(0, -1),
}


def _base(lib, shape):
    if math.prod(shape) == 0:
        return lib.zeros(*shape)
    return lib.tensor(np.arange(math.prod(shape), dtype=np.float32).reshape(shape))


def _layout(v):
    return tuple(v.shape), tuple(v.stride()), v.storage_offset(), v.is_contiguous()


def _cases():
    for shape in SHAPES:
        for name, fn in VIEWS.items():
            try:
                fn(_base(torch, shape))
            except (RuntimeError, IndexError):
                continue
            yield pytest.param(shape, name, id=f"{name}-{'x'.join(map(str, shape)) or '0d'}")


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize(("shape", "name"), list(_cases()))
def test_layout_of_views_with_dims_of_size_1_or_0_is_torchs(shape, name, compiled):
    want = _layout(VIEWS[name](_base(torch, shape)))
    if not compiled:
        assert _layout(VIEWS[name](_base(flame, shape))) == want
        return
    seen = {}

    @flame.compile
    def f(x):
        v = VIEWS[name](x)
        seen["traced"] = _layout(v)
        return v * 1

    f(_base(flame, shape))
    assert seen["traced"] == want


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4), (2, 0, 3)])
def test_a_tensor_with_no_element_has_torchs_contiguous_strides(shape):
    assert flame.zeros(*shape).stride() == torch.zeros(*shape).stride()
    assert flame.empty(*shape).stride() == torch.empty(*shape).stride()


def test_an_empty_slice_starts_where_torchs_does_and_its_data_ptr_is_0():
    x, tx = flame.arange(10.0), torch.arange(10.0)
    for key in (slice(5, 5), slice(10, None), slice(7, 3), slice(20, 30)):
        v, tv = x[key], tx[key]
        assert (v.storage_offset(), v.data_ptr()) == (tv.storage_offset(), tv.data_ptr()) != (0, 0)
    assert flame.zeros(3, 0).data_ptr() == torch.zeros(3, 0).data_ptr() == 0


DIAGONAL_BASES = {  # (the shape of the tensor made, the view of it whose diagonal is taken)
    "matrix": ((3, 4), lambda t: t),
    "transposed": ((3, 4), lambda t: t.t()),
    "3-d": ((3, 4, 5), lambda t: t),
    "permuted": ((3, 4, 5), lambda t: t.permute(2, 0, 1)),
    "sliced": ((3, 4, 5), lambda t: t[1:, ::2]),
    "expanded": ((4,), lambda t: t.expand(3, 4)),
    "no element": ((0, 3), lambda t: t),
}
DIAGONALS = [(0, 0, 1), (1, 0, 1), (-2, 0, 1), (2, 1, 0), (0, -1, 0), (1, 0, -1), (-1, 2, 0), (5, 0, 1), (-7, 1, 0)]


def _diagonal_cases():
    for base, (shape, view) in DIAGONAL_BASES.items():
        rank = view(_base(torch, shape)).dim()
        for spec in DIAGONALS:
            if -rank <= min(spec[1:]) and max(spec[1:]) < rank:
                yield pytest.param(base, spec, id=f"{base}-{spec}")


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize(("base", "spec"), list(_diagonal_cases()))
def test_layout_of_a_diagonal_is_torchs(base, spec, compiled):
    """A diagonal of any plane is a view with torch's strides and offset (flame's was a copy, contiguous,
    where the plane's two dims were not neighbours, and an empty one had the stride 1)."""
    shape, view = DIAGONAL_BASES[base]
    want = _layout(view(_base(torch, shape)).diagonal(*spec))
    if not compiled:
        assert _layout(view(_base(flame, shape)).diagonal(*spec)) == want
        return
    seen = {}

    @flame.compile
    def f(x):
        v = view(x).diagonal(*spec)
        seen["traced"] = _layout(v)
        return v * 1

    got = f(_base(flame, shape))
    assert seen["traced"] == want
    np.testing.assert_array_equal(got.numpy(), view(_base(torch, shape)).diagonal(*spec).numpy())
