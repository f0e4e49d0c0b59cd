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

from linen2nnx.migrate.cst_meta import FastVisitor, contains
from linen2nnx.migrate.cst_utils import code, is_docstring, is_super_call, self_targets
from linen2nnx.migrate.inheritance import super_method, super_statement

HOOK = "__post_init__"


def is_post_init(stmt: cst.BaseStatement) -> bool:
    """``def __post_init__(...)`` as a statement of a class body."""
    return isinstance(stmt, cst.FunctionDef) and stmt.name.value == HOOK


def can_move(cls: cst.ClassDef, fn: cst.FunctionDef, fields: Collection[str]) -> bool:
    """Whether ``fn``, the ``__post_init__`` of ``cls``, can run in ``__init__`` after the fields (see
    the module docstring); a hook that rebinds one of the ``fields`` cannot. The caller checks the
    class's bases."""
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
        return False
    chained = [s for s in fn.body.body if _is_super_hook(s)]
    return (
        len(chained) == 1
        and not _names_hook(cls, fn)
        and not contains(fn.body, (cst.Return,), opaque=(cst.FunctionDef, cst.ClassDef, cst.Lambda))
        and not _rebinds(fn, fields)
    )


def hook_statements(fn: cst.FunctionDef) -> list[cst.BaseStatement]:
    """The body of a movable hook ``fn`` less its docstring and its ``super().__post_init__()``."""
    body = fn.body.body if isinstance(fn.body, cst.IndentedBlock) else ()
    return [s for s in body if not is_docstring(s) and not _is_super_hook(s)]


def _is_super_hook(stmt: cst.BaseStatement) -> bool:
    """``super().__post_init__()`` as a statement of its own."""
    call = super_statement(stmt)
    return call is not None and super_method(call) == HOOK


def _names_hook(cls: cst.ClassDef, fn: cst.FunctionDef) -> bool:
    """Whether anything in ``cls`` but ``fn``'s own ``super().__post_init__()`` names the hook
    (``self.__post_init__()`` called again, a second definition)."""
    found: list[bool] = []

    class Names(FastVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            if node.value == HOOK:
                found.append(True)

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            return not (node.attr.value == HOOK and is_super_call(node.value))  # the chained call

    for stmt in cls.body.body:
        Names().walk(fn.body if stmt is fn else stmt)
    return bool(found)


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
