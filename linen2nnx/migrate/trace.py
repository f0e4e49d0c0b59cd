"""Trace-guided shapes: run the Linen model once (abstractly) and record what each submodule sees.

``migrate --trace SPEC`` uses this when static dataflow cannot tell a layer's input feature size
(e.g. ``nn.Dense`` after a flatten). Nothing is computed: ``jax.eval_shape`` runs ``init`` on
abstract values and ``nn.intercept_methods`` records every submodule call.
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
from collections import defaultdict
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

from linen2nnx.errors import L2NError, ModelBuildError
from linen2nnx.spec import LinenSide, linen_ctor_kwargs


@dataclasses.dataclass
class Trace:
    child_inputs: dict[tuple[str, str], list[tuple[int, ...]]]
    """(parent class qualname, child name) -> shapes of the child's first input, one per call."""
    instances: dict[str, list[dict[str, Any]]]
    """class qualname -> config (dataclass fields) of each traced instance."""
    root_class: str
    root_module: str
    root_inputs: list[tuple[int, ...]]
    """Shapes of the root module's positional inputs."""
    spec_ref: str = ""
    dims_read: dict[tuple[str, str], tuple[int, ...]] = dataclasses.field(default_factory=dict)
    """(parent class, child name) -> the axes of the child's first input (negative, from the end) that
    its parameter shapes depend on; only for classes that size a parameter from ``x.shape``."""

    own_inputs: dict[str, list[tuple[tuple[int, ...] | None, ...]]] = dataclasses.field(default_factory=dict)
    """class qualname -> the shapes of its ``__call__``'s positional arguments (None: not an array),
    one tuple per call: what a size the dataflow could only guess at (``x @ y``) is checked against."""

    carries: dict[tuple[str, str], list[tuple[int, ...]]] = dataclasses.field(default_factory=dict)
    """(parent class, child name) -> the last-axis sizes of the leaves of a child's first argument when
    it is a tuple (an RNN cell's carry), one tuple per call: Linen cells take their hidden size from it."""

    child_parents: dict[tuple[str, str], list[int | None]] = dataclasses.field(default_factory=dict)
    """(parent class, child name) -> for each call of ``child_inputs``, the index of the parent's own
    instance in ``instances`` (None: not recorded): which config each call's shape goes with."""

    input_leaves: dict[tuple[str, str], list[str | None]] = dataclasses.field(default_factory=dict)
    """(parent class, child name) -> for each call of ``child_inputs``, which leaf of the parent's own
    call arguments the child's first input is, unchanged (``"0:.nodes"``: ``.nodes`` of the first
    argument; ``"0:"``: the argument itself), or None: what a layer that a library applies for the
    module (``jraph.GraphMapFeatures(embed_node_fn=nn.Dense(...))``) reads."""

    root_leaves: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    """The root call's array leaves by the same spelling (``"0:.nodes"``) -> their shapes."""

    own_leaves: dict[str, dict[str, tuple[int, ...]]] = dataclasses.field(default_factory=dict)
    """class qualname -> the array leaves of its first call's arguments, spelled as ``root_leaves``:
    what a constructor size of a class built inside the model (``input_leaf:0:.nodes``) is read from."""

    path_inputs: dict[tuple[str, ...], list[tuple[int, ...]]] = dataclasses.field(default_factory=dict)
    """A module's Linen path (``('encoder', '0', 'attention', 'key')``) -> the shapes of its first input,
    one per call: the size of one layer of one instance of a class that other instances share."""

    instance_paths: dict[str, list[tuple[str, ...] | None]] = dataclasses.field(default_factory=dict)
    """class qualname -> the Linen path of each traced instance, as ``instances`` lists them."""

    defined: dict[tuple[str, ...], tuple[str, ...]] = dataclasses.field(default_factory=dict)
    """A called module's Linen path -> the names its scope holds once its call ran: the submodules
    ``setup()`` defined (called or not; not one a config test left out) and its variables."""

    @functools.cached_property
    def built_paths(self) -> frozenset[tuple[str, ...]]:
        """The Linen paths of the traced instances (``instance_paths``, read once all are known)."""
        return frozenset(path for paths in self.instance_paths.values() for path in paths if path is not None)

    def shapes_for(self, class_qualname: str, child: str) -> list[tuple[int, ...]]:
        return self.child_inputs.get((class_qualname, child), [])

    def __getstate__(self) -> dict[str, Any]:
        """What ``-j N`` sends to its worker processes. The traced configs hold what the model was built
        with: closures (initialisers), which ``pickle`` refuses, and the traced package's own classes,
        which a worker cannot import. They travel as copies of what the sizer reads of them (see
        :func:`picklable_config`)."""
        state = dict(self.__dict__)
        state["instances"] = {
            name: [{k: picklable_config(v) for k, v in cfg.items()} for cfg in configs]
            for name, configs in self.instances.items()
        }
        return state


