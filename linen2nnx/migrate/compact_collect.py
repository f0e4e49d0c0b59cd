"""Walking an ``@nn.compact`` method: which calls build submodules or variables, and where.

:class:`CompactCollector` is the read-only walk behind ``ClassPlanner._plan_compact``. It tracks the
constructs a submodule cannot be hoisted out of (``while``, comprehensions, lambdas, loops over
call-time values) and the loop nests a replayed ``for`` expresses, and hands each constructor call
to the planner, which records a :class:`~linen2nnx.migrate.sites.Site` on the plan.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import libcst as cst
import libcst.matchers as m

from linen2nnx.layers import LayerRule
from linen2nnx.migrate.auto_name_counts import (
    Record,
    exclusive_branch,
    moved_off_record,
    stable_tests,
    static_count,
)
from linen2nnx.migrate.call_time_builds import built_for_optional_input, built_in_trace
from linen2nnx.migrate.cst_meta import FastVisitor
from linen2nnx.migrate.cst_utils import (
    NOT_LOCAL,
    code,
    keyword_arg,
    names_in,
    negated,
    rebound_names,
)
from linen2nnx.migrate.factories import call_site_ctor
from linen2nnx.migrate.factory_fields import FieldFactory
from linen2nnx.migrate.function_factories import FunctionFactory
from linen2nnx.migrate.guard_conditions import Guard, creation_context, early_return, guards
from linen2nnx.migrate.loop_tests import nest_conditions, tested_in_loop
from linen2nnx.migrate.nest_runs import in_inner_loop
from linen2nnx.migrate.rules import MOD_004
from linen2nnx.migrate.sites import ClassPlan, LoopInfo, Site, jumps_in, loop_name_prefix

if TYPE_CHECKING:
    from linen2nnx.migrate.site_planning import SitePlanner


class Built(NamedTuple):
    """What a constructor call in ``@nn.compact`` builds."""

    factory: Any  # what it is built through (a partial local, a factory field, a factory method), or None
    target: cst.Call  # the constructor call itself
    rule: LayerRule | None  # a built-in layer
    user: ClassPlan | None  # a Linen class of the run
    variable: bool  # self.param / self.variable
    what: str  # how findings name it


class _Branches:
    """An ``if`` with an ``else`` (or an early return) being walked: the auto-name counts before it and
    after its body."""

    def __init__(
        self, node: cst.If, outer: list[str] | None, before: dict[str, int | None], guard: Guard | None
    ) -> None:
        self.node, self.outer, self.before, self.guard = node, outer, before, guard
        self.records_at: dict[str, int] = {}  # class -> how many of its auto-named ones came before
        self.after_body: dict[str, int | None] | None = None


def same_name_sites(plan: ClassPlan) -> list[Site]:
    """Hoisted modules after the first of a Linen name with another attribute: the name map can hold
    one of them only (a guard: the walk lets only complementary branches share a name)."""
    first: dict[str, str] = {}
    found = []
    for site in plan.hoisted_order:
        if site.container is not None or site.kind not in ("layer", "module") or not site.linen_name:
            continue
        if first.setdefault(site.linen_name, site.attr) != site.attr:
            found.append(site)
    return found


class CompactCollector(FastVisitor):
    """Plans the submodules and variables one ``@nn.compact`` method creates."""

    def __init__(
        self,
        planner: SitePlanner,
        plan: ClassPlan,
        fn: cst.FunctionDef,
        counts: dict[str, int],
        local_names: set[str],
        partials: dict[str, Any],
        counters: dict[str, int | None],
    ) -> None:
        self.planner = planner
        self.ctx = planner.ctx
        self.state = planner.state
        self.plan = plan  # the class being planned
        self.fn = fn  # the compact method
        self.counts = counts  # local name -> how many times the method assigns it
        self.local_names = local_names  # its locals that hold call-time values where the walk is
        self.all_local_names = local_names  # its locals that __init__ does not replay everywhere
        self.partials = partials  # `dense = partial(nn.Dense, ...)` locals built at each use
        self.counters = counters  # Linen auto-name counters (`Dense_0`, `Dense_1`, ...)
        self.blocked = 0  # inside a construct we cannot hoist out of
        self.jump_flags: list[bool] = []  # per blocked `for`: whether it has break / continue
        self.loops: list[LoopInfo] = []
        self.nest: list[tuple[set[str], dict[str, cst.SimpleStatementLine]]] = []  # per enclosing `for`
        self.branch_conditions: dict[str, list[Record]] = {}  # class -> its auto-named ones
        self.reset_ifs: set[cst.If] = set()  # whose branches the walk counts from the counts before them
        self.branches: list[_Branches] = []  # per enclosing `if` with an `else`
        self.off_record: set[str] = set()  # classes counted beside their records (moved_off_record)

    def _block(self, node: cst.CSTNode) -> bool:
        self.blocked += 1
        return True

    def _unblock(self, node: cst.CSTNode) -> None:
        self.blocked -= 1

    visit_While = visit_ListComp = visit_GeneratorExp = visit_Lambda = visit_DictComp = _block
    leave_While = leave_ListComp = leave_GeneratorExp = leave_Lambda = leave_DictComp = _unblock

    def _read_at(self, node: cst.CSTNode) -> None:
        """``local_names`` where ``node`` reads them: a local the method rebinds at call time later is
        static before that (see static_locals.py)."""
        if self.plan.static_flow is not None:
            self.local_names = self.plan.static_flow.call_time_at(
                node, self.all_local_names, self.ctx.parent_of
            )

    def visit_If(self, node: cst.If) -> bool:
        """An ``if`` on config with an ``else``: each branch counts auto-names from the counts before the
        ``if``, as Linen does (only one branch runs). After an early return (guard_conditions.py), the
        code that goes on counts from the branch that did not return."""
        guard = early_return(node)
        if (isinstance(node.orelse, cst.Else) or guard) and not self.blocked and not self.loops:
            outer = self.planner.conditions_of(node, self.fn, self.local_names)
            self.branches.append(_Branches(node, outer, dict(self.counters), guard))
            self.branches[-1].records_at = {k: len(v) for k, v in self.branch_conditions.items()}
            self.reset_ifs.add(node)
        return True

    def visit_Else(self, node: cst.Else) -> bool:
        top = self.branches[-1] if self.branches else None
        if top is not None and top.node.orelse is node:
            top.after_body = dict(self.counters)
            self.counters.clear()
            self.counters.update(top.before)
        return True

    def leave_If(self, node: cst.If) -> None:
        """Where both branches built the same number of a class, the count after the ``if`` is known
        either way: the class's auto-named modules of the branches stop making later names depend on
        the condition (:meth:`_name_depends_on_branch`)."""
        top = self.branches[-1] if self.branches else None
        if top is None or top.node is not node:
            return
        self.branches.pop()
        after_body, after_else = top.after_body or {}, dict(self.counters)
        if top.guard is not None:  # one branch returned: the other's counts go on
            going = after_body if top.guard.holds else after_else if top.node.orelse else top.before
            self.counters.clear()
            self.counters.update(going)
            return
        for name in set(after_body) | set(after_else):
            body_n, else_n = after_body.get(name, 0), after_else.get(name, 0)
            if body_n != else_n:  # a later one is named by the branch that ran: its records stay
                self.counters[name] = None if body_n is None or else_n is None else max(body_n, else_n)
                continue
            if top.outer is None or name not in self.branch_conditions:
                continue
            # each branch's ones under its test alone are that many under the outer tests (static_count)
            depth, deciding = len(top.outer), self._deciding(top.node, top.outer)
            records, start = self.branch_conditions[name], top.records_at.get(name, 0)
            deeper = [
                r for r in records[start:] if r.conditions[:depth] == top.outer and len(r.conditions) > depth
            ]
            built = (body_n or 0) - (top.before.get(name) or 0)
            if len(deeper) != 2 * built or any(len(r.conditions) != depth + 1 for r in deeper):
                continue
            kept = [r for r in records[start:] if r not in deeper]
            self.branch_conditions[name] = [*records[:start], *kept, *[Record(top.outer, deciding)] * built]

    def visit_For(self, node: cst.For) -> bool:
        self._read_at(node)
        loop = None if self._over_mapping(node.iter) else range_loop(node, self.local_names)
        outer = set().union(*(names for names, _ in self.nest))
        jumps = jumps_in(node)
        nestable = (
            None
            if self.blocked or jumps
            else self.planner.nest_loop(node, self.local_names - outer, self.counts, self.plan)
        )
        if nestable is None:
            self.blocked += 1
            self.jump_flags.append(jumps)
            self.loops.append(LoopInfo("", ""))
        else:
            self.loops.append(loop if loop is not None and not self.loops else LoopInfo("", "", node=node))
            self.nest.append(nestable)
        return True

    def _over_mapping(self, it: cst.BaseExpression) -> bool:
        """``for k in self.dims`` over a field that holds a dict (its annotation or default says so): its
        keys are no list index, and ``self.dims[i]`` in ``__init__`` would look up a key."""
        field = next((f for f in self.plan.fields if code(it) == f"self.{f.name}"), None)
        text = f"{field.annotation} {field.default or ''}" if field is not None else ""
        return any(word in text for word in ("dict", "Dict", "Mapping", "{"))

    def leave_For(self, node: cst.For) -> None:
        loop = self.loops.pop()
        if loop.node is None:
            self.blocked -= 1
            self.jump_flags.pop()
        else:
            self.nest.pop()

    def nest_site(self, node: cst.Call, args: list[cst.BaseExpression], stateless: bool = False) -> bool:
        """Built inside loops that only a replayed nest expresses (see sites.LoopNest)? Not for a test of
        the loop's names around a ``stateless`` module: built every iteration, it holds nothing."""
        if not self.loops:
            return False
        if len(self.loops) > 1 or not self.loops[0].var:
            return True
        nest = self.plan.nests.get(self.loops[0].node)
        if nest is not None and any(in_inner_loop(nest, site, self.ctx.parent_of) for site in nest.sites):
            return True  # after an inner loop's modules (a norm after each stage): built between them
        body_locals = set().union(*(stmts for _, stmts in self.nest))
        if not stateless and tested_in_loop(node, self.loops[0].node, self.nest, self.ctx.parent_of):
            return True  # `if i < self.n - 1: nn.LayerNorm()(x)` (loop_tests.py)
        return any(names_in(a) & body_locals for a in args)  # `for i in range(n): f = 2 * i`

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node is self.fn

    def visit_Call(self, node: cst.Call) -> None:
        self._read_at(node)
        found = self._constructor(node)
        built = self._built(node, *found) if found is not None else None
        if built is None:
            return
        plan, ctx, what = self.plan, self.ctx, built.what
        if self.blocked:
            ctx.report(
                MOD_004,
                node,
                f"{what} created inside a loop with break / continue / return in @nn.compact (Linen builds "
                "it on some iterations only) is not hoisted yet"
                if any(self.jump_flags)
                else f"{what} created inside a while loop, comprehension, lambda "
                "or loop over call-time values in @nn.compact is not hoisted yet",
                "create it in __init__ (an nnx.List for several) and index it at the call",
            )
            self._uncount(built)
            return
        stateless = built.rule is not None and built.rule.no_variables
        in_nest = self.nest_site(node, [a.value for a in (*built.target.args, *node.args)], stateless)
        loop = None if in_nest else self.loops[-1] if self.loops else None
        skipped = frozenset({loop.var, loop.index} - {""}) if loop and stateless else frozenset()
        args = (self.fn, self.local_names, None if built.variable else plan)
        conditions = (  # a nest's own `if`s are replayed with it (loop_tests.py)
            nest_conditions(self.planner, node, self.loops[0].node, *args, self.nest)
            if in_nest and self.loops[0].node is not None
            else self.planner.conditions_of(node, *args, skipped)
        )
        if built.variable and self.planner.plan_lazy_variable(plan, node, conditions, self.local_names):
            return
        if conditions is None and not in_nest and loop is None and built_in_trace(self, node, built):
            conditions = []  # built always, as the traced call built it; still used under its condition
        if conditions is None and not in_nest and loop is None and self._holds_nothing(built):
            # built whatever the call-time tests say: holding nothing, it adds no weight (stateless_classes.py)
            conditions = self.planner.conditions_of(node, self.fn, self.local_names, plan, stateless=True)
        naming = conditions  # the tests Linen builds it under, for the auto-name checks
        if conditions is None and not in_nest and loop is None and not built.variable:
            naming, conditions = built_for_optional_input(self, node, built)
        if conditions is None:
            self.state.handled.add(node)  # this finding says it all
            ctx.report(
                MOD_004,
                node,
                f"{what} is created under a condition on a call-time value",
                "create it in __init__ and decide at call time whether to use it",
            )
            return
        if loop is None and not in_nest and self._name_depends_on_branch(node, built, naming):
            return
        if loop is not None and not in_nest and not self._counted_before_loop(node, built, conditions, loop):
            return
        if not self._created_in_context(node, what):
            before = dict(self.counters)
            self._plan_site(node, built, in_nest, loop, conditions)
            counted = not (loop or in_nest or built.variable) and (built.rule or built.user)
            self.off_record |= moved_off_record(
                before, self.counters, self.class_name(built) if counted else None
            )

    def _created_in_context(self, node: cst.Call, what: str) -> bool:
        """``node`` is created inside a ``with`` whose effect on its creation ``__init__`` would not have
        (``initialize_param_with_dtype(...)``: guard_conditions.creation_context): reported."""
        context = creation_context(node, self.fn, self.ctx.parent_of, self.ctx.qualnames)
        if context is None:
            return False
        self.state.handled.add(node)
        self.ctx.report(
            MOD_004,
            node,
            f"{what} is created inside `with {' '.join(context.split())}`, whose effect on its creation "
            "(a dtype, a sharding, names) __init__ would not have",
            "create it in __init__ under the same context, or give its effect as constructor arguments",
        )
        return True

    def _counted_before_loop(
        self, node: cst.Call, built: Built, conditions: list[str], loop: LoopInfo
    ) -> bool:
        """A loop's auto-named module after others of its class: Linen numbers the loop's modules on
        from how many ran before it, a static count only when each of those ran whenever the loop runs
        (built under a prefix of the loop's conditions, each counted once). Otherwise a finding (False):
        the loop's names depend on a condition (flaxmodels' ``MappingNetwork``: a label layer built only
        when ``c_dim_ > 0``, then ``fc{i}`` layers), or the loop's first names are those of modules a
        branch that returns built (``if not self.widths: return nn.Dense(2)(x)``: ``Dense_0`` either way,
        which one name map entry cannot tell apart)."""
        if built.variable or built.factory is not None or keyword_arg(built.target, "name") is not None:
            return True
        if built.rule is None and built.user is None:
            return True
        name = self.class_name(built)
        n = self.counters.get(name, 0)
        earlier = self.branch_conditions.get(name, [])
        if n is None or (not n and not earlier):
            return True  # none before, or after a loop (the planner's finding)
        if n and len(earlier) == n and all(r.conditions == conditions[: len(r.conditions)] for r in earlier):
            return True
        # the loop's list starts with them (loop_chains.py), each counted where NNX builds it as Linen
        prefix = self.planner.conditional_prefix(self.plan, name, loop, conditions, n, self.local_names)
        if (
            prefix
            and len(earlier) == n
            and all(r.conditions == s.conditions for r, s in zip(earlier, prefix))
        ):
            return True  # does (not one NNX builds always but Linen only when an optional input is given)
        self.state.handled.add(built.target.func)  # this finding says it all
        self.ctx.report(
            MOD_004,
            node,
            f"auto-named {built.what} built in a loop after other {name}s built under other "
            "conditions: Linen counts only the modules that ran, so the loop's names depend on them",
            "give the loop's modules name=f'prefix_{i}'",
        )
        self._uncount(built)
        return False

    def _deciding(self, node: cst.CSTNode, conditions: list[str]) -> cst.If | None:
        """The ``if`` the walk counted both branches of from one start that gives the last of
        ``conditions`` around ``node`` (an early return's, or a branch's), else None."""
        for guard in guards(node, self.fn, self.ctx.parent_of) if conditions else ():
            test = code(guard.node.test)
            if conditions[-1] in (test, negated(test)):
                return guard.node if guard.node in self.reset_ifs else None  # type: ignore[return-value]
        return None

    def _name_depends_on_branch(self, node: cst.Call, built: Built, conditions: list[str]) -> bool:
        """An auto-named module after one of its class built only under a condition this one is not
        under (the other branch of an ``if``, or after an ``if`` that built one): Linen counts only the
        modules that ran, so its name depends on the condition; a finding (True) instead of a static
        name that holds for one config only. Records the conditions of each auto-named one."""
        if built.variable or keyword_arg(built.target, "name") is not None:
            return False
        if built.rule is None and built.user is None:
            return False
        name = self.class_name(built)
        if self.counters.get(name, 0) is None:
            return False  # after a loop of its class: that finding says it already
        earlier = self.branch_conditions.setdefault(name, [])
        deciding = self._deciding(node, conditions)
        other = next(
            (
                r
                for r in earlier
                if r.conditions != conditions[: len(r.conditions)]
                and not exclusive_branch(r, conditions, deciding)
            ),
            None,
        )
        if other is not None and name not in self.off_record:  # one count wherever it runs?
            n = static_count([r.conditions for r in earlier], conditions, stable_tests(self.counts))
            if n is not None:  # Linen's count before it, one number wherever it runs
                other, self.counters[name] = None, n
        if other is None:
            earlier.append(Record(list(conditions), deciding))
            return False
        self.ctx.report(
            MOD_004,
            node,
            f"auto-named {built.what} after a {name} built only when {' and '.join(other.conditions)}: "
            "Linen counts only the modules that ran, so its name depends on that condition",
            "give the modules explicit name= (one attribute each), or build both in __init__",
        )
        return True  # every later auto-named one of the class is a finding too (the record stays)

    @staticmethod
    def _holds_nothing(built: Built) -> bool:
        """A built-in layer or a class of the run that holds no variable, whatever its config."""
        if built.variable or built.factory is not None:
            return False
        return (
            built.rule.no_variables
            if built.rule is not None
            else bool(built.user and built.user.holds_nothing)
        )

    def _uncount(self, built: Built) -> None:
        """An auto-named module left where it is, in a loop or a construct Linen may run any number of
        times: how many of its class Linen has built is unknown from here on, so a later auto-named
        one of the class is a finding rather than ``Block_0`` again."""
        if built.variable or (built.rule is None and built.user is None):
            return
        if keyword_arg(built.target, "name") is not None:
            return  # an explicit name consumes no counter
        self.counters[self.class_name(built)] = None

    def class_name(self, built: Built) -> str:
        """The name Linen counts ``built``'s auto-names by (a lifted class's included)."""
        name = built.rule.auto_name if built.rule else built.user.name  # type: ignore[union-attr]
        return self.ctx.linen_class_name(built.target.func, name)

    def _built(self, node: cst.Call, factory: Any, target: cst.Call) -> Built | None:
        """What the constructor call ``node`` builds; None when it is neither a layer, a class of the run
        nor a variable (an unknown submodule is flagged)."""
        ctx = self.ctx
        rule = ctx.layer_rule_of(target.func)
        user = None if rule is not None else ctx.user_class_of(target.func)
        if user is None and isinstance(factory, FieldFactory) and factory.classes:
            user = self.state.linen_classes.get(factory.classes[0])  # `Block` of a kept `BlockLinen`
        variable = factory is None and ctx.self_call(node) in ("param", "variable")
        if rule is None and user is None and not variable:
            if not (
                isinstance(node.func, cst.Call)
                and isinstance(node.func.func, cst.Name)
                and node.func.func.value in self.partials
            ):  # `dense(...)(x)`: planned at `dense(...)`
                self.planner.flag_unknown_submodule(node, self.plan)
            return None
        what = f"nn.{rule.linen}" if rule else (user.name if user else f"self.{ctx.self_call(node)}")
        return Built(factory, target, rule, user, variable, what)

    def _plan_site(
        self, node: cst.Call, built: Built, in_nest: bool, loop: LoopInfo | None, conditions: list[str]
    ) -> None:
        """Hoist what ``node`` builds into ``__init__`` (built under ``conditions``), or say why not."""
        plan, ctx, what = self.plan, self.ctx, built.what
        lifted = None if built.variable else ctx.check_lifted(built.target, at=node)
        if lifted is False:
            return
        before = len(plan.hoisted_order)
        if in_nest and (built.variable or lifted is not None or self.planner.nesting(plan, node) is not None):
            ctx.report(
                MOD_004,
                node,
                f"{what} inside nested loops (or a loop body with locals) is not hoisted yet",
                "create it in __init__ (an nnx.List for several)",
            )
            return
        if built.variable:
            if loop is not None:
                ctx.report(
                    MOD_004,
                    node,
                    f"{what} inside a loop is not hoisted yet",
                    "create the variables in __init__",
                )
                return
            self.planner.add_variable_site(plan, node, hoisted=True, local_names=self.local_names)
        elif not self._plan_submodule(
            node, built.target, built.factory, built.rule, built.user, in_nest, loop, conditions
        ):
            return
        for site in plan.hoisted_order[before:]:
            site.conditions = conditions

    def _constructor(self, node: cst.Call) -> tuple[Any, cst.Call] | None:
        """(the factory, the constructor call) ``node`` builds through: written here (no factory), returned
        by a factory method, or built by a partial local or a module-factory field; None once reported."""
        ctx, plan = self.ctx, self.plan
        factory: Any = plan.factories.get(ctx.self_call(node) or "")
        if factory is None and isinstance(node.func, cst.Name):
            factory = self.partials.get(node.func.value)  # `dense = partial(nn.Dense, ...)`; `dense(...)(x)`
        if factory is None and ctx.self_call(node) is not None and self.planner.applied(node):
            factory = ctx.field_factory(plan, ctx.self_call(node))  # `self.conv(...)(x)`
        if factory is None and self.planner.applied(node):
            factory = ctx.function_factory_of(node.func)  # `ops.linear(...)(x)`: a module-level factory
        if factory is None:
            return None, node
        target = call_site_ctor(factory, node)
        if target is not None and isinstance(factory, FunctionFactory):
            self.state.factory_layers[target.func] = factory.rule  # its callee was parsed from text
        if target is None:
            shown = code(node.func) if isinstance(factory, FunctionFactory) else f"self.{factory.name}"
            ctx.report(
                MOD_004,
                node,
                f"{shown}(...) arguments do not bind to its parameters",
                "call it with its parameters, or build the layer by hand",
            )
            return None
        return factory, target

    def _plan_submodule(
        self,
        node: cst.Call,
        target: cst.Call,
        factory: Any,
        rule: LayerRule | None,
        user: ClassPlan | None,
        in_nest: bool,
        loop: LoopInfo | None,
        conditions: Any,
    ) -> bool:
        """Plan a submodule ``node`` builds; False when it was planned as a nested layer (whose sites
        keep their own conditions)."""
        plan, planner = self.plan, self.planner
        nesting = planner.nesting(plan, node) if factory is None else None
        if nesting is not None:
            planner.plan_nested(plan, node, rule, nesting, self.counters, user)
            return False
        handled = target.func in self.state.handled
        if in_nest:
            planner.plan_nest_child(
                plan,
                target,
                node,
                rule,
                user,
                factory,
                self.nest,
                self.counters,
                self.local_names,
                conditions,
            )
        else:
            planner.plan_compact_child(
                plan, target, rule, user, loop, self.counters, self.local_names, conditions, factory, node
            )
        if isinstance(factory, FieldFactory):
            if not handled:
                self.state.handled.discard(target.func)  # the field's default / a binding
            if factory.rule is not None:  # `nn.Conv` bound to it becomes `nnx.Conv` where written
                self.state.binding_values.update(dict.fromkeys(factory.values, (factory.rule, plan)))
        if factory is not None and plan.sites.get(target) is not None:
            site = plan.sites.pop(target)  # keyed by the call of the helper, which is what the
            site.ctor, site.factory = node, factory  # rewrite meets; built from the helper later
            plan.sites[node] = site
        return True


