"""The model pair spec: the one way users point ``convert``, ``check`` and ``train`` at models.

A spec reference is ``package.module:function`` or ``path/to/file.py[:function]`` (default function
``pair``). The function takes no arguments and returns either

- a :class:`LinenSide` (enough for ``migrate --trace``), or
- a :class:`ModelPair` (the Linen side plus a factory for the NNX twin and the name map).

Both sides are called the same way: ``inputs(batch)`` gives ``(args, kwargs)`` and the mode keyword
arguments (``train_kwargs`` / ``eval_kwargs``) are added on top, because ``migrate`` keeps the
``__call__`` signature of every module it rewrites.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from linen2nnx.errors import L2NError, SpecError

DEFAULT_FUNCTION = "pair"


def _default_inputs(batch: Any) -> tuple[tuple, dict]:
    return (batch["x"],), {}


@dataclasses.dataclass
class LinenSide:
    """Everything needed to run the Linen original: module, example batch, loss and modes."""

    model: Any  # flax.linen.Module (unbound)
    batch: Mapping[str, Any]
    loss: Callable[[Any, Mapping[str, Any]], Any]  # (outputs, batch) -> scalar
    inputs: Callable[[Mapping[str, Any]], tuple[tuple, dict]] = _default_inputs
    train_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=lambda: {"train": True})
    eval_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=lambda: {"train": False})
    mutable: tuple[str, ...] = ()  # collections a train-mode apply updates, e.g. ("batch_stats",)
    rng_streams: tuple[str, ...] = ("params", "dropout")
    optimizer: Any = None  # optax.GradientTransformation
    seed: int = 0
    name: str = ""
    # Sharded runs (``check``/``demo --mesh``): Linen's logical axis rules (logical name -> mesh axes),
    # the mesh axis names they are written for, and the mesh axes the example batch's leading
    # dimension is split over (axes missing from the mesh are skipped).
    logical_axis_rules: tuple[tuple[str, Any], ...] = ()
    mesh_axes: tuple[str, ...] = ()
    batch_axes: tuple[str, ...] = ("data", "fsdp")
    # A longer batch for sequence models (same structure as ``batch``, longer sequence axis):
    # ``check`` also compares the eval forward on it (``forward/long``), because position-dependent
    # slips (a RoPE base, a positional table) grow with the position and short inputs hide them.
    long_batch: Mapping[str, Any] | None = None

    @property
    def state_collections(self) -> tuple[str, ...]:
        """``mutable`` but the sown collections (``intermediates``, and those registered to an
        ``nnx.Intermediate`` subclass): the collections of variables a train apply updates. Sown
        values are compared as such (``nnx.capture``), never as variables an NNX twin holds; fed back to
        the next step, Linen would append to them."""
        from linen2nnx.checkpoint_convert.read import sown_collections

        sown = set(sown_collections())
        return tuple(c for c in self.mutable if c not in sown)

    def call_args(self, train: bool) -> tuple[tuple, dict]:
        args, kwargs = self.inputs(self.batch)
        mode = self.train_kwargs if train else self.eval_kwargs
        return tuple(args), {**kwargs, **mode}

    def init_rngs(self, seed: int | None = None) -> dict[str, Any]:
        import jax

        keys = jax.random.split(jax.random.key(self.seed if seed is None else seed), len(self.rng_streams))
        return dict(zip(self.rng_streams, keys))

    def apply_rngs(self) -> dict[str, Any]:
        """The keys of :meth:`init_rngs` but ``params``: what an ``apply`` hands a model that draws
        (``make_rng('dropout')``, a VAE's noise) in the check's forwards."""
        return {k: v for k, v in self.init_rngs().items() if k != "params"}

    def init_variables(self, seed: int | None = None, *, train: bool = False) -> dict[str, Any]:
        """``model.init`` on the example batch, in eval mode unless ``train`` (the usual Linen init)."""
        args, kwargs = self.call_args(train=train)
        return self.model.init(self.init_rngs(seed), *args, **kwargs)


@dataclasses.dataclass
class ModelPair:
    """A Linen model and its NNX twin, plus the name map that relates their state trees."""

    linen: LinenSide
    nnx_factory: Callable[[Any], Any]  # (nnx.Rngs) -> nnx.Module
    name_map: Path | None = None
    source: str = ""  # the spec reference it was loaded from, for messages

    def make_nnx(self, seed: int = 0) -> Any:
        """Build the NNX twin.

        Without an active mesh, eager sharding is switched off for the construction: Linen builds
        logically partitioned weights anywhere (the names are only metadata), while NNX refuses to
        create a Variable with sharding names outside a mesh.
        """
        import jax
        from flax import nnx

        # a `default` stream too: NNX layers draw from streams Linen never names (RNN's `carry`, ...)
        streams = {s: seed + i + 1 for i, s in enumerate(self.linen.rng_streams)}
        no_mesh = jax.sharding.get_abstract_mesh().empty
        with nnx.use_eager_sharding(False) if no_mesh else contextlib.nullcontext():
            return self.nnx_factory(nnx.Rngs(seed, **streams))


def nnx_optimizer(model: Any, tx: Any) -> Any:
    """``nnx.Optimizer(model, tx, wrt=nnx.Param)`` for the spec's (Linen) optimizer.

    ``tx.init`` runs on NNX's parameter tree: an ``nnx.State`` named by the NNX attributes
    (``layer_norm_0``), not Linen's dict of module names (``LayerNorm_0``). A mask or label function
    written for Linen's tree fails there (``MaskedNode`` has no ``shape``, "expected (frozen)dict"): a
    SpecError that says so, never a traceback."""
    from flax import nnx

    try:
        return nnx.Optimizer(model, tx, wrt=nnx.Param)
    except L2NError:
        raise
    except Exception as e:  # whatever the optax transform raises
        raise SpecError(
            f"the spec's optimizer fails on the NNX model's parameters ({type(e).__name__}: {e}): a mask or "
            "label function (optax.masked, multi_transform, adamw(mask=...)) written for Linen's parameter tree "
            "(a dict of Linen module names) meets NNX's (an nnx.State of the NNX attribute names); write it "
            "for the NNX tree"
        ) from e


def linen_ctor_kwargs(module: Any) -> dict[str, Any]:
    """The dataclass fields a Linen module was constructed with (its config), minus parent/name.

    ``migrate`` keeps every dataclass field as a constructor argument of the NNX class, so these
    kwargs construct the NNX twin too.
    """
    return {
        f.name: getattr(module, f.name)
        for f in dataclasses.fields(module)
        if f.init and f.name not in ("parent", "name")
    }


def nnx_ctor_kwargs(module: Any, nnx_module: Any) -> dict[str, Any]:
    """:func:`linen_ctor_kwargs`, with each value as the NNX constructor takes it (see
    :func:`nnx_config_value`)."""
    return {name: nnx_config_value(value, nnx_module) for name, value in linen_ctor_kwargs(module).items()}


def nnx_config_value(value: Any, nnx_module: Any) -> Any:
    """A Linen config value in NNX terms: a class the migration converted (``block_cls=ResNetBlock``)
    becomes the NNX class of the same name in ``nnx_module``; a Flax Linen layer (``conv=nn.Conv``)
    its NNX layer; a ``functools.partial`` of either keeps its arguments (Linen keyword names
    renamed as the layer table says); a member of an enum a migrated file defines, the member of the
    same name of that file's NNX copy (the two copies' enums never compare equal: every test of the
    config would go the other way), also inside a dataclass config, a tuple, a list or a dict; and a
    config object of a class such a file defines (a ``PretrainedConfig``), an object of the copy's
    class with the same attributes: ``isinstance(self.config, CLIPTextConfig)`` in the NNX copy holds
    for it, as the Linen original's test holds for the Linen object. Anything else is passed as is."""
    import enum
    import functools

    from flax import linen, nnx

    from linen2nnx.layers import layer_rule

    if isinstance(value, enum.Enum):
        twin = _twin_of(type(value), nnx_module)
        return twin[value.name] if isinstance(twin, type) and issubclass(twin, enum.Enum) else value
    if isinstance(value, (tuple, list, dict)) or _is_config_object(value):
        return _config_with_twins(value, nnx_module)
    if (twin_object := _object_twin(value, nnx_module)) is not None:
        return twin_object
    if isinstance(value, functools.partial):
        func = nnx_config_value(value.func, nnx_module)
        if func is value.func:
            return value
        rule = (
            layer_rule(f"flax.linen.{value.func.__name__}")
            if value.func.__module__.startswith("flax.linen")
            else None
        )
        keywords = {rule.nnx_arg(k) if rule else k: v for k, v in value.keywords.items()}
        return functools.partial(func, *value.args, **keywords)
    if isinstance(value, type) and issubclass(value, linen.Module):
        if value.__module__.startswith("flax.linen"):
            rule = layer_rule(f"flax.linen.{value.__name__}")
            return getattr(nnx, rule.nnx) if rule is not None else value
        twin = _class_twin(value, nnx_module)
        if isinstance(twin, type) and issubclass(twin, nnx.Module):
            return twin
    return value