def trace_linen(side: LinenSide, spec_ref: str = "") -> Trace:
    """Run the Linen model of ``side`` abstractly (``jax.eval_shape`` of its init) on its example
    batch, recording every submodule call (see :class:`_Recorder`)."""
    import flax.linen as nn
    import jax

    recorder = _Recorder()
    model_type = type(side.model)
    try:
        args, kwargs = side.call_args(train=False)
    except L2NError:
        raise
    except Exception as e:  # `inputs=` left out and the batch has no "x": the spec's fault, said so
        how = (
            "LinenSide(inputs=...) fails on it"
            if side.inputs is not None
            else "set LinenSide(inputs=...) to say how a batch becomes its arguments"
        )
        raise ModelBuildError(
            f"spec {spec_ref or '(trace)'}: the example batch does not give {model_type.__name__}'s inputs "
            f"({type(e).__name__}: {e}); {how}"
        ) from e

    def init():
        with nn.intercept_methods(recorder.intercept):
            return side.model.init(side.init_rngs(), *args, **kwargs)

    try:
        jax.eval_shape(init)
    except L2NError:
        raise
    except Exception as e:  # the user's model or batch: a message naming the spec, not a traceback
        raise ModelBuildError(
            f"spec {spec_ref or '(trace)'}: the Linen model {model_type.__name__} fails on its example batch: "
            f"{type(e).__name__}: {e}"
        ) from e
    dims_read = {key: _dims_read(*probe) for key, probe in recorder.probes.items()}
    return Trace(
        child_inputs=dict(recorder.child_inputs),
        instances=dict(recorder.instances),
        root_class=model_type.__qualname__,
        root_module=model_type.__module__,
        root_inputs=[tuple(a.shape) for a in args if hasattr(a, "shape")],
        spec_ref=spec_ref,
        dims_read={k: v for k, v in dims_read.items() if v is not None},
        own_inputs=dict(recorder.own_inputs),
        carries=dict(recorder.carries),
        child_parents=dict(recorder.child_parents),
        input_leaves=dict(recorder.input_leaves),
        own_leaves=dict(recorder.own_leaves),
        root_leaves={k: tuple(v.shape) for k, v in leaf_paths(args).items()},
        path_inputs=dict(recorder.path_inputs),
        instance_paths=dict(recorder.instance_paths),
        defined=dict(recorder.defined),
    )


