"""Names that hold a class of the file or of the run, for the verifier: a call of such a name is a
build of that class, checked against its NNX ``__init__``.

A method's locals (``block = modules.Block``; ``block = nnx.remat(block, ...)``; ``partial(block,
...)``), the module's own names bound once (``N2 = Norm``, ``NormF = functools.partial(Norm,
False)`` at module level, read in a method that does not bind the name itself), and a classmethod's
``cls``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_utils import assigned_names, code
from linen2nnx.migrate.verify_syntax import assignments, self_chain


def class_aliases(
    body: cst.CSTNode, names_a_class: Callable[[cst.BaseExpression], bool]
) -> dict[str, cst.BaseExpression]:
    """The names ``body``'s assignments (not those of functions or classes inside it) bind to a class,
    directly or through a wrapper that keeps its constructor; ``names_a_class`` says what is one."""
    return _aliases_of(assignments(body), names_a_class)


def _aliases_of(
    found: list[cst.Assign], names_a_class: Callable[[cst.BaseExpression], bool]
) -> dict[str, cst.BaseExpression]:
    aliases: dict[str, cst.BaseExpression] = {}
    for assign in found:
        target, value = assign.targets[0].target, assign.value
        if not isinstance(target, cst.Name):
            continue
        if isinstance(value, cst.IfExp):  # `A if cond else B`: a class either way, each checked
            body, orelse = _class_of(value.body, aliases), _class_of(value.orelse, aliases)
            if names_a_class(body) and names_a_class(orelse):
                aliases[target.value] = value.with_changes(body=body, orelse=orelse)
            continue
        value = _class_of(value, aliases)
        if names_a_class(value):
            aliases[target.value] = value
    return aliases


def _class_of(value: cst.BaseExpression, aliases: dict[str, cst.BaseExpression]) -> cst.BaseExpression:
    while isinstance(value, cst.Call) and value.args and not value.args[0].keyword:
        value = value.args[0].value  # nnx.remat(Block, ...), partial(Block, ...): still Block
    if isinstance(value, cst.Name) and value.value in aliases:
        value = aliases[value.value]
    return value


def module_class_aliases(
    module: cst.Module, names_a_class: Callable[[cst.BaseExpression], bool]
) -> dict[str, cst.BaseExpression]:
    """:func:`class_aliases` of the module's own statements, for the names they bind once (a name bound
    twice, ``try: ... except ImportError: N = None``, is no alias)."""
    found = assignments(module)
    bound = Counter(a.targets[0].target.value for a in found if isinstance(a.targets[0].target, cst.Name))
    return {n: v for n, v in _aliases_of(found, names_a_class).items() if bound[n] == 1}


def child_alias(methods: list[tuple[cst.FunctionDef, Any]], value: cst.BaseExpression) -> bool:
    """Is ``value`` a local of the method being checked (the last of ``methods``) bound to a child of
    ``self`` (``d = self.dense_0``, what ``d = nn.Dense(4)`` became): its ``.variables`` is Linen API."""
    if type(value) is not cst.Name or not methods:
        return False
    bound = [a.value for a in assignments(methods[-1][0].body) if code(a.targets[0].target) == value.value]
    return bool(bound) and all(self_chain(v) for v in bound)


def method_aliases(
    fn: cst.FunctionDef, owner: cst.ClassDef | None, names_a_class: Callable[[cst.BaseExpression], bool]
) -> dict[str, cst.BaseExpression]:
    """:func:`class_aliases` of a method of ``owner``, and the ``cls`` of a ``@classmethod`` that never
    binds it again: ``cls(width=3)`` builds ``owner`` (a subclass at most), so it is checked against
    ``owner``'s NNX ``__init__`` as ``Owner(width=3)`` is (it was not checked: TypeError at the call)."""
    aliases = class_aliases(fn.body, names_a_class)
    params = fn.params.posonly_params or fn.params.params
    if owner is not None and params and any(code(d.decorator) == "classmethod" for d in fn.decorators):
        name = params[0].name.value
        if assigned_names(fn).get(name) == 1:
            aliases[name] = cst.Name(owner.name.value)
    return aliases
