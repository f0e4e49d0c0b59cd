"""A Linen module's ``__post_init__``, moved into the NNX ``__init__`` after the fields.

A Linen module is a dataclass: ``__post_init__`` runs once the fields are set, when the module is
constructed (before ``setup()``, which runs lazily). Code uses it to check or normalise fields
(``self.patches = ml_collections.ConfigDict(self.patches)``), and often only to call the base's hook
(``super().__post_init__()``, which registers the Linen module). An ``nnx.Module`` is no dataclass:
nothing calls ``__post_init__``, so what it sets would be missing. Its body therefore moves into
``__init__``, right after the fields, without the ``super().__post_init__()`` call (NNX has no hook to
chain to), and the method goes.

It moves only when that is the same program: the class's bases are Linen's own (a base of the run may
have a hook of its own to chain to), the hook binds no field (sizes are read from the fields as the
constructor receives them), takes only ``self``, calls the base's hook exactly once
as a statement of its own, returns nothing early (a ``return`` would leave ``__init__`` before the
submodules are built) and is called nowhere else. Any other hook stays, and the verifier reports it.
Linen API left in a moved body (``self.scope``, ``nn.share_scope``) is the verifier's to report, at
its line in ``__init__``.
"""

from __future__ import annotations

from collections.abc import Collection

import libcst as cst

from linen2nnx.migrate.cst_meta import FastVisitor
from linen2nnx.migrate.cst_utils import code, is_docstring, self_targets
from linen2nnx.migrate.inheritance import super_method

HOOK = "__post_init__"


def is_post_init(stmt: cst.BaseStatement) -> bool:
    """``def __post_init__(...)`` as a statement of a class body."""
    return isinstance(stmt, cst.FunctionDef) and stmt.name.value == HOOK


def moved_body(
    cls: cst.ClassDef, fn: cst.FunctionDef, fields: Collection[str]
) -> list[cst.BaseStatement] | None:
    """The statements of ``fn`` (the ``__post_init__`` of ``cls``) that ``__init__`` runs after the
    fields: its body less the docstring and the ``super().__post_init__()`` statement; None when the
    hook cannot move (see the module docstring), or rebinds one of the ``fields``. The caller checks
    the class's bases."""
    params = fn.params
    if (
        fn.decorators
        or len(params.params) != 1
        or params.star_arg is not cst.MaybeSentinel.DEFAULT
        or params.kwonly_params
        or params.star_kwarg is not None
        or params.posonly_params
        or not isinstance(fn.body, cst.IndentedBlock)
    ):
        return None
    chained = [s for s in fn.body.body if _is_super_hook(s)]
    if len(chained) != 1 or _reads_hook(cls, fn) or _returns(fn.body) or _rebinds(fn, fields):
        return None
    return hook_statements(fn)


def hook_statements(fn: cst.FunctionDef) -> list[cst.BaseStatement]:
    """The body of a movable hook ``fn`` less its docstring and its ``super().__post_init__()``."""
    body = fn.body.body if isinstance(fn.body, cst.IndentedBlock) else ()
    return [s for s in body if not is_docstring(s) and not _is_super_hook(s)]


def _is_super_hook(stmt: cst.BaseStatement) -> bool:
    """``super().__post_init__()`` as a statement of its own."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return False
    small = stmt.body[0]
    call = small.value if isinstance(small, cst.Expr) else None
    return isinstance(call, cst.Call) and not call.args and super_method(call) == HOOK


class _Finder(FastVisitor):
    """Whether a tree holds a ``return`` (outside nested functions and classes) or names the hook."""

    def __init__(self, skip: cst.CSTNode | None = None) -> None:
        self.returns = False
        self.names_hook = False
        self.skip = skip

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node is not self.skip and self.skip is not None  # a nested def's return is its own

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return self.skip is not None

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return self.skip is not None

    def visit_Return(self, node: cst.Return) -> None:
        self.returns = True

    def visit_Name(self, node: cst.Name) -> None:
        self.names_hook |= node.value == HOOK

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        return not (node.attr.value == HOOK and _is_super_ref(node))  # the chained call: not a reading


def _is_super_ref(node: cst.Attribute) -> bool:
    value = node.value
    return isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "super"


def _returns(block: cst.BaseSuite) -> bool:
    finder = _Finder()
    for stmt in block.body if isinstance(block, cst.IndentedBlock) else ():
        finder.walk(stmt)
    return finder.returns


def _reads_hook(cls: cst.ClassDef, fn: cst.FunctionDef) -> bool:
    """Whether anything in ``cls`` other than ``fn``'s own ``super().__post_init__()`` names the hook
    (``self.__post_init__()`` called again, a second definition)."""
    finder = _Finder(skip=fn)
    for stmt in cls.body.body:
        if stmt is not fn:
            finder.walk(stmt)
    inner = _Finder(skip=fn)
    for stmt in fn.body.body if isinstance(fn.body, cst.IndentedBlock) else ():
        inner.walk(stmt)
    return finder.names_hook or inner.names_hook


def _rebinds(fn: cst.FunctionDef, fields: Collection[str]) -> bool:
    """Whether the hook binds a field (``self.width = int(self.width)``, or through ``__setattr__``).
    Sizes are read from the fields as the constructor receives them (a caller translates ``self.width``
    of its submodule into the value it passes); a field the hook rebinds would make those sizes wrong,
    so such a hook stays (and the verifier reports it)."""
    if "__setattr__" in code(fn.body):
        return True
    bound: set[str] = set()

    class Bindings(FastVisitor):
        def on_binding(self, node: cst.CSTNode) -> None:
            bound.update(name for _, name in self_targets(node))

        visit_Assign = visit_AugAssign = visit_AnnAssign = visit_For = on_binding  # type: ignore[assignment]

    Bindings().walk(fn.body)
    return bool(bound & set(fields))
