"""Whether two classes a config chooses between name their weights alike.

One attribute is often built as one class or another on a config test (``if cfg.gated: self.ff =
GatedFF(cfg) else: self.ff = PlainFF(cfg)``; a local bound to ``Clipped if cfg.clip else Plain``). Linen
keeps one name for it, ``ff``, and a checkpoint holds whichever build ran. The name map can still
convert both when every name the two builds share goes to the same NNX attribute: it lists the other
classes as the child's alternatives (:attr:`linen2nnx.namemap.Child.alternatives`) and walks a path
through each. Where a shared name goes to two places (a class whose ``scale`` is the other's ``bias``),
or where the map does not say what a class names (a class outside the run, one kept as Linen, a base's
build, a parameter named by a field), they are not alike and the caveat L2N-MOD-013 stands. The map is
the file's own entries with those of the classes of the files it imports (their summaries carry them).

Built-in layers name their parameters as the layer table says: two alike when they rename the same
names the same way; a built-in and a class of the run when each name the class gives is the one the
layer would give it.
"""

from __future__ import annotations

from linen2nnx.layers import LAYERS_BY_LINEN, LayerRule
from linen2nnx.namemap import ClassEntry, NameMap

DEPTH = 4
"""How deep differing children are compared before the builds count as not alike."""


def alike(name_map: NameMap, first: str, other: str, depth: int = 0) -> bool:
    """Whether the classes keyed ``first`` and ``other`` (name-map keys, or a built-in layer's Linen
    name) place every Linen name they share at the same NNX attribute, as far as ``name_map`` tells."""
    if first == other:
        return True
    if depth >= DEPTH:
        return False
    rules = LAYERS_BY_LINEN.get(first), LAYERS_BY_LINEN.get(other)
    if rules[0] is not None and rules[1] is not None:
        return dict(rules[0].param_renames) == dict(rules[1].param_renames)
    entries = name_map.classes.get(first), name_map.classes.get(other)
    if not all(_known(e) for e in entries if e is not None):
        return False
    if rules[0] is not None or rules[1] is not None:
        rule = rules[0] if rules[0] is not None else rules[1]
        entry = entries[1] if rules[0] is not None else entries[0]
        return entry is not None and _alike_to_layer(entry, rule)  # type: ignore[arg-type]
    if entries[0] is None or entries[1] is None:
        return False
    return _alike_entries(name_map, entries[0], entries[1], depth)


def _known(entry: ClassEntry) -> bool:
    """An entry that names everything its class builds: no base's build, no Linen original behind the
    bridge, no variable named by a field (which stands for any name)."""
    return (
        not entry.bases
        and not entry.bridge
        and not any("{" in n for v in entry.variables.values() for n in v)
    )


def _names(entry: ClassEntry) -> dict[str, str]:
    """Every Linen name directly below the class -> the NNX attribute it goes to."""
    out = {name: attr for variables in entry.variables.values() for name, attr in variables.items()}
    out.update({name: child.attr for name, child in entry.children.items()})
    return out


def _alike_entries(name_map: NameMap, a: ClassEntry, b: ClassEntry, depth: int) -> bool:
    names_a, names_b = _names(a), _names(b)
    for name in names_a.keys() & names_b.keys():
        if names_a[name] != names_b[name]:
            return False
        ca, cb = a.children.get(name), b.children.get(name)
        if ca is None and cb is None:
            continue  # a variable of each, under the same attribute
        if ca is None or cb is None:
            return False  # a variable of one is a module of the other
        if ca.container != cb.container or ca.shared or cb.shared or ca.handed or cb.handed:
            return False
        if (
            ca.alternatives
            or cb.alternatives
            or not alike(name_map, ca.linen_class, cb.linen_class, depth + 1)
        ):
            return False
    return True


def _alike_to_layer(entry: ClassEntry, rule: LayerRule) -> bool:
    """A class of the run against a built-in layer: each name the class gives goes where the layer's
    table would put it, and none is a name the layer renames."""
    return all(attr == name and name not in rule.param_renames for name, attr in _names(entry).items())
