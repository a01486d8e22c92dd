"""`nn.Module`: PyTorch's base class for layers and models, and its containers (Sequential, ModuleList, ModuleDict).

A module registers what is assigned to its attributes, as torch does: a `Parameter` (or any leaf tensor with
`requires_grad=True`) becomes a parameter, a `Module` a submodule, and `register_buffer` adds state that is saved
but not trained (BatchNorm's running statistics). State-dict keys are torch's (`features.0.weight`), so torch
checkpoints load unchanged. Plain lists, tuples and dicts of modules or parameters held by a module are walked too
(tinygrad-style code keeps layers in lists; torch would need a ModuleList).

Differences from torch, on purpose:
- `training` of a module that was never switched with `train()`/`eval()` follows the global `Tensor.training`
  (False unless `with Tensor.train():`), as tinygrad's layers do; torch modules start in training mode.
- `state_dict()` returns the module's own tensors (not detached copies); `load_state_dict` assigns into them.
- `to(device)` and dtype changes replace each tensor by a converted leaf of its own (there is no `.data`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple, TypeVar

from tg.ir import DType
from tg.tensor.autograd import no_grad
from tg.tensor.tensor import Tensor

__all__ = ["Module", "ModuleDict", "ModuleList", "Parameter", "ParameterDict", "ParameterList", "Sequential"]

M = TypeVar("M", bound="Module")


class Parameter(Tensor):
    """A tensor that is a module parameter (torch's `nn.Parameter`): a leaf with storage of its own that requires
    grad (unless `requires_grad=False`). `self.w = Parameter(Tensor.randn(3, 3))` registers it on a Module."""

    __slots__ = ()

    def __init__(self, data: Tensor | None = None, requires_grad: bool = True) -> None:
        if data is None:
            data = Tensor.empty(0)
        if not isinstance(data, Tensor):
            data = Tensor(data)
        super().__init__(data.detach().uop)
        if requires_grad:
            self.requires_grad_(True)
        else:
            self._requires_grad = False

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()


class _IncompatibleKeys(NamedTuple):
    missing_keys: list[str]
    unexpected_keys: list[str]


def _is_parameter(value: Any) -> bool:
    return isinstance(value, Parameter) or (isinstance(value, Tensor) and value.requires_grad is True and value.is_leaf)


def _walk_plain(value: Any) -> Iterator[tuple[str, Any]]:
    """(key, item) of a plain list, tuple or dict held by a module: items that are modules or tensors, nested."""
    items: Iterable[tuple[Any, Any]] = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        if isinstance(item, (Module, Tensor)):
            yield str(key), item
        elif isinstance(item, (list, tuple, dict)):
            for sub, x in _walk_plain(item):
                yield f"{key}.{sub}", x


class Module:
    """Base class of layers and models (PyTorch's `nn.Module`).

    >>> class Net(Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.fc = Linear(4, 2)
    ...     def forward(self, x):
    ...         return self.fc(x).relu()
    >>> [k for k, _ in Net().named_parameters()]  # doctest: +SKIP
    ['fc.weight', 'fc.bias']
    """

    _training: bool | None
    _parameters: dict[str, Tensor | None]
    _buffers: dict[str, Tensor | None]
    _modules: dict[str, Module | None]
    _non_persistent_buffers: set[str]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if args or kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got unexpected arguments (Module takes none)")
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "_non_persistent_buffers", set())
        object.__setattr__(self, "_training", None)

    def _registries(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        try:
            return self._parameters, self._buffers, self._modules
        except AttributeError:
            raise AttributeError(
                f"cannot assign module state before {type(self).__name__}.__init__() called super().__init__()"
            ) from None

    # ---- attributes: registration by assignment ------------------------------------------------------------

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "training":
            object.__setattr__(self, name, value)  # the property's setter
            return
        if name.startswith("_") and name in ("_parameters", "_buffers", "_modules", "_non_persistent_buffers"):
            object.__setattr__(self, name, value)
            return
        params, buffers, modules = self._registries()
        if isinstance(value, Module):
            self._forget(name)
            modules[name] = value
        elif name in buffers and (value is None or isinstance(value, Tensor)):
            buffers[name] = value  # assigning to a buffer keeps it a buffer (torch)
        elif _is_parameter(value) or (name in params and (value is None or isinstance(value, Tensor))):
            self._forget(name)
            params[name] = value
        elif name in modules and value is None:
            modules[name] = None
        else:
            self._forget(name)
            object.__setattr__(self, name, value)

    def _forget(self, name: str) -> None:
        for registry in self._registries():
            registry.pop(name, None)
        self._non_persistent_buffers.discard(name)
        self.__dict__.pop(name, None)

    def __getattr__(self, name: str) -> Any:  # only called when normal lookup fails: the registries
        d = self.__dict__
        for registry in ("_parameters", "_buffers", "_modules"):
            if registry in d and name in d[registry]:
                return d[registry][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        if any(name in r for r in self._registries()):
            self._forget(name)
        else:
            object.__delattr__(self, name)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | {k for r in self._registries() for k in r})

    @property
    def training(self) -> bool:
        """Training mode: set by `train()`/`eval()`; until then the global `Tensor.training`."""
        return bool(Tensor.training) if self._training is None else self._training

    @training.setter
    def training(self, mode: bool | None) -> None:
        object.__setattr__(self, "_training", None if mode is None else bool(mode))

    # ---- registration by call --------------------------------------------------------------------------------

    def register_parameter(self, name: str, param: Tensor | None) -> None:
        """Add a parameter (a leaf tensor that requires grad, or None) under `name`."""
        self._check_name(name, "parameter")
        if param is not None and not isinstance(param, Tensor):
            raise TypeError(f"cannot register a {type(param).__name__} as parameter '{name}' (Tensor or None expected)")
        self._forget(name)
        self._parameters[name] = param if param is None or _is_parameter(param) else Parameter(param)

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Add state that is not trained (running statistics, masks): in `state_dict()` unless not `persistent`."""
        self._check_name(name, "buffer")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot register a {type(tensor).__name__} as buffer '{name}' (Tensor or None expected)")
        self._forget(name)
        self._buffers[name] = tensor
        if not persistent:
            self._non_persistent_buffers.add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        """Add a submodule under `name` (also `register_module`)."""
        self._check_name(name, "module")
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self._forget(name)
        self._modules[name] = module

    register_module = add_module

    def _check_name(self, name: str, kind: str) -> None:
        self._registries()
        if not isinstance(name, str):
            raise TypeError(f"{kind} name should be a string, got {type(name).__name__}")
        if not name or "." in name:
            raise KeyError(f"{kind} name can't be empty or contain '.', got {name!r}")

    def get_submodule(self, target: str) -> Module:
        """The submodule at dotted path `target` ("" is this module)."""
        mod: Module = self
        for part in target.split(".") if target else []:
            sub = mod._modules.get(part) if part in mod._modules else None
            if not isinstance(sub, Module):
                raise AttributeError(f"{type(mod).__name__} has no submodule '{part}' (path '{target}')")
            mod = sub
        return mod

    def get_parameter(self, target: str) -> Tensor:
        """The parameter at dotted path `target`."""
        path, _, name = target.rpartition(".")
        mod = self.get_submodule(path)
        if name not in mod._parameters or mod._parameters[name] is None:
            raise AttributeError(f"{type(mod).__name__} has no parameter '{name}'")
        return mod._parameters[name]  # type: ignore[return-value]

    # ---- calling ------------------------------------------------------------------------------------------

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The computation; subclasses define it and call the module (`model(x)`), not `forward` directly."""
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    # ---- walking ----------------------------------------------------------------------------------------

    def _children_items(self) -> Iterator[tuple[str, Any]]:
        """Registered submodules, then modules/tensors inside plain containers held as attributes."""
        for name, m in self._modules.items():
            if m is not None:
                yield name, m
        for name, value in self.__dict__.items():
            if isinstance(value, (list, tuple, dict)) and not name.startswith("_"):
                for key, item in _walk_plain(value):
                    yield f"{name}.{key}", item

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """(name, module) of the direct submodules."""
        seen: set[int] = set()
        for name, m in self._children_items():
            if isinstance(m, Module) and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self) -> Iterator[Module]:
        """The direct submodules."""
        return (m for _, m in self.named_children())

    def named_modules(
        self, memo: set[int] | None = None, prefix: str = "", remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Module]]:
        """(dotted name, module) of this module and every submodule, depth first ('' is this module)."""
        memo = set() if memo is None else memo
        stack: list[tuple[str, Module]] = [(prefix, self)]
        while stack:  # iterative: deep models never hit the recursion limit
            name, mod = stack.pop()
            if remove_duplicate and id(mod) in memo:
                continue
            memo.add(id(mod))
            yield name, mod
            subs = [(f"{name}.{n}" if name else n, m) for n, m in mod.named_children()]
            stack.extend(reversed(subs))

    def modules(self) -> Iterator[Module]:
        """This module and every submodule."""
        return (m for _, m in self.named_modules())

    def _named_members(
        self, members: Callable[[Module], Iterable[tuple[str, Any]]], prefix: str, recurse: bool, remove_duplicate: bool
    ) -> Iterator[tuple[str, Tensor]]:
        seen: set[int] = set()
        mods = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        for mod_name, mod in mods:
            for name, t in members(mod):
                if t is None or (remove_duplicate and id(t) in seen):
                    continue
                seen.add(id(t))
                yield (f"{mod_name}.{name}" if mod_name else name), t

    @staticmethod
    def _own_parameters(mod: Module) -> Iterator[tuple[str, Tensor]]:
        yield from mod._parameters.items()  # type: ignore[misc]
        for name, item in mod._children_items():
            if isinstance(item, Tensor) and _is_parameter(item):
                yield name, item

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Tensor]]:
        """(dotted name, parameter) of every parameter, torch's names and order."""
        return self._named_members(self._own_parameters, prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Tensor]:
        """Every parameter (give them to an optimizer: `SGD(model.parameters(), lr=0.1)`)."""
        return (p for _, p in self.named_parameters(recurse=recurse))

    def named_buffers(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Tensor]]:
        """(dotted name, buffer) of every buffer."""
        return self._named_members(lambda m: m._buffers.items(), prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        """Every buffer."""
        return (b for _, b in self.named_buffers(recurse=recurse))

    # ---- state ----------------------------------------------------------------------------------------------

    def state_dict(self, *, prefix: str = "", keep_vars: bool = True) -> OrderedDict[str, Tensor]:
        """`{dotted name: tensor}` of parameters and persistent buffers, with torch's keys and order (each module's
        parameters, then its buffers, then its submodules). The values are the module's own tensors."""
        out: OrderedDict[str, Tensor] = OrderedDict()
        for mod_name, mod in self.named_modules(prefix=prefix.rstrip("."), remove_duplicate=False):
            base = f"{mod_name}." if mod_name else ""
            for name, p in self._own_parameters(mod):
                if p is not None and "." not in name:
                    out.setdefault(base + name, p)
            for name, b in mod._buffers.items():
                if b is not None and name not in mod._non_persistent_buffers:
                    out.setdefault(base + name, b)
            for name, item in mod._children_items():  # parameters inside plain containers
                if isinstance(item, Tensor) and "." in name:
                    out.setdefault(base + name, item)
        return out

    def load_state_dict(self, state_dict: Mapping[str, Tensor], strict: bool = True, assign: bool = False) -> Any:
        """Copy `state_dict`'s tensors into this module's (keys, shapes checked; values cast and moved to each
        tensor's dtype and device); returns `(missing_keys, unexpected_keys)` like torch."""
        if assign:
            raise NotImplementedError("load_state_dict(assign=True) is not supported: values are always copied")
        missing, unexpected = load_state_dict(self, dict(state_dict), strict=strict, verbose=False)
        return _IncompatibleKeys(missing, unexpected)

    # ---- modes and gradients ----------------------------------------------------------------------------------

    def train(self: M, mode: bool = True) -> M:
        """Training mode for this module and every submodule (dropout active, BatchNorm batch statistics)."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        for m in self.modules():
            m.training = mode
        return self

    def eval(self: M) -> M:
        """Inference mode for this module and every submodule (`train(False)`)."""
        return self.train(False)

    def requires_grad_(self: M, requires_grad: bool = True) -> M:
        """Switch gradient tracking of every parameter (freeze a part of a model with `requires_grad_(False)`)."""
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget the parameters' gradients (`.grad = None`, or zeros with `set_to_none=False`)."""
        for p in self.parameters():
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad = Tensor.zeros(*p.shape, dtype=p.dtype, device=p.device)

    def apply(self: M, fn: Callable[[Module], Any]) -> M:
        """Call `fn` on every submodule and then this module (torch's order), e.g. for custom initialisation."""
        for m in reversed(list(self.modules())):
            fn(m)
        return self

    # ---- moving and converting --------------------------------------------------------------------------------

    def _convert(self: M, fn: Callable[[Tensor], Tensor]) -> M:
        with no_grad():
            for mod in self.modules():
                for registry in (mod._parameters, mod._buffers):
                    for name, t in registry.items():
                        if t is None:
                            continue
                        new = fn(t)
                        if new is t:
                            continue
                        was_param = registry is mod._parameters
                        fresh = Parameter(new, requires_grad=bool(t.requires_grad)) if was_param else new.realize()
                        registry[name] = fresh
        return self

    def to(self: M, device: str | None = None, dtype: DType | None = None) -> M:
        """Move every parameter and buffer to `device` and/or cast the floating ones to `dtype`."""
        from tg.ir import dtypes

        def conv(t: Tensor) -> Tensor:
            if dtype is not None and dtypes.is_float(t.dtype) and t.dtype is not dtype:
                t = t.cast(dtype)
            return t.to(device) if device is not None and t.device != device else t

        return self._convert(conv)

    def cpu(self: M) -> M:
        """Every parameter and buffer on the CPU."""
        return self.to("CPU")

    def float(self: M) -> M:
        """Floating parameters and buffers as float32."""
        from tg.ir import dtypes

        return self.to(dtype=dtypes.float32)

    def half(self: M) -> M:
        """Floating parameters and buffers as float16."""
        from tg.ir import dtypes

        return self.to(dtype=dtypes.float16)

    # ---- printing -----------------------------------------------------------------------------------------

    def extra_repr(self) -> str:
        """The text inside this module's parentheses in its repr (layers override it)."""
        return ""

    def _get_name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        lines = [line for line in self.extra_repr().split("\n") if line] if self.extra_repr() else []
        for name, m in self._modules.items():
            body = repr(m).replace("\n", "\n  ")
            lines.append(f"({name}): {body}")
        if not lines:
            return f"{self._get_name()}()"
        if len(lines) == 1 and not self._modules:
            return f"{self._get_name()}({lines[0]})"
        return f"{self._get_name()}(\n  " + "\n  ".join(lines) + "\n)"

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__.copy()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


# ---- containers -------------------------------------------------------------------------------------------------


class Sequential(Module):
    """Modules applied in order: `Sequential(Linear(4, 8), ReLU(), Linear(8, 2))`, or from an OrderedDict of
    named modules. Keys are the positions ("0", "1", ...) or the given names, as in torch."""

    def __init__(self, *args: Any) -> None:
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for name, module in args[0].items():
                self.add_module(name, module)
        else:
            for idx, module in enumerate(args):
                self.add_module(str(idx), module)

    def forward(self, x: Any) -> Any:
        for module in self._modules.values():
            if module is not None:
                x = module(x)
        return x

    def _index(self, idx: int) -> str:
        n = len(self._modules)
        if not -n <= idx < n:
            raise IndexError(f"index {idx} is out of range for a {type(self).__name__} of {n} modules")
        return list(self._modules)[idx % n]

    def __getitem__(self, idx: int | slice) -> Any:
        if isinstance(idx, slice):
            return type(self)(OrderedDict(list(self._modules.items())[idx]))
        return self._modules[self._index(idx)]

    def __setitem__(self, idx: int, module: Module) -> None:
        self.add_module(self._index(idx), module)

    def __delitem__(self, idx: int | slice) -> None:
        keys = list(self._modules)[idx] if isinstance(idx, slice) else [self._index(idx)]
        for k in keys:
            del self._modules[k]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(m for m in self._modules.values() if m is not None)

    def append(self, module: Module) -> Sequential:
        """Add `module` at the end."""
        self.add_module(str(len(self)), module)
        return self


class ModuleList(Module):
    """A list of submodules, registered under their positions ("0", "1", ...): `ModuleList([Block() for _ in
    range(4)])`; indexable and iterable like a list, not callable."""

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def _index(self, idx: int) -> int:
        n = len(self._modules)
        if not -n <= idx < n:
            raise IndexError(f"index {idx} is out of range for a ModuleList of {n} modules")
        return idx % n

    def __getitem__(self, idx: int | slice) -> Any:
        mods = list(self._modules.values())
        if isinstance(idx, slice):
            return ModuleList(mods[idx])  # type: ignore[arg-type]
        return mods[self._index(idx)]

    def __setitem__(self, idx: int, module: Module) -> None:
        self.add_module(str(self._index(idx)), module)

    def __delitem__(self, idx: int | slice) -> None:
        mods = list(self._modules.values())
        if isinstance(idx, slice):
            del mods[idx]
        else:
            del mods[self._index(idx)]
        self._modules.clear()
        for i, m in enumerate(mods):
            self._modules[str(i)] = m

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._modules.values())

    def __iadd__(self, modules: Iterable[Module]) -> ModuleList:
        return self.extend(modules)

    def append(self, module: Module) -> ModuleList:
        """Add `module` at the end."""
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        """Add each of `modules` at the end."""
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> None:
        """Insert `module` before position `index`."""
        mods = list(self._modules.values())
        mods.insert(index, module)
        self._modules.clear()
        for i, m in enumerate(mods):
            self.add_module(str(i), m)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("ModuleList is not callable: iterate over it in your forward()")


class ModuleDict(Module):
    """A dict of submodules, registered under their keys: `ModuleDict({"enc": Linear(4, 8)})`."""

    def __init__(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]  # type: ignore[return-value]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        del self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __contains__(self, key: object) -> bool:
        return key in self._modules

    def keys(self) -> Iterable[str]:
        """The keys, in insertion order."""
        return self._modules.keys()

    def values(self) -> Iterable[Module]:
        """The modules, in insertion order."""
        return self._modules.values()  # type: ignore[return-value]

    def items(self) -> Iterable[tuple[str, Module]]:
        """(key, module) pairs, in insertion order."""
        return self._modules.items()  # type: ignore[return-value]

    def pop(self, key: str) -> Module:
        """Remove `key` and return its module."""
        return self._modules.pop(key)  # type: ignore[return-value]

    def clear(self) -> None:
        """Remove every module."""
        self._modules.clear()

    def update(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]]) -> None:
        """Add (or replace) modules from a mapping or (key, module) pairs."""
        pairs = modules.items() if isinstance(modules, Mapping) else modules
        for key, module in pairs:
            self.add_module(key, module)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("ModuleDict is not callable: index it in your forward()")


