"""Can ``__init__`` evaluate an expression of a Linen method without running anything Linen-only?

A config local (``depth_scaling = jnp.sqrt(self.head_dim)``) is replayed in ``__init__`` only when
evaluating it calls no ``self`` method (``self.param``, a helper reading call-time state), builds no
module and calls no call's result. A ``lambda`` runs nothing when it is bound, so inside one only a
call of an initializer *field* is allowed besides plain code (``query_init = lambda *args:
self.kernel_init(*args) / depth_scaling``, T5X's query initializer): ``__init__`` binds the same closure.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

import libcst as cst

from linen2nnx.migrate.cst_meta import FastVisitor

if TYPE_CHECKING:
    from linen2nnx.migrate.context import FileContext


def has_side_effects(ctx: FileContext, value: cst.BaseExpression, fields: Collection[str] = ()) -> bool:
    """Does evaluating ``value`` call a ``self`` method, build a layer or a class of the run, or call a
    call's result? In a ``lambda`` a call of one of ``fields`` does not count."""
    found = False
    allowed: list[str] = []  # the fields a call may name where the walk is (inside lambdas)

    class V(FastVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            nonlocal found
            if (
                ctx.self_call(node) not in (None, *allowed)
                or ctx.layer_rule_of(node.func)
                or ctx.user_class_of(node.func)
                or isinstance(node.func, cst.Call)
            ):
                found = True

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            allowed.extend(fields)
            self.walk(node.body)
            del allowed[len(allowed) - len(fields) :]
            return False

    V().walk(value)
    return found
