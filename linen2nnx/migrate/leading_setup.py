"""The attributes ``setup()`` binds first, before it builds anything, to call-free expressions
(``self.hidden_size = self.config.hidden_size``, ``self.head_dim = self.dim // self.heads``).

``__init__`` replays them first, so a size written as one of them can be read by every layer the class
builds (:func:`leading_setup_sizes`). A caller can also read them through their values
(:func:`leading_setup_values`): a block whose output size is ``self.hidden_size`` gives its caller
``<config>.hidden_size``, in terms of the arguments the caller built it with.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import libcst as cst

from linen2nnx.migrate.cst_meta import calls_in
from linen2nnx.migrate.cst_utils import code, needs_parens, parse_expression, self_attr


def leading_setup_sizes(
    setup: cst.FunctionDef | None, methods: Iterable[cst.FunctionDef] = ()
) -> frozenset[str]:
    """The attributes the first statements of ``setup()`` bind to call-free expressions, before it
    builds anything (``self.head_dim = self.dim // self.heads``, also after a call-free local
    ``config = self.config``): ``__init__`` replays them first, so a size written as one of them can
    be read by every layer it builds. One that another statement of setup() or of the class's other
    ``methods`` binds again (a helper setup() calls) is none."""
    names: set[str] = set()
    for stmt in setup.body.body if setup is not None else ():
        small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
        if not (isinstance(small, cst.Assign) and len(small.targets) == 1) or calls_in(small.value):
            break
        target = small.targets[0].target
        attr = self_attr(target)
        if attr is None and type(target) is not cst.Name:
            break
        if attr is not None:
            names.add(attr)
    # one bound again later (even by `+=`) is not kept
    text = "".join(code(m) for m in (setup, *(m for m in methods if m is not setup))) if names else ""
    return frozenset(
        n for n in names if len(re.findall(rf"self\.{n}\s*(?://|\*\*|<<|>>|[-+*/%@&|^])?=(?!=)", text)) == 1
    )


def leading_setup_values(
    setup: cst.FunctionDef | None, fields: Iterable[str], methods: Iterable[cst.FunctionDef] = ()
) -> dict[str, str]:
    """``{attr: value}`` for the leading attributes of :func:`leading_setup_sizes` whose value reads
    only ``fields`` of the class (``self.<field>``), earlier such attributes and call-free locals before
    them, each spelled out: ``{'hidden_size': 'self.config.hidden_size'}``. What else they read (a
    module-level name, a local bound by something else) leaves them out."""
    kept = leading_setup_sizes(setup, methods)
    known = {f: f"self.{f}" for f in fields}
    values: dict[str, str] = {}
    local_values: dict[str, str | None] = {}
    for stmt in setup.body.body if setup is not None and kept else ():
        small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
        if not (isinstance(small, cst.Assign) and len(small.targets) == 1) or calls_in(small.value):
            break
        target = small.targets[0].target
        value = _spelled(small.value, {**known, **values}, local_values)
        attr = self_attr(target)
        if type(target) is cst.Name:
            local_values[target.value] = value
        elif attr is None:
            break
        elif value is not None and attr in kept:
            values[attr] = value
    return values


def _spelled(
    node: cst.BaseExpression, attrs: dict[str, str], local_values: dict[str, str | None]
) -> str | None:
    """``node`` with ``self.<a>`` and the locals replaced by their values; None when it reads a name or
    attribute of ``self`` that has none."""
    missing = False
    attribute_names: set[int] = set()

    class Spell(cst.CSTTransformer):
        def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
            nonlocal missing
            name = self_attr(original)
            if name is None:
                return updated
            if name not in attrs:
                missing = True
                return updated
            return _operand(attrs[name]) if attrs[name] != f"self.{name}" else updated

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            attribute_names.add(id(node.attr))  # `hidden_size` of `cfg.hidden_size`: no local
            return self_attr(node) is None  # self.x: replaced whole in leave_Attribute

        def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
            nonlocal missing
            if original.value == "self" or id(original) in attribute_names:
                return updated
            value = local_values.get(original.value, "")
            if value is None or (value == "" and original.value not in _BUILTINS):
                missing = True
                return updated
            return _operand(value) if value else updated

    out = node.visit(Spell())
    return None if missing else code(out)


def _operand(text: str) -> cst.BaseExpression:
    """``text`` as an expression that can stand where a name stood (parenthesised where needed)."""
    value = parse_expression(text)
    return (
        value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()]) if needs_parens(value) else value
    )


_BUILTINS = frozenset({"None", "True", "False", "int", "float", "len", "max", "min", "abs", "round"})
