"""Where a converted layer subclass is named outside the Linen classes the run rewrites.

A subclass of a built-in layer with a ``param`` override becomes an NNX class
(:mod:`~linen2nnx.migrate.layer_subclasses`); the Linen classes of the run build it the NNX way. Any other
place that names it -- ``def make(): return StdConv(8, (3, 3))``, ``model = StdConv(...)`` followed by
``model.init(...)``, a class kept as Linen, a subclass of it -- still builds or uses it the Linen way,
which fails on the NNX class (or, for a subclass, would drop one of the overrides). Those places are
found here so that each gets a located finding instead of being left as they were. A file importing
such a class from another file of the run learns of it through a :class:`LayerSubclassFact` (handed on
with the functions that build layers) and reports its uses the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import libcst as cst

from linen2nnx.layers import LayerRule
from linen2nnx.migrate.rules import API_002

if TYPE_CHECKING:
    from linen2nnx.migrate.context import FileContext


@dataclasses.dataclass(frozen=True)
class LayerSubclassFact:
    """What files importing it need to know of a converted layer subclass (picklable: no syntax trees)."""

    key: str  # its absolute dotted name
    rule: LayerRule  # the built-in layer it subclasses


@dataclasses.dataclass(frozen=True)
class LayerSubclassUse:
    """A name of a converted layer subclass: the node, the top-level class holding it (None at module
    level or in a function), whether it is that class's base (``class DoubleScaled(ScaledDense)``) and
    the built-in layer the subclass extends."""

    node: cst.Name | cst.Attribute  # `StdConv`, or `convs.StdConv` through an import of its module
    owner: cst.ClassDef | None
    is_base: bool
    rule: LayerRule


def dotted_subclass_names(imports: Mapping[str, str], external: Mapping[str, Any]) -> dict[str, LayerRule]:
    """``convs.StdConv`` -> its built-in layer, for each converted layer subclass of another file of the
    run (``external``: absolute dotted name -> its fact) that a module import binds (``imports``: local
    name -> absolute dotted name, as ``import pkg.convs as convs`` or ``from pkg import convs`` give)."""
    found: dict[str, LayerRule] = {}
    for local, qualname in imports.items():
        for key, fact in external.items():
            if key.startswith(qualname + "."):
                found[f"{local}.{key[len(qualname) + 1 :]}"] = fact.rule
    return found


def _dotted(node: cst.BaseExpression) -> str | None:
    """``a.b.C`` of an attribute chain of names; None for any other expression."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr.value}"
    return None


def layer_subclass_uses(
    module: cst.Module, names: Mapping[str, LayerRule], dotted: Mapping[str, LayerRule] | None = None
) -> list[LayerSubclassUse]:
    """Every read of one of ``names`` (local name -> its built-in layer), or of one of ``dotted``
    (``convs.StdConv`` -> its built-in layer), in ``module``, but the subclasses' own definitions."""
    dotted = dotted or {}
    if not names and not dotted:
        return []
    found: list[LayerSubclassUse] = []

    class Visit(cst.CSTVisitor):
        def __init__(self) -> None:
            self.owner: list[cst.ClassDef] = []

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            owner = self.owner[0] if self.owner else node
            for base in node.bases:
                value = base.value
                rule = (
                    names.get(value.value)
                    if isinstance(value, cst.Name)
                    else dotted.get(_dotted(value) or "")
                    if isinstance(value, cst.Attribute)
                    else None
                )
                if rule is not None:
                    assert isinstance(value, (cst.Name, cst.Attribute))
                    found.append(LayerSubclassUse(value, owner, True, rule))
            self.owner.append(node)
            node.body.visit(self)
            self.owner.pop()
            return False

        def visit_Import(self, node: cst.Import) -> bool:
            return False

        def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
            return False

        def visit_Arg(self, node: cst.Arg) -> bool:
            node.value.visit(self)  # `f(StdConv=...)` names a keyword, not the class
            return False

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            text = _dotted(node) if dotted else None
            if text is not None and text in dotted:  # `convs.StdConv` of `import pkg.convs as convs`
                owner = self.owner[0] if self.owner else None
                found.append(LayerSubclassUse(node, owner, False, dotted[text]))
                return False
            node.value.visit(self)  # `x.StdConv` is an attribute, not the class
            return False

        def visit_Name(self, node: cst.Name) -> None:
            if node.value in names:
                owner = self.owner[0] if self.owner else None
                found.append(LayerSubclassUse(node, owner, False, names[node.value]))

    module.visit(Visit())
    return found


def report_layer_subclass_use(ctx: FileContext, use: LayerSubclassUse) -> None:
    """The located finding for a use :func:`layer_subclass_uses` found where the rewrite does not reach."""
    name = _dotted(use.node) or ""
    rule = use.rule
    ctx.state.handled.add(use.node)
    if use.is_base:
        assert use.owner is not None
        ctx.report(
            API_002,
            use.node,
            f"{use.owner.name.value} subclasses {name} (an nn.{rule.linen} subclass with a param override, "
            f"rewritten as an nnx.{rule.nnx} subclass); a subclass of it, which Linen builds with its own "
            "overrides and fields on top of the parent's, is not converted",
            f"fold the overrides into one direct subclass of nn.{rule.linen}, or write the NNX class by hand",
        )
        return
    where = (
        "in a class the run does not rewrite"
        if use.owner is not None
        else "outside a Linen class this run migrates"
    )
    # one of another file is built the NNX way only in the Linen classes of its own file
    first = "build it in a Linen class the run migrates, or " if name in ctx.state.layer_subclasses else ""
    ctx.report(
        API_002,
        use.node,
        f"{name} (an nn.{rule.linen} subclass with a param override) is rewritten as an nnx.{rule.nnx} "
        f"subclass, but is used here {where}, where it is not converted",
        f"{first}build the NNX layer by hand ({name}(in_features, ..., rngs=nnx.Rngs(0))) and call it directly",
    )