class ParameterList(Module):
    """A list of parameters, registered under their positions."""

    def __init__(self, values: Iterable[Tensor] | None = None) -> None:
        super().__init__()
        for v in values or ():
            self.append(v)

    def append(self, value: Tensor) -> ParameterList:
        """Add a parameter at the end (a plain tensor becomes a Parameter)."""
        self.register_parameter(str(len(self._parameters)), value)
        return self

    def __getitem__(self, idx: int) -> Tensor:
        return list(self._parameters.values())[idx]  # type: ignore[return-value]

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self) -> Iterator[Tensor]:
        return iter(p for p in self._parameters.values() if p is not None)


class ParameterDict(Module):
    """A dict of parameters, registered under their keys."""

    def __init__(self, values: Mapping[str, Tensor] | None = None) -> None:
        super().__init__()
        for k, v in (values or {}).items():
            self[k] = v

    def __getitem__(self, key: str) -> Tensor:
        return self._parameters[key]  # type: ignore[return-value]

    def __setitem__(self, key: str, value: Tensor) -> None:
        self.register_parameter(key, value)

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self) -> Iterator[str]:
        return iter(self._parameters)

    def keys(self) -> Iterable[str]:
        """The keys, in insertion order."""
        return self._parameters.keys()

    def items(self) -> Iterable[tuple[str, Tensor]]:
        """(key, parameter) pairs."""
        return self._parameters.items()  # type: ignore[return-value]


