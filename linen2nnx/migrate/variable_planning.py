"""Planning the variable sites of a class: ``self.param`` / ``self.variable`` calls.

Part of the *analyse* step, a base of :class:`~linen2nnx.migrate.site_planning.SitePlanner`: a
variable is created in ``__init__`` (a hoisted or ``setup()`` site on the plan) or, when Linen
creates it on the init call only (a call-time condition, a size read at call time, a decode cache),
on the first call (:mod:`~linen2nnx.migrate.lazy_vars`). Submodule sites are the planner's own.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from linen2nnx.migrate.cst_meta import calls_in, syntax_children
from linen2nnx.migrate.cst_utils import (
    NOT_LOCAL,
    assigned_in,
    assigned_names,
    attribute_for,
    code,
    comprehension_names,
    names_in,
    negated,
    only_shape_uses,
    self_attr,
    single_assign,
    snake_case,
)
from linen2nnx.migrate.custom_vars import file_variable_type
from linen2nnx.migrate.input_dtypes import give_dtype_argument, input_dtype_args
from linen2nnx.migrate.lazy_vars import LazyVar
from linen2nnx.migrate.loop_names import reserved
from linen2nnx.migrate.pytree_inits import pytree_init
from linen2nnx.migrate.rebound_locals import in_source_order
from linen2nnx.migrate.replayed_lines import shape_unpack
from linen2nnx.migrate.rules import API_002, MOD_004
from linen2nnx.migrate.side_effects import has_side_effects
from linen2nnx.migrate.sites import ClassPlan, Site, shape_last_refs
from linen2nnx.migrate.variable_args import canonical_variable_call, wrapped_field_keywords
from linen2nnx.migrate.variable_locals import variable_locals, with_locals
from linen2nnx.namemap import is_field_name


class VariablePlanning:
    """The variable part of the :class:`~linen2nnx.migrate.site_planning.SitePlanner` (a base class of
    it): reads the planner's ``ctx`` and ``state`` only."""

    def plan_lazy_variable(
        self, plan: ClassPlan, node: cst.Call, conditions: list[str] | None, local_names: set[str]
    ) -> bool:
        """``self.variable`` of a non-param collection that Linen creates on the init call (under a
        call-time condition, or sized by call-time values, or a decode cache): created on the first
        call in NNX too (see lazy_vars.py). True when planned so."""
        if self.ctx.self_call(node) != "variable":
            return False
        canonical = canonical_variable_call(self.with_known_locals(node, "variable"), "variable")
        if isinstance(canonical, str):
            return False
        args = list(canonical.args)
        if not all(isinstance(a.value, cst.SimpleString) for a in args[:2]):
            return False
        collection, name = args[0].value.evaluated_value, args[1].value.evaluated_value  # type: ignore[union-attr]
        call_time = any((names_in(a.value) - NOT_LOCAL) & local_names for a in args[2:])
        if collection == "params" or not (conditions is None or call_time or collection == "cache"):
            return False
        if call_time and conditions == [] and collection != "cache":
            return False  # batch stats sized by the input, built on every call: __init__ sizes them
        statement = self.ctx.statement_of(node)
        if not isinstance(statement, cst.SimpleStatementLine):
            return False
        attr = name if name.isidentifier() else snake_case(name)
        taken = (
            set(plan.field_names)
            | {s.attr for s in plan.sites.values()}
            | {v.attr for v in plan.lazy_vars.values()}
        )
        while attr in taken:
            attr += "_"
        self.state.handled.add(node)
        plan.lazy_vars[node] = LazyVar(
            collection, name, attr, self.variable_type(collection), statement, self._call_time_when(node)
        )
        return True

    def _pytree_param(self, call: cst.Call, name: str, args: list[cst.Arg]) -> bool:
        """``self.param('wb', two, ...)`` whose initializer returns several arrays: a finding (pytree_inits.py)."""
        init = args[1].value if len(args) > 1 else None
        returns = (
            pytree_init(self.state.tree, self.ctx.enclosing_function(call), init)
            if init is not None
            else None
        )
        if returns is not None:
            self.ctx.report(
                MOD_004,
                call,
                f"self.param({name!r}, ...): its initializer returns {returns} of arrays, which Linen stores "
                "as one parameter; an nnx.Param holds one array",
                "create one self.param per array",
            )
        return returns is not None

    def with_known_locals(self, call: cst.Call, kind: str | None) -> cst.Call:
        """``call`` with the locals of its method whose value at the call is known spelled out (see
        :mod:`~linen2nnx.migrate.variable_locals`); remembered for the emitter, which does the same to
        the rewritten call."""
        fn = self.ctx.enclosing_function(call)
        found = variable_locals(fn, call, self.ctx.parent_of) if fn is not None else {}
        if found:
            self.state.variable_locals[call] = found
        return with_locals(call, found, 1 if kind == "param" else 2)

    def variable_type(self, collection: str) -> str:
        """The expression of the NNX Variable type of a Linen collection: ``nnx.BatchStat``, or the
        file's own subclass for a custom collection (defined once per file, see custom_vars.py)."""
        return file_variable_type(self.state, collection)

    def _call_time_when(self, node: cst.CSTNode) -> str:
        """The ``if`` tests around ``node`` in its method, when they only read the method's parameters
        and config (``decode``, ``not self.deterministic``); "True" otherwise."""
        fn = self.ctx.enclosing_function(node)
        if fn is None:
            return "True"
        params = {p.name.value for p in (*fn.params.params, *fn.params.kwonly_params)} - {"self"}
        tests: list[str] = []
        prev, cur = node, self.ctx.parent_of(node)
        while cur is not None and cur is not fn:
            if isinstance(cur, cst.If):
                if (names_in(cur.test) - NOT_LOCAL - {"self"}) - params:
                    return "True"
                if prev is cur.body:
                    tests.insert(0, code(cur.test))
                elif prev is cur.orelse:
                    tests.insert(0, negated(code(cur.test)))
            prev, cur = cur, self.ctx.parent_of(cur)
        if not tests:
            return "True"
        return " and ".join(f"({t})" if len(tests) > 1 else t for t in tests)

    def add_variable_site(
        self,
        plan: ClassPlan,
        call: cst.Call,
        *,
        hoisted: bool,
        local_names: set[str],
        attr: str | None = None,
    ) -> Site | None:
        """``self.param(name, init, *args)`` / ``self.variable(col, name, init, *args)`` (keywords as
        :mod:`~linen2nnx.migrate.variable_args` puts them; ``site.args`` indexes that canonical form)."""
        kind = self.ctx.self_call(call)
        self.state.handled.add(call)  # reported here either way: no generic "Linen API" finding on top
        canonical = canonical_variable_call(
            self.with_known_locals(call, kind), "param" if kind == "param" else "variable"
        )
        args = [] if isinstance(canonical, str) else list(canonical.args)
        unconvertible = (
            canonical
            if isinstance(canonical, str)
            else wrapped_field_keywords(
                canonical,
                "param" if kind == "param" else "variable",
                {f.name: f.default for f in plan.fields},
            )
        )
        named = self._variable_names(call, kind, args, unconvertible, plan)
        if named is None:
            return None
        collection, name, var_type = named
        if is_field_name(name):
            attr = attr or self._field_named_attr(plan, call, name)
            if attr is None:
                return None
        dtype_args = input_dtype_args(self.ctx, plan, call, args, local_names) if hoisted else {}
        shape_refs = self._variable_shape_refs(call, kind, name, args, local_names, plan, set(dtype_args))
        if shape_refs is None:
            return None
        if collection == "cache" and hoisted:
            self.ctx.report(
                API_002, call, "a Linen decode cache created at call time", "use NNX's init_cache pattern"
            )
            return None
        attr = _clear_of_field_named(plan, name, _variable_attr(plan, name, attr))
        attr = _clear_of_modules(plan, _clear_of_other_collections(plan, collection, attr))
        site = Site(
            kind="param" if kind == "param" else "variable",
            attr=attr,
            linen_name=name,
            ctor=call,
            hoisted=hoisted,
            collection=collection,
            var_type=var_type,
            shape_refs=shape_refs,
        )
        site.args = {str(i): a for i, a in enumerate(args)}
        plan.sites[call] = site
        if hoisted:
            plan.hoisted_order.append(site)
        if dtype_args:
            give_dtype_argument(self.ctx, plan, site, dtype_args, args, f"self.{kind}({name!r}, ...)")
        return site

    def _variable_names(
        self,
        call: cst.Call,
        kind: str | None,
        args: list[cst.Arg],
        unconvertible: str | None,
        plan: ClassPlan,
    ) -> tuple[str, str, str] | None:
        """(collection, name, NNX Variable type) of a ``self.param`` / ``self.variable`` call (``args``:
        its canonical arguments); None, with a finding, when its arguments have no canonical form
        (``unconvertible`` says why) or its names are not literals. A variable named by a field of the
        class (``self.param(self.weight_name, ...)``) is named ``{weight_name}``: see
        :meth:`_field_named_attr`."""
        literal = [a.value for a in args[: 1 if kind == "param" else 2]]
        field = _field_name_of(literal[-1], plan) if literal and unconvertible is None else None
        if field is not None and all(isinstance(v, cst.SimpleString) for v in literal[:-1]):
            collection = "params" if kind == "param" else literal[0].evaluated_value  # type: ignore[union-attr]
            return collection, f"{{{field}}}", self.variable_type(collection)
        if unconvertible is None and not all(isinstance(v, cst.SimpleString) for v in literal):
            unconvertible = "non-literal names"
        if unconvertible is not None:
            splat = unconvertible.startswith("*args")
            self.ctx.report(
                API_002,
                call,
                f"self.{kind}(...) with {unconvertible}"
                + (
                    " whose value at the call is not known (a local bound once above the call to a string or a "
                    "tuple display would be read as its value)"
                    if splat
                    else ""
                ),
                "create the nnx.Variable in __init__: VariableType(init_fn(*init_args)), nnx.Param(init_fn("
                "rngs.params(), *init_args)) for a param (see docs/nnx_facts.md#variables-and-module-structure)",
            )
            return None
        collection = "params" if kind == "param" else literal[0].evaluated_value  # type: ignore[union-attr]
        name = literal[-1].evaluated_value  # type: ignore[union-attr]
        if kind == "param" and self._pytree_param(call, name, args):
            return None
        return collection, name, self.variable_type(collection)

    def _field_named_attr(self, plan: ClassPlan, call: cst.Call, name: str) -> str | None:
        """The NNX attribute of a variable named by a field (``w = self.param(self.weight_name, ...)``):
        the local it is assigned to. Its Linen name is the field's value, which differs per instance,
        so the name map records the pattern ``{weight_name}`` (any name below the class that nothing
        else claims); a class may have one such variable of a collection, else the names could not be
        told apart. None, with a finding, otherwise."""
        parent = self.ctx.parent_of(call)
        targets = parent.targets if isinstance(parent, cst.Assign) else ()
        target = targets[0].target if len(targets) == 1 else None
        others = [
            s
            for s in plan.sites.values()
            if s.kind in ("param", "variable") and is_field_name(s.linen_name) and s.ctor is not call
        ]
        collection = "params" if self.ctx.self_call(call) == "param" else None
        if isinstance(target, cst.Name) and not any(collection in (None, s.collection) for s in others):
            return _variable_attr(plan, target.value, None)
        self.ctx.report(
            API_002,
            call,
            f"self.{self.ctx.self_call(call)}(...) named by the field {name[1:-1]}, "
            + ("with another variable named by a field" if others else "not assigned to a local"),
            "create the nnx.Variable in __init__ under an attribute of its own and map its Linen name by hand",
        )
        return None

    def _variable_shape_refs(
        self,
        call: cst.Call,
        kind: str | None,
        name: str,
        args: list[cst.Arg],
        local_names: set[str],
        plan: ClassPlan | None = None,
        dtype_args: set[int] = frozenset(),  # type: ignore[assignment]
    ) -> dict[str, list[str]] | None:
        """The arguments of ``self.param`` / ``self.variable`` that read a call-time value's
        ``x.shape[-1]`` (the dataflow sizes them); None, with a finding, when one reads another
        call-time value. Other axes of the input's shape (``x.shape[3]``) give the class the input's
        shape as a constructor argument, as a local reading them does (local_planning.py)."""
        shape_refs: dict[str, list[str]] = {}
        for i, a in enumerate(args):
            if i in dtype_args:
                continue  # the input's dtype: a constructor argument (input_dtypes.py)
            uses = (names_in(a.value) - NOT_LOCAL) & local_names
            refs = shape_last_refs(a.value, uses) if uses else None
            if (
                uses
                and refs is None
                and plan is not None
                and (
                    self._input_shape_arg(plan, call, a.value, uses)
                    or unpacked_input_shape(self.ctx, plan, call, a.value, uses)
                )
            ):
                continue
            if uses and refs is None:
                self.ctx.report(
                    MOD_004,
                    call,
                    f"self.{kind}({name!r}, ...) uses the call-time value "
                    f"{', '.join(sorted(uses))} and cannot move to __init__",
                    "derive its shape from constructor arguments, or use --trace",
                )
                return None
            if refs:
                shape_refs[str(i)] = refs  # (x.shape[-1], features): the dataflow knows x's size
        return shape_refs

    def _input_shape_arg(
        self, plan: ClassPlan, call: cst.Call, value: cst.BaseExpression, uses: set[str]
    ) -> bool:
        """``value`` reads only the shape of the compact method's input, unchanged until ``call``'s line:
        ``__init__`` computes it on a stand-in of the shape the class gains as an argument."""
        fn = self.ctx.enclosing_function(call)
        if not stands_for_first_input(self.ctx, fn, plan):
            return False
        first = fn.params.params[1].name.value
        if uses != {first} or not only_shape_uses(value, first) or plan.shape_input not in ("", first):
            return False
        top: Any = call
        while top is not None and self.ctx.parent_of(top) is not fn.body:
            top = self.ctx.parent_of(top)
        if top is None or self.has_side_effects(value):  # type: ignore[attr-defined]
            return False
        if not isinstance(top, cst.SimpleStatementLine) and first in assigned_in(top):
            return False  # rebound on the way inside the block
        if not shape_kept_until(self.ctx, fn, top, first):
            return False
        plan.shape_input = first
        plan.input_shape_params.append(call)
        return True


