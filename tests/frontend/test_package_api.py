"""What a user finds with help(flame): every public function, with its real signature and a docstring."""

import inspect
import pydoc

import pytest

import flame


def test_help_lists_the_everyday_functions():
    text = pydoc.render_doc(flame, renderer=pydoc.plaintext)
    functions = text[text.index("FUNCTIONS"):]
    for name in ("cat", "where", "stack", "sum", "mean", "exp", "reshape", "clamp", "maximum", "pow"):
        assert name in flame.__all__, name
        assert f"\n    {name}(" in functions, name


@pytest.mark.parametrize("name", ["sum", "mean", "amax", "argmax", "reshape", "transpose", "clamp", "gelu", "exp",
                                  "squeeze", "tril"])
def test_functions_have_the_method_signature_and_a_docstring(name):
    fn = getattr(flame, name)
    params = list(inspect.signature(fn).parameters)
    method_params = list(inspect.signature(getattr(flame.Tensor, name)).parameters)
    assert params == ["input", *method_params[1:]]  # not (x, *args, **kwargs)
    assert fn.__doc__ and "elementwise sum" not in fn.__doc__ and len(fn.__doc__) > 15


def test_functions_still_compute():
    x = flame.tensor([[1.0, -2.0], [3.0, 4.0]])
    assert flame.sum(x, dim=1, keepdim=True).shape == (2, 1)
    assert flame.sum([1.0, 2.0]).item() == 3.0  # a list is converted first
    assert flame.clamp(x, min=0.0).numpy().min() == 0.0


def test_all_holds_no_submodules_but_ir():
    import types

    assert "ir" in flame.__all__
    modules = [n for n in flame.__all__ if isinstance(getattr(flame, n), types.ModuleType)]
    assert sorted(modules) == ["ir", "linalg", "special"]