def _class_twin(cls: type, nnx_module: Any) -> Any:
    """The NNX class of Linen ``cls``: the one of its module and qualified name in the NNX copy first
    (``Net(block_cls=a.Block)`` is NNX ``a.Block`` though ``nets.py`` imports another ``Block`` from
    ``b``: by bare name check built the wrong twin and failed a correct migration); else the class of
    the same name in ``nnx_module`` (an NNX copy loaded on its own), unless the Linen module of that
    name binds the name to another class."""
    import sys

    twin = _twin_of(cls, nnx_module)
    if twin is not None:
        return twin
    linen_home = sys.modules.get(nnx_module.__name__)
    if linen_home is not None and linen_home is not nnx_module:
        if getattr(linen_home, cls.__name__, cls) is not cls:
            return None  # the name is another class there: its twin is not cls's
    return getattr(nnx_module, cls.__name__, None)


def _twin_of(obj: Any, nnx_module: Any) -> Any:
    """The object of the same qualified name in the NNX copy of ``obj``'s module, where the migration
    rewrote that module (imported beside its Linen original: isolated_import.py); None elsewhere."""
    from linen2nnx.isolated_import import migrated_sibling

    owner = getattr(obj, "__module__", None)
    twin: Any = nnx_module if owner == nnx_module.__name__ else migrated_sibling(nnx_module, str(owner))
    for part in getattr(obj, "__qualname__", "").split("."):
        twin = getattr(twin, part, None)
    return twin if twin is not obj else None