class OpaqueValue:
    """A traced config value that cannot cross a process boundary (a function, a closure): only its
    ``repr`` does, so the sizer sees no number in it, as it sees none in the function itself."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text

    def __call__(self, *args: Any, **kwargs: Any) -> Any:  # callable, as the value it stands for
        raise TypeError(f"{self.text} was not sent to this process")


def picklable_config(value: Any, depth: int = 0) -> Any:
    """A copy of ``value`` made of builtins and numpy only, which any process can unpickle (the
    classes of the traced package are not importable there): integers (numpy's, an ``IntEnum``) as
    ``int``, mappings as dicts of their string keys, lists and tuples element by element, a
    dataclass's, a NamedTuple's or a plain object's public attributes as a ``SimpleNamespace``, and an
    :class:`OpaqueValue` for the rest (a callable, a type): what the sizer reads of each is unchanged."""
    import numpy as np

    if isinstance(value, (str, bytes, bool, float, complex, type(None))):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, np.ndarray) and value.dtype != object:
        return value
    if depth > 8 or isinstance(value, type) or callable(value):
        return OpaqueValue(repr(value))
    if isinstance(value, Mapping):
        return {k: picklable_config(v, depth + 1) for k, v in value.items() if isinstance(k, str)}
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        items = [picklable_config(v, depth + 1) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if dataclasses.is_dataclass(value):
        attrs = {f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}
    elif hasattr(value, "_fields"):  # a NamedTuple
        attrs = {f: getattr(value, f) for f in value._fields}
    else:
        found = getattr(value, "__dict__", None)
        if not isinstance(found, dict):
            return OpaqueValue(repr(value))
        attrs = {k: v for k, v in found.items() if k.isidentifier() and not k.startswith("_")}
    return SimpleNamespace(**{k: picklable_config(v, depth + 1) for k, v in attrs.items()})


class _Recorder:
    """What a method interceptor records of each module ``__call__`` during one abstract init: the
    inputs of each child under its parent's class, its carries, each instance's config, and a probe
    for the modules whose parameter shapes read the input's shape."""

    def __init__(self) -> None:
        self.child_inputs: dict[tuple[str, str], list[tuple[int, ...]]] = defaultdict(list)
        self.instances: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.own_inputs: dict[str, list[tuple[tuple[int, ...] | None, ...]]] = defaultdict(list)
        self.carries: dict[tuple[str, str], list[tuple[int, ...]]] = defaultdict(list)
        self.seen: set[int] = set()
        self.child_parents: dict[tuple[str, str], list[int | None]] = defaultdict(list)
        self.instance_index: dict[int, int] = {}  # id(module) -> its index in instances[its class]
        self.alive: list[Any] = []  # the recorded modules, kept so that no id is reused for another
        self.calling: list[Any] = []  # modules whose __call__ is running, outermost first
        self.call_args: dict[int, tuple] = {}  # id(module) -> the positional arguments of its running call
        self.input_leaves: dict[tuple[str, str], list[str | None]] = defaultdict(list)
        self.own_leaves: dict[str, dict[str, tuple[int, ...]]] = {}
        self.probes: dict[tuple[str, str], tuple[Any, tuple, dict]] = {}
        self.path_inputs: dict[tuple[str, ...], list[tuple[int, ...]]] = defaultdict(list)
        self.instance_paths: dict[str, list[tuple[str, ...] | None]] = defaultdict(list)
        self.defined: dict[tuple[str, ...], tuple[str, ...]] = {}

    def intercept(self, next_fun, args, kwargs, context):
        module = context.module
        if context.method_name != "__call__":
            return next_fun(*args, **kwargs)
        path = _path_of(module)
        self._record(module, args, kwargs, path)
        self.calling.append(module)
        outer = self.call_args.get(id(module))
        self.call_args[id(module)] = args
        try:
            out = next_fun(*args, **kwargs)
            if path is not None:  # what its setup() defined, now that it ran
                self.defined[path] = tuple(getattr(getattr(module, "_state", None), "children", {}))
            return out
        finally:
            self.calling.pop()
            if outer is None:
                self.call_args.pop(id(module), None)
            else:
                self.call_args[id(module)] = outer

    def _record(self, module: Any, args: tuple, kwargs: dict, path: tuple[str, ...] | None) -> None:
        import flax.linen as nn
        import jax

        self.own_inputs[type(module).__qualname__].append(
            tuple(tuple(a.shape) if hasattr(a, "shape") else None for a in args)
        )
        if type(module).__qualname__ not in self.own_leaves:
            leaves = leaf_paths(args)
            self.own_leaves[type(module).__qualname__] = {k: tuple(v.shape) for k, v in leaves.items()}
        parent = module.parent
        if not isinstance(parent, nn.Module):
            # inside a lifted transform (nn.scan, nn.remat, ...) the parent is a Scope: the module
            # that applies the transform is the innermost one still running
            parent = self.calling[-1] if self.calling else None
        # a cell's call is (carry, x): its input is x, its carry one array (GRU) or a tuple (LSTM)
        cell = isinstance(module, nn.RNNCellBase) and len(args) >= 2
        carry = args[0] if args and (cell or isinstance(args[0], (tuple, list))) else None
        x = args[1] if cell else args[0] if args else None
        if isinstance(parent, nn.Module) and carry is not None:
            leaves = jax.tree.leaves(carry)
            if leaves and all(hasattr(leaf, "shape") and leaf.shape for leaf in leaves):
                self.carries[(type(parent).__qualname__, module.name)].append(
                    tuple(leaf.shape[-1] for leaf in leaves)
                )
        first = x if args else kwargs.get(_first_parameter(type(module)))  # `block(hidden_states=h)`
        if path is not None and hasattr(first, "shape"):
            self.path_inputs[path].append(tuple(first.shape))
        if isinstance(parent, nn.Module) and hasattr(x, "shape"):
            key = (type(parent).__qualname__, module.name)
            self.child_inputs[key].append(tuple(x.shape))
            self.child_parents[key].append(self.instance_index.get(id(parent)))
            leaves = leaf_paths(self.call_args.get(id(parent), ()))
            self.input_leaves[key].append(next((p for p, v in leaves.items() if v is x), None))
            if key not in self.probes and _sizes_params_from_shape(type(module)):
                self.probes[key] = (module.clone(parent=None, name=None), _abstract(args), _abstract(kwargs))
        if id(module) not in self.seen:
            self.seen.add(id(module))
            try:
                kwargs_of = linen_ctor_kwargs(module)
                found = self.instances[type(module).__qualname__]
                self.instance_index[id(module)] = len(found)
                self.alive.append(module)
                found.append(kwargs_of)
                self.instance_paths[type(module).__qualname__].append(path)
            except TypeError:
                pass


def _path_of(module: Any) -> tuple[str, ...] | None:
    """The module's Linen path (its scope's), None when it has none (an unbound clone)."""
    try:
        return tuple(str(part) for part in module.path)
    except Exception:  # no scope: a module applied by hand, outside the traced tree
        return None


@functools.cache
def _first_parameter(cls: type) -> str | None:
    """The name of ``cls.__call__``'s first parameter after ``self`` (what a call may pass by keyword)."""
    import inspect

    try:
        params = list(inspect.signature(cls.__call__).parameters)
    except (TypeError, ValueError):
        return None
    return params[1] if len(params) > 1 else None


def leaf_paths(args: tuple) -> dict[str, Any]:
    """The array leaves of call arguments by where they sit: ``"0:"`` the first argument itself,
    ``"0:.nodes"`` an attribute of it (a NamedTuple field), ``"1:['image']"`` a dict entry."""
    import jax

    found: dict[str, Any] = {}
    for index, arg in enumerate(args):
        for path, leaf in jax.tree_util.tree_flatten_with_path(arg)[0]:
            if hasattr(leaf, "shape"):
                found[f"{index}:{jax.tree_util.keystr(path)}"] = leaf
    return found


def _sizes_params_from_shape(cls: type) -> bool:
    """Does the class create a param in a method that reads an input's ``.shape`` (cheap source test)?"""
    import inspect

    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return False
    except SystemError:  # CPython 3.11's class lookup (ast.parse) can fail so in a long-lived process:
        source = "".join(_method_source(f) for f in vars(cls).values())  # the methods, found by line
    return "self.param(" in source and ".shape" in source


def _method_source(value: object) -> str:
    """The source of a function defined in a class body, or ''."""
    import inspect

    if not inspect.isfunction(value):
        return ""
    try:
        return inspect.getsource(value)
    except (OSError, TypeError, SystemError):
        return ""


def _abstract(tree: Any) -> Any:
    import jax

    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype) if hasattr(a, "shape") else a, tree)