def unpacked_input_shape(
    ctx: Any, plan: ClassPlan, call: cst.Call, value: cst.BaseExpression, uses: set[str]
) -> bool:
    """``value`` reads only names of ``n, l, d = x.shape`` lines of the compact method's input, unchanged
    until there: ``__init__`` replays those lines whole on a stand-in of the shape the class gains as an
    argument (``(1, l, d)`` of a position embedding), as it does ``l = x.shape[1]``. The line's last name
    then reads the stand-in too, not the dataflow's size. (``x.shape`` read at the call is
    :meth:`_input_shape_arg`'s: ``x`` may be rebound by then.)"""
    fn = ctx.enclosing_function(call)
    if not stands_for_first_input(ctx, fn, plan):
        return False
    first = fn.params.params[1].name.value
    if plan.shape_input not in ("", first) or not uses or first in uses:
        return False
    counts = assigned_names(fn)
    lines: dict[str, cst.BaseStatement] = {}
    for stmt in fn.body.body:
        unpack = shape_unpack(stmt)
        if unpack is not None and unpack[1] == first:
            lines.update({n: stmt for n in unpack[0] if counts.get(n) == 1})
    top: Any = call
    while top is not None and ctx.parent_of(top) is not fn.body:
        top = ctx.parent_of(top)
    derived = _derived_locals(ctx, plan, fn, uses, lines, counts, top)
    if derived is None:
        return False
    unpacked = {n for n in lines if any(n in names_in(s) for s in derived.values())} | (uses & set(lines))
    if not unpacked or not all(shape_kept_until(ctx, fn, lines[n], first) for n in unpacked):
        return False
    for stmt in {id(lines[n]): lines[n] for n in unpacked}.values():
        for name in (n for n, s in lines.items() if s is stmt):
            plan.pure_locals[name] = stmt
            plan.input_shape_locals.add(name)
            plan.shape_locals.pop(name, None)
    plan.pure_locals.update(derived)
    plan.pure_locals = in_source_order(plan.pure_locals, fn)
    plan.shape_input = first
    return True


