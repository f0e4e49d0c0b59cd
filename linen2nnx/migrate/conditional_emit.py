"""The ``__init__`` statements of a submodule or variable that Linen creates only under config tests.

``if <tests>: self.<attr> = <built> else: self.<attr> = None`` keeps the attribute defined when Linen
would not create it. A second site of the same attribute (a parameter of one name created in each
branch of an ``if`` / ``elif`` chain) must not reset what the first set, and NNX refuses a value of
the parameter after ``None`` (the attribute turned static): so it goes in place of the first's
``self.<attr> = None``, as a nested ``if`` whose own ``else`` keeps the ``None``.
"""

from __future__ import annotations

import libcst as cst

from linen2nnx.migrate.cst_utils import code, parse_expression, parse_statement
from linen2nnx.migrate.sites import Site


def conditional(
    site: Site,
    assign: cst.SimpleStatementLine | list[cst.SimpleStatementLine],
    stmts: list[cst.BaseStatement],
    bare: bool = False,
) -> None:
    """``if <conditions>: <assign> else: self.<attr> = None`` appended to ``stmts``, merged with the
    statement before when it tests the same; with no ``else`` when ``bare`` (an earlier statement sets
    the attribute unconditionally)."""
    test = " and ".join(f"({c})" if len(site.conditions) > 1 else c for c in site.conditions)
    assigns = assign if isinstance(assign, list) else [assign]
    if bare:
        only = parse_statement(f"if {test}:\n    pass\n")
        assert isinstance(only, cst.If)
        stmts.append(only.with_changes(body=only.body.with_changes(body=assigns)))
        return
    block = parse_statement(f"if {test}:\n    pass\nelse:\n    self.{site.attr} = None\n")
    assert isinstance(block, cst.If) and isinstance(block.orelse, cst.Else)
    last = stmts[-1] if stmts else None
    if (
        isinstance(last, cst.If)
        and code(last.test) == code(block.test)
        and isinstance(last.orelse, cst.Else)
        and all(code(s).endswith("= None\n") for s in last.orelse.body.body)
    ):
        block = last  # the same test as the statement before: one if / else for both
        stmts.pop()
        assign_else = block.orelse.body.body  # type: ignore[union-attr]
        block = block.with_changes(
            body=block.body.with_changes(body=[*block.body.body, *assigns]),
            orelse=block.orelse.with_changes(
                body=block.orelse.body.with_changes(  # type: ignore[union-attr]
                    body=[*assign_else, parse_statement(f"self.{site.attr} = None\n")]
                )
            ),
        )
    else:
        block = block.with_changes(body=block.body.with_changes(body=assigns))
    stmts.append(block)


def other_branch(site: Site, block: cst.If, assign: cst.SimpleStatementLine) -> cst.If | cst.Else:
    """The ``else`` building the other branch's module of a one-condition switch; under outer
    conditions too, an ``elif`` on the branch's own conditions, the ``else`` left as it was. A later
    module of the same branch joins what an earlier one built there (in place of its attribute's
    ``= None``), never replaces it."""
    orelse = block.orelse
    test = " and ".join(f"({c})" for c in site.conditions)
    if isinstance(orelse, cst.If) and code(orelse.test) == test:  # this branch's elif, built before
        return orelse.with_changes(body=orelse.body.with_changes(body=[*orelse.body.body, assign]))
    if isinstance(orelse, cst.Else) and (len(site.conditions) == 1 or _built_in(orelse)):
        reset = f"self.{site.attr} = None\n"
        body = list(orelse.body.body)
        at = next(
            (i for i, s in enumerate(body) if isinstance(s, cst.SimpleStatementLine) and code(s) == reset),
            None,
        )
        if at is None:
            body.append(assign)
        else:
            body[at] = assign
        return orelse.with_changes(body=orelse.body.with_changes(body=body))
    if len(site.conditions) == 1 or not isinstance(orelse, cst.Else):
        return cst.Else(body=cst.IndentedBlock(body=[assign]))
    return cst.If(test=parse_expression(test), body=cst.IndentedBlock(body=[assign]), orelse=orelse)


def _built_in(orelse: cst.Else) -> bool:
    """Whether an ``else`` builds something already (not only resets attributes to ``None``)."""
    return any(not code(s).endswith("= None\n") for s in orelse.body.body)


def nested_in_else(block: cst.BaseStatement, site: Site, assign: cst.SimpleStatementLine) -> cst.If | None:
    """``block`` with the ``self.<attr> = None`` of its ``else`` (or of an ``if`` nested there by an
    earlier call) replaced by ``if <conditions>: <assign> else: self.<attr> = None``; None when it
    has no such statement."""
    orelse = block.orelse if isinstance(block, cst.If) else None
    if not isinstance(orelse, cst.Else):
        return None
    reset = f"self.{site.attr} = None\n"
    body = list(orelse.body.body)
    for i, stmt in enumerate(body):
        if isinstance(stmt, cst.SimpleStatementLine) and code(stmt) == reset:
            inner: list[cst.BaseStatement] = []
            conditional(site, assign, inner)
            body[i] = inner[0]
            return block.with_changes(orelse=orelse.with_changes(body=orelse.body.with_changes(body=body)))
        if isinstance(stmt, cst.If):
            deeper = nested_in_else(stmt, site, assign)
            if deeper is not None:
                body[i] = deeper
                return block.with_changes(
                    orelse=orelse.with_changes(body=orelse.body.with_changes(body=body))
                )
    return None
