"""Linen classes that hold no state whatever their config (scenic's ``IdentityLayer``: ``return x``).

Linen builds a submodule only on the path that reaches it; ``__init__`` cannot build one under a test
of a call-time value (``if not train: x = IdentityLayer(name='representation')(x)``). For a class that
creates no variable and no submodule, building it always changes no weight and no name of the name
map, so the call keeps its test and the class is built in ``__init__`` like a built-in layer that
holds no variables (``LayerRule.no_variables``). The fact is read from the source and travels to other
files with the class's summary.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import libcst as cst

from linen2nnx.migrate.bridge import can_bridge
from linen2nnx.migrate.cst_meta import syntax_children
from linen2nnx.migrate.cst_utils import code
from linen2nnx.migrate.sites import compact_only

if TYPE_CHECKING:
    from linen2nnx.migrate.context import FileContext

MODULE_BASES = frozenset({"flax.linen.Module", "flax.linen.module.Module"})
"""The one base a stateless class has (not ``nn.RNNCellBase``, which ``LINEN_MODULE`` also holds)."""
PURE_LIBRARIES = ("jax.", "numpy.", "math.")
"""Modules whose functions a stateless class may call (array code, no Linen scope)."""


def holds_nothing(ctx: FileContext, node: cst.ClassDef) -> bool:
    """Whether Linen class ``node`` creates nothing: its one base is ``nn.Module`` itself, neither it nor
    a method has a decorator (but ``nn.compact``), and its body calls only functions of
    ``PURE_LIBRARIES`` (no ``self.param``, no helper method, no layer, no call of a call)."""
    if node.decorators or len(node.bases) != 1 or node.keywords:
        return False
    if not ctx.qualnames(node.bases[0].value) & MODULE_BASES:
        return False
    for method in (s for s in node.body.body if isinstance(s, cst.FunctionDef)):
        if not compact_only(method, ctx.qualnames):
            return False  # a decorator may wrap the method in one that creates parameters
    stack: list[cst.CSTNode] = [node.body]
    while stack:  # source order, stopping at the first call that may create something (most classes)
        cur = stack.pop()
        if type(cur) is cst.Call:
            names = ctx.qualnames(cur.func)
            if not names or not all(name.startswith(PURE_LIBRARIES) for name in names):
                return False
        stack.extend(reversed(syntax_children(cur)))
    return True


def site_holds_nothing(site: Any) -> bool:
    """Whether a site (``sites.Site``) builds a module holding no variable whatever its config: a
    built-in layer with none (``nn.Dropout``) or a class of the run that creates none."""
    if site.factory is not None or site.kind not in ("layer", "module"):
        return False
    return bool(
        (site.user is not None and site.user.holds_nothing)
        or (site.rule is not None and site.rule.no_variables)
    )


def interchangeable(a: Any, b: Any) -> bool:
    """Two sites (``sites.Site``) that build the same module holding nothing, by the same constructor
    text, each under no config test: the branches of a call-time ``if`` naming it alike
    (``IdentityLayer(name='mlp1')`` in both) can share one attribute."""
    same = not a.conditions and not b.conditions and code(a.ctor) == code(b.ctor)
    return same and site_holds_nothing(a) and a.linen_name == b.linen_name


def any_class_below(plan: Any, test: Callable[[Any], bool], seen: frozenset[str] = frozenset()) -> bool:
    """Whether ``test`` holds for a site of ``plan``'s class or of a class of the run it builds, at any
    depth (``test`` sees each site; a class met again on the way down is not walked twice)."""
    if plan.name in seen:
        return False
    for site in plan.sites.values():
        user = site.user if site.kind == "module" else None
        if test(site) or (user is not None and any_class_below(user, test, seen | {plan.name})):
            return True
    return False


def holds_bridged(plan: Any) -> bool:
    """Whether ``plan``'s class builds, at any depth, a class of the run whose rewrite is blocked (kept as
    Linen behind ``nnx.bridge.ToNNX``): its variables come on a first call, so training code that builds
    the model calls ``nnx.bridge.lazy_init`` on it as on the kept class itself."""

    def bridged(site: Any) -> bool:
        user = site.user if site.kind == "module" else None
        return user is not None and bool(
            user.kept_linen or (user.blocking and can_bridge(user, user.user_base))
        )

    return any_class_below(plan, bridged)