def _derived_locals(
    ctx: Any,
    plan: ClassPlan,
    fn: cst.FunctionDef,
    uses: set[str],
    lines: dict[str, cst.BaseStatement],
    counts: dict[str, int],
    site: cst.CSTNode | None,
) -> dict[str, cst.BaseStatement] | None:
    """The top-level ``name = value`` lines that the names of ``uses`` outside the ``n, h, w, c = x.shape``
    unpackings (``lines``) are bound by, and the lines those read in turn (``shape = (1, 1, w, c)``): each
    name bound once in the method, by that line only, whose value reads only unpacked names, locals
    ``__init__`` already replays, each other and globals, and has no side effects. None when a name is
    bound otherwise, after the statement of the variable (``site``), or reads anything else (the input
    itself included)."""
    top = {}
    for stmt in fn.body.body:
        if stmt is site:
            break
        assign = single_assign(stmt)
        if assign is not None:
            top[assign[0]] = (stmt, assign[1])
    first = fn.params.params[1].name.value
    found: dict[str, cst.BaseStatement] = {}
    todo = [n for n in uses if n not in lines]
    while todo:
        name = todo.pop()
        if name in found or name in lines or name in plan.pure_locals:
            continue
        if counts.get(name) != 1 or name not in top or name in plan.mode_partials:
            return None
        stmt, value = top[name]
        reads = (names_in(value) - NOT_LOCAL - comprehension_names(value)) & set(counts)
        if first in reads or has_side_effects(ctx, value, plan.field_names):
            return None
        found[name] = stmt
        todo.extend(reads)
    return found


