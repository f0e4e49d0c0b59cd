"""A submodule's output size in its caller's terms, with the submodule's own locals spelled out.

A class of the run sizes its result with an expression of its own ``__init__``: ``self.nmid * 4``, but
also a local its method binds (``nout = self.nmid * 4`` ... ``nn.Dense(nout)``). ``self.<field>``
becomes the caller's argument; a local of the submodule means nothing in the caller (``in_features=nout``
there would be an undefined name), so it is replaced by its value when the submodule's ``__init__``
replays it (bound once by ``name = value``) from config, or from the size of its input when the
caller knows the size of what it applies the submodule to (``nmid = self.nmid or x.shape[-1] // 4``),
and otherwise the size is unknown to the caller (a finding there, never a stray name).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable

import libcst as cst

from linen2nnx.migrate.cst_meta import syntax_children
from linen2nnx.migrate.cst_utils import (
    assigned_names,
    code,
    names_in,
    parse_expression,
    replace_name,
    single_assign,
    substitute_self_fields,
)
from linen2nnx.migrate.dataflow_types import Feat
from linen2nnx.migrate.sites import ClassPlan, replace_shape_last

BUILTIN_NAMES = frozenset(dir(builtins))
MAX_DEPTH = 16  # locals defined through other locals, at most this deep


def callee_locals(tree: cst.Module | None, cls_name: str) -> set[str] | None:
    """Every name a method of the module-level class ``cls_name`` binds (its parameters too); None when
    the file does not define it (a class of another file: its locals are not known here)."""
    bindings = _callee_bindings(tree, cls_name)
    return None if bindings is None else set(bindings)


def _callee_bindings(tree: cst.Module | None, cls_name: str) -> dict[str, int] | None:
    """For each name a method of ``cls_name`` binds, the most times one method binds it (an
    augmented assignment under an ``if`` counts: ``d = w`` then ``d *= 2`` is bound twice)."""
    cls = next(
        (
            s
            for s in (tree.body if tree is not None else ())
            if isinstance(s, cst.ClassDef) and s.name.value == cls_name
        ),
        None,
    )
    if cls is None or not isinstance(cls.body, cst.IndentedBlock):
        return None
    found: dict[str, int] = {}
    for stmt in cls.body.body:
        if isinstance(stmt, cst.FunctionDef):
            for name, count in assigned_names(stmt).items():
                found[name] = max(found.get(name, 0), count)
    return found


def setup_local(setup: cst.FunctionDef | None, name: str) -> cst.BaseStatement | None:
    """The statement of ``setup()`` that binds ``name``, when it is the only binding of the name there
    and a plain ``name = value`` of the body itself (run once, whatever the config): ``__init__`` runs
    it as ``setup()`` did (``out_channels = self.in_channels if self.out_channels is None else
    self.out_channels``)."""
    if setup is None or not isinstance(setup.body, cst.IndentedBlock) or assigned_names(setup).get(name) != 1:
        return None
    if name in _nonlocal_names(setup):  # a nested function rebinds it (`def grow(): nonlocal out; ...`)
        return None
    return next((stmt for stmt in setup.body.body if (single_assign(stmt) or ("",))[0] == name), None)


def in_caller_terms(
    tree: cst.Module | None,
    user: ClassPlan,
    expr: str,
    fields: dict[str, str],
    first: str | None,
    callee_expr: str | None = None,
) -> str | None:
    """``expr`` (the submodule ``user``'s, ``self.<field>`` already the caller's ``fields``) with the
    submodule's replayable locals (of its ``@nn.compact`` method, or bound once by ``setup()``) replaced by their values;
    None when one is not replayable. ``first``
    is the size of the caller's value the submodule is applied to (None: unknown), for a local read
    from the submodule's input (``nmid = self.nmid or x.shape[-1] // 4``). ``callee_expr`` is ``expr`` as
    the submodule spells it: for a class of another file, whose locals (and module-level names) are not
    known here, a name in it other than ``self`` or a builtin leaves the size unknown."""
    bindings = _callee_bindings(tree, user.name)
    own = None if bindings is None else set(bindings)
    if own is not None and any(
        bindings[n] > 1 for n in names_in(parse_expression(callee_expr or expr)) & own
    ):
        return None  # a local bound twice (`d = w`; `if c: d *= 2`): which binding holds is not known here
    if own is None:
        if callee_expr is None:
            return None
        free = names_in(parse_expression(callee_expr)) - {"self"} - BUILTIN_NAMES
        return None if free else expr
    assert bindings is not None
    spelled = _spelled_out(user, bindings, callee_expr) if callee_expr is not None else None
    if spelled is not None:  # the callee's locals spelled out in its own terms first, then its fields
        caller_expr = substitute_self_fields(spelled, fields)
        setup_used = any(n not in user.pure_locals for n in names_in(parse_expression(callee_expr)) & own)
        if (
            caller_expr is not None
            and setup_used
            and names_in(parse_expression(caller_expr)) - {"self"} - BUILTIN_NAMES
        ):
            return None  # a setup() local read through a name of the caller (a local of its own loop)
        return caller_expr
    from_caller = set().union(*(names_in(parse_expression(v)) for v in fields.values())) if fields else set()
    for _ in range(MAX_DEPTH):
        used = sorted(names_in(parse_expression(expr)) & own)
        if not used:
            return expr
        if set(used) & from_caller or _binds_inside(expr) & set(used):
            return None  # a caller's name spelled like a callee local, or one a lambda of the size binds
        for name in used:
            stmt = user.pure_locals.get(name) or setup_local(user.setup, name)
            bound = single_assign(stmt) if stmt is not None else None
            if bound is None or bound[0] != name or bindings[name] > 1:
                return None  # bound twice (`d = w`; `if c: d *= 2`): which binding holds is not known
            value = substitute_self_fields(code(bound[1]), fields)  # the callee's fields, then its input
            if value is None:
                return None
            if name in user.shape_locals:  # `x.shape[-1]` of the submodule's input: the caller's size
                input_sizes = user.shape_local_sizes.get(name) or {}
                if first is None or set(input_sizes) != set(user.shape_locals[name]):
                    return None
                if any(user.new_args.get(size) != "input:0" for size in input_sizes.values()):
                    return None
                value = replace_shape_last(parse_expression(value), dict.fromkeys(input_sizes, first))
            if name not in user.pure_locals and names_in(parse_expression(value)) - {"self"} - BUILTIN_NAMES:
                return None  # a setup() local read through a name of the caller (a local of its own loop)
            expr = replace_name(expr, name, f"({value})")
    return None


def _spelled_out(user: ClassPlan, bindings: dict[str, int], expr: str) -> str | None:
    """``expr`` of the submodule with its replayable config locals replaced by their values, still in
    the submodule's terms (``self.<field>`` left as is), so that a caller's name equal to one of its
    locals (both spell the config `config`) is never taken for that local. None when a local is not
    replayable from config alone (one read from the input is left to the caller-terms walk)."""
    for _ in range(MAX_DEPTH):
        used = sorted(names_in(parse_expression(expr)) & set(bindings))
        if not used:
            return expr
        if _binds_inside(expr) & set(used):
            return None
        for name in used:
            stmt = user.pure_locals.get(name) or setup_local(user.setup, name)
            bound = single_assign(stmt) if stmt is not None else None
            if bound is None or bound[0] != name or name in user.shape_locals or bindings[name] > 1:
                return None
            expr = replace_name(expr, name, f"({code(bound[1])})")
    return None


def _binds_inside(expr: str) -> set[str]:
    """The names a lambda or comprehension inside ``expr`` binds (never a callee local to replace)."""
    found: set[str] = set()

    def walk(node: cst.CSTNode) -> None:
        if isinstance(node, cst.Lambda):
            found.update(p.name.value for p in (*node.params.params, *node.params.kwonly_params))
        elif isinstance(node, cst.CompFor):
            found.update(names_in(node.target))
        for child in syntax_children(node):
            walk(child)

    walk(parse_expression(expr))
    return found


def _nonlocal_names(fn: cst.FunctionDef) -> set[str]:
    """The names a function nested in ``fn`` declares ``nonlocal`` (and so may rebind)."""
    found: set[str] = set()

    def walk(node: cst.CSTNode) -> None:
        if isinstance(node, cst.Nonlocal):
            found.update(n.name.value for n in node.names)
        for child in syntax_children(node):
            walk(child)

    walk(fn.body)
    return found


def choice_seen(feat: Feat, fields: dict[str, str], seen: Callable[[Feat], Feat]) -> Feat:
    """A block's size that depends on whether a loop of it ran (``(self.width if self.depth > 0 else
    <its input>)``: a list ``setup()`` builds over ``range(self.depth)``), in its caller's terms: the
    test with the caller's values for the fields, decided where those are literals, and each side as
    ``seen`` by the caller; unknown where the test reads anything but the block's fields and the two
    sides differ."""
    undecided = Feat.unknown("a size of the block that depends on whether its loop ran")
    sides = [seen(element) for element in feat.elements]
    if len(sides) != 2 or any(side.kind not in ("expr", "input") for side in sides):
        return undecided
    if sides[0] == sides[1]:  # the same size either way: what the test reads does not matter
        return sides[0]
    test = substitute_self_fields(feat.expr, fields)
    if test is None:
        return undecided
    if not names_in(parse_expression(test)):  # `2 > 0`: the caller's literal config decides it
        try:
            return sides[0] if eval(test, {"__builtins__": {}}) else sides[1]  # literals only, no names
        except Exception:
            pass
    return Feat("choice", expr=test, elements=tuple(sides))
