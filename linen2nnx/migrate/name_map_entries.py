"""The name map's entry of a rewritten class (:mod:`linen2nnx.namemap`): each Linen variable and
child name of the class and the NNX attribute it becomes, from the plan alone."""

from __future__ import annotations

import dataclasses
from typing import Any

import libcst as cst

from linen2nnx.layers import LAYERS_BY_LINEN
from linen2nnx.migrate.alike_builds import alike
from linen2nnx.migrate.context import FileContext
from linen2nnx.migrate.cst_utils import code, keyword_arg, literal_name
from linen2nnx.migrate.factory_fields import FieldFactory
from linen2nnx.migrate.kw_only import bound_fields
from linen2nnx.migrate.lifted import param_axis
from linen2nnx.migrate.rules import MOD_013
from linen2nnx.migrate.sites import ClassPlan, Site, root_site
from linen2nnx.migrate.stateless_classes import site_holds_nothing
from linen2nnx.namemap import Child, ClassEntry, NameMap


def _linen_class(ctx: FileContext, site: Site) -> str:
    """The name-map key of the Linen class a site builds."""
    if site.rule:
        return site.rule.linen_qualname
    return site.user.key or ctx.class_key(site.user.name)  # type: ignore[union-attr]


def _built_class_key(ctx: FileContext, site: Site, name: str) -> str:
    """The name-map key of class ``name`` a factory field of ``site`` builds: where that class is
    defined (``mypkg.blocks.Block`` for a default of another file, which the site's plan carries), not
    this file's ``mypkg.nets.Block``, which no class has and so converts none of its weights."""
    user = site.user
    if user is not None and user.name == name and user.key:
        return user.key
    return ctx.class_key(name)


def _bound_classes(ctx: FileContext, site: Site) -> list[tuple[str, str]]:
    """The Linen names of a factory field's other bindings (``block_cls=BlockB`` besides the default
    ``BlockA``): Linen auto-names the child after the class the field builds (``BlockB_0``), so each
    binding maps that name to the same attribute."""
    keys = _choice_keys(ctx, site)
    if len(keys) < 2:
        return []
    first = keys[0].rpartition(".")[2]
    if not site.linen_name.startswith(f"{first}_"):
        return []  # named by `name=`: one name whatever the class
    suffix = site.linen_name[len(first) :]
    return [(f"{key.rpartition('.')[2]}{suffix}", key) for key in keys[1:]]


def _choice_keys(ctx: FileContext, site: Site) -> list[str]:
    """The keys of the classes a site may build, by the binding of a factory field or by a local of
    ``@nn.compact`` chosen on the config (class_choices.py); fewer than two for one class."""
    if site.choice_plans:
        return [p.key or ctx.class_key(p.name) for p in site.choice_plans]
    factory = site.factory
    if not isinstance(factory, FieldFactory):
        return []
    return [_built_class_key(ctx, site, name) for name in factory.classes]


def record_name_map(ctx: FileContext, state: Any, plan: ClassPlan) -> None:
    """Put ``plan``'s class in the file's name map: its variables and children, by Linen name."""
    key = ctx.class_key(plan.name)
    entry = ClassEntry(name=key, module=state.module_name, file=state.path, new_args=dict(plan.new_args))
    entry.bases = [b.key or ctx.class_key(b.name) for b in (plan.super_init,) if b is not None]
    for site in plan.sites.values():
        if site.kind in ("param", "variable"):
            entry.variables.setdefault(site.collection, {})[site.linen_name] = site.attr
            continue
        linen_class = _linen_class(ctx, site)
        if site.parent is not None and not root_site(site).hoisted:
            continue  # inside a setup() layer: Linen names it under that layer (rules map it)
        stacked = site.lifted.stacked if site.lifted is not None else None
        if site.scope_names:  # nn.share_scope: its names at this level lead to it
            for name in site.scope_names:
                entry.children[name] = Child(site.attr, linen_class, shared=True)
        elif site.container is None:
            if site.linen_name in entry.children and site_holds_nothing(site):
                continue  # `Dense(name='pre_logits')` or `IdentityLayer(name='pre_logits')`: the weights
            tied = True if site.attr in plan.other_weights else None
            stack = param_axis(stacked) if stacked else None
            child = Child(site.attr, linen_class, stack=stack, other_weights=tied, handed=_handed(ctx, site))
            entry.children[site.linen_name] = _with_alternatives(
                ctx, site, entry.children.get(site.linen_name), child
            )
            for name, built in _bound_classes(ctx, site):  # `block_cls=BlockB` builds `BlockB_0`
                entry.children.setdefault(name, Child(site.attr, built, stack=stack, other_weights=tied))
        elif site.elements is not None:  # a setup() comprehension: `blocks_{i}`, `block.{i}`
            entry.children[site.elements] = Child(attr=site.attr, linen_class=linen_class, container="list")
        elif site.extends is not None or site.prefix_index not in ("", "0"):
            continue  # the elements after the first loop's: Linen counts on, {Class}_{k} is element k
        elif site.prefix_index:  # the first of the modules before its class's first loop: they start its list
            name = site.linen_name.rpartition("_")[0]
            entry.children[name] = Child(attr=site.attr, linen_class=linen_class, container="list")
        elif site.loop is not None and len(keys := _choice_keys(ctx, site)) > 1 and not _chosen_by_name(site):
            for built_key in keys:  # named after whichever class the field / the local builds
                name = built_key.rpartition(".")[2]
                entry.children[name] = Child(attr=site.attr, linen_class=built_key, container="list")
        elif site.loop is not None:
            child_key = (
                site.linen_name if site.linen_name not in entry.children else f"{site.linen_name}_{{i}}"
            )
            child = Child(attr=site.attr, linen_class=linen_class, container="list")
            entry.children[child_key] = _with_alternatives(ctx, site, None, child)
        elif site.nest is not None:  # Linen counts on across the loops: {Class}_{k} is element k
            keys = [] if _chosen_by_name(site) else _choice_keys(ctx, site)
            for key_of in keys or (linen_class,):
                name = key_of.rpartition(".")[2] if keys else site.linen_name
                entry.children[name] = Child(attr=site.attr, linen_class=key_of, container="list")
            if not keys:  # one name whichever class builds it
                entry.children[site.linen_name] = _with_alternatives(
                    ctx, site, None, entry.children[site.linen_name]
                )
            if site.single_name:  # `'wi' if len(self.activations) == 1 else f'wi_{idx}'`
                entry.children[site.single_name] = Child(attr=f"{site.attr}/0", linen_class=linen_class)
    for var in plan.lazy_vars.values():
        entry.variables.setdefault(var.collection, {})[var.name] = var.attr
    _record_containers(ctx, entry, plan)
    state.name_map.classes[key] = entry