class StateDictError(ValueError):
    """A state dict does not fit the model: lists the missing, unexpected and mismatched keys."""


def _shapes_match(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return a == b or (a in ((), (1,)) and b in ((), (1,)))


def get_state_dict(obj: Any, prefix: str = "", tensor_type: type = Tensor) -> dict[str, Tensor]:
    """`{attribute path: Tensor}` for every tensor reachable from `obj` through attributes, lists/tuples (by
    index), dicts (by key) and namedtuples; `None` and other values are skipped. An `nn.Module` contributes its
    `state_dict()` (parameters and persistent buffers, torch's keys).

    >>> class Net:
    ...     def __init__(self):
    ...         self.fc = Linear(2, 3)
    >>> sorted(get_state_dict(Net()))  # doctest: +SKIP
    ['fc.bias', 'fc.weight']
    """
    out: dict[str, Tensor] = {}
    seen: set[int] = set()
    stack: list[tuple[str, Any]] = [(prefix.rstrip("."), obj)]
    while stack:  # iterative depth-first walk, children in attribute order
        name, value = stack.pop()
        if isinstance(value, tensor_type):
            out.setdefault(name, value)  # type: ignore[arg-type]
            continue
        if id(value) in seen:
            continue
        children: list[tuple[str, Any]]
        if isinstance(value, Module):
            children = list(value.state_dict().items())
        elif isinstance(value, tuple) and hasattr(value, "_asdict"):
            children = list(value._asdict().items())
        elif isinstance(value, (list, tuple)):
            children = [(str(i), v) for i, v in enumerate(value)]
        elif isinstance(value, dict):
            children = [(str(k), v) for k, v in value.items()]
        elif hasattr(value, "__dict__") and not isinstance(value, type):
            children = list(vars(value).items())
        else:
            continue
        seen.add(id(value))
        stack.extend((f"{name}.{key}" if name else key, child) for key, child in reversed(children))
    return out


def get_parameters(obj: Any) -> list[Tensor]:
    """Every tensor reachable from `obj` (parameters and buffers), each once, in state-dict order."""
    unique: dict[int, Tensor] = {}
    for t in get_state_dict(obj).values():
        unique.setdefault(id(t), t)
    return list(unique.values())


def load_state_dict(
    model: Any,
    state_dict: dict[str, Tensor],
    strict: bool = True,
    verbose: bool = True,
    consume: bool = False,
    realize: bool = True,
) -> tuple[list[str], list[str]]:
    """Copy `state_dict`'s tensors into `model`'s tensors of the same name; returns `(missing, unexpected)`.

    With `strict=True` (default) any missing or unexpected key raises StateDictError; shape mismatches always do
    (the message lists every problem with both shapes). Values are cast to the model tensor's dtype and moved to
    its device; `requires_grad` of the model tensor is kept. Tensors are realized one at a time (a tqdm bar shows
    progress when `verbose` and there are many), so a large lazily loaded file never sits in memory twice;
    `consume=True` deletes each entry from `state_dict` once loaded.
    """
    if not isinstance(state_dict, dict):
        raise TypeError(f"load_state_dict needs a dict of name -> Tensor, got {type(state_dict).__name__}")
    model_sd = get_state_dict(model)
    missing = [k for k in model_sd if k not in state_dict]
    unexpected = [k for k in state_dict if k not in model_sd]
    mismatched = [
        f"size mismatch for {k}: file {tuple(v.shape)}, model {model_sd[k].shape}"
        for k, v in state_dict.items()
        if k in model_sd and isinstance(v, Tensor) and not _shapes_match(tuple(v.shape), model_sd[k].shape)
    ]
    not_tensors = [k for k, v in state_dict.items() if k in model_sd and not isinstance(v, Tensor)]
    problems = [f"{k} is a {type(state_dict[k]).__name__}, not a Tensor" for k in not_tensors] + mismatched
    if strict:
        problems = (
            [f"missing keys: {missing}"] * bool(missing)
            + [f"unexpected keys: {unexpected}"] * bool(unexpected)
            + problems
        )
    if problems:
        raise StateDictError("error loading state dict:\n  " + "\n  ".join(problems))
    keys = [k for k in model_sd if k in state_dict]
    progress: Any = keys
    if verbose and len(keys) > 50:
        from tqdm import tqdm

        progress = tqdm(keys, desc="loading weights", unit="tensor")
    for key in progress:
        target, value = model_sd[key], state_dict[key]
        value = value.to(target.device).cast(target.dtype).reshape(target.shape)
        _replace(target, value)
        if realize:
            target.realize()
        if consume:
            del state_dict[key]
    return missing, unexpected


def _replace(target: Tensor, value: Tensor) -> None:
    """Give `target` the value `value` in place (its buffer when it has one), outside autograd."""
    with no_grad():
        target.assign(value)
