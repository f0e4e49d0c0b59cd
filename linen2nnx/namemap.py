"""The name map (``linen2nnx-map.json``): how Linen state paths become NNX state paths.

``migrate`` writes it, ``checkpoint_convert`` and ``equivalence`` read it. It is per class so it
composes along the module tree for any config: a Linen path is walked from the root class, each
child name is looked up in its class entry, and built-in layers hand over to the layer table.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from linen2nnx.errors import L2NError
from linen2nnx.layers import LAYERS_BY_LINEN

FORMAT = "linen2nnx-map"
VERSION = 1
FILENAME = "linen2nnx-map.json"

PathT = tuple[Any, ...]


@dataclasses.dataclass
class Child:
    attr: str
    """NNX attribute name."""
    linen_class: str
    """``flax.linen.Dense`` for built-ins, else the class key of a migrated class (its qualname)."""
    container: str | None = None
    """``list`` / ``dict`` when a ``setup()`` list or dict became ``nnx.List`` / ``nnx.Dict``."""
    stack: str | None = None
    """The stack axis (source) of a module built under ``nn.scan`` / ``nn.vmap``: the same on both
    sides, so its state converts by name; recorded so readers know the leaves carry a layer axis."""
    other_weights: bool | None = None
    """The class applies this layer with other weights (``.apply({'params': ...})``, a tied head):
    Linen may never create the layer's own parameters, which the NNX layer holds unread."""
    handed: dict[str, str] | None = None
    """Classes of the run the class builds in place as this module's constructor arguments (field ->
    class key; ``AltUp(norm=Norm())`` in ``setup()``): Linen adopts each under the module's field name,
    and NNX holds it as that attribute."""
    shared: bool | None = None
    """The layer shares the class's scope (``nn.share_scope``): the key is one of the names it creates
    at the class's level, and the layer's own entry maps that same key."""
    alternatives: list[str] | None = None
    """Other classes the config may build under the same name (``if cfg.gated: self.ff = GatedFF()
    else: self.ff = PlainFF()``): a path below the child is walked through each class, and one NNX
    path must come out (migrate records alternatives only where no name maps two ways)."""


@dataclasses.dataclass
class ClassEntry:
    name: str
    module: str = ""
    file: str = ""
    children: dict[str, Child] = dataclasses.field(default_factory=dict)
    variables: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    """collection -> {Linen variable name -> NNX attribute}. A name ``{field}`` stands for the value of
    that field (``self.param(self.weight_name, ...)``): any name below the class nothing else claims."""
    new_args: dict[str, str] = dataclasses.field(default_factory=dict)
    """Constructor arguments the NNX class gained -> how their value is obtained (``input:i``: the last
    axis of positional input ``i``; ``input_shape:i``: its shape; ``input_axis:i:EXPR``: ``EXPR``, one
    axis of that input's shape, as the Linen source wrote it; ``traced:N``, ``unresolved...``, ``handed:F``
    (the output size of the module handed in as constructor argument ``F``): a size
    the caller passes)."""
    bases: list[str] = dataclasses.field(default_factory=list)
    """Classes whose build this one inherits (it calls their ``__init__``): names not found here are
    looked up there."""
    bridge: str | None = None
    """Attribute of the ``nnx.bridge.ToNNX`` holding the Linen original (a class kept as Linen): its
    state sits under that attribute with the Linen names unchanged."""