def _with_alternatives(ctx: FileContext, site: Site, before: Child | None, child: Child) -> Child:
    """``child``, or the child an earlier build of the same name recorded, listing each class the
    config may build under the name as an alternative where they all name their weights alike
    (alike_builds.py; else L2N-MOD-013 was reported and the map names the last build's)."""
    keys = [] if _bound_classes(ctx, site) else _choice_keys(ctx, site)  # a local chosen on the config
    if len(keys) > 1 and child.handed is None and alike_all(ctx, keys):
        return dataclasses.replace(child, linen_class=keys[0], alternatives=keys[1:])
    if before is None or before.linen_class == child.linen_class or before.attr != child.attr:
        return child
    if before.handed or child.handed or before.shared or before.stack != child.stack:
        return child
    classes = [before.linen_class, *(before.alternatives or ())]
    if all(c in LAYERS_BY_LINEN for c in (*classes, child.linen_class)):
        return child  # built-in layers: where they rename alike the last one's entry maps both
    if child.linen_class in classes:
        return before
    if not alike_all(ctx, [child.linen_class, *classes]):
        return child
    return dataclasses.replace(before, alternatives=[*classes[1:], child.linen_class])


def report_other_builds(ctx: FileContext, plan: ClassPlan) -> None:
    """One Linen name built as two different modules (``if self.plain: self.norm = Affine() else:
    self.norm = Swapped()``): the map of a class names one build's weights only, and which one ran
    depends on the config, so a checkpoint of the other would convert under the wrong names
    (``L2N-MOD-013``, reported while the class is planned, so the marker lands on the build). None
    where both map their weights alike: one class handed the same modules, or built-in layers that
    rename nothing; nor where one build holds no weights (``IdentityLayer(name='pre_logits')`` for
    ``Dense(..., name='pre_logits')``): the map names the other's, and that config has none."""
    first: dict[str, tuple[str, dict[str, str] | None]] = {}
    for site in plan.sites.values():
        if site.kind in ("param", "variable") or site.parent is not None or site.scope_names:
            continue
        if site.container is not None or site.loop is not None or site.nest is not None:
            continue
        if site_holds_nothing(site):
            continue  # no weights under the name when it runs: the map names the other build's
        build = (_linen_class(ctx, site), _handed(ctx, site))
        before = first.setdefault(site.linen_name, build)
        if before == build or all(
            (rule := LAYERS_BY_LINEN.get(c)) is not None and not rule.param_renames
            for c in (before[0], build[0])
        ):
            continue
        if before[1] is None and build[1] is None and alike_all(ctx, [before[0], build[0]]):
            continue  # the map lists both classes under the name (Child.alternatives)
        texts = [_build_text(*before), _build_text(*build)]
        if texts[0] == texts[1]:  # flax's DenseGeneral and a library's own: the full names
            texts = [_build_text(*before, full=True), _build_text(*build, full=True)]
        _report_builds(ctx, site, site.linen_name, texts)


def alike_all(ctx: FileContext, keys: list[str]) -> bool:
    """Whether every class of ``keys`` names its weights as the first does (alike_builds.py)."""
    entries = known_entries(ctx)
    return all(alike(entries, keys[0], key) for key in keys[1:])


