"""Variables reached by their Linen name: ``self.put_variable`` writes, ``self.get_variable`` /
``self.has_variable`` reads, ``self.sow`` (into the NNX attribute of the sown name).

``self.put_variable(collection, name, value)`` is a variable written, and created by its first write.

Linen's ``put_variable`` creates the variable when the collection is mutable and it does not exist yet,
else overwrites it; decode loops use it for counters and caches (``self.put_variable("cache",
"seq_len", n)`` in a ``prefill`` method, ``self.get_variable("cache", "seq_len")`` in ``extend``).
NNX modules may gain a Variable on any eager call, so each write becomes::

    if hasattr(self, "seq_len"):
        self.seq_len.value = n
    else:
        self.seq_len = nnx.Cache(n)

(a variable ``__init__`` creates is simply assigned). The first write of a name is planned as a
:class:`~linen2nnx.migrate.lazy_vars.LazyVar` (``put=True``), so ``get_variable`` / ``has_variable``
follow and the name map records its attribute. A ``params`` write, a name that is not a literal or a
write that is not a statement of its own stays a finding: an optimizer must see every Param after
``__init__``, and the rest cannot be told apart statically.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_meta import calls_in
from linen2nnx.migrate.cst_utils import code, parse_expression, parse_statement, snake_case
from linen2nnx.migrate.custom_vars import file_variable_type
from linen2nnx.migrate.lazy_vars import LazyVar
from linen2nnx.migrate.rules import API_002, VAR_002, VAR_004
from linen2nnx.migrate.sites import COLLECTION_TYPES, ClassPlan


def literal_put(call: cst.Call) -> tuple[str, str, cst.BaseExpression] | None:
    """(collection, name, value) of ``self.put_variable("c", "n", value)`` with positional arguments."""
    args = call.args
    if len(args) != 3 or any(a.keyword is not None or a.star for a in args):
        return None
    col, name = args[0].value, args[1].value
    if not (isinstance(col, cst.SimpleString) and isinstance(name, cst.SimpleString)):
        return None
    return col.evaluated_value, name.evaluated_value, args[2].value  # type: ignore[return-value]


def plan_put_variables(planner: Any, plan: ClassPlan, node: cst.ClassDef, calls: list[cst.Call]) -> None:
    """Plan the first convertible write of each name among ``calls`` (the class's
    ``self.put_variable`` calls) as a variable created on that write."""
    ctx = planner.ctx
    taken = (
        set(plan.field_names)
        | {s.attr for s in plan.sites.values()}
        | {v.attr for v in plan.lazy_vars.values()}
        | {s.name.value for s in node.body.body if isinstance(s, cst.FunctionDef)}
        | set(plan.setup_vars)
    )
    for call in calls:
        put = literal_put(call)
        statement = ctx.statement_of(call)
        if put is None or put[0] == "params" or not is_own_statement(statement, call):
            continue
        collection, name = put[0], put[1]
        if variable_attr(plan, collection, name) is not None:
            continue  # declared by self.variable, or written before: planned already
        attr = name if name.isidentifier() else snake_case(name)
        while attr in taken:
            attr += "_"
        taken.add(attr)
        fn = ctx.enclosing_function(call)
        in_call = fn is not None and fn.name.value == "__call__"
        plan.lazy_vars[call] = LazyVar(
            collection,
            name,
            attr,
            planner.site_planner.variable_type(collection),
            statement,
            planner.site_planner._call_time_when(call) if in_call else None,  # type: ignore[arg-type]
            put=True,
        )


def is_own_statement(statement: Any, call: cst.Call) -> bool:
    """``call`` is the whole of a one-statement line (``self.put_variable(...)`` alone)."""
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and statement.body[0].value is call
    )


def write(attr: str, var_type: str | None, value: cst.BaseExpression) -> cst.BaseStatement:
    """The statement a write becomes: an assignment of an existing variable, or (``var_type`` given)
    the assignment or the creation, whichever the first write finds."""
    text = code(value)
    if var_type is None:
        return parse_statement(f"self.{attr}.value = {text}\n")
    return parse_statement(
        f"if hasattr(self, {attr!r}):\n"
        f"    self.{attr}.value = {text}\n"
        f"else:\n"
        f"    self.{attr} = {var_type}({text})\n"
    )


def lazy_var(plan: ClassPlan, collection: str, name: str) -> LazyVar | None:
    """The variable of this class created on a call (or by its first write), if ``name`` is one."""
    return next((v for v in plan.lazy_vars.values() if (v.collection, v.name) == (collection, name)), None)


def variable_attr(plan: ClassPlan, collection: str, name: str) -> str | None:
    """The NNX attribute of a Linen variable of this class (created in __init__ or lazily)."""
    lazy = lazy_var(plan, collection, name)
    if lazy is not None:
        return lazy.attr
    for site in plan.sites.values():
        if site.kind in ("param", "variable") and (site.collection, site.linen_name) == (collection, name):
            return site.attr
    return None


def rewrite_put(
    ctx: Any, plan: ClassPlan, original: cst.Call, updated: cst.Call
) -> cst.BaseExpression | None:
    """``self.put_variable("cache", "n", v)`` -> a write of ``self.n``: its statement is replaced whole
    (``ctx.state.stmt_replaced``) when the class's variable ``n`` has an attribute; None otherwise."""
    put = literal_put(original)
    statement = ctx.statement_of(original)
    if put is None or not is_own_statement(statement, original):
        return None
    collection, name, _ = put
    attr = variable_attr(plan, collection, name)
    if attr is None:
        return None
    lazy = lazy_var(plan, collection, name)
    block = write(attr, lazy.var_type if lazy is not None else None, updated.args[2].value)
    ctx.state.stmt_replaced[statement] = block.with_changes(leading_lines=statement.leading_lines)
    ctx.state.handled.add(original)
    ctx.state.uses_nnx = True
    ctx.report(
        VAR_004,
        original,
        f"self.put_variable({collection!r}, {name!r}, ...) -> a write of self.{attr}"
        + (", created by the first write as Linen does" if lazy is not None else ""),
    )
    return updated


