"""A parameter read through a submodule's ``.variables``: ``self.transformer.variables['params']['wte']
['embedding']`` -> ``self.transformer.wte.embedding[...]``; a variable of the class itself read through
its own ``self.variables['cache']['cache_index']`` -> ``self.cache_index[...]``.

Tied weights are read this way in Linen (a head that reuses an embedding table). In NNX the same array
is an attribute path of the submodule, found through what the plan knows: the child's own plan (a class
of this file: its submodules by Linen name, its ``self.param`` variables) down to a built-in layer whose
NNX parameter has the Linen parameter's name and layout. The submodule may be reached through a chain
of attributes (``self.model.decoder.embed_tokens.variables['params']['embedding']``: each link a
submodule by its attribute), and a layer's initialiser may be a local of setup() bound once to one. Anything else -- another collection, a list
element, a class of another file, a layer of another layout, a parameter created with metadata boxes
(``.variables`` returns the box, ``[...]`` the array) or a whole ``.variables`` -- stays the verifier's
manual ``L2N-VERIFY-003``.
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.context import FileContext
from linen2nnx.migrate.cst_utils import code, parse_expression, self_attr
from linen2nnx.migrate.function_aliases import sole_assigned_value
from linen2nnx.migrate.rules import VAR_005
from linen2nnx.migrate.sites import ClassPlan, Site
from linen2nnx.migrate.verify_syntax import self_assignments

# built-in layers whose NNX parameters are the Linen ones by name and layout (docs/nnx_facts.md)
SAME_PARAMS = {
    "Dense": {"kernel", "bias"},
    "Embed": {"embedding"},
    "Conv": {"kernel", "bias"},
    "LayerNorm": {"scale", "bias"},
    "RMSNorm": {"scale"},
}
BOXES = ("partition", "logical", "metadata", "box")  # initialisers that wrap the value in metadata
# where an initialiser that returns a plain array lives (what its name resolves to, not how it is spelled)
INITIALIZERS = (
    "flax.linen.initializers.",
    "jax.nn.initializers.",
    "flax.nnx.initializers.",
    "flax.linen.linear.default_",
)


def variables_read(ctx: FileContext, original: cst.Subscript) -> cst.BaseExpression | None:
    """The NNX read of the whole chain ``original`` ends (its outermost subscript), or None."""
    plan = ctx.current_plan()
    parent = ctx.parent_of(original)
    if plan is None or (isinstance(parent, cst.Subscript) and parent.value is original):
        return None  # an inner subscript: the outermost one rewrites the chain
    keys, base = _keys(original)
    if (
        keys is None
        or len(keys) < 2
        or not (isinstance(base, cst.Attribute) and base.attr.value == "variables")
    ):
        return None
    if isinstance(base.value, cst.Name) and base.value.value == "self":
        attr = _own_variable(ctx, plan, keys, original)
        if attr is None:
            return None
        ctx.report(VAR_005, original, f"{code(original)} -> self.{attr}[...]")
        return parse_expression(f"self.{attr}[...]")
    if keys[0] != "params":
        return None
    chain = _attr_chain(base.value)  # `self.model.decoder.embed_tokens`: ["model", "decoder", ...]
    site = child_site(ctx, plan, chain[0]) if chain else None
    path = _path(ctx, site, [*chain[1:], *keys[1:]], attrs=len(chain) - 1) if site is not None else None
    if path is None:
        return None
    nnx_read = f"self.{'.'.join([site.attr, *path])}[...]"  # type: ignore[union-attr]
    ctx.report(VAR_005, original, f"{code(original)} -> {nnx_read}")
    return parse_expression(nnx_read)


DISPLAYS = frozenset(
    {"builtins.print", "print", "pprint.pprint", "pprint.pp"}
    | {f"{log}.{level}" for log in ("logging", "absl.logging") for level in ("debug", "info", "warning")}
)
"""Calls that only show a value: what they show of ``.variables`` may change form, nothing computes on it."""


def displayed_variables(
    ctx: FileContext, original: cst.Attribute, parent: cst.CSTNode | None
) -> cst.BaseExpression | None:
    """``print(self.dense2.variables)`` -> ``print(nnx.state(self.dense2))``: a submodule's (or the
    class's own) variables shown whole, by a call that only displays them. NNX shows the state by
    attribute path rather than by collection, and a lazily built Linen submodule shows nothing in
    ``setup()`` where NNX shows its arrays: a different picture of the same weights, nothing computed."""
    plan = ctx.current_plan()
    if plan is None or original.attr.value != "variables" or not isinstance(parent, cst.Arg):
        return None
    call = ctx.parent_of(parent)
    if not (isinstance(call, cst.Call) and parent in call.args and ctx.qualnames(call.func) & DISPLAYS):
        return None
    holder = original.value
    child = self_attr(holder)
    own = isinstance(holder, cst.Name) and holder.value == "self"
    if not own and (child is None or child_site(ctx, plan, child) is None):
        return None
    shown = f"nnx.state({code(holder)})"
    ctx.report(
        VAR_005, original, f"{code(original)} shown by {code(call.func)} -> {shown} (by attribute path)"
    )
    return parse_expression(shown)


def _own_variable(ctx: FileContext, plan: ClassPlan, keys: list[str], read: cst.CSTNode) -> str | None:
    """The NNX attribute of ``self.variables[collection][name]``: a variable this class creates with
    ``self.param`` / ``self.variable`` (in ``__init__``, or lazily on a call: a decode cache), read as
    its value; None for a deeper path, a variable of another class or one whose value is boxed."""
    if len(keys) != 2:
        return None
    collection, name = keys
    lazy = [(call, v) for call, v in plan.lazy_vars.items() if (v.collection, v.name) == (collection, name)]
    if lazy:
        plain = len(lazy) == 1 and not any(word in code(lazy[0][0]).lower() for word in BOXES)
        attr, bound = lazy[0][1].attr, 0  # the Linen class never assigns it as an attribute
    else:
        sites = [
            s
            for s in plan.sites.values()
            if s.kind in ("param", "variable") and (s.collection, s.linen_name) == (collection, name)
        ]
        plain = len(sites) == 1 and _plain(ctx, sites[0])
        attr, bound = (sites[0].attr, 1) if sites else (None, 0)
    # `self.w = self.param(...)` then `self.w = self.w * 2` in setup(): the attribute is no longer the
    # variable, so its read says nothing of what .variables gives
    return attr if plain and _self_assignments(ctx, read, attr) == bound else None


def _self_assignments(ctx: FileContext, node: cst.CSTNode, attr: str | None) -> int:
    """How many statements of the class around ``node`` assign ``self.<attr>``."""
    cls = node
    while cls is not None and not isinstance(cls, cst.ClassDef):
        cls = ctx.parent_of(cls)
    if cls is None or attr is None:
        return -1
    return self_assignments(cls).get(attr, 0)


def _keys(node: cst.BaseExpression) -> tuple[list[str] | None, cst.BaseExpression]:
    """``x['a']['b']`` -> (``['a', 'b']``, ``x``); None for any key that is not one string literal."""
    keys: list[str] = []
    while isinstance(node, cst.Subscript):
        elements = node.slice
        index = elements[0].slice if len(elements) == 1 else None
        value = index.value if isinstance(index, cst.Index) else None
        if not isinstance(value, cst.SimpleString) or not isinstance(value.evaluated_value, str):
            return None, node
        keys.insert(0, value.evaluated_value)
        node = node.value
    return keys, node


def _plain(ctx: FileContext, site: Site) -> bool:
    """Built once, as the attribute itself (no list, loop, lift or alternative), from arguments it
    names one by one (a ``**kwargs`` could carry a boxing initialiser)."""
    ctor = site.ctor
    return (
        not (isinstance(ctor, cst.Call) and any(a.star for a in ctor.args))
        and site.container is None
        and site.loop is None
        and site.nest is None
        and site.lifted is None
        and site.tail_of is None
        and site.exclusive_with is None
        and site.factory is None
        and not site.conditions
        and all(_plain_value(ctx, name, arg.value, site) for name, arg in site.args.items())
    )


def _plain_value(ctx: FileContext, name: str, value: cst.BaseExpression, site: Site) -> bool:
    """No metadata box around the parameter: no argument mentions one, and an initialiser (a layer's
    ``*_init``, a ``self.param``'s second argument) resolves to one of ``nn.initializers`` /
    ``jax.nn.initializers`` themselves (a field or a local may hold ``nn.with_partitioning(...)``,
    and a module of the user's that happens to be called ``initializers`` may box too)."""
    if any(word in code(value).lower() for word in BOXES):
        return False
    if not (name.endswith("_init") or (site.kind == "param" and name == "1")):
        return True
    if isinstance(value, cst.Name):  # `init = jax.nn.initializers.normal(...)` bound once above
        bound = sole_assigned_value(ctx, value)
        if bound is None or isinstance(bound, cst.Name):
            return False
        return _plain_value(ctx, name, bound, site)
    named = value.func if isinstance(value, cst.Call) else value
    found = ctx.qualnames(named)
    return bool(found) and all(q.startswith(INITIALIZERS) for q in found)


def child_site(ctx: FileContext, plan: ClassPlan, name: str, by_linen: bool = False) -> Site | None:
    found = [s for s in plan.sites.values() if (s.linen_name if by_linen else s.attr) == name]
    return found[0] if len(found) == 1 and _plain(ctx, found[0]) else None


def _attr_chain(node: cst.BaseExpression) -> list[str] | None:
    """``self.a.b.c`` -> ``["a", "b", "c"]``; None for anything that is not a chain of attributes of self."""
    names: list[str] = []
    while isinstance(node, cst.Attribute):
        names.insert(0, node.attr.value)
        node = node.value
    return names if names and isinstance(node, cst.Name) and node.value == "self" else None


def _path(ctx: FileContext, site: Site, keys: list[str], attrs: int = 0) -> list[str] | None:
    """The NNX attribute names under ``site`` for the Linen parameter path ``keys``, whose first
    ``attrs`` name submodules by their attributes rather than their Linen names (``self.model.decoder.
    embed_tokens.variables['params']['embedding']``: ``decoder`` and ``embed_tokens``, then ``embedding``)."""
    if site.kind == "layer" and site.rule is not None:
        names = SAME_PARAMS.get(site.rule.linen, set())
        return keys if len(keys) == 1 and keys[0] in names and not site.nested else None
    if site.kind == "param":
        return [] if not keys else None
    user = site.user
    own = ctx.state.linen_classes.get(user.name) if site.kind == "module" and user is not None else None
    if own is not user or own is None or own.blocking or own.super_init is not None or not keys:
        return None  # a class of another file, kept as Linen, or building what its base builds
    inner = child_site(ctx, own, keys[0], by_linen=attrs == 0)
    rest = _path(ctx, inner, keys[1:], max(attrs - 1, 0)) if inner is not None else None
    return [inner.attr, *rest] if inner is not None and rest is not None else None
