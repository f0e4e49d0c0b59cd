"""Sizes that come out of a module a class is handed: ``Encoder(config, shared_embedding=self.embed)``.

A class that applies a module it receives as a constructor argument (``x = self.shared_embedding(t)``)
cannot tell that module's output size: any module may be handed in. The flow marks such a value
exactly (:func:`handed_output`: a ``Feat`` whose ``handed`` names the argument, kept only while the
value's last axis is the module's output's), and a size it feeds becomes a constructor argument the
class gains, of kind ``handed:<argument>`` (``ClassPlan.new_args``) with the usual ``L2N-SHAPE-003``.

A class of the run that builds such a class knows what it hands in (:func:`handed_size`): one of its
own submodules whose output size it can spell (``features=cfg.emb_dim`` of the embedding it built)
gives that size, and the argument is settled there; a module it was handed itself passes the question
up, as its own ``handed:`` argument. Anything else (a module built at call time, a function, a
submodule whose output size is not a config expression) stays the required argument it was.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

import libcst as cst

from linen2nnx.migrate.cst_utils import self_attr
from linen2nnx.migrate.dataflow_types import Feat
from linen2nnx.migrate.setup_order import ready_at

if TYPE_CHECKING:
    from linen2nnx.migrate.sites import ClassPlan, Site
    from linen2nnx.migrate.sizing import Sizer

HANDED = "handed:"
"""The kind of a constructor argument a class gained for the output size of a module it is handed."""


def handed_output(call: cst.Call, fields: Collection[str]) -> Feat | None:
    """``self.F(...)`` where ``F`` is a constructor field: an unknown size that is exactly the output
    size of whatever module the builder hands in as ``F``; None for any other call (``method=`` runs
    another method than ``__call__``)."""
    func = call.func
    if any(a.keyword is not None and a.keyword.value == "method" for a in call.args):
        return None
    if (
        isinstance(func, cst.Attribute)
        and isinstance(func.value, cst.Name)
        and func.value.value == "self"
        and func.attr.value in fields
    ):
        field = func.attr.value
        return Feat("unknown", reason=f"a call of constructor argument {field}", handed=field)
    return None


def handed_kind(feat: Feat) -> str | None:
    """The ``new_args`` kind of a size that is exactly a handed module's output; None otherwise."""
    return f"{HANDED}{feat.handed}" if feat.kind == "unknown" and feat.handed else None


def handed_size(
    sizer: Sizer, plan: ClassPlan, site: Site, arg: str, how: str, node: cst.CSTNode
) -> str | None:
    """What ``plan`` passes for ``arg`` of the class ``site`` builds, an argument of kind ``how``
    (``handed:F``): the output size of the submodule it hands in as ``F``, in its own ``__init__``'s
    terms; its own new argument when it forwards a module it was handed; None when it cannot tell."""
    given = site.args.get(how.removeprefix(HANDED))
    attr = self_attr(given.value) if given is not None else None
    if attr is None or site.user is None:
        return None
    submodule = _single_site(plan, attr)
    if submodule is not None:
        out = sizer.layer_info(submodule).output(Feat.unknown("no input"))
        if out.kind != "expr":
            return None
        return ready_at(plan.setup, site.ctor if not site.hoisted else None, out.expr)
    if attr in plan.field_names:  # a module handed to this class too: its builder tells
        what = f"{arg} of {site.user.name}"
        return sizer._required_arg(plan, site, what, node, arg, how=f"{HANDED}{attr}")
    return None


def _single_site(plan: ClassPlan, attr: str) -> Site | None:
    """The one submodule ``plan`` builds as ``self.attr``: not a list's element, not one of two
    exclusive builds, not built in a loop or from a helper."""
    found = [s for s in plan.sites.values() if s.attr == attr and s.parent is None]
    if len(found) != 1:
        return None
    return found[0] if found[0].kind in ("layer", "module") and built_alone(found[0]) else None


def built_alone(site: Site) -> bool:
    """``site`` builds one module of its own attribute, which ``self.attr`` handed on stands for (here and
    in local_sites.held_submodule): not nested in another layer's arguments, not an element of a list
    (a loop's, a comprehension's, a loop nest's), not one of two exclusive builds."""
    return (
        site.parent is None
        and site.container is None
        and site.loop is None
        and site.nest is None
        and site.elements is None
        and site.exclusive_with is None
    )
