"""Read a Linen checkpoint into plain nested dicts of arrays, whatever it was saved as.

Accepted inputs:

- an Orbax checkpoint directory (``StandardCheckpointer().save(path, train_state_or_variables)``),
  a ``CheckpointManager`` step or root (:mod:`.source` picks the item; :mod:`.stream` plans from
  metadata and restores with a target, group by group);
- a flax msgpack file (``flax.serialization.to_bytes(...)``, also the legacy
  ``flax.training.checkpoints`` files);
- an in-memory tree: a variables dict ``{'params': ..., 'batch_stats': ...}``, a restored
  ``TrainState`` dict, or a live ``TrainState`` object.

No Linen target is needed: the point of conversion is that the Linen code that would give the
target may no longer exist; Orbax items are restored onto targets built from their own metadata. Partitioning boxes (``LogicallyPartitioned`` /
``Partitioned``) are stripped here, because Orbax and msgpack restore them as ``{'value': array}``
dicts and the NNX side keeps sharding as Variable metadata instead (docs/nnx_facts.md#linen-checkpoints-restored-without-a-target). A restored
dict is taken for a box only when it is ``{'value': array}`` plus box metadata keys; a module whose
*only* variable is literally named ``value`` looks the same, and then fails validation loudly
(its leaf lands one level up) rather than converting wrongly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from linen2nnx.errors import L2NError
from linen2nnx.namemap import flatten
from linen2nnx.trees import plain_dicts

PathT = tuple[Any, ...]

#: TrainState fields that are not variable collections but that the converter understands.
TRAIN_STATE_FIELDS = ("step", "opt_state")
#: Collections that hold values produced by a call, not state: never converted.
TRANSIENT_COLLECTIONS = ("intermediates",)


def sown_collections() -> tuple[str, ...]:
    """``intermediates`` and every Linen collection registered (``nnx.register_variable_name``) to an
    ``nnx.Intermediate`` subclass: a collection only ever sown into (``self.sow('losses', ...)``, an
    auxiliary loss, which migrate gives such a subclass). Never converted; ``check`` makes them all
    mutable in Linen's forwards and compares their values as sown values, where NNX's ``capture`` of
    ``Intermediate`` finds them."""
    from flax import nnx
    from flax.nnx import variablelib

    own = [
        name
        for name, typ in variablelib.VariableTypeCache.items()
        if name not in TRANSIENT_COLLECTIONS
        and isinstance(typ, type)
        and issubclass(typ, nnx.Intermediate)
        and not issubclass(typ, nnx.Perturbation)  # flax's own: a perturb() point, no sown value
    ]
    return (*TRANSIENT_COLLECTIONS, *sorted(own))


_BOX_METADATA_KEYS = frozenset({"names", "mesh", "rules"})


@dataclasses.dataclass
class LinenCheckpoint:
    """A Linen checkpoint restored as plain data.

    ``collections`` maps a Linen collection name (``params``, ``batch_stats``, ``cache`` …) to its
    nested dict of arrays. ``opt_state`` is the raw optax state as restored (a list with ``None``
    for ``EmptyState`` from Orbax, a dict with ``'0'``, ``'1'`` … keys from msgpack).
    """

    collections: dict[str, dict[str, Any]]
    opt_state: Any = None
    step: int | None = None
    ignored: dict[str, str] = dataclasses.field(default_factory=dict)
    """Top-level entries that are not converted -> why (shown in the report, never silent)."""
    unboxed: list[str] = dataclasses.field(default_factory=list)
    """Paths whose partitioning box was stripped."""
    source: str = "<memory>"
    format: str = "variables"
    step_dtype: str | None = None
    """The dtype the step was saved with (``int32`` after a jitted update), for ``--to linen``."""
    first_call: dict[str, str] = dataclasses.field(default_factory=dict)
    """Linen leaves (``cache/c``) the NNX model creates on its first call -> that NNX path (first_call.py)."""
    unregistered: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)
    """The ignored top-level mappings whose name no Variable type was registered for when the checkpoint
    was read: a collection the target model registers once built (a Linen class kept behind
    ``nnx.bridge.ToNNX`` with its own collection) is adopted then (:meth:`adopt_registered`)."""

    def adopt_registered(self) -> bool:
        """Move the :attr:`unregistered` entries that now name a registered Variable type into the
        collections (called once the target model is built); True when one moved."""
        moved = [key for key in self.unregistered if _is_collection(key)]
        for key in moved:
            self.collections[key] = _unbox(self.unregistered.pop(key), (key,), self.unboxed)
            self.ignored.pop(key, None)
        return bool(moved)

    def variables(self) -> dict[str, Any]:
        """The Linen ``variables`` dict (what ``model.apply`` takes)."""
        return dict(self.collections)

    def leaves(self) -> list[tuple[str, PathT, Any]]:
        """``(collection, path, array)`` for every variable leaf, in a stable order."""
        out = []
        for coll in sorted(self.collections):
            for path, leaf in flatten(self.collections[coll]):
                out.append((coll, path, leaf))
        return out


def read_linen_checkpoint(src: Any, *, live: bool = False) -> LinenCheckpoint:
    """Restore ``src`` (a path or an in-memory tree) into a :class:`LinenCheckpoint`.

    Raises :class:`L2NError` naming the path when it is missing or cannot be read, so the CLI
    reports it with exit code 2 instead of a traceback.
    """
    if isinstance(src, LinenCheckpoint):
        return src
    if isinstance(src, (str, Path)):
        path = Path(src).expanduser()
        tree, fmt = _restore_path(path)
        return tree if isinstance(tree, LinenCheckpoint) else parse_tree(tree, source=str(path), fmt=fmt)
    return parse_tree(src, source="<memory>", fmt="variables", live=live)


def parse_tree(
    tree: Any, *, source: str = "<memory>", fmt: str = "variables", live: bool = False
) -> LinenCheckpoint:
    """Split a restored tree into variable collections, optimizer state, step and ignored entries.

    ``live``: the tree is the Linen model's own init (its boxes are live objects), so a ``{'value':
    array}`` dict is a module's parameter named ``value``, never a restored box."""
    if not isinstance(tree, Mapping):
        tree = _to_state_dict(tree, source)
    tree = _plain(tree)
    if "params" not in tree and (live or (not tree and source == "<memory>")):
        # the init of a model creating no parameter (a sinusoid embedding; its one layer off by a field)
        tree = {**tree, "params": {}}
    if "params" not in tree:
        keys = ", ".join(map(repr, sorted(map(str, tree)))) or "nothing"
        raise L2NError(
            f"{source}: not a Linen checkpoint: expected a top-level 'params' collection "
            f"(a variables dict or a TrainState), found {keys}"
        )
    unboxed: list[str] = []
    collections: dict[str, dict[str, Any]] = {}
    ignored: dict[str, str] = {}
    unregistered: dict[str, Any] = {}
    opt_state = None
    step = step_dtype = None
    sown = sown_collections()
    for key, value in tree.items():
        key = str(key)
        if key == "opt_state":
            continue  # after the parameters, whose tree its moments mirror
        if key == "step":
            step = step_number(value, source)
            step_dtype = _dtype_of(value)
        elif key in sown:
            ignored[key] = "sown values are produced by a call, not state"
        elif isinstance(value, Mapping) and not value:
            ignored[key] = "empty"  # kept in the report: ``convert --to linen`` writes it back
        elif _is_collection(key) and isinstance(value, Mapping):
            collections[key] = _unbox(value, (key,), unboxed, live=live)
        elif _is_axes_collection(key, tree):
            ignored[key] = AXES_IGNORED
        else:
            ignored[key] = "not a registered variable collection (TrainState field?)"
            if isinstance(value, Mapping):
                unregistered[key] = value
    if "opt_state" in tree:
        named_value = _value_leaves(collections.get("params", {}))
        opt_state = _unbox(tree["opt_state"], ("opt_state",), unboxed, named_value)
    return LinenCheckpoint(
        collections, opt_state, step, ignored, unboxed, source, fmt, step_dtype, unregistered=unregistered
    )


