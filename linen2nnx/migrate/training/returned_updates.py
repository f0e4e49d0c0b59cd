"""``return state.apply_gradients(grads=g), metrics`` written as the two statements the training pass
reads: ``state = state.apply_gradients(grads=g)``, then ``return state, metrics``.

The pass rewrites an update that is a statement of its own or the whole of a return; one returned
beside other values (the usual train step) would block the file. Binding it first is the same
computation where the update is the tuple's first element (evaluated first either way), the other
elements do not read the state's name (they would read the new state instead of the old one), and
the name is a parameter of the function (a new local binding could not hide a global the function
reads elsewhere). The driver keeps this text only where its plan then converts (``driver.py``).
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.cst_meta import nodes_of
from linen2nnx.migrate.cst_utils import names_in

UPDATES = ("apply_gradients", "replace")


def split_returned_updates(module: cst.Module) -> cst.Module | None:
    """``module`` with each ``return <param>.apply_gradients(...), ...`` split in two; None when it
    has none."""
    if not any(_update_returned(line) for line in nodes_of(module, (cst.SimpleStatementLine,))):
        return None  # nothing to split: no transformer pass over the whole tree
    changed = False

    class Split(cst.CSTTransformer):
        def __init__(self) -> None:
            self.params: list[set[str]] = []

        def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
            params = node.params
            self.params.append(
                {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}
            )

        def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
            self.params.pop()
            return updated

        def leave_SimpleStatementLine(
            self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
        ) -> cst.SimpleStatementLine | cst.FlattenSentinel[cst.SimpleStatementLine]:
            nonlocal changed
            name = _returned_update(updated, self.params[-1] if self.params else set())
            if name is None:
                return updated
            changed = True
            ret = updated.body[0]
            elements = list(ret.value.elements)  # type: ignore[union-attr]
            update = cst.Assign(targets=[cst.AssignTarget(cst.Name(name))], value=elements[0].value)
            first = updated.with_changes(body=[update])
            rest = ret.value.with_changes(  # type: ignore[union-attr]
                elements=[elements[0].with_changes(value=cst.Name(name)), *elements[1:]]
            )
            return cst.FlattenSentinel([first, cst.SimpleStatementLine(body=[ret.with_changes(value=rest)])])

    out = module.visit(Split())
    return out if changed else None


def _returned_update(line: cst.SimpleStatementLine, params: set[str]) -> str | None:
    """The state's name where ``line`` is ``return <name>.<update>(...), <values not reading it>``."""
    value = _update_returned(line)
    if value is None:
        return None
    receiver = value.elements[0].value.func.value  # type: ignore[attr-defined]
    if not (isinstance(receiver, cst.Name) and receiver.value in params):
        return None
    if any(receiver.value in names_in(e.value) for e in value.elements[1:]):
        return None
    return receiver.value


def _update_returned(line: cst.SimpleStatementLine) -> cst.Tuple | None:
    """The tuple ``line`` returns where it is ``return <expr>.<update>(...), ...`` (no starred element)."""
    if len(line.body) != 1 or not isinstance(line.body[0], cst.Return):
        return None
    value = line.body[0].value
    if not (isinstance(value, cst.Tuple) and len(value.elements) > 1):
        return None
    if any(isinstance(e, cst.StarredElement) for e in value.elements):
        return None
    call = value.elements[0].value
    if not (
        isinstance(call, cst.Call)
        and isinstance(call.func, cst.Attribute)
        and call.func.attr.value in UPDATES
    ):
        return None
    return value
