"""The attributes ``setup()`` binds first, before it builds anything, to call-free expressions
(``self.hidden_size = self.config.hidden_size``, ``self.head_dim = self.dim // self.heads``).

``__init__`` replays them first, so a size written as one of them can be read by every layer the class
builds (:func:`leading_setup_sizes`). A caller can also read them through their values
(:func:`leading_setup_values`): a block whose output size is ``self.hidden_size`` gives its caller
``<config>.hidden_size``, in terms of the arguments the caller built it with.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

import libcst as cst

from linen2nnx.migrate.cst_meta import calls_in
from linen2nnx.migrate.cst_utils import (
    code,
    names_in,
    needs_parens,
    parse_expression,
    replace_name,
    self_attr,
    substitute_self_fields,
)


def _leading_assignments(
    setup: cst.FunctionDef | None,
) -> Iterator[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """``(target, value)`` of the first statements of ``setup()``: single assignments of call-free
    values to an attribute of ``self`` or a local, up to the first statement of any other kind."""
    for stmt in setup.body.body if setup is not None else ():
        small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
        if not (isinstance(small, cst.Assign) and len(small.targets) == 1) or calls_in(small.value):
            return
        target = small.targets[0].target
        if self_attr(target) is None and type(target) is not cst.Name:
            return
        yield target, small.value


def leading_setup_sizes(
    setup: cst.FunctionDef | None, methods: Iterable[cst.FunctionDef] = ()
) -> frozenset[str]:
    """The attributes the first statements of ``setup()`` bind to call-free expressions, before it
    builds anything (``self.head_dim = self.dim // self.heads``, also after a call-free local
    ``config = self.config``): ``__init__`` replays them first, so a size written as one of them can
    be read by every layer it builds. One that another statement of setup() or of the class's other
    ``methods`` binds again (a helper setup() calls) is none."""
    names = {attr for target, _ in _leading_assignments(setup) if (attr := self_attr(target)) is not None}
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
    for target, value in _leading_assignments(setup) if kept else ():
        spelled = _spelled(value, {**known, **values}, local_values)
        attr = self_attr(target)
        if attr is None:
            local_values[target.value] = spelled  # type: ignore[attr-defined]
        elif spelled is not None and attr in kept:
            values[attr] = spelled
    return values


def _spelled(
    node: cst.BaseExpression, attrs: dict[str, str], local_values: dict[str, str | None]
) -> str | None:
    """``node`` with its locals and ``self.<a>`` replaced by their values; None when it reads a name or
    an attribute of ``self`` that has none."""
    text = code(node)
    for name in names_in(node) - {"self"}:
        value = local_values.get(name)
        if value is None:
            if name in local_values or name not in _BUILTINS:
                return None
            continue
        text = replace_name(text, name, f"({value})" if needs_parens(parse_expression(value)) else value)
    return substitute_self_fields(text, attrs)


_BUILTINS = frozenset({"None", "True", "False", "int", "float", "len", "max", "min", "abs", "round"})
