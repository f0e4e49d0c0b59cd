"""``params = model.init(rng, x)['params']`` written as the two statements the training pass reads.

The Linen tutorials' form subscripts the variables ``init`` returns at once, so no name holds them,
while the train-state rewrite builds the NNX model in the variables' place and reads the collection
from it (``params = nnx.state(variables, nnx.Param)``). Binding the variables to a local of their own
first (``variables = model.init(rng, x)``, then ``params = variables['params']``) evaluates the same
expressions in the same order. The driver plans this text only where the original would leave the
file's training code as written, and keeps it only where that plan converts (see ``driver.py``): a
file the original form already converts (``nnx.state(Model(...), nnx.Param)``) is unchanged.
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.cst_meta import nodes_of
from linen2nnx.migrate.cst_utils import names_in, numbered_name


def split_init_subscripts(module: cst.Module) -> cst.Module | None:
    """``module`` with each ``name = <receiver>.init(...)[<string>]`` statement split in two; None
    when it has none."""
    if not any(_init_subscript(line) for line in nodes_of(module, (cst.SimpleStatementLine,))):
        return None  # nothing to split: no transformer pass over the whole tree
    taken = names_in(module)
    changed = False

    class Split(cst.CSTTransformer):
        def leave_SimpleStatementLine(
            self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
        ) -> cst.SimpleStatementLine | cst.FlattenSentinel[cst.SimpleStatementLine]:
            nonlocal changed
            found = _init_subscript(updated)
            if found is None:
                return updated
            call, subscript = found
            name = numbered_name("variables", taken)
            taken.add(name)
            changed = True
            first = updated.with_changes(
                body=[cst.Assign(targets=[cst.AssignTarget(cst.Name(name))], value=call)]
            )
            assign = updated.body[0]
            second = cst.SimpleStatementLine(
                body=[assign.with_changes(value=subscript.with_changes(value=cst.Name(name)))]  # type: ignore[attr-defined]
            )
            return cst.FlattenSentinel([first, second])

    out = module.visit(Split())
    return out if changed else None


def _init_subscript(line: cst.SimpleStatementLine) -> tuple[cst.Call, cst.Subscript] | None:
    if len(line.body) != 1 or not isinstance(line.body[0], cst.Assign):
        return None
    assign = line.body[0]
    value = assign.value
    if not (len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name)):
        return None
    if not (isinstance(value, cst.Subscript) and len(value.slice) == 1):
        return None
    index = value.slice[0].slice
    call = value.value
    if not (isinstance(index, cst.Index) and isinstance(index.value, cst.SimpleString)):
        return None
    if not (
        isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value == "init"
    ):
        return None
    return call, value