def stands_for_first_input(ctx: Any, fn: cst.FunctionDef | None, plan: ClassPlan) -> bool:
    """``fn`` is the class's compact method, and its first parameter the input a caller's ``x_shape``
    describes: ``__call__``'s own, or a compact ``body(self, u)`` that only ``__call__`` calls, with its
    input unchanged (``self.body(x)``); one called with what ``__call__`` made of it is not."""
    if fn is None or fn is not plan.compact or len(fn.params.params) < 2:
        return False
    if fn.name.value == "__call__":
        return True
    methods = ctx.state.methods.get(plan.name, [])
    call = next((m for m in methods if m.name.value == "__call__"), None)
    if call is None or len(call.params.params) < 2:
        return False
    first = call.params.params[1].name.value
    uses = [(m, c) for m in methods for c in calls_in(m.body) if self_attr(c.func) == fn.name.value]
    return (
        bool(uses)
        and first not in assigned_in(call.body)
        and all(
            m is call and c.args and c.args[0].keyword is None and code(c.args[0].value) == first
            for m, c in uses
        )
    )


def shape_kept_until(ctx: Any, fn: cst.FunctionDef, stop: cst.BaseStatement, name: str) -> bool:
    """Every rebinding of ``name`` before ``stop`` keeps its shape (``x = jnp.asarray(x, dtype)``,
    ``x = x.astype(...)``), so ``x.shape`` there is the input's shape."""
    for stmt in fn.body.body:
        if stmt is stop:  # a rebinding inside the statement that holds the use may come before it
            return not _binds_elsewhere(stmt, name) and (
                isinstance(stmt, cst.SimpleStatementLine) or name not in assigned_in(stmt)
            )
        if not isinstance(stmt, cst.SimpleStatementLine):
            if name in assigned_in(stmt) or _binds_elsewhere(stmt, name):
                return False
            continue
        for small in stmt.body:
            if _binds_elsewhere(small, name):
                return False
            if isinstance(small, cst.Assign) and name in assigned_in(small):
                value = small.value
                keeps = isinstance(value, cst.Call) and (
                    (
                        ctx.qualnames(value.func) & {"jax.numpy.asarray", "jax.numpy.array", "numpy.asarray"}
                        and value.args
                        and code(value.args[0].value) == name
                    )
                    or (
                        isinstance(value.func, cst.Attribute)
                        and value.func.attr.value == "astype"
                        and code(value.func.value) == name
                    )
                )
                if not keeps or len(small.targets) != 1:
                    return False
            elif isinstance(small, (cst.AugAssign, cst.AnnAssign)) and name in assigned_in(small):
                return False
    return True


