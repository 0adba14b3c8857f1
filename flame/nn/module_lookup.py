"""Module lookups by dotted name, as PyTorch's: get_submodule, set_submodule, get_parameter and
get_buffer walk the attribute path one name at a time and raise AttributeError, with torch's messages,
where a name is missing or names something of the wrong kind."""

from __future__ import annotations


def check_new_name(module, kind: str, name, registry: str) -> None:
    """torch's checks on a name given to register_parameter / register_buffer / add_module (`kind`:
    "parameter", "buffer", "module"): a str, non-empty, without ".", and not an attribute the module has
    outside the registry `registry` (a method, a plain attribute, or an entry of another kind)."""
    if not isinstance(name, str):
        raise TypeError(f"{kind} name should be a string. Got {type(name).__name__}")
    if "." in name:
        raise KeyError(f'{kind} name can\'t contain ".", got: {name}')
    if name == "":
        raise KeyError(f'{kind} name can\'t be empty string ""')
    if name not in module.__dict__[registry] and hasattr(module, name):
        raise KeyError(f"attribute '{name}' already exists")


class ModuleLookup:
    """The dotted-name lookups of nn.Module (mixed into flame.nn.Module)."""

    def _get_name(self) -> str:
        return type(self).__name__

    def get_submodule(self, target: str):
        """The submodule at the dotted path `target` ("" is the module itself)."""
        from flame.nn.module import Module

        if target == "":
            return self
        mod = self
        for item in target.split("."):
            if not hasattr(mod, item):
                raise AttributeError(mod._get_name() + " has no attribute `" + item + "`")
            mod = getattr(mod, item)
            if not isinstance(mod, Module):
                raise AttributeError("`" + item + "` is not an nn.Module")
        return mod

    def set_submodule(self, target: str, module, strict: bool = False) -> None:
        """Put `module` at the dotted path `target`: replacing a submodule there, or adding one to an
        existing parent unless strict."""
        from flame.nn.module import Module

        if target == "":
            raise ValueError("Cannot set the submodule without a target name!")
        atoms = target.split(".")
        if not isinstance(module, Module):
            raise ValueError(f"`module` is not an nn.Module, found {type(module)}")
        parent = self if len(atoms) == 1 else self.get_submodule(".".join(atoms[:-1]))
        if strict and not hasattr(parent, atoms[-1]):
            raise AttributeError(parent._get_name() + " has no attribute `" + atoms[-1] + "`")
        if hasattr(parent, atoms[-1]) and not isinstance(getattr(parent, atoms[-1]), Module):
            raise AttributeError("`" + atoms[-1] + "` is not an nn.Module")
        setattr(parent, atoms[-1], module)

    def _attribute_at(self, target: str):
        """(the module holding the dotted path `target`'s last name, that name, its value)."""
        module_path, _, name = target.rpartition(".")
        mod = self.get_submodule(module_path)
        if not hasattr(mod, name):
            raise AttributeError(mod._get_name() + " has no attribute `" + name + "`")
        return mod, name, getattr(mod, name)

    def get_parameter(self, target: str):
        """The Parameter at the dotted path `target`."""
        from flame.nn.parameter import Parameter

        _, name, param = self._attribute_at(target)
        if not isinstance(param, Parameter):
            raise AttributeError("`" + name + "` is not an nn.Parameter")
        return param

    def get_buffer(self, target: str):
        """The buffer at the dotted path `target`."""
        mod, name, buffer = self._attribute_at(target)
        if name not in mod._buffers:
            raise AttributeError("`" + name + "` is not a buffer")
        return buffer
