"""Linen's ``Module.clone`` / ``Module.copy`` of a module the class holds, or of the class itself.

``self.other = self.base.clone(features=3)`` in ``setup()`` builds a second, unbound copy of a
submodule (with other fields) that Linen binds under the new attribute; ``self.clone(...)`` copies
the class. An NNX module has neither method: kept as written, the NNX class raises
``AttributeError`` when it is built, and the copy is missing from the name map. Nothing here
converts such a copy, so each is a blocking ``L2N-MOD-004`` where it stands, whether or not it
passes ``name=`` / ``parent=`` (the verifier's ``L2N-VERIFY-001`` sees only those, and only after
the rewrite). A field handed a module (``norm: nn.Module``) is the verifier's when it passes them.

The same per-apply copy makes ``del self.model_name`` at call time harmless in Linen (a mark that the
field is unused: each apply binds a fresh copy); the NNX module lives on, so its second call would
not find the attribute. Also a blocking finding (:func:`report_field_deletions`).
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from linen2nnx.migrate.cst_meta import calls_in, nodes_of
from linen2nnx.migrate.cst_utils import self_attr
from linen2nnx.migrate.rules import MOD_004
from linen2nnx.migrate.sites import ClassPlan
from linen2nnx.migrate.verify_syntax import linen_module_copy

COPY_METHODS = frozenset({"clone", "copy"})


def _holder(node: cst.BaseExpression) -> str | None:
    """``self`` -> ``""``; ``self.a`` -> ``"a"``; ``self.layers[0]`` -> ``"layers[]"`` (an element of a
    list of modules; ``self.layers.copy()`` copies the list); None else."""
    indexed = isinstance(node, cst.Subscript)
    while isinstance(node, cst.Subscript):
        node = node.value
    if isinstance(node, cst.Name) and node.value == "self":
        return None if indexed else ""
    attr = self_attr(node)
    return None if attr is None else attr + "[]" * indexed


def _module_fields(plan: ClassPlan) -> set[str]:
    """Fields annotated as a Linen module (``norm: nn.Module``): a dict field's ``copy()`` is not one."""
    return {f.name for f in plan.fields if f.annotation.rpartition(".")[2] == "Module"}


def report_module_copies(
    report: Callable[..., None], plan: ClassPlan, methods: list[cst.FunctionDef]
) -> None:
    """A blocking ``L2N-MOD-004`` for each ``.clone(...)`` / ``.copy(...)`` of ``self`` or of an
    attribute holding a submodule the class builds (``report(rule, node, message, hint)``)."""
    built = {
        s.attr.partition("[")[0] + "[]" * ("[" in s.attr)
        for s in plan.sites.values()
        if not s.hoisted and s.kind in ("layer", "module")
    }
    handed = _module_fields(plan) - built
    for fn in methods:
        for call in calls_in(fn.body):
            func = call.func
            if not (isinstance(func, cst.Attribute) and func.attr.value in COPY_METHODS):
                continue
            holder = _holder(func.value)
            if holder is None or not (holder == "" or holder in built or holder in handed):
                continue
            if holder == "" and func.attr.value in plan.method_names:
                continue  # the class's own clone / copy method
            if holder in handed and linen_module_copy(call):
                continue  # the verifier's L2N-VERIFY-001 stands there
            what = "the class itself" if holder == "" else f"submodule self.{holder.replace('[]', '[...]')}"
            report(
                MOD_004,
                call,
                f"{plan.name}.{fn.name.value}: .{func.attr.value}(...) of {what} is Linen's "
                f"Module.{func.attr.value}, which an NNX module does not have",
                "build the copy as a submodule of its own in setup (the class with the fields it "
                "changes), or copy it with nnx.clone after __init__",
            )


def report_field_deletions(
    report: Callable[..., None], plan: ClassPlan, methods: list[cst.FunctionDef]
) -> None:
    """A blocking ``L2N-MOD-004`` for each ``del self.<attr>`` in a method that runs at call time."""
    for fn in methods:
        if fn.name.value in ("setup", "__init__", "__post_init__"):
            continue
        for node in nodes_of(fn.body, (cst.Del,)):
            target = node.target  # type: ignore[attr-defined]
            targets = [e.value for e in target.elements] if isinstance(target, cst.Tuple) else [target]
            attrs = [a for a in map(self_attr, targets) if a is not None]
            if attrs:
                report(
                    MOD_004,
                    node,
                    f"{plan.name}.{fn.name.value}: del self.{attrs[0]} at call time: Linen deletes it from the "
                    "copy of the module each apply binds; the NNX module lives on, and its next call would "
                    "not find it",
                    "remove the del (it only marks the field unused), then migrate again",
                )