def _binds_elsewhere(node: cst.CSTNode, name: str) -> bool:
    """``name`` is bound under ``node`` other than by an assignment statement or a loop: by a walrus
    (``(x := x.T)``) or an ``as`` (``with ... as x``, ``except ... as x``)."""
    stack = [node]
    while stack:
        cur = stack.pop()
        if isinstance(cur, cst.NamedExpr) and name in names_in(cur.target):
            return True
        if isinstance(cur, cst.AsName) and name in names_in(cur.name):
            return True
        stack.extend(syntax_children(cur))
    return False


def _clear_of_field_named(plan: ClassPlan, name: str, attr: str) -> str:
    """``attr``, with ``_`` added while a variable site of another name already has it where one of
    the two is named by a field (``w = self.param(self.weight_name, ...)`` then ``self.param('w', ...)``:
    two variables, two attributes)."""
    taken = {
        s.attr
        for s in plan.sites.values()
        if s.kind in ("param", "variable")
        and s.linen_name != name
        and (is_field_name(s.linen_name) or is_field_name(name))
    }
    while attr in taken:
        attr += "_"
    return attr


MODULES = ("layer", "module")  # the kinds of site that hold a child, not a variable


def _clear_of_modules(plan: ClassPlan, attr: str) -> str:
    """``attr``, with ``_`` added while a child of the class holds it (``self.param('dense_0')`` beside
    ``Dense_0``'s ``dense_0``) or it is :func:`reserved` (``self.param('norm')`` beside ``def norm``)."""
    while reserved(plan, attr) or any(s.attr == attr and s.kind in MODULES for s in plan.sites.values()):
        attr += "_"
    return attr