def _object_twin(value: Any, nnx_module: Any, depth: int = 0) -> Any:
    """``value`` as an object of its class's twin in the NNX copy (see :func:`nnx_config_value`), its
    attributes translated too; None where its class has no twin or it is no plain object."""
    from flax import linen

    attrs = getattr(value, "__dict__", None)
    if depth > 8 or isinstance(value, (type, linen.Module)) or callable(value) or not isinstance(attrs, dict):
        return None
    twin = _twin_of(type(value), nnx_module)
    if not isinstance(twin, type) or twin is type(value):
        return None
    out = twin.__new__(twin)
    for name, attr in attrs.items():
        nested = _object_twin(attr, nnx_module, depth + 1)
        out.__dict__[name] = nested if nested is not None else nnx_config_value(attr, nnx_module)
    return out


def _is_config_object(value: Any) -> bool:
    import dataclasses

    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _config_with_twins(value: Any, nnx_module: Any) -> Any:
    """A tuple / list / dict / dataclass config with each element in NNX terms; itself when none changes."""
    import copy
    import dataclasses

    if isinstance(value, (tuple, list)):
        items = [nnx_config_value(v, nnx_module) for v in value]
        changed = any(a is not b for a, b in zip(items, value))
        return (
            (type(value)(items) if not hasattr(value, "_fields") else type(value)(*items))
            if changed
            else value
        )
    if isinstance(value, dict):
        entries = {k: nnx_config_value(v, nnx_module) for k, v in value.items()}
        return entries if any(entries[k] is not v for k, v in value.items()) else value
    if hasattr(value, "parent") or type(value).__module__.startswith(("flax.", "jax.")):
        return value  # a Linen module or a library's own object: not a config of the run
    fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if hasattr(value, f.name)}
    changed = {k: t for k, v in fields.items() if (t := nnx_config_value(v, nnx_module)) is not v}
    if not changed:
        return value
    out = copy.copy(value)
    for k, v in changed.items():
        object.__setattr__(out, k, v)  # a frozen dataclass too
    return out