def _value_leaves(params: Any, prefix: PathT = ()) -> set[PathT]:
    """The paths of the parameters named ``value`` (``Scale_0/value``): a moment of the optimizer
    state at the same path is that parameter's, not a restored partitioning box."""
    if not isinstance(params, Mapping):
        return set()
    found = set()
    for k, v in params.items():
        if k == "value" and not isinstance(v, Mapping):
            found.add((*prefix, k))
        found |= _value_leaves(v, (*prefix, k))
    return found


AXES_IGNORED = (
    "logical axis names of partitioning.param_with_axes / variable_with_axes, not state: the NNX "
    "Variables carry them as out_sharding metadata"
)


def _is_axes_collection(key: str, tree: Mapping[str, Any]) -> bool:
    """``params_axes`` beside ``params`` (``<col>_axes`` beside ``<col>``): where
    ``flax.linen.partitioning`` records the logical names of the collection's variables."""
    return key.endswith("_axes") and key.removesuffix("_axes") in tree


# ---- restoring from disk -----------------------------------------------------------------------
def _restore_path(path: Path) -> tuple[Any, str]:
    if not path.exists():
        raise L2NError(f"{path}: checkpoint not found")
    if path.is_file():
        return _restore_msgpack(path), "msgpack"
    from linen2nnx.checkpoint_convert.stream import load_arrays, open_orbax

    return load_arrays(open_orbax(path)), "orbax"