def variable_query(
    ctx: Any, plan: ClassPlan, api: str, original: cst.Call, updated: cst.Call
) -> cst.BaseExpression | None:
    """``self.has_variable`` / ``self.get_variable`` of a variable the class creates -> its attribute
    (``.value`` of one a ``put_variable`` creates: it may hold any value; a default when it does not
    exist yet)."""
    collection, name = (a.value.evaluated_value for a in original.args[:2])  # type: ignore[union-attr]
    attr = variable_attr(plan, collection, name)
    if attr is None:
        return None
    ctx.state.handled.add(original)
    ctx.report(VAR_004, original, f"self.{api}({collection!r}, {name!r}) -> self.{attr}")
    if api == "has_variable":
        return parse_expression(f"hasattr(self, {attr!r})")
    lazy = lazy_var(plan, collection, name)
    read = parse_expression(f"self.{attr}.value" if lazy is not None and lazy.put else f"self.{attr}[...]")
    if len(updated.args) == 3:
        test = parse_expression(f"hasattr(self, {attr!r})")
        choice = cst.IfExp(test=test, body=read, orelse=updated.args[2].value)
        if isinstance(ctx.parent_of(original), (cst.Assign, cst.Arg, cst.Return)):
            return choice
        return choice.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])  # `get(...) + 1`
    return read


def rewrite_sow(ctx: Any, plan: ClassPlan, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
    """``self.sow("intermediates", ...)`` -> ``self.sow(nnx.Intermediate, ...)``; into a collection of
    its own (``self.sow("losses", "aux", v)``, an auxiliary loss) -> ``self.sow(Losses, ...)``, the
    file's registered ``nnx.Intermediate`` subclass for it (custom_vars.py); a finding where NNX's
    attribute of that name is already something else (a field, a variable, a submodule), or where
    the collection also holds the file's variables."""
    collection = original.args[0].value.evaluated_value
    state_kind = collection in ctx.state.variable_classes and collection not in ctx.state.sown_collections
    var_type = COLLECTION_TYPES.get(collection) or (None if state_kind else _sown_type(ctx, collection))
    ctx.state.handled.add(original)
    name_arg = original.args[1].value if len(original.args) > 1 else None
    name = name_arg.evaluated_value if isinstance(name_arg, cst.SimpleString) else None
    taken = {*plan.field_names, *(s.attr for s in plan.sites.values()), *plan.setup_properties}
    if var_type is None:
        why = f"self.sow into the custom collection {collection!r}, which also holds variables"
        hint = "sow into a collection of its own (an nnx.Intermediate subclass)"
    elif name in taken:
        why = (
            f"self.sow({collection!r}, {name!r}, ...): NNX sows into the attribute {name}, which is "
            "already a field, a variable or a submodule of the class"
        )
        hint = "sow under a name of its own (and read the intermediates under it)"
    elif name in _sown_elsewhere(ctx, original, collection):
        why = (
            f"self.sow({collection!r}, {name!r}, ...): the class sows {name!r} into another collection "
            "too, and NNX sows a name into one attribute of one type"
        )
        hint = "sow under names of their own"
    else:
        why = hint = ""
    if why:
        ctx.report(API_002, original, why, hint)
        return updated
    spelled = f"nnx.{var_type}" if collection in COLLECTION_TYPES else var_type
    ctx.report(VAR_002, original, f"self.sow({collection!r}, ...) -> self.sow({spelled}, ...)")
    ctx.state.uses_nnx = True
    first = updated.args[0].with_changes(value=parse_expression(spelled))
    return updated.with_changes(args=[first, *updated.args[1:]])


def _sown_elsewhere(ctx: Any, call: cst.Call, collection: str) -> set[str]:
    """The literal names the class of ``call`` sows into collections other than ``collection``: NNX
    sows each name into one attribute, whose type cannot be two (``Losses`` and ``Intermediate``)."""
    cls = ctx.enclosing(call, cst.ClassDef)
    names: set[str] = set()
    for node in calls_in(cls) if cls is not None else ():
        args = node.args
        if (
            ctx.self_call(node) == "sow"
            and len(args) > 1
            and isinstance(args[0].value, cst.SimpleString)
            and isinstance(args[1].value, cst.SimpleString)
            and args[0].value.evaluated_value != collection
        ):
            names.add(args[1].value.evaluated_value)
    return names


def _sown_type(ctx: Any, collection: str) -> str:
    """The name of the file's ``nnx.Intermediate`` subclass for the custom collection ``collection``,
    chosen on first use."""
    ctx.state.sown_collections.add(collection)
    return file_variable_type(ctx.state, collection)