def known_entries(ctx: FileContext) -> NameMap:
    """The name-map entries this file knows: its own classes' so far, and those of the classes of the
    files it imports (their summaries carry them). Not of a class with manual findings that block its
    rewrite: what it builds where the findings stand is in no entry, which would look like names it
    does not have."""
    external = {
        s.key: s.entry for s in ctx.state.external.values() if s.entry is not None and not s.kept_linen
    }
    blocked = {p.key for p in ctx.state.linen_classes.values() if p.blocking or p.kept_linen}
    own = {key: entry for key, entry in ctx.state.name_map.classes.items() if key not in blocked}
    return NameMap({**external, **own})


def report_class_choice(ctx: FileContext, site: Site, keys: list[str]) -> None:
    """A use named by ``name=`` (or, in ``setup()``, by its attribute) of a local holding one of several
    classes chosen on the config (class_choices.py, setup_aliases.py): one Linen name for each class's
    weights, as ``report_other_builds`` says."""
    texts = [_build_text(key, None) for key in keys]
    if len(set(texts)) < len(texts):
        texts = [_build_text(key, None, full=True) for key in keys]
    name = keyword_arg(site.ctor, "name")
    if name is None:  # a setup() attribute
        _report_builds(ctx, site, site.linen_name, texts)
        return
    shown = code(name.value)  # `f'block_{i}'` is shown as the names it gives, `block_{i}`
    if isinstance(name.value, cst.FormattedString) and not name.value.start.endswith('"""'):
        shown = shown[len(name.value.start) : -len(name.value.end)]
    _report_builds(ctx, site, literal_name(site.ctor) or shown, texts)


def _report_builds(ctx: FileContext, site: Site, name: str, texts: list[str]) -> None:
    """L2N-MOD-013 on ``site``: ``name`` is built as each of ``texts`` depending on the config."""
    shown = ", as ".join(texts[:-1]) + f" or as {texts[-1]}"
    ctx.report(
        MOD_013,
        site.ctor,
        f"{name} is built as {shown} depending on the config: the name map names one build's weights only",
        "build one class under each name (two attributes), or convert the checkpoint with a map written by hand",
    )


def _chosen_by_name(site: Site) -> bool:
    """A use of a class chosen on the config that gives ``name=``: one Linen name whichever class
    builds it, not one per class."""
    return bool(site.choice_plans) and keyword_arg(site.ctor, "name") is not None


def _build_text(linen_class: str, handed: dict[str, str] | None, full: bool = False) -> str:
    """``Affine``, or ``AltUp(norm=Affine)`` for a build handed a module of the run (``full``: the
    classes' dotted names)."""
    name = linen_class if full else linen_class.rpartition(".")[2]
    if not handed:
        return name
    handed_text = ", ".join(
        f"{field}={key if full else key.rpartition('.')[2]}" for field, key in sorted(handed.items())
    )
    return f"{name}({handed_text})"


def handed_builds_convert(site: Site) -> bool:
    """Whether the run's classes built in place as ``site``'s constructor arguments become NNX builds
    (``rngs=rngs``, adopted under the field's name): a single module ``setup()`` builds, of a class the
    run rewrites. One kept as Linen behind the bridge would hold an NNX module its Linen original
    cannot see the state of, and a list's or loop's elements are named by the list."""
    if site.hoisted or site.user is None or site.user.blocking or site.user.kept_linen:
        return False
    return site.container is None and site.loop is None and site.elements is None and site.nest is None


def _handed(ctx: FileContext, site: Site) -> dict[str, str] | None:
    """The classes of the run a ``setup()`` site builds in place as its constructor arguments (field ->
    class key): Linen adopts such a module under the field's name (``altup/norm/scale``)."""
    if not handed_builds_convert(site):
        return None
    assert site.user is not None
    found: dict[str, str] = {}
    for field, arg in bound_fields(site.user.fields, site.ctor).items():
        built = ctx.user_class_of(arg.value.func) if isinstance(arg.value, cst.Call) else None
        if built is not None:
            found[field] = built.key or ctx.class_key(built.name)
    return found or None


def _record_containers(ctx: FileContext, entry: ClassEntry, plan: ClassPlan) -> None:
    """The name-map children of ``setup()`` lists: one list entry when Linen names the elements
    ``{attr}_{i}``, else one child per element."""
    for attr, sites in plan.containers.items():
        classes = [_linen_class(ctx, s) for s in sites]
        if len(set(classes)) == 1 and all(s.linen_name == f"{attr}_{i}" for i, s in enumerate(sites)):
            entry.children[attr] = Child(attr=attr, linen_class=classes[0], container="list")
            continue
        for i, (site, linen_class) in enumerate(zip(sites, classes)):  # names or classes of their own
            entry.children[site.linen_name] = Child(attr=f"{attr}/{i}", linen_class=linen_class)
