"""The *analyse* part of the module pass: a :class:`ClassPlan` for each Linen class.

:class:`ClassPlanner` reads the original tree only: what becomes a field, a submodule, a variable,
and where it is built. It asks the ``Sizer`` (sizing.py) for feature sizes, the ``FileContext`` for
names and findings; where a method builds its modules is the ``SitePlanner``'s job, which locals
``__init__`` replays the ``LocalPlanner``'s.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from linen2nnx.migrate.auto_name_counts import never_together
from linen2nnx.migrate.call_time_builds import built_when_sized
from linen2nnx.migrate.callee_ranks import with_out_ranks
from linen2nnx.migrate.carry_inits import plan_carry_inits
from linen2nnx.migrate.class_choices import alike_candidates, finish_choice
from linen2nnx.migrate.class_fields import class_fields, plan_field_kinds
from linen2nnx.migrate.class_tables import report_class_choices
from linen2nnx.migrate.compact_aliases import CompactAlias, branch_assignments, compact_aliases
from linen2nnx.migrate.compact_collect import CompactCollector, same_name_sites
from linen2nnx.migrate.context import FileContext
from linen2nnx.migrate.crossfile_bindings import factory_fields
from linen2nnx.migrate.cst_meta import FastVisitor
from linen2nnx.migrate.cst_utils import (
    NOT_LOCAL,
    assigned_names,
    code,
    literal_name,
    names_in,
    opposite,
    parse_expression,
    self_attr,
    substitute_self_fields,
)
from linen2nnx.migrate.factories import PartialLocal, find_factory, substitute
from linen2nnx.migrate.factory_fields import FieldPartial
from linen2nnx.migrate.inheritance import plan_inherited_build
from linen2nnx.migrate.inherited_sizes import check_inherited_sizes
from linen2nnx.migrate.init_writes import report_init_writes
from linen2nnx.migrate.input_sizes import finish_input_sizes
from linen2nnx.migrate.key_replay import plan_key_replay
from linen2nnx.migrate.lazy_vars import either
from linen2nnx.migrate.lift_streams import report_method_scan_streams
from linen2nnx.migrate.lifted import SCAN_DECORATORS, LiftError, method_scan
from linen2nnx.migrate.local_planning import LocalPlanner
from linen2nnx.migrate.local_sites import plan_local_sites
from linen2nnx.migrate.merge_flags import merge_flags
from linen2nnx.migrate.method_auto_names import auto_names_across_methods
from linen2nnx.migrate.module_copies import report_field_deletions, report_module_copies
from linen2nnx.migrate.name_map_entries import report_other_builds
from linen2nnx.migrate.named_variables import plan_put_variables
from linen2nnx.migrate.rules import MOD_004, MOD_006, XFORM_002
from linen2nnx.migrate.setup_aliases import finish_setup_aliases
from linen2nnx.migrate.setup_foreign import flag_foreign_setup, flag_setup_factory_field
from linen2nnx.migrate.setup_lists import (
    ClassAlias,
    class_alias,
    comprehension_index,
    element_names,
    element_position,
    remat_branches,
)
from linen2nnx.migrate.setup_loop_lists import loop_lists
from linen2nnx.migrate.setup_partials import add_partial_site, attribute_values, setup_partials
from linen2nnx.migrate.setup_values import plan_setup_values
from linen2nnx.migrate.shared_scope import plan_shared_scopes
from linen2nnx.migrate.site_planning import SitePlanner
from linen2nnx.migrate.sites import LINEN_COMPACT, ClassPlan, Site
from linen2nnx.migrate.sizing import Sizer
from linen2nnx.migrate.stateless_classes import holds_bridged, holds_nothing, interchangeable
from linen2nnx.migrate.static_locals import static_everywhere


class ClassPlanner:
    """Plans one Linen module class on the original tree (no rewriting here)."""

    def __init__(self, ctx: FileContext, sizer: Sizer, site_planner: SitePlanner) -> None:
        self.ctx = ctx
        self.state = ctx.state
        self.sizer = sizer
        self.site_planner = site_planner  # where each submodule and variable is built
        self.locals = LocalPlanner(ctx, site_planner)  # which locals of a method __init__ replays
        self.setup_partials: dict[str, PartialLocal] = {}  # of the setup() being planned

    def plan_module_class(self, node: cst.ClassDef) -> ClassPlan | None:
        """Plan ``node`` if it is a Linen module class and record the plan (and its summary for the
        files that import it); None for any other class."""
        if not self.ctx.is_linen_module(node):
            if any(
                self.ctx.qualnames(d.decorator) & LINEN_COMPACT
                for m in node.body.body
                if isinstance(m, cst.FunctionDef)
                for d in m.decorators
            ):
                bases = ", ".join(code(b.value) for b in node.bases) or "object"
                self.ctx.report(
                    MOD_006,
                    node,
                    f"{node.name.value} uses @nn.compact but its base ({bases}) is "
                    "not a Linen class of this run",
                    "migrate the file that defines the base in the same run",
                )
            return None
        self.state.planning, self.state.pending_blocking = True, []
        plan = self.plan_class(node)
        plan.user_base = any(self.ctx.user_class_of(b.value) for b in node.bases)
        self.state.planning = False
        plan.blocking = self.state.pending_blocking
        plan.key = self.ctx.class_key(plan.name)
        report_other_builds(self.ctx, plan)
        self.state.plans[node] = plan
        self.state.linen_classes[plan.name] = plan
        summary = with_out_ranks(self.sizer, plan, plan.summary())
        summary.bridged_inside, summary.factory_fields = holds_bridged(plan), factory_fields(self.ctx, plan)
        self.state.summaries[plan.key] = summary
        return plan

    def plan_class(self, node: cst.ClassDef) -> ClassPlan:
        """The plan of Linen class ``node``: fields, factories, scans, ``setup`` and ``@nn.compact`` sites,
        then the feature sizes of every site and what ``__init__`` replays."""
        plan = ClassPlan(name=node.name.value, fields=class_fields(self.ctx, node))
        plan.linen_prefix = self.ctx.decorator_prefix(node)
        plan.holds_nothing = holds_nothing(self.ctx, node)
        plan_field_kinds(self.ctx, plan, node)
        plan.call_flags = merge_flags(self.ctx, plan, node)
        methods = [s for s in node.body.body if isinstance(s, cst.FunctionDef)]
        self.state.methods[plan.name] = methods
        plan.method_names = frozenset(m.name.value for m in methods)
        self._plan_factories(plan, methods)
        for fn in methods:
            self._plan_method_scan(plan, fn, {m.name.value for m in methods})
        counters: dict[str, int | None] = {}
        by_method: list[list[Site]] = []  # the hoisted sites of each @nn.compact method
        for fn in methods:
            if fn.name.value == "setup":
                plan.setup = fn
                self._plan_setup(plan, fn)
            elif any(self.ctx.qualnames(d.decorator) & LINEN_COMPACT for d in fn.decorators):
                before = len(plan.hoisted_order)
                self._plan_compact(plan, fn, counters)
                by_method.append(plan.hoisted_order[before:])
        auto_names_across_methods(self.ctx, by_method)
        plan_put_variables(self, plan, node, plan.put_calls)
        plan_setup_values(self.ctx, plan)  # `self.scale = jnp.exp(self.log_scale)`, arrays of setup()
        self._size_and_finish(plan, methods)
        plan_inherited_build(plan, node, methods, self.ctx.user_class_of, self.ctx.report)
        check_inherited_sizes(self.sizer, plan, node)
        report_module_copies(self.ctx.report, plan, methods)
        report_field_deletions(self.ctx.report, plan, methods)
        report_class_choices(self.ctx, methods)  # `NORMS[self.norm](...)`: a class picked at call time
        report_init_writes(self.ctx, plan, methods)  # `count.value += 1` unguarded: Linen's init writes it
        return plan

    def _plan_factories(self, plan: ClassPlan, methods: list[cst.FunctionDef]) -> None:
        """Helper methods that return a layer: each call is a submodule (see factories.py)."""
        for fn in methods:
            if fn.name.value in ("__call__", "setup"):
                continue
            factory = find_factory(
                fn,
                lambda f: bool(self.ctx.layer_rule_of(f) or self.ctx.user_class_of(f)),
                lambda v: not self.site_planner.has_side_effects(v),
            )
            if factory is not None:
                plan.factories[factory.name] = factory
                self.state.handled.add(factory.ctor.func)  # built at the call sites, never reported here
                self.state.factory_ctors.add(factory.ctor)

    def _size_and_finish(self, plan: ClassPlan, methods: list[cst.FunctionDef]) -> None:
        """Size every site (see the order below), then what __init__ replays and when state exists."""
        # 1. helper methods' results (so __call__ can follow values through self.method(x)); 2. __call__ sizes
        # its layers (its inputs may become constructor arguments); 3. other methods fill in what is left.
        others = [fn for fn in methods if fn.name.value not in ("setup", "__call__")]
        calls = [fn for fn in methods if fn.name.value == "__call__"]
        for fn in others:
            self.sizer.run_flow(plan, fn, resolve=False)
        for fn in [*calls, *others]:
            self.sizer.run_flow(plan, fn, resolve=True)
        self.sizer.resolve_unused(plan)
        built_when_sized(plan)  # a module sized by an optional input's size: built when it is given
        self.site_planner.restate_shape_tests(plan)
        for fn in methods:
            plan_carry_inits(self.ctx, plan, fn)
        self.locals.collect_needed_locals(plan)
        finish_input_sizes(self.ctx, plan)
        for site in plan.sites.values():
            site.state_when = self._site_state_when(plan, site)
        plan.state_when = either(
            [v.when for v in plan.lazy_vars.values() if v.when is not None]
            + [s.state_when for s in plan.sites.values() if s.state_when is not None]
        )

    def _plan_method_scan(self, plan: ClassPlan, fn: cst.FunctionDef, taken: set[str]) -> None:
        """``@functools.partial(nn.scan, ...)`` on a method (see :class:`~.lifted.MethodScan`)."""
        for d in fn.decorators:
            call = d.decorator
            if not (
                isinstance(call, cst.Call)
                and self.ctx.qualnames(call.func) & {"functools.partial"}
                and call.args
                and call.args[0].keyword is None
                and self.ctx.qualnames(call.args[0].value) & SCAN_DECORATORS
            ):
                continue
            self.ctx.mark_transform_names(call)
            try:
                if any(a.keyword is None for a in call.args[1:]):
                    raise LiftError("positional nn.scan arguments are not converted")
                kwargs = {a.keyword.value: a.value for a in call.args[1:]}  # type: ignore[union-attr]
                plan.scanned_methods[fn.name.value] = method_scan(kwargs, fn, taken, self.ctx.is_broadcast)
                report_method_scan_streams(self.ctx, call, f"{plan.name}.{fn.name.value}", kwargs)
            except LiftError as err:
                self.ctx.report(
                    XFORM_002,
                    call,
                    f"{plan.name}.{fn.name.value}: {err}",
                    "rewrite with nnx.scan over a step method by hand (see docs/nnx_facts.md, Lifted transforms)",
                )

    def _plan_setup(self, plan: ClassPlan, fn: cst.FunctionDef) -> None:
        self.setup_partials = setup_partials(self.locals, plan, fn)  # `dense = partial(nn.Dense, ...)`
        aliases = self._class_aliases(fn, assigned_names(fn), setup=True)  # `layer = A if self.a else B`
        self._plan_setup_block(plan, fn.body.body)
        finish_setup_aliases(self.ctx, plan, aliases)
        for local in self.setup_partials.values():  # each use builds from the rewritten partial
            self._drop_partial(local)
        self.setup_partials = {}

    def _drop_partial(self, local: PartialLocal) -> None:
        """Every use of ``local`` is built in ``__init__``: its line goes (a module's line stays)."""
        if not local.module_level:
            self.state.handled.add(local.ctor.func)
            self.state.partial_calls[local.partial] = local
            self.state.dropped_statements.add(local.statement)

    def _plan_setup_block(self, plan: ClassPlan, body: Any) -> None:
        """setup() statements, also under ``if`` / ``match`` (a conditional submodule keeps its test)."""
        self._plan_setup_loops(plan, body)
        for k, stmt in enumerate(body):
            if isinstance(stmt, cst.If) and self._plan_remat_branches(plan, stmt, list(body[k + 1 :])):
                continue
            if isinstance(stmt, cst.If):
                self._plan_setup_block(plan, stmt.body.body)
                orelse = stmt.orelse
                while orelse is not None:
                    self._plan_setup_block(plan, orelse.body.body)
                    orelse = orelse.orelse if isinstance(orelse, cst.If) else None
                continue
            if isinstance(stmt, cst.Match):  # `match cfg.kind: case ...:` builds one block per case
                for case in stmt.cases:
                    self._plan_setup_block(plan, case.body.body)
                continue
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue
            for small in stmt.body:
                if not (isinstance(small, cst.Assign) and len(small.targets) == 1):
                    continue
                for attr, value in attribute_values(small.targets[0].target, small.value):
                    self._plan_setup_assign(plan, attr, value, stmt, body)

    def _plan_setup_assign(
        self, plan: ClassPlan, attr: str, value: cst.BaseExpression, stmt: Any, body: Any
    ) -> None:
        """One ``self.attr = value`` of setup(): a submodule (directly, through a setup partial, or as a
        list of them), a variable, or a comprehension of submodules."""
        if isinstance(value, cst.IfExp):  # `self.pooler = Pooler(...) if flag else None`: as under an `if`
            for branch in (value.body, value.orelse):
                self._plan_setup_assign(plan, attr, branch, stmt, body)
            return
        local = None
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Name):
            local = self.setup_partials.get(value.func.value)
        if local is not None:  # `self.q = dense(4)`: the constructor the partial stands for
            add_partial_site(self.site_planner, plan, attr, value, local)
        elif isinstance(value, cst.Call) and (
            self.ctx.layer_rule_of(value.func) or self.ctx.user_class_of(value.func)
        ):
            linen_name = literal_name(value) or attr  # Linen's scope name: name= wins over the attribute
            self.site_planner.add_site(plan, value, attr=attr, linen_name=linen_name, hoisted=False)
        elif isinstance(value, cst.Call) and self.ctx.self_call(value) in ("param", "variable"):
            site = self.site_planner.add_variable_site(
                plan, value, hoisted=False, local_names=set(), attr=attr
            )
            if site is not None:
                plan.setup_vars[attr] = site.kind
        elif isinstance(value, cst.ListComp) and isinstance(value.elt, cst.Call):
            self._plan_setup_comprehension(plan, attr, value, stmt, body)
        elif (
            isinstance(value, (cst.List, cst.Tuple))
            and value.elements
            and all(
                isinstance(e.value, cst.Call)
                and (self.ctx.layer_rule_of(e.value.func) or self.ctx.user_class_of(e.value.func))
                for e in value.elements
            )
        ):
            sites = []
            for i, e in enumerate(value.elements):
                linen_name = literal_name(e.value) or f"{attr}_{i}"
                site = self.site_planner.add_site(
                    plan, e.value, attr=f"{attr}[{i}]", linen_name=linen_name, hoisted=False
                )
                site.container = "list"
                sites.append(site)
            plan.containers[attr] = sites
        elif isinstance(value, cst.Call) and self_attr(value.func) in plan.field_names:
            flag_setup_factory_field(self.ctx, plan, attr, value)  # `self.norm = self.norm_factory()`
        elif isinstance(value, cst.Call):  # `self.w = kd.nn.Identity()`, applied: from outside the run
            flag_foreign_setup(self.ctx, plan, attr, value)

    def _plan_setup_loops(self, plan: ClassPlan, body: Any) -> None:
        """Lists a loop of setup() fills with submodules (setup_loop_lists.py): one site for the
        construction of each, built where it is written; a located finding where not followed."""
        assert plan.setup is not None
        followed, unfollowed = loop_lists(list(body), plan.setup, self._builds_submodule)
        for found in followed:
            site = self.site_planner.add_site(
                plan, found.ctor, attr=found.attr, linen_name=found.names, hoisted=False
            )
            site.container, site.elements, site.elements_index = "list", found.names, found.index  # type: ignore[assignment]
            for k, seed in enumerate(found.seeds):  # `resnets = [Block(...)]` before the loop: element k
                site = self.site_planner.add_site(
                    plan, seed, attr=found.attr, linen_name=found.names, hoisted=False
                )
                site.container, site.elements, site.elements_index = "list", found.names, str(k)  # type: ignore[assignment]
        for miss in unfollowed:
            self.ctx.report(
                MOD_004,
                miss.ctor,
                miss.reason,
                "fill the list with one unconditional append per `range` iteration",
            )

    def _builds_submodule(self, node: cst.BaseExpression) -> bool:
        return isinstance(node, cst.Call) and bool(
            self.ctx.layer_rule_of(node.func) or self.ctx.user_class_of(node.func)
        )

    def _plan_remat_branches(self, plan: ClassPlan, stmt: cst.If, later: list[cst.BaseStatement]) -> bool:
        """``if flag: L = remat(Block); self.blocks = [L(...) ...] else: self.blocks = [Block(...) ...]``
        (setup_lists.remat_branches): the else branch's list stands for both, its elements applied
        through the remat under the flag, as a flag-wrapped class local is (the Griffin form)."""
        found = remat_branches(stmt, later)
        if (
            found is None
            or not self._builds_submodule(found.comp.elt)
            or self.ctx.transform_kind(found.remat.func) != "remat"
        ):
            return False
        before = set(plan.sites)
        self._plan_setup_comprehension(plan, found.attr, found.comp, found.kept, [found.kept])
        site = next((plan.sites[k] for k in plan.sites if k not in before), None)
        if site is None:
            return False
        site.lifted = self.ctx.lift_chain(found.remat)
        site.lift_condition = code(stmt.test)
        self.state.else_kept.add(stmt)  # the if becomes its else branch's statement
        self.state.handled.add(found.remat.func)
        self.state.relocated_calls.add(found.remat)
        return True

    def _plan_setup_comprehension(
        self, plan: ClassPlan, attr: str, comp: cst.ListComp, stmt: cst.BaseStatement, body: Any
    ) -> None:
        """``self.blocks = [Block(..., name=f'block_{i}') for i in range(n)]`` (setup_lists.py): one site
        for every element, built where it is written; left as it is when its names cannot be followed."""
        assert isinstance(comp.elt, cst.Call)
        alias = None
        if not self._builds_submodule(comp.elt):
            alias = self._setup_class_alias(plan, comp.elt, stmt, body)  # `block_class(...)`
            if alias is None:
                return
        index = comprehension_index(comp)
        names = element_names(comp.elt, index, attr) if index is not None else None
        if names is None:
            return  # the verifier reports the Linen module left in the comprehension
        site = self.site_planner.add_site(plan, comp.elt, attr=attr, linen_name=names, hoisted=False)
        position = element_position(comp, index)  # what a tuple of per-element sizes is indexed by
        site.container, site.elements, site.elements_index = "list", names, position  # type: ignore[assignment]
        if alias is not None and alias.remat is not None:
            assert alias.remat_stmt is not None
            site.lifted = self.ctx.lift_chain(
                alias.remat.with_changes(args=[cst.Arg(alias.value), *alias.remat.args[1:]])
            )
            site.lift_condition = code(alias.remat_stmt.test)
            self.state.dropped_statements.add(alias.remat_stmt)  # the remat moves to the call
            self.state.handled.add(alias.remat.func)
            self.state.relocated_calls.add(alias.remat)

    def _setup_class_alias(
        self, plan: ClassPlan, ctor: cst.Call, stmt: cst.BaseStatement, body: Any
    ) -> ClassAlias | None:
        """``block_class(...)``: the class a local of setup() holds (see setup_lists.class_alias)."""
        if not isinstance(ctor.func, cst.Name) or plan.setup is None or body is not plan.setup.body.body:
            return None
        alias = class_alias(list(body), stmt, ctor.func.value)
        if alias is None or not self._builds_submodule(cst.Call(alias.value)):
            return None
        if alias.remat is not None and self.ctx.transform_kind(alias.remat.func) != "remat":
            return None
        self.state.alias_classes[ctor.func] = alias.value  # `block_class(...)` builds that class
        return alias

    def _plan_compact(self, plan: ClassPlan, fn: cst.FunctionDef, counters: dict[str, int | None]) -> None:
        counts = assigned_names(fn)
        branches = branch_assignments(fn.body.body, counts, lambda f: self.ctx.transform_kind(f) is not None)
        self.ctx.collect_lift_aliases([*fn.body.body, *branches])
        plan.compact = fn
        plan.pure_locals = self.locals.pure_locals(plan, fn)
        local_names = set(counts) - static_everywhere(plan)
        partials = self.locals.partial_locals(plan, fn, counts)
        replayable = {name: plan.pure_locals.pop(name) for name in partials if name in plan.pure_locals}
        # ^ built at each use, never replayed in __init__ as a config local -- unless also used otherwise

        aliases = self._class_aliases(fn, counts)
        plan.key_replay = plan.key_replay or plan_key_replay(self.ctx, plan, fn, self.site_planner)
        CompactCollector(self.site_planner, plan, fn, counts, local_names, partials, counters).walk(fn)
        for alias in aliases:
            self._hoist_alias(plan, alias)
        for factory in partials.values():
            local = factory.local if isinstance(factory, FieldPartial) else factory
            assert local is not None
            built = sum(1 for site in plan.sites.values() if site.factory is factory)
            if built and built == local.uses:  # every use is a submodule built in __init__: drop the local
                self._drop_partial(local)
                plan.partial_classes.add(local.ctor.func)
            elif local.name in replayable:  # also handed on (`block(norm=norm)`): a config local of __init__
                plan.pure_locals[local.name] = replayable[local.name]
            if built and isinstance(factory, FieldPartial):  # its uses are built from the rewritten partial
                self.state.partial_calls[local.partial] = local
        self._flag_class_values(plan, fn)
        self.locals.view_handed_modes(plan)
        self._share_exclusive_attrs(plan)
        for site in same_name_sites(plan):
            self.ctx.report(
                MOD_004, site.ctor, f"{site.linen_name} built in two places that share no attribute"
            )
        plan_local_sites(plan, fn.body.body, counts)
        self.site_planner.flag_handed_locals(plan, fn)
        plan_shared_scopes(self.ctx, self.state, plan, fn)

    def _site_state_when(self, plan: ClassPlan, site: Site) -> str | None:
        """When applying ``site`` creates variables, in this class's terms: the submodule's condition
        with its parameters replaced by the call's arguments (the parent call of a compact ctor)."""
        if site.rule is not None and site.rule.init_call_cache:  # a built-in layer's decode cache
            flag = site.args.get(site.rule.init_call_cache)  # (rewrite_calls: created on a fresh call)
            return (
                None
                if flag is None or code(flag.value) == "False"
                else self._call_time_condition(plan, flag, flag.value)
            )
        when = site.user.state_when if site.user is not None else None
        if when is None or when == "True":
            return when
        app = self.ctx.parent_of(site.ctor)
        callee = next(
            (m for m in self.state.methods.get(site.user.name, []) if m.name.value == "__call__"), None
        )
        if not (isinstance(app, cst.Call) and app.func is site.ctor) or callee is None:
            return "True"
        params = [p for p in (*callee.params.params, *callee.params.kwonly_params)][1:]
        positional = [a for a in app.args if a.keyword is None]
        if any(a.star for a in app.args) or len(positional) > len(params):
            return "True"
        values = {p.name.value: code(a.value) for p, a in zip(params, positional)}
        values.update({a.keyword.value: code(a.value) for a in app.args if a.keyword is not None})
        for p in params:
            if p.name.value not in values:
                if p.default is None:
                    return "True"
                values[p.name.value] = code(p.default)
        # the callee's fields in the caller's terms: the arguments it is built with, else their defaults
        fields = {f.name: f.default for f in getattr(site.user, "fields", ()) if f.default is not None}
        fields.update({name: code(arg.value) for name, arg in site.args.items()})
        marked = substitute_self_fields(when, {f: f"_l2n_field_{f}" for f in fields})
        if marked is None:  # reads the callee's self otherwise
            return "True"
        values.update({f"_l2n_field_{f}": value for f, value in fields.items()})  # one substitution for both
        result = parse_expression(code(substitute(parse_expression(marked), values)))
        return self._call_time_condition(plan, app, result)

    def _call_time_condition(self, plan: ClassPlan, at: cst.CSTNode, condition: cst.BaseExpression) -> str:
        """``condition`` (written at ``at``'s method, ``decode=self.decode``) as the class's call-time
        condition, when it reads only config and that method's parameters; "True" otherwise."""
        fn = self.ctx.enclosing_function(at)
        mine = {p.name.value for p in (*fn.params.params, *fn.params.kwonly_params)} if fn else set()
        ok = names_in(condition) - NOT_LOCAL - {"self"} <= mine | static_everywhere(plan)
        return code(condition) if ok else "True"

    @staticmethod
    def _share_exclusive_attrs(plan: ClassPlan) -> None:
        """``if cfg.scan: layers = <stack>`` / ``else: layers_i = ...``: one attribute for both (MaxText's
        ``scan_layers``), built by an if / else in ``__init__``; so too the branches of an ``if`` under the
        same outer conditions (built by an ``elif``), and a module holding nothing built alike twice."""
        by_attr = {s.attr: s for s in plan.hoisted_order}
        for site in plan.hoisted_order:
            other = by_attr.get(site.attr[:-1]) if site.attr.endswith("_") else None
            if other is not None and interchangeable(other, site):  # one stateless module on two paths
                site.attr = other.attr
            if other is None or other.exclusive_with is not None or not site.conditions:
                continue
            same_name = other.linen_name == site.linen_name
            if len(site.conditions) > 1 and same_name and _complementary(other.conditions, site.conditions):
                site.attr = other.attr
                site.exclusive_with = other
            elif (
                len(site.conditions) == 1
                and len(other.conditions) == 1
                and opposite(*other.conditions, *site.conditions)
            ):
                site.attr = other.attr
                site.exclusive_with = other
            elif same_name and never_together(other.conditions, site.conditions, lambda _: True):
                site.attr = (
                    other.attr
                )  # `if not self.pre_norm:` apart from `if self.pre_norm:` (auto_name_counts.py)

    def _class_aliases(self, fn: cst.FunctionDef, counts: dict[str, int], setup: bool = False) -> list:
        """``block = Block`` / ``block = nn.remat(Block, ...) if self.remat else Block`` in @nn.compact
        (compact_aliases.py), or in ``setup()`` with no remat (setup_aliases.py): each ``block(...)`` is
        planned as the class it builds."""
        found = compact_aliases(
            fn,
            counts,
            self.ctx.parent_of,
            lambda n: (
                not (isinstance(n, cst.Name) and n.value in self.state.lift_aliases)
                and self.ctx.user_class_of(n) is not None
            ),
            lambda call: self.ctx.transform_kind(call.func) == "remat",
        )
        found = [a for a in found if alike_candidates(self.ctx, a.classes) and not (setup and a.remat)]
        for alias in found:
            for use in alias.uses:
                self.state.alias_classes[use] = alias.cls
                if alias.choice is not None:  # built as the class the config chooses (class_choices.py)
                    self.state.alias_choices[use] = alias.choice
        return found

    def _hoist_alias(self, plan: ClassPlan, alias: CompactAlias) -> None:
        """Every use of ``alias`` became a submodule: the local goes, its remat moves to the calls. Else
        the statement stays and its class read is a finding (``_flag_class_values``)."""
        sites = [s for s in plan.sites.values() if isinstance(s.ctor, cst.Call) and s.ctor.func in alias.uses]
        if len(sites) != len(alias.uses) or not all(s.hoisted for s in sites):
            return
        self.state.dropped_statements.add(alias.stmt)
        self.state.hoisted_aliases.update(alias.uses)
        plan.pure_locals.pop(alias.name, None)
        plan.partial_classes.update(alias.classes or [alias.cls])  # read as a value only to build these
        finish_choice(self.ctx, sites, alias.classes)
        if alias.remat is None:
            return
        plan.partial_classes.add(alias.remat.args[0].value)
        for site in sites:
            site.lifted, site.lift_condition = self.ctx.lift_chain(alias.remat), alias.condition
        self.state.handled.add(alias.remat.func)
        self.state.relocated_calls.add(alias.remat)

    def _flag_class_values(self, plan: ClassPlan, fn: cst.FunctionDef) -> None:
        """A Linen class of the run used as a value in @nn.compact (``Attn = vmap(Block, ...)``,
        ``partial(Dense, ...)``) builds its module at call time, which no hoisting covers: left alone
        the NNX class would build a fresh (NNX) module on every call. Built-in layers used so are
        L2N-API-002 already; lifted transforms of a class are planned as sites."""
        command = self
        callees = {site.ctor.func for site in plan.sites.values() if isinstance(site.ctor, cst.Call)}
        callees |= plan.partial_classes  # `partial(Dense, ...)` whose every use is built in __init__

        class Values(FastVisitor):
            def visit_Call(self, node: cst.Call) -> None:
                if (
                    command.ctx.transform_kind(node.func) is not None
                ):  # nn.scan(Cell, ...): a site, or XFORM-002
                    callees.update(a.value for a in node.args)

            def visit_Attribute(self, node: cst.Attribute) -> bool:
                return False  # `self.Foo`, `mod.Foo`: not a bare class name of this file

            def visit_Name(self, node: cst.Name) -> None:
                if node in callees or node.value not in command.state.linen_classes:
                    return
                command.ctx.report(
                    MOD_004,
                    node,
                    f"{node.value} is used as a value in @nn.compact: a module "
                    "built from it at call time cannot be hoisted into __init__",
                    "build the module in __init__ (an nnx transform of the class for vmap / scan)",
                )

        for stmt in fn.body.body:
            Values().walk(stmt)


def _complementary(a: list[str], b: list[str]) -> bool:
    """Conditions of the two branches of one ``if``: the same outer ones, the last one negated."""
    if len(a) != len(b) or not a or a[:-1] != b[:-1]:
        return False
    return opposite(a[-1], b[-1])
