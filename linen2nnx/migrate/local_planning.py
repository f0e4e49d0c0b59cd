"""Planning the locals of an ``@nn.compact`` method: which of them ``__init__`` replays.

Part of the *analyse* step, used by :class:`~linen2nnx.migrate.planning.ClassPlanner`. A local bound
once from config (``hidden = self.width * 4``) is replayed in ``__init__`` when a hoisted constructor
reads it; a ``partial(nn.BatchNorm, use_running_average=not train)`` moves its mode flag to the calls;
a local read from the input's shape becomes a new constructor argument; a
``partial(<layer>, ...)`` local is built at each use (see :mod:`~linen2nnx.migrate.factories`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import libcst as cst

from linen2nnx.migrate.context import FileContext
from linen2nnx.migrate.cst_meta import FastVisitor
from linen2nnx.migrate.cst_utils import (
    NOT_LOCAL,
    assigned_names,
    code,
    comprehension_names,
    names_in,
    only_shape_uses,
    parse_expression,
    self_attr,
)
from linen2nnx.migrate.factories import (
    PartialLocal,
    alias_reads_built,
    find_alias_local,
    find_partial_local,
    unknown_overrides,
)
from linen2nnx.migrate.factory_fields import FieldFactory, FieldPartial
from linen2nnx.migrate.function_aliases import plain_assign, reads_linen, sole_binding
from linen2nnx.migrate.init_guards import creates_nothing
from linen2nnx.migrate.input_sizes import reads_rank_only
from linen2nnx.migrate.key_replay import check_key_replay
from linen2nnx.migrate.layer_args import builds_mode_layers
from linen2nnx.migrate.loop_tests import test_names
from linen2nnx.migrate.mutation import mutated_locals
from linen2nnx.migrate.rebound_locals import (
    bound_name,
    dead_bindings,
    earlier_keys,
    in_source_order,
    incomplete_chains,
    keep_earlier,
    read_before_last,
    rebinding_chains,
)
from linen2nnx.migrate.replayed_lines import replayed_assign
from linen2nnx.migrate.rules import LAYER_003, MOD_004, SHAPE_002
from linen2nnx.migrate.site_planning import SitePlanner
from linen2nnx.migrate.sites import ClassPlan, compact_only, nest_fors, shape_last_refs
from linen2nnx.migrate.static_locals import StaticLocals
from linen2nnx.migrate.variable_planning import shape_kept_until, stands_for_first_input


class LocalPlanner:
    """Plans the locals of a method on the original tree (no rewriting here)."""

    def __init__(self, ctx: FileContext, site_planner: SitePlanner) -> None:
        self.ctx = ctx
        self.state = ctx.state
        self.site_planner = site_planner  # whether a value has side effects

    def pure_locals(self, plan: ClassPlan, fn: cst.FunctionDef) -> dict[str, cst.BaseStatement]:
        """Top-level ``name = expr`` bound once (or every time so: rebound_locals.py), whose value uses
        only config (``self.*``), globals and earlier such names: they can be replayed in ``__init__``."""
        counts, dead = dead_bindings(fn, assigned_names(fn))
        params = {
            p.name.value for p in (*fn.params.params, *fn.params.kwonly_params, *fn.params.posonly_params)
        }
        params |= mutated_locals(fn)  # `last = widths.pop()`: changed in place, never replayed
        chains = rebinding_chains(fn, counts, params)
        saved = (
            dict(plan.mode_partials),
            set(plan.input_shape_locals),
            plan.shape_input,
            dict(plan.shape_locals),
        )
        while True:
            pure = self._pure_pass(plan, fn, counts, params, chains, dead)
            bad = incomplete_chains(pure, chains, counts, set(plan.mode_partials) | set(plan.shape_locals))
            bad |= read_before_last(pure, chains - bad, fn)
            if not bad:
                break
            chains -= bad  # one binding is a call-time value: none of them is replayed
            plan.mode_partials, plan.input_shape_locals = dict(saved[0]), set(saved[1])
            plan.shape_input, plan.shape_locals = saved[2], dict(saved[3])
        if chains:
            pure = in_source_order(pure, fn)
        return self._static_statements(plan, fn, pure, counts, params, dead)

    def _pure_pass(
        self,
        plan: ClassPlan,
        fn: cst.FunctionDef,
        counts: dict[str, int],
        params: set[str],
        chains: set[str],
        dead: set[tuple[str, int]],
    ) -> dict[str, cst.BaseStatement]:
        pure: dict[str, cst.BaseStatement] = {}
        for stmt in fn.body.body:
            assign = replayed_assign(stmt)  # `n, l, d = x.shape`: d as `x.shape[-1]`
            if assign is None or (assign[0], id(stmt)) in dead:
                continue
            name, value = assign
            if (counts.get(name) != 1 and name not in chains) or name in params:
                continue
            if name in self.state.lift_aliases:
                continue  # a transformed class: applied at the call, never replayed
            if name in chains:
                keep_earlier(pure, name)
            used = names_in(value) - NOT_LOCAL - comprehension_names(value)
            call_time = {n for n in used if n in counts and n not in pure and not earlier_keys(pure, n)}
            mode = self._mode_partial(value, call_time | params) if call_time or used & params else None
            if mode:  # `norm = partial(nn.BatchNorm, use_running_average=not train)`: the flag moves to calls
                plan.mode_partials[name] = mode
                pure[name] = stmt
                continue
            refs = shape_last_refs(value, call_time) if call_time else None
            if call_time and refs is None:
                first = fn.params.params[1].name.value if len(fn.params.params) > 1 else None
                if (
                    first is None
                    or not stands_for_first_input(self.ctx, fn, plan)  # `body(self, u)` of a changed x
                    or call_time != {first}
                    or not only_shape_uses(value, first)
                    or not self._shape_kept_until(fn, stmt, first)
                    or self.site_planner.has_side_effects(value)
                ):
                    continue
                plan.input_shape_locals.add(name)  # `kernel_shape = tuple(x.shape[a] for a in axes)`
                plan.shape_input = first
                pure[name] = stmt
                continue
            if self.site_planner.has_side_effects(value, plan.field_names):
                continue
            pure[name] = stmt
            if refs:  # `d = x.shape[-1] if ... else ...`: replayed with x's size once the dataflow knows it
                plan.shape_locals[name] = refs
        return pure

    def _static_statements(
        self,
        plan: ClassPlan,
        fn: cst.FunctionDef,
        pure: dict[str, cst.BaseStatement],
        counts: dict[str, int],
        params: set[str],
        dead: set[tuple[str, int]],
    ) -> dict[str, cst.BaseStatement]:
        """``pure`` with the statements that bind static values otherwise (tuple unpacking, an ``if`` on
        config, a name rebound at call time later): see static_locals.py. A binding in ``dead`` is none
        (nothing reads it): it never stands in for the live one."""
        flow = StaticLocals(
            fn,
            counts,
            # in a lambda, a call of a field (`lambda *a: self.kernel_init(*a) / scale`) runs later
            lambda value: self.site_planner.has_side_effects(value, plan.field_names),
            params | set(self.state.lift_aliases),
            dead,
            lambda value: creates_nothing(self.ctx, value),
        )
        # a shape local (`qkv = self.qkv or x.shape[-1]`) replays with the input's size, or gives a
        # finding where the flow cannot tell it: a static statement may read it
        extended = flow.extend(pure, set(pure) - set(plan.mode_partials))
        for name, refs in flow.shape_refs.items():  # a shape local of a branch: sized as one of the body
            if name in extended and name not in pure:
                plan.shape_locals[name] = refs
        plan.static_flow = flow
        plan.static_statements = [  # a shape local's line reads the input: the method keeps it
            stmt for name, stmt in extended.items() if name not in pure and name not in flow.shape_refs
        ]
        return extended

    def _mode_partial(self, value: cst.BaseExpression, call_time: set[str]) -> dict[str, str] | None:
        """``partial(nn.BatchNorm, use_running_average=not train, ...)`` whose only call-time reads are
        mode flags NNX takes at the call: ``{flag: source}``; None otherwise."""
        if not (
            isinstance(value, cst.Call)
            and self.ctx.qualnames(value.func) & {"functools.partial"}
            and value.args
            and value.args[0].keyword is None
            and not any(a.star for a in value.args)
        ):
            return None
        rule = self.ctx.layer_rule_of(value.args[0].value)
        if rule is None:
            return None
        mode = {}
        for arg in value.args[1:]:
            if (names_in(arg.value) - NOT_LOCAL) & call_time:
                if (
                    arg.keyword is None
                    or arg.keyword.value not in rule.call_args
                    or self.site_planner.has_side_effects(arg.value)
                ):
                    return None
                mode[arg.keyword.value] = code(arg.value)
        return mode or None

    def view_handed_modes(self, plan: ClassPlan) -> None:
        """A mode partial handed to a submodule (``block_cls(..., norm=norm)``) sets the flag of the layers
        the submodule builds with it: the call becomes ``nnx.view(block, use_running_average=...)(x)``
        -- when every such layer of the submodule's class is built through that field."""
        if not plan.mode_partials:
            return
        for site in plan.hoisted_order:
            if site.kind != "module":
                continue
            classes = site.factory.classes if isinstance(site.factory, FieldFactory) else (site.user.name,)  # type: ignore[union-attr]
            for name, arg in site.args.items():
                local = arg.value.value if isinstance(arg.value, cst.Name) else None
                mode = plan.mode_partials.get(local or "")
                if mode is None:
                    continue
                users = [self.state.linen_classes.get(c) for c in classes]
                built = [self._built_only_through(u, name) if u is not None else None for u in users]
                if any(b is None for b in built):
                    self.ctx.report(
                        MOD_004,
                        arg,
                        f"{local} sets {', '.join(mode)} at call time and is handed to "
                        f"{site.attr}, whose class builds such layers otherwise too",
                        "pass the flag to the submodule's call by hand",
                    )
                    continue
                for flag, source in mode.items():
                    if site.view_kwargs.get(flag, source) != source:
                        self.ctx.report(
                            MOD_004,
                            arg,
                            f"two values of {flag} handed to {site.attr}",
                            "pass the flags to the submodule's call by hand",
                        )
                    site.view_kwargs[flag] = source
                if not all(built):  # a class may build none of them (all conditional): no flag to set is fine
                    site.view_kwargs["raise_if_not_found"] = "False"
                self.ctx.report(
                    LAYER_003,
                    arg,
                    f"{', '.join(mode)} of {local} applied at the call of {site.attr} through nnx.view",
                )

    @staticmethod
    def _built_only_through(user: ClassPlan, field: str) -> bool | None:
        """Is every layer with a call-time mode flag that ``user`` builds built through ``self.<field>``?
        None if not; else whether one of them is built unconditionally (nnx.view finds a flag to set)."""
        unconditional = False
        for site in user.sites.values():
            if site.rule is not None and site.rule.call_args:
                if not (isinstance(site.factory, FieldFactory) and site.factory.name == field):
                    return None
                unconditional |= not site.conditions and site.exclusive_with is None
            elif site.kind == "module" and site.user is not None and builds_mode_layers(site.user):
                return None
        return unconditional

    def _shape_kept_until(self, fn: cst.FunctionDef, stop: cst.BaseStatement, name: str) -> bool:
        return shape_kept_until(self.ctx, fn, stop, name)

    def partial_locals(
        self, plan: ClassPlan, fn: cst.FunctionDef, assigned: dict[str, int]
    ) -> dict[str, PartialLocal | FieldPartial]:
        """The method's ``name = partial(<layer or class of the run>, ...)`` locals (see factories.py),
        partials of a module-factory field (``conv = partial(self.conv, use_bias=False)``), and
        module-level partials the method reads (``LayerNorm = partial(nn.LayerNorm, epsilon=1e-5)``)."""
        reads: dict[str, int] = {}
        first_read: dict[str, cst.Name] = {}

        class Names(FastVisitor):
            def visit_Name(self, node: cst.Name) -> None:
                reads[node.value] = reads.get(node.value, 0) + 1
                first_read.setdefault(node.value, node)

        Names().walk(fn.body)
        reads = {name: n - assigned.get(name, 0) for name, n in reads.items()}
        found = {}
        statements = list(fn.body.body)
        module_level = {}
        for name, node in first_read.items():
            stmt = self._module_partial_statement(plan, name, node, assigned, fn)
            if stmt is not None:
                statements.append(stmt)
                module_level[stmt] = name
        is_constructor = lambda f: bool(  # noqa: E731
            self.ctx.layer_rule_of(f) or self.ctx.user_class_of(f) or self._factory_field_of(plan, f)
        )
        for stmt in statements:
            alias = find_alias_local(stmt, is_constructor, reads) if stmt in module_level else None
            if alias is not None:
                found[alias.name] = alias
                continue
            local = find_partial_local(
                stmt,
                is_constructor,
                lambda f: bool(self.ctx.qualnames(f) & {"functools.partial"}),
                reads,
                {**assigned, module_level[stmt]: 1} if stmt in module_level else assigned,
            )
            if local is not None and unknown_overrides(local.partial, local.name, fn.body):
                local = None  # `dense(4, **extra)` of a partial with keywords: which one wins is unknown
            if local is not None and stmt in module_level:
                local = dataclasses.replace(local, uses=reads.get(local.name, 0), module_level=True)
            field = self._factory_field_of(plan, local.ctor.func) if local is not None else None
            if field is not None:
                found[local.name] = FieldPartial(
                    **{f.name: getattr(field, f.name) for f in dataclasses.fields(field)}, local=local
                )
            elif local is not None:
                found[local.name] = local
        return found

    def _module_partial_statement(
        self,
        plan: ClassPlan,
        name: str,
        read: cst.Name,
        assigned: dict[str, int],
        fn: cst.FunctionDef | None = None,
    ) -> cst.SimpleStatementLine | None:
        """The module-level ``name = partial(...)`` line the method's read of ``name`` sees, when it is
        the name's one binding (``LayerNorm = partial(nn.LayerNorm, epsilon=1e-5)``)."""
        if assigned.get(name):
            return None
        assign = plain_assign(self.ctx, sole_binding(self.ctx, read))
        line = self.ctx.parent_of(assign) if assign is not None else None
        if type(line) is not cst.SimpleStatementLine or self.ctx.parent_of(line) is not self.state.tree:
            return None
        value = assign.value  # type: ignore[union-attr]
        if type(value) in (cst.Name, cst.Attribute):  # `MultiHeadDotProductAttention = nn.MultiHead...`
            builds = self.ctx.layer_rule_of(value) or self.ctx.user_class_of(value)
            cls = self.ctx.parent_of(self.ctx.parent_of(fn)) if fn is not None else None
            return line if builds and type(cls) is cst.ClassDef and alias_reads_built(cls, fn, name) else None
        if not isinstance(value, cst.Call) or not value.args:
            return None
        # its arguments go into __init__ as written there: none may be Linen (the module's line is
        # rewritten on its own) or a name __init__ binds otherwise (a field, a local of the method)
        bound_in_init = set(assigned) | set(plan.field_names)
        for arg in value.args[1:]:
            if reads_linen(self.ctx, arg.value) or names_in(arg.value) & bound_in_init:
                return None
        return line

    def _factory_field_of(self, plan: ClassPlan, func: cst.BaseExpression) -> FieldFactory | None:
        """``self.conv`` naming a module-factory field of ``plan`` whose bindings agree."""
        field = self_attr(func)
        return self.ctx.field_factory(plan, field) if field is not None else None

    def collect_needed_locals(self, plan: ClassPlan) -> None:
        """Pure locals the hoisted constructors refer to (transitively), in source order."""
        needed: set[str] = set()
        # a partial local's use (`dense(name='q')`) is built from the partial's arguments, not the local
        ctors = [
            cst.Tuple([cst.Element(a.value) for a in (*partial_of(s.factory).partial.args[1:], *s.ctor.args)])
            if partial_of(s.factory) is not None
            else s.ctor
            for s in plan.hoisted_order
        ]
        ctors += [parse_expression(s.loop.range_src) for s in plan.hoisted_order if s.loop is not None]
        for nest in plan.nests.values():  # the loops' iterables and body locals read config locals too
            ctors += [f.iter for f in nest_fors(nest.outer)]
            ctors += [stmt.body[0].value for stmt in nest.local_stmts.values()]  # type: ignore[attr-defined]
            ctors += [cst.Name(n) for n in test_names(nest.outer)]  # its `if` tests (loop_tests.py)
        todo = [n for ctor in ctors for n in names_in(ctor) if n in plan.pure_locals]
        chained, reads = check_key_replay(self.ctx, plan)  # key_replay.py: the config locals it reads first
        todo = [n for n in todo if bound_name(n) not in chained] + [n for n in reads if n in plan.pure_locals]
        todo += [n for n in condition_names(plan) if n in plan.pure_locals]  # `if c != self.n:` reads c
        while todo:
            name = todo.pop()
            if name in needed:
                continue
            needed.add(name)
            todo.extend(earlier_keys(plan.pure_locals, name))  # a rebound local: every binding replays
            stmt = plan.pure_locals[name]
            tests = plan.static_flow.replay_tests.get(stmt, []) if plan.static_flow is not None else []
            todo.extend(n for node in (stmt, *tests) for n in names_in(node) if n in plan.pure_locals)
        plan.needed_locals = [n for n in plan.pure_locals if n in needed]
        plan.input_shape_params = [c for c in plan.input_shape_params if c in plan.sites]
        if needed & plan.input_shape_locals or plan.input_shape_params:
            arg = f"{plan.shape_input}_shape"
            while arg in plan.field_names:
                arg += "_"
            shared = arg in plan.new_args  # a flattened input's size reads the same shape
            plan.new_args[arg] = "input_shape:0"
            reads = [plan.pure_locals[n] for n in plan.needed_locals if n in plan.input_shape_locals]
            plan.shape_rank_only = (
                not shared
                and self._plain_call(plan)
                and reads_rank_only([*reads, *plan.input_shape_params], plan.shape_input)
            )
            self.ctx.report(
                SHAPE_002,
                plan.pure_locals[next(n for n in plan.needed_locals if n in plan.input_shape_locals)]
                if needed & plan.input_shape_locals
                else plan.input_shape_params[0],
                f"{plan.name} gains constructor argument {arg}: the shape of `{plan.shape_input}`, which its "
                "parameter shapes read",
                f"pass {arg}=x.shape where {plan.name} is built",
            )

    def _plain_call(self, plan: ClassPlan) -> bool:
        """Whether the stand-in's input is what a caller passes: the compact method is ``__call__``
        itself, under no decorator but ``nn.compact`` (a lift such as ``nn.vmap`` changes its rank)."""
        fn = plan.compact
        return fn is not None and fn.name.value == "__call__" and compact_only(fn, self.ctx.qualnames)


def condition_names(plan: ClassPlan) -> set[str]:
    """The names the tests ``__init__`` builds its sites under read (``if big:`` of ``big = self.n > 2``)."""
    names: set[str] = set()
    for text in {c for site in plan.hoisted_order for c in site.conditions}:
        try:
            names |= names_in(parse_expression(text))
        except cst.ParserSyntaxError:
            continue
    return names


def partial_of(factory: Any) -> PartialLocal | None:
    """The ``name = partial(...)`` local a site's factory is (directly, or of a factory field)."""
    return (
        factory.local
        if isinstance(factory, FieldPartial)
        else factory
        if isinstance(factory, PartialLocal)
        else None
    )