def range_loop(node: cst.For, local_names: set[str]) -> LoopInfo | None:
    """``for i in range(<config expr>)``, ``for i in range(<start>, <stop>)``, ``for v in <config
    sequence>`` or ``for i, v in enumerate(<config sequence>)`` -> LoopInfo; else None."""
    it = node.iter
    if names_in(node.target) & rebound_names(node.body):
        return None  # `for w in self.widths: w = w * 2`: the body's value, not the element, is read
    counted = _enumerated(node, local_names)
    if counted is not None:  # `i` counts the elements from 0: the index a rewritten loop would add
        return LoopInfo(counted[1], code(counted[2]), index=counted[0], node=node)
    if not isinstance(node.target, cst.Name) or (names_in(it) - {"range"} - NOT_LOCAL) & local_names:
        return None
    if isinstance(it, cst.Call) and isinstance(it.func, cst.Name) and it.func.value == "range":
        if not 1 <= len(it.args) <= 2 or any(a.keyword for a in it.args):
            return None
        # ``range(start, stop)``: the variable is no list index (the first element is at ``start``),
        # so the loop counts with ``enumerate`` as over a config sequence
        index = f"{node.target.value}_index" if len(it.args) == 2 else ""
        return LoopInfo(node.target.value, code(it), index=index, node=node)
    if isinstance(it, cst.Call):
        return None  # enumerate(...), zip(...): not followed yet
    index = f"{node.target.value}_index"
    return LoopInfo(node.target.value, code(it), index=index, node=node)


def _enumerated(node: cst.For, local_names: set[str]) -> tuple[str, str, cst.BaseExpression] | None:
    """(``i``, ``v``, the sequence) of ``for i, v in enumerate(<config sequence>)`` (no start), else None."""
    target, it = node.target, node.iter
    if not (isinstance(target, cst.Tuple) and len(target.elements) == 2):
        return None
    i, v = (e.value for e in target.elements)
    if not (isinstance(i, cst.Name) and isinstance(v, cst.Name)) or i.value == v.value:
        return None
    if not (isinstance(it, cst.Call) and isinstance(it.func, cst.Name) and it.func.value == "enumerate"):
        return None
    if len(it.args) != 1 or it.args[0].keyword is not None or it.args[0].star:
        return None
    sequence = it.args[0].value
    if (names_in(sequence) - NOT_LOCAL) & local_names:
        return None
    named = [a.value for a in m.findall(node.body, m.Arg(keyword=m.Name("name")))]  # type: ignore[attr-defined]
    if any(loop_name_prefix(value, i.value) is None for value in named):
        return None  # other names (`f"unit{i:02d}"`, `f"block{i + 1}"`): the loop-nest patterns follow them
    return i.value, v.value, sequence