def _dims_read(module: Any, args: tuple, kwargs: dict) -> tuple[int, ...] | None:
    """The input axes whose size changes a parameter shape: init once as traced, then once per axis
    with that axis one longer (abstractly; nothing is computed). A longer batch axis alone may not run
    when other inputs share it (``x`` beside its style vectors): the batch axis of every input as long
    as the first one's then grows with it."""
    import jax

    def param_shapes(first: Any, batch: bool = False) -> Any:
        # arrays travel as eval_shape arguments, everything else (flags, None) stays a Python value
        leaves, treedef = jax.tree.flatten((first, args[1:], kwargs), is_leaf=lambda x: x is None)
        arrays = [i for i, leaf in enumerate(leaves) if isinstance(leaf, jax.ShapeDtypeStruct)]
        if batch:  # the other inputs of the first one's batch size, one longer on that axis too
            size = args[0].shape[0]
            leaves = [
                jax.ShapeDtypeStruct((size + 1, *leaf.shape[1:]), leaf.dtype)
                if i in arrays and i > 0 and leaf.shape and leaf.shape[0] == size
                else leaf
                for i, leaf in enumerate(leaves)
            ]

        def run(*values: Any) -> Any:
            filled = list(leaves)
            for i, value in zip(arrays, values):
                filled[i] = value
            f, rest, kw = jax.tree.unflatten(treedef, filled)
            return module.init(jax.random.key(0), f, *rest, **kw)

        out = jax.eval_shape(run, *[leaves[i] for i in arrays])
        return jax.tree.map(lambda a: a.shape, out.get("params", {}))

    try:
        base = param_shapes(args[0])
        rank = len(args[0].shape)
        read = []
        for axis in range(rank):
            shape = list(args[0].shape)
            shape[axis] += 1
            longer = jax.ShapeDtypeStruct(tuple(shape), args[0].dtype)
            try:
                shapes = param_shapes(longer)
            except Exception:
                if axis != 0:
                    raise
                shapes = param_shapes(longer, batch=True)
            if shapes != base:
                read.append(axis - rank)
        return tuple(read)
    except Exception:  # a module that cannot run on its own (needs its parent's scope): no evidence
        return None