def _clear_of_other_collections(plan: ClassPlan, collection: str, attr: str) -> str:
    """``attr``, or ``<attr>_<collection>`` when a variable of another collection already has it
    (``self.param('w', ...)`` and ``self.variable('ema', 'w', ...)``: two variables, two attributes)."""
    taken = {
        s.attr for s in plan.sites.values() if s.kind in ("param", "variable") and s.collection != collection
    } | {v.attr for v in plan.lazy_vars.values() if v.collection != collection}
    if attr not in taken:
        return attr
    attr = f"{attr}_{snake_case(collection)}"
    while attr in taken:
        attr += "_"
    return attr


def _field_name_of(value: cst.BaseExpression, plan: ClassPlan) -> str | None:
    """``weight_name`` of ``self.weight_name`` when it is a field of the class."""
    field = self_attr(value)
    return field if field in plan.field_names else None


def _variable_attr(plan: ClassPlan, name: str, attr: str | None) -> str:
    """The NNX attribute of variable ``name``: ``attr`` where setup() assigns it (kept too when the class
    declares it as a field it does not take, ``embedding: Array = field(init=False)``), else the name;
    one that is a field of the class gets a ``_``."""
    declared = {f.name for f in plan.fields if not f.init}
    if attr is not None and attr in declared:
        return attr
    attr = attr or attribute_for(name, "param")  # `self.param('w-1')`: w_1
    return f"{attr}_" if attr in plan.field_names else attr
