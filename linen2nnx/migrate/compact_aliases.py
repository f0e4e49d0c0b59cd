"""A local of ``@nn.compact`` that holds a Linen class of the run, used only to build modules.

ViT-style encoders pick the block class once and build every layer from the local::

    block = nn.remat(Block, prevent_cse=False, static_argnums=(2,)) if self.remat else Block
    for lyr in range(self.depth):
        x = block(name=f"encoderblock_{lyr}", mlp_dim=self.mlp_dim)(x, deterministic)

(or just ``block = Block``). Each ``block(...)`` builds the class, so it is planned as a submodule of
that class (``FileState.alias_classes``), hoisted into ``__init__`` like a direct ``Block(...)``; the
remat a static condition asks for moves to the call (``nnx.remat`` under the same condition, the
call's arguments closed over, so what ``static_argnums`` kept static stays a Python value) and the
local's statement goes. Only a local bound once, by a top-level statement, and read only as the
callee of a constructor call after it, is taken; under the remat every call must give ``name=``,
since Linen's auto-names follow the wrapped class (``CheckpointBlock_0``) and would depend on the
condition. When a use is not planned the statement stays and the class read is a finding. A local
chosen among several classes on the config is planned as its first class (class_choices.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import libcst as cst

from linen2nnx.migrate.class_choices import auto_names_exact, class_choice
from linen2nnx.migrate.cst_meta import FastVisitor, calls_in
from linen2nnx.migrate.cst_utils import code, keyword_arg, names_in, negated, single_assign


@dataclasses.dataclass
class CompactAlias:
    name: str
    stmt: cst.BaseStatement
    cls: cst.BaseExpression  # the class every use builds (of a choice: the first, planned for all)
    uses: list[cst.Name]  # the local at each constructor call
    remat: cst.Call | None = None  # `nn.remat(Block, ...)`, applied when `condition` holds
    condition: str | None = None
    classes: list[cst.BaseExpression] = dataclasses.field(
        default_factory=list
    )  # of a choice (class_choices.py)
    choice: cst.BaseExpression | None = None  # ... `BlockA if self.kind == 'a' else BlockB`, for __init__


def _reads(nodes: list[cst.BaseStatement], name: str) -> list[cst.Name]:
    """Every read of the local ``name`` in ``nodes`` (attribute and keyword names excluded)."""
    found: list[cst.Name] = []

    class Reads(FastVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            if node.value == name:
                found.append(node)

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            self.walk(node.value)
            return False

        def visit_Arg(self, node: cst.Arg) -> bool:
            self.walk(node.value)
            return False

    for stmt in nodes:
        Reads().walk(stmt)
    return found


def _choice(
    value: cst.BaseExpression,
    is_class: Callable[[cst.BaseExpression], bool],
    is_remat: Callable[[cst.Call], bool],
) -> tuple[cst.BaseExpression, cst.Call | None, str | None] | None:
    """``Block`` -> (Block, None, None); ``nn.remat(Block, ...) if self.flag else Block`` -> (Block, the
    remat, ``self.flag``) (``not (...)`` when the remat is the ``else``); None for anything else."""
    if isinstance(value, (cst.Name, cst.Attribute)):
        return (value, None, None) if is_class(value) else None
    if not isinstance(value, cst.IfExp) or names_in(value.test) - {"self"}:
        return None
    if any(isinstance(n, cst.Call) for n in calls_in(value.test)):
        return None  # a method call in the condition: not known to be a static config
    for remat, plain, condition in (
        (value.body, value.orelse, code(value.test)),
        (value.orelse, value.body, negated(code(value.test))),
    ):
        if (
            isinstance(plain, (cst.Name, cst.Attribute))
            and is_class(plain)
            and isinstance(remat, cst.Call)
            and is_remat(remat)
            and remat.args
            and remat.args[0].keyword is None
            and not remat.args[0].star
            and code(remat.args[0].value) == code(plain)
            and all(a.keyword is not None for a in remat.args[1:])
        ):
            return plain, remat, condition
    return None


def compact_aliases(
    fn: cst.FunctionDef,
    counts: dict[str, int],
    parent_of: Callable[[cst.CSTNode], cst.CSTNode | None],
    is_class: Callable[[cst.BaseExpression], bool],
    is_remat: Callable[[cst.Call], bool],
) -> list[CompactAlias]:
    """The class-holding locals of ``fn`` (see the module docstring) with their uses."""
    body = list(fn.body.body)
    params = {p.name.value for p in (*fn.params.params, *fn.params.kwonly_params, *fn.params.posonly_params)}
    found: list[CompactAlias] = []
    for at, stmt in enumerate(body):
        among = class_choice(stmt, counts, is_class)  # `block = A if self.a else B`, or an `if` of them
        assign = single_assign(stmt) if among is None else (among[0], among[1][0])
        if assign is None or (among is None and counts.get(assign[0]) != 1):
            continue
        name, value = assign
        choice = _choice(value, is_class, is_remat)
        if choice is None or name in params or _reads(body[:at], name):
            continue
        uses = _reads(body[at + 1 :], name)
        calls = [parent_of(use) for use in uses]
        if not uses or not all(isinstance(c, cst.Call) and c.func is u for c, u in zip(calls, uses)):
            continue
        if choice[1] is not None and not all(keyword_arg(c, "name") is not None for c in calls):  # type: ignore[arg-type]
            continue  # auto-names under the remat would be CheckpointBlock_k
        if among is not None and not auto_names_exact(fn, stmt, among[1], calls):  # type: ignore[arg-type]
            continue  # BlockA_k or BlockB_j: Linen counts each class apart
        alias = CompactAlias(name, stmt, choice[0], uses, choice[1], choice[2])
        if among is not None:
            alias.classes, alias.choice = among[1], among[2]
        found.append(alias)
    return found


def branch_assignments(
    body: list[cst.BaseStatement], counts: dict[str, int], is_transform: Callable[[cst.BaseExpression], bool]
) -> list[cst.BaseStatement]:
    """The ``name = <transform>(...)`` lines inside the ``if`` / ``else`` branches of ``body`` (at any
    depth of branches, not in loops) of names bound once in the method: ``if self.scan: block =
    nn.remat(Block, ...)`` then ``nn.scan(block, ...)(...)`` in the same branch (ViT), a lift alias
    as a top-level one is. One that reads another local (a call-time ``variable_axes``), or that
    another such line wraps again (``scanned = nn.scan(block, ...)``), is left as it is."""
    lines = _branch_lines(body)
    transforms = [
        (line, a)
        for line in lines
        if (a := single_assign(line)) is not None and isinstance(a[1], cst.Call) and is_transform(a[1].func)
    ]
    wrapped = {n for _, (_, value) in transforms for n in names_in(value)}
    return [
        line
        for line, (name, value) in transforms
        if counts.get(name) == 1 and not names_in(value) & counts.keys() and name not in wrapped
    ]


def _branch_lines(body: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """The statements inside the ``if`` / ``elif`` / ``else`` branches of ``body``, at any depth."""
    found: list[cst.BaseStatement] = []
    for stmt in body:
        branch: cst.CSTNode | None = stmt if isinstance(stmt, cst.If) else None
        while branch is not None:
            assert isinstance(branch, (cst.If, cst.Else))
            inner = list(branch.body.body)
            found += inner + _branch_lines(inner)
            branch = branch.orelse if isinstance(branch, cst.If) else None
    return found