def _restore_msgpack(path: Path) -> Any:
    from flax import serialization

    try:
        data = path.read_bytes()
    except OSError as e:
        raise L2NError(f"{path}: unreadable checkpoint: {e}") from e
    try:
        return serialization.msgpack_restore(data)
    except Exception as e:
        raise L2NError(
            f"{path}: not a flax msgpack checkpoint ({type(e).__name__}: {e}); "
            "pass an Orbax checkpoint directory or a file written by flax.serialization.to_bytes"
        ) from e


# ---- tree normalisation ------------------------------------------------------------------------
def _to_state_dict(obj: Any, source: str) -> Any:
    from flax import serialization

    try:
        return serialization.to_state_dict(obj)
    except Exception as e:  # pragma: no cover - defensive
        raise L2NError(f"{source}: cannot read a {type(obj).__name__} as a checkpoint: {e}") from e


def _plain(tree: Any) -> Any:
    """FrozenDicts and other mappings -> dicts with str keys; boxes and leaves kept as they are."""
    return plain_dicts(tree, str_keys=True, sequence_of=lambda x: not _is_box(x))


def _is_box(x: Any) -> bool:
    try:
        from flax.core.meta import AxisMetadata
    except ImportError:  # pragma: no cover
        return False
    return isinstance(x, AxisMetadata)


def _unbox(
    tree: Any,
    prefix: PathT,
    unboxed: list[str],
    named_value: frozenset | set = frozenset(),
    live: bool = False,
) -> Any:
    """Replace partitioning boxes (live objects or their restored ``{'value': array}`` form) by arrays.

    A restored box is indistinguishable from a module whose one parameter is named ``value``: below
    the collection such a leaf is read unboxed here, and the name map places it back under ``value``
    (``map_with_name_map``); the collection itself is never a box. ``named_value``: the paths of the
    parameters named ``value``, whose optimizer moments (at the same path) are no boxes either;
    ``live``: only live box objects are boxes (the model's own init)."""
    if _is_box(tree):
        unboxed.append("/".join(map(str, prefix)))
        return tree.value if hasattr(tree, "value") else tree.unbox()
    if isinstance(tree, Mapping):
        if (
            not live
            and len(prefix) > 1
            and "value" in tree
            and _is_array(tree["value"])
            and set(tree) - {"value"} <= _BOX_METADATA_KEYS
            and not any((*prefix, "value")[-len(p) :] == p for p in named_value)  # a moment of such a param
        ):
            unboxed.append("/".join(map(str, prefix)))
            return tree["value"]
        return {k: _unbox(v, (*prefix, k), unboxed, named_value, live) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_unbox(v, (*prefix, i), unboxed, named_value, live) for i, v in enumerate(tree)]
    return tree


def _is_array(x: Any) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype")


def _is_collection(name: str) -> bool:
    from flax.nnx import variablelib

    try:
        variablelib.variable_type_from_name(name)
    except ValueError:
        return False
    return True


def _dtype_of(value: Any) -> str | None:
    if value is None:
        return None
    dtype = getattr(value, "dtype", None)
    return np.dtype(dtype if dtype is not None else np.asarray(value).dtype).name


def step_number(value: Any, source: str) -> int | None:
    """The training step a checkpoint holds, as an int; None where it holds none (or only its metadata).
    A step that is not one whole number is refused, naming ``source``: truncating ``7.9`` to ``7``, or
    reading one of several numbers, would resume training at a step nobody saved."""
    if value is None:
        return None
    try:
        array = np.asarray(value)
    except (TypeError, ValueError):
        return None
    if array.dtype == object or array.dtype.kind not in "iuf":
        return None  # metadata (a shape and dtype), or no number at all
    if array.shape != ():
        raise L2NError(f"{source}: step has shape {array.shape}; a checkpoint's step is one number")
    if array.dtype.kind == "f" and not float(array).is_integer():
        raise L2NError(f"{source}: step is {float(array)}, not a whole number")
    return int(array)