@dataclasses.dataclass
class NameMap:
    classes: dict[str, ClassEntry] = dataclasses.field(default_factory=dict)

    # ---- (de)serialisation --------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "classes": {
                k: {
                    "module": c.module,
                    "file": c.file,
                    "children": {n: _drop_none(dataclasses.asdict(ch)) for n, ch in c.children.items()},
                    "variables": c.variables,
                    "new_args": c.new_args,
                    **({"bases": c.bases} if c.bases else {}),
                    **({"bridge": c.bridge} if c.bridge else {}),
                }
                for k, c in sorted(self.classes.items())
            },
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], origin: str = "<name map>") -> NameMap:
        if data.get("format") != FORMAT or data.get("version") != VERSION:
            raise L2NError(f"{origin}: not a {FORMAT} v{VERSION} file")
        classes = {}
        for key, c in data.get("classes", {}).items():
            classes[key] = ClassEntry(
                name=key,
                module=c.get("module", ""),
                file=c.get("file", ""),
                children={n: Child(**ch) for n, ch in c.get("children", {}).items()},
                variables={k: dict(v) for k, v in c.get("variables", {}).items()},
                new_args=dict(c.get("new_args", {})),
                bases=list(c.get("bases", [])),
                bridge=c.get("bridge"),
            )
        return cls(classes)

    def save(self, path: str | Path) -> None:
        from linen2nnx.io_utils import atomic_write_text

        atomic_write_text(Path(path), json.dumps(self.to_json(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> NameMap:
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError as e:
            raise L2NError(f"{path}: name map not found") from e
        except (OSError, json.JSONDecodeError) as e:
            raise L2NError(f"{path}: unreadable name map: {e}") from e
        return cls.from_json(data, origin=str(path))

    def merge(self, other: NameMap) -> None:
        self.classes.update(other.classes)

    # ---- lookup -------------------------------------------------------------------------------
    def find_class(self, qualname: str, module: str | None = None) -> str | None:
        """The class key for a Linen class; ``module`` disambiguates same-named classes."""
        if qualname in self.classes:
            return qualname
        hits = [k for k, c in self.classes.items() if k.rsplit(".", 1)[-1] == qualname]
        if module is not None and len(hits) > 1:
            exact = [k for k in hits if self.classes[k].module == module]
            # a file in a folder with no __init__.py is recorded by a shorter name (`b` for `pc.sub.b`)
            dotted = [k for k in hits if _same_module(self.classes[k].module, module)]
            hits = exact or dotted or hits
        return hits[0] if len(hits) == 1 else None

    def to_nnx_path(self, root: str, collection: str, path: PathT) -> PathT:
        """Map one Linen variable path (below its collection) to the NNX state path.

        Raises ``KeyError`` naming the first path element the map cannot place.
        """
        out: list[Any] = []
        cls = root
        handed: dict[str, str] = {}  # what the step before handed the class now walked (Child.handed)
        i = 0
        while i < len(path):
            key = str(path[i])
            rule = LAYERS_BY_LINEN.get(cls)
            if rule is not None:
                index = re.fullmatch(rf"{rule.varargs_list}_(\d+)", key) if rule.varargs_list else None
                if index:  # Sequential's layers_2 -> layers/2 (then the element's own names)
                    out.extend([rule.varargs_list, int(index.group(1))])
                else:
                    out.append(rule.param_renames.get(key, key))
                out.extend(path[i + 1 :])
                return tuple(out)
            entry = self.classes.get(cls)
            if entry is not None and entry.bridge:  # kept as Linen behind nnx.bridge.ToNNX
                out.append(entry.bridge)
                out.extend(path[i:])
                return tuple(out)
            if entry is None:  # not migrated by us (e.g. hand-written): names are kept
                out.extend(path[i:])
                return tuple(out)
            if key in handed and key not in entry.children:  # a module handed in, adopted as this field
                out.append(key)
                cls, handed = handed[key], {}
                i += 1
                continue
            handed = {}
            if key in entry.children and entry.children[key].container is None:
                child = entry.children[key]
                out.extend(attr_path(child.attr))
                if child.alternatives and not handed and not child.shared:
                    return (*out, *self._one_of(child, collection, path[: i + 1], path[i + 1 :]))
                handed = dict(child.handed or {})
                if child.linen_class == cls:
                    raise KeyError(f"{'/'.join(map(str, path[: i + 1]))}: class {cls} shares its own scope")
                cls = child.linen_class
                i += 0 if child.shared else 1  # a shared scope: the key is the child's name too
                continue
            container_hit = _container_lookup(entry, key)
            if container_hit is not None:
                child, index = container_hit
                out.extend([child.attr, index])
                if child.alternatives:
                    return (*out, *self._one_of(child, collection, path[: i + 1], path[i + 1 :]))
                cls = child.linen_class
                i += 1
                continue
            found = self._variable_path(entry, collection, path[i:])
            if found is not None:
                return (*out, *found)
            raise KeyError(f"{'/'.join(map(str, path[: i + 1]))}: not in the name map for class {cls}")
        return tuple(out)

    def _one_of(self, child: Child, collection: str, above: PathT, rest: PathT) -> PathT:
        """``rest`` below a child the config builds as one of several classes: the one NNX path the
        classes that place it agree on. A KeyError when none places it, or two place it apart (the
        map cannot tell which class built the checkpoint)."""
        classes = [child.linen_class, *(child.alternatives or ())]
        found: dict[PathT, str] = {}
        for cls in classes:
            try:
                found.setdefault(self.to_nnx_path(cls, collection, rest), cls)
            except KeyError:
                continue
        where = "/".join(map(str, (*above, *rest)))
        if len(found) == 1:
            return next(iter(found))
        if not found:
            raise KeyError(f"{where}: not in the name map for any of the classes {', '.join(classes)}")
        raise KeyError(
            f"{where}: the classes {', '.join(found.values())}, which the config chooses between, "
            f"place it at different NNX paths"
        )

    def _variable_path(self, entry: ClassEntry, collection: str, rest: PathT) -> PathT | None:
        """Where a class's own variable ``rest[0]`` (or one its bases build) lives: by its name, then
        through the bases, last the one variable a field names (any name nothing else claims)."""
        variables = entry.variables.get(collection, {})
        attr = variables.get(str(rest[0]))
        if attr is not None:
            return (attr, *rest[1:])
        for base in entry.bases:  # built by the base's __init__, under the base's names
            try:
                return self.to_nnx_path(base, collection, rest)
            except KeyError:
                continue
        attr = _named_by_field(variables)
        return (attr, *rest[1:]) if attr is not None else None


def applied_with_other_weights(name_map: NameMap, root: str, nnx_path: PathT) -> bool:
    """Whether ``nnx_path`` lies under a layer the name map marks ``other_weights`` (walked from
    ``root`` through plain children; a container, base or bridge ends the walk: not marked)."""
    entry = name_map.classes.get(root)
    i = 0
    while entry is not None and i < len(nnx_path):
        step = next(
            (
                ch
                for ch in entry.children.values()
                if ch.container is None
                and tuple(attr_path(ch.attr)) == tuple(nnx_path[i : i + len(attr_path(ch.attr))])
            ),
            None,
        )
        if step is None:
            return False
        if step.other_weights:
            return True
        i += len(attr_path(step.attr))
        entry = name_map.classes.get(step.linen_class)
    return False


def attr_path(attr: str) -> list[Any]:
    """``rnn_0/cell`` -> ``['rnn_0', 'cell']``; ``seq/layers/0`` -> ``['seq', 'layers', 0]``."""
    return [int(p) if p.isdigit() else p for p in attr.split("/")]


_INDEX = re.compile(r"\{i(?:\+(\d+))?(?::0(\d+)d)?\}")


def split_pattern(pattern: str) -> tuple[str, int, str]:
    """``unit{i+2}`` -> ``("unit", 2, "")``: the text around a list's element-name pattern and the
    offset of the number in the name from the element's index (a loop over ``range(1, n)`` naming
    its modules ``unit{j + 1}``: element 0 is ``unit2``). ``{i+1:02d}``: the number zero-padded."""
    found = _INDEX.search(pattern)
    assert found is not None, pattern
    return pattern[: found.start()], int(found.group(1) or 0), pattern[found.end() :]


def _width(pattern: str) -> int:
    found = _INDEX.search(pattern)
    return int(found.group(2) or 0) if found is not None else 0


def element_key(pattern: str, index: int) -> str:
    """The Linen name of element ``index`` of a list whose element names follow ``pattern``."""
    before, offset, after = split_pattern(pattern)
    return f"{before}{str(index + offset).zfill(_width(pattern))}{after}"


def _container_lookup(entry: ClassEntry, key: str) -> tuple[Child, Any] | None:
    for name, child in entry.children.items():
        if child.container == "list" and _INDEX.search(name):  # element names as a pattern: `block.{i}`
            before, offset, after = split_pattern(name)
            found = re.fullmatch(re.escape(before) + r"(\d+)" + re.escape(after), key)
            index = int(found.group(1)) - offset if found else -1
            if index >= 0 and (not _width(name) or element_key(name, index) == key):  # `unit02`, not `unit2`
                return child, index
            continue
        if child.container is None or not key.startswith(name + "_"):
            continue
        suffix = key[len(name) + 1 :]
        if child.container == "list" and re.fullmatch(r"\d+", suffix):
            return child, int(suffix)
        if child.container == "dict":
            return child, suffix
    return None


def is_field_name(linen_name: str) -> bool:
    """Whether a variable's Linen name in the map is a field's value (``{weight_name}``: a variable
    ``self.param(self.weight_name, ...)`` creates)."""
    return linen_name.startswith("{") and linen_name.endswith("}")


def _named_by_field(variables: Mapping[str, str]) -> str | None:
    """The NNX attribute of the class's one variable named by a field (``{weight_name}``: its Linen
    name is the field's value, which the map of a class cannot know), or None."""
    by_field = [a for name, a in variables.items() if is_field_name(name)]
    return by_field[0] if len(by_field) == 1 else None


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def flatten(tree: Mapping[str, Any], prefix: PathT = ()) -> Iterable[tuple[PathT, Any]]:
    """Flatten a nested mapping into ``(path, leaf)`` pairs (mappings are inner nodes; ``None`` leaves,
    e.g. an Orbax-restored empty state, are skipped)."""
    for k, v in tree.items():
        if isinstance(v, Mapping):
            yield from flatten(v, (*prefix, k))
        elif v is not None:
            yield (*prefix, k), v


def _same_module(recorded: str, module: str) -> bool:
    """``recorded`` (a class entry's module) names ``module`` (``pc.sub.b``) by a dotted tail of it
    (``b``, ``sub.b``), or the other way round."""
    return bool(recorded) and (module.endswith(f".{recorded}") or recorded.endswith(f".{module}"))