def input_leaf(value: Any, accessor: str) -> Any:
    """The array at ``accessor`` (``.nodes``, ``['image']``, ``[0]``: jax's key path spelling) of one
    call argument: what a constructor size the trace found as that leaf's last axis is read from."""
    import jax

    for path, leaf in jax.tree_util.tree_flatten_with_path(value)[0]:
        if jax.tree_util.keystr(path) == accessor:
            return leaf
    raise SpecError(f"the example input has no leaf {accessor!r}")


WRITTEN_SPEC = "linen2nnx_spec.py"  # the pair spec `migrate --trace --out-dir` writes (spec_writer.py)


def import_file(path: str | Path, name: str | None = None) -> Any:
    """Import a Python file as a uniquely named module (its folder goes on ``sys.path``, unless it is
    a migrated tree: the packages there would shadow the Linen originals a pair spec also loads, and
    the spec ``migrate`` writes imports the migrated modules by their paths)."""
    from linen2nnx.namemap import FILENAME as NAME_MAP_FILENAME

    path = Path(path).resolve()
    if not path.is_file():
        raise SpecError(f"{path}: no such file")
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    name = name or f"_linen2nnx_{path.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    migrated_tree = path.name == WRITTEN_SPEC or (path.parent / NAME_MAP_FILENAME).is_file()
    if str(path.parent) not in sys.path and not migrated_tree:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SpecError(f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[name]
        raise SpecError(f"{path}: import failed: {type(e).__name__}: {e}") from e
    return module


def _split_ref(ref: str) -> tuple[str, str]:
    target, sep, func = ref.rpartition(":")
    if not sep or "/" in func or func.endswith(".py"):
        return ref, DEFAULT_FUNCTION
    return target, func or DEFAULT_FUNCTION


def load_spec_object(ref: str) -> Any:
    """Resolve a spec reference and call its function; returns what the function returned."""
    target, func_name = _split_ref(ref)
    if target.endswith(".py") or "/" in target or Path(target).is_file():
        module = import_file(target)
    else:
        try:
            module = importlib.import_module(target)
        except Exception as e:
            raise SpecError(f"spec {ref!r}: cannot import {target!r}: {type(e).__name__}: {e}") from e
    func = getattr(module, func_name, None)
    if func is None or not callable(func):
        raise SpecError(f"spec {ref!r}: {target} has no function {func_name!r}")
    try:
        obj = func()
    except Exception as e:
        raise SpecError(f"spec {ref!r}: {func_name}() failed: {type(e).__name__}: {e}") from e
    if isinstance(obj, ModelPair) and not obj.source:
        obj.source = ref
    return obj


def load_linen_side(ref: str) -> LinenSide:
    obj = load_spec_object(ref)
    if isinstance(obj, ModelPair):
        return obj.linen
    if isinstance(obj, LinenSide):
        return obj
    raise SpecError(f"spec {ref!r}: expected a LinenSide or ModelPair, got {type(obj).__name__}")


def load_pair(ref: str) -> ModelPair:
    obj = load_spec_object(ref)
    if not isinstance(obj, ModelPair):
        raise SpecError(
            f"spec {ref!r}: expected a ModelPair (Linen model + NNX factory), got {type(obj).__name__}; "
            "a LinenSide alone is enough for `migrate --trace`, not for convert/check"
        )
    return obj
